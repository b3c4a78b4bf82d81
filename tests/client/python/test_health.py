"""The hand-encoded health messages and the balancing options of dns: targets (no server)."""
import unittest

from matserve_client import health


class HealthMessagesTest(unittest.TestCase):
    def test_request_encoding(self):
        self.assertEqual(health.encode_request(""), b"")
        self.assertEqual(health.encode_request("matserve.v1.MatrixService"),
                         b"\x0a\x19matserve.v1.MatrixService")
        long_name = "x" * 300  # a length that needs two varint bytes
        self.assertEqual(health.encode_request(long_name)[:3], b"\x0a\xac\x02")

    def test_reply_decoding(self):
        self.assertEqual(health.decode_status(b"\x08\x01"), "SERVING")
        self.assertEqual(health.decode_status(b"\x08\x02"), "NOT_SERVING")
        self.assertEqual(health.decode_status(b""), "UNKNOWN")  # proto3 default omitted
        self.assertEqual(health.decode_status(b"\x12\x02ab\x08\x01"), "SERVING")  # unknown field
        self.assertEqual(health.decode_status(b"\x08\x09"), "STATUS_9")
        with self.assertRaises(ValueError):
            health.decode_status(b"\x08")  # truncated
        with self.assertRaises(ValueError):
            health.decode_status(b"\x0d\x00\x00\x00\x00")  # fixed32: not in this message


class BalancingOptionsTest(unittest.TestCase):
    def test_dns_targets_balance_round_robin_unless_the_caller_chose(self):
        rr = [("grpc.lb_policy_name", "round_robin")]
        self.assertEqual(health.balancing_options("dns:///matserve.default.svc:50051", ()), rr)
        self.assertEqual(health.balancing_options("localhost:50051", ()), [])
        self.assertEqual(health.balancing_options("ipv4:10.0.0.1:50051,10.0.0.2:50051", ()), [])
        chosen = [("grpc.lb_policy_name", "pick_first")]
        self.assertEqual(health.balancing_options("dns:///svc:50051", chosen), [])
        config = [("grpc.service_config", "{}")]
        self.assertEqual(health.balancing_options("dns:///svc:50051", config), [])


if __name__ == "__main__":
    unittest.main()
