"""End-to-end on several GPUs: placement of resident matrices and spreading of requests.

Skips (visibly) unless the server starts its CUDA backend with at least two GPUs. Checks that
uploads without a placement spread over the devices, that operands on different devices are
refused with FAILED_PRECONDITION, that colocate_with puts a matrix beside another and the product
is then correct, and that concurrent independent requests run on every device.
"""
import collections
import concurrent.futures
import unittest

import grpc
import numpy as np

from matserve.v1 import matrix_service_pb2 as pb
from server_process import cuda_server_or_skip, matrix, release_all
from test_service import decode, rand, rel_l2


class MultiGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = cuda_server_or_skip()
        cls.stub = cls.server.stub
        cls.devices = len(cls.stub.GetServerInfo(pb.GetServerInfoRequest()).devices)
        if cls.devices < 2:
            cls.server.stop()
            raise unittest.SkipTest(f"the server sees {cls.devices} GPU; this test needs 2 or more")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()

    def tearDown(self):
        release_all(self.stub)

    def test_placement_spread_refusal_and_colocation(self):
        a, b = rand(257, 129), rand(129, 65)
        ha = self.stub.Upload(pb.UploadRequest(matrix=matrix(a))).resident
        hb = self.stub.Upload(pb.UploadRequest(matrix=matrix(b))).resident
        # An idle server breaks the tie by bytes in use: the second upload goes elsewhere.
        self.assertNotEqual(ha.device, hb.device)
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Multiply(pb.MultiplyRequest(a_handle=ha.handle, b_handle=hb.handle))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("different devices", ctx.exception.details())
        hb2 = self.stub.Upload(pb.UploadRequest(matrix=matrix(b), colocate_with=ha.handle)).resident
        self.assertEqual(hb2.device, ha.device)
        reply = self.stub.Multiply(pb.MultiplyRequest(a_handle=ha.handle, b_handle=hb2.handle,
                                                      keep_result=True))
        self.assertTrue(reply.device.startswith(ha.device))
        self.assertEqual(reply.result.device, ha.device)
        c = decode(self.stub.Download(pb.DownloadRequest(handle=reply.result.handle)).matrix)
        self.assertLess(rel_l2(c, a.astype(np.float64) @ b), 1e-5)
        # On the other device the same product from B's side (B^T A^T) is correct too.
        ha2 = self.stub.Upload(pb.UploadRequest(matrix=matrix(a), colocate_with=hb.handle)).resident
        self.assertEqual(ha2.device, hb.device)
        reply = self.stub.Multiply(pb.MultiplyRequest(a_handle=hb.handle, b_handle=ha2.handle,
                                                      transpose_a=True, transpose_b=True))
        self.assertTrue(reply.device.startswith(hb.device))
        self.assertLess(rel_l2(decode(reply.c), (a.astype(np.float64) @ b).T), 1e-5)

    def test_concurrent_requests_use_every_device(self):
        a, b = rand(1024, 1024), rand(1024, 1024)
        want = a.astype(np.float64) @ b
        request = pb.MultiplyRequest(a=matrix(a), b=matrix(b))

        def one(_):
            r = self.stub.Multiply(request, timeout=60)
            return r.device.split()[0], rel_l2(decode(r.c), want)

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(one, range(64)))
        used = collections.Counter(d for d, _ in results)
        self.assertEqual(len(used), self.devices, f"requests per device: {dict(used)}")
        self.assertLess(max(e for _, e in results), 1e-5)


if __name__ == "__main__":
    unittest.main()
