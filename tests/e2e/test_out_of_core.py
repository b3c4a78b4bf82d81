"""End-to-end on a GPU: matrices too large for the device's budget, and products computed out of core.

Skips (visibly) unless the server starts its CUDA backend. The server runs with a 6 MiB device
budget and 256-wide tiles, so matrices of a few MB are "too large": a matrix above a third of the
budget is kept in host memory (its ResidentInfo says "host"), and a product that reads such a
matrix, keeps such a result, or whose inline operands and result do not fit the budget together
is computed tile by tile with the pieces streamed to the GPU. Checks each such product element by
element against float64 (the per-element bound of tests/support/gemm_bound.py) for every
precision and operand order with alpha, beta and C; operands mixed (host, device, inline); a
column-major result; what cannot fit even in tiles (RESOURCE_EXHAUSTED); and the operations that
refuse a host matrix (FAILED_PRECONDITION, naming why).
"""
import unittest

import grpc
import numpy as np

from matserve.v1 import matrix_service_pb2 as pb
from server_process import cuda_server_or_skip, matrix, release_all
from test_batching import metric
from test_gpu_service import COMPUTE, DATA, OUT, operands
from test_service import decode, rand, rel_l2
import gemm_bound  # noqa: E402  (tests/support; test_service put it on the path)

BUDGET = 6 << 20
HOST_ABOVE = BUDGET // 3  # bytes above which a matrix is kept in host memory

# m, n, k per precision: A, B and C all above a third of the budget, none a multiple of the tile.
SHAPES = {"fp64": (517, 600, 523), "fp32": (1031, 1100, 523), "tf32": (1031, 1100, 523),
          "fp16": (1031, 1100, 1031), "bf16": (1031, 1100, 1031)}
ORDERS = [(False, False), (True, True), (True, False), (False, True)]


class OutOfCoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = cuda_server_or_skip(f"--memory_budget_bytes={BUDGET}",
                                         "--out_of_core_tile=256")
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()

    def tearDown(self):
        release_all(self.stub)

    def upload(self, m):
        return self.stub.Upload(pb.UploadRequest(matrix=m), timeout=60).resident

    def download(self, handle):
        return decode(self.stub.Download(pb.DownloadRequest(handle=handle), timeout=60).matrix)

    def test_matrices_above_a_third_of_the_budget_live_in_host_memory(self):
        big, small = rand(1031, 523), rand(300, 200)
        self.assertGreater(big.nbytes, HOST_ABOVE)
        hb, hs = self.upload(matrix(big)), self.upload(matrix(small))
        self.assertEqual(hb.device, "host")
        self.assertTrue(hs.device.startswith("cuda:"), hs.device)
        np.testing.assert_array_equal(self.download(hb.handle), big)
        # Ranged reads of a host matrix, as striped downloads make them.
        part = self.stub.ReadRange(pb.ReadRangeRequest(handle=hb.handle, offset=4096, length=8192))
        self.assertEqual(part.data, big.tobytes()[4096:4096 + 8192])
        # Its memory is counted while it lives, and kept pinned for reuse after its release.
        self.assertGreaterEqual(metric(self.server, "matserve_host_matrix_bytes", state="in_use"),
                                big.nbytes)
        self.stub.Release(pb.ReleaseRequest(handle=hb.handle))
        self.assertEqual(metric(self.server, "matserve_host_matrix_bytes", state="in_use"), 0)
        self.assertGreaterEqual(metric(self.server, "matserve_host_matrix_bytes", state="cached"),
                                big.nbytes)

    def test_products_on_host_matrices_match_float64_in_every_order_and_precision(self):
        failures = []
        for precision in ("fp64", "fp32", "tf32", "fp16", "bf16"):
            m, n, k = SHAPES[precision]
            out_type = pb.FP64 if OUT[precision] == "fp64" else pb.FP32
            for ta, tb in ORDERS:
                sent = []
                ma, mb, want = operands(precision, m, n, k, ta, tb, sent)
                c0 = rand(m, n).astype(np.float64 if OUT[precision] == "fp64" else np.float32)
                ha, hb, hc = self.upload(ma), self.upload(mb), self.upload(matrix(c0))
                what = f"{precision} {m}x{n}x{k} ta={ta} tb={tb}"
                if (ha.device, hb.device, hc.device) != ("host", "host", "host"):
                    failures.append(f"{what}: placed on {ha.device}, {hb.device}, {hc.device}")
                r = self.stub.Multiply(pb.MultiplyRequest(
                    a_handle=ha.handle, b_handle=hb.handle, c_handle=hc.handle, transpose_a=ta,
                    transpose_b=tb, alpha=1.5, beta=-0.5, compute=COMPUTE[precision],
                    output_dtype=out_type, keep_result=True), timeout=120)
                if not r.variant.endswith("+out_of_core") or r.result.device != "host":
                    failures.append(f"{what}: ran {r.variant!r}, result on {r.result.device}")
                got = self.download(r.result.handle)
                limit = gemm_bound.bound(*sent, precision, DATA[precision], OUT[precision],
                                         alpha=1.5, beta=-0.5, c0=c0)
                msg = gemm_bound.check(got, 1.5 * want - 0.5 * c0.astype(np.float64), limit)
                if msg is not None:
                    failures.append(f"{what}: {msg}")
                release_all(self.stub)
        self.assertEqual(failures, [])

    def test_mixed_operands_and_a_column_major_result(self):
        a, b_small, b_big = rand(1031, 523), rand(523, 65), rand(523, 1100)
        ha = self.upload(matrix(a))
        self.assertEqual(ha.device, "host")
        want_small = a.astype(np.float64) @ b_small
        limit = gemm_bound.bound(a, b_small, "fp32", "fp32", "fp32")
        # B on the device, B inline: the pieces of B come from device memory or the request.
        hb = self.upload(matrix(b_small))
        self.assertTrue(hb.device.startswith("cuda:"))
        for request in (pb.MultiplyRequest(a_handle=ha.handle, b_handle=hb.handle),
                        pb.MultiplyRequest(a_handle=ha.handle, b=matrix(b_small))):
            r = self.stub.Multiply(request, timeout=60)
            self.assertTrue(r.variant.endswith("+out_of_core"), r.variant)
            gemm_bound.assert_within(self, decode(r.c), want_small, limit)
        # A column-major result, kept in host memory, from B inline.
        r = self.stub.Multiply(pb.MultiplyRequest(a_handle=ha.handle, b=matrix(b_big),
                                                  output_layout=pb.COL_MAJOR, keep_result=True),
                               timeout=60)
        self.assertEqual(r.result.device, "host")
        self.assertEqual(r.result.layout, pb.COL_MAJOR)
        gemm_bound.assert_within(self, self.download(r.result.handle),
                                 a.astype(np.float64) @ b_big,
                                 gemm_bound.bound(a, b_big, "fp32", "fp32", "fp32"))

    def test_inline_operands_too_large_together_run_out_of_core(self):
        a, b = rand(1200, 700), rand(700, 900)  # 3.4 + 2.5 MB in, 4.3 MB out: over 6 MiB
        r = self.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(b)), timeout=60)
        self.assertTrue(r.variant.endswith("+out_of_core"), r.variant)
        gemm_bound.assert_within(self, decode(r.c), a.astype(np.float64) @ b,
                                 gemm_bound.bound(a, b, "fp32", "fp32", "fp32"))
        # A small product on the same server still runs in core.
        s = self.stub.Multiply(pb.MultiplyRequest(a=matrix(rand(64, 64)), b=matrix(rand(64, 64))))
        self.assertFalse(s.variant.endswith("+out_of_core"), s.variant)

    def test_what_cannot_fit_even_in_tiles_is_resource_exhausted(self):
        a, b = rand(70, 30000), rand(30000, 70)  # one 64-row piece of A' alone is 7.7 MB
        # A in host memory: the product must run out of core, and cannot.
        ha = self.upload(matrix(a))
        self.assertEqual(ha.device, "host")
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Multiply(pb.MultiplyRequest(a_handle=ha.handle, b=matrix(b)), timeout=60)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("even in tiles", ctx.exception.details())
        self.assertIn("--memory_budget_bytes", ctx.exception.details())
        # Inline: refused by the budget, as a product out of core could not run either.
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(b)), timeout=60)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("--memory_budget_bytes", ctx.exception.details())

    def test_operations_that_need_the_matrix_on_the_device_refuse_it(self):
        a = rand(1031, 523)
        ha = self.upload(matrix(a))
        self.assertEqual(ha.device, "host")
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Transpose(pb.TransposeRequest(a_handle=ha.handle), timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("host memory", ctx.exception.details())
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.MultiplyBatched(pb.MultiplyBatchedRequest(
                batch=1, a_handles=[ha.handle], b_handles=[ha.handle], transpose_b=True),
                timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.FAILED_PRECONDITION,
                         ctx.exception.details())
        self.assertIn("host memory", ctx.exception.details())
        # fp32 data computed in bf16 would need a conversion on the device: not out of core.
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Multiply(pb.MultiplyRequest(a_handle=ha.handle, b=matrix(rand(523, 9)),
                                                  compute=pb.COMPUTE_BF16), timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("precision", ctx.exception.details())
        # The server goes on.
        x, y = rand(100, 50), rand(50, 70)
        r = self.stub.Multiply(pb.MultiplyRequest(a=matrix(x), b=matrix(y)), timeout=30)
        self.assertLess(rel_l2(decode(r.c), x.astype(np.float64) @ y), 1e-5)


if __name__ == "__main__":
    unittest.main()
