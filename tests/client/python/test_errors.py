"""Unit tests (no server) for matserve_client.errors: one exception class per gRPC status code,
each carrying the code and the server's message."""
import unittest

import grpc

import matserve_client
from matserve_client.errors import ERROR_CLASSES, MatserveError, error_for, from_rpc_error
from fakes import FakeRpcError


class ErrorsTest(unittest.TestCase):
    def test_every_status_code_but_ok_has_an_exported_class(self):
        for code in grpc.StatusCode:
            if code == grpc.StatusCode.OK:
                continue
            cls = ERROR_CLASSES[code]
            self.assertTrue(issubclass(cls, MatserveError))
            self.assertIs(getattr(matserve_client, cls.__name__), cls)

    def test_conversion_keeps_code_and_message(self):
        e = from_rpc_error(FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "a.rows: must be >= 1"))
        self.assertIsInstance(e, matserve_client.InvalidArgument)
        self.assertEqual(e.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.message, "a.rows: must be >= 1")
        self.assertEqual(str(e), "INVALID_ARGUMENT: a.rows: must be >= 1")
        self.assertEqual(e.args, (grpc.StatusCode.INVALID_ARGUMENT, "a.rows: must be >= 1"))

    def test_constructor_takes_code_then_message(self):
        e = MatserveError(grpc.StatusCode.UNAVAILABLE, "down")
        self.assertEqual((e.code, e.message), (grpc.StatusCode.UNAVAILABLE, "down"))
        self.assertIsInstance(error_for(grpc.StatusCode.DEADLINE_EXCEEDED, "late"),
                              matserve_client.DeadlineExceeded)

    def test_the_former_base_class_name_is_the_same_class(self):
        # MatservError (deprecated) stays an alias for a release: old `except` clauses still catch.
        self.assertIs(matserve_client.MatservError, MatserveError)
        with self.assertRaises(matserve_client.MatservError):
            raise error_for(grpc.StatusCode.NOT_FOUND, "gone")

    def test_missing_details_fall_back_to_the_error_text(self):
        e = from_rpc_error(FakeRpcError(grpc.StatusCode.INTERNAL, None))
        self.assertIsInstance(e, matserve_client.Internal)
        self.assertTrue(e.message)


if __name__ == "__main__":
    unittest.main()
