"""End-to-end on several GPUs: placement of resident matrices and spreading of requests.

Skips (visibly) unless the server starts its CUDA backend with at least two GPUs. Checks that
uploads without a placement spread over the devices, that operands on different devices are
refused with FAILED_PRECONDITION, that colocate_with puts a matrix beside another and the product
is then correct, that concurrent independent requests run on every device, and that one product
spread over every GPU (split) is correct element by element for every operand order, precision and
band shape, inline and resident, and runs on one GPU when not asked or not large enough.
"""
import collections
import concurrent.futures
import unittest

import grpc
import numpy as np

from matserve.v1 import matrix_service_pb2 as pb
from server_process import cuda_server_or_skip, matrix, release_all
from test_gpu_service import COMPUTE, DATA, OUT, operands
from test_service import decode, rand, rel_l2
import gemm_bound  # noqa: E402  (tests/support; test_service put it on the path)

# Small tiles, so that the small products here still give each helper several tiles to pipeline.
SPLIT_TILE = 256


class MultiGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = cuda_server_or_skip(f"--split_gemm_tile={SPLIT_TILE}")
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

    def test_one_product_over_every_gpu_matches_float64(self):
        # Tall (bands of rows), wide (bands of columns), one row, and sides that are no multiple
        # of the tile; alpha and beta with C, so the helpers' copies of C's blocks count too.
        shapes = [(257, 131, 97), (33, 1000, 45), (1000, 7, 3), (1, 2, 5), (1031, 37, 129)]
        failures = []
        for precision in ("fp64", "fp32", "tf32", "fp16", "bf16"):
            out_type = pb.FP64 if OUT[precision] == "fp64" else pb.FP32
            for m, n, k in shapes:
                for ta, tb in [(False, False), (True, True), (True, False), (False, True)]:
                    sent = []
                    ma, mb, want = operands(precision, m, n, k, ta, tb, sent)
                    c0 = rand(m, n).astype(np.float64 if OUT[precision] == "fp64" else np.float32)
                    r = self.stub.Multiply(pb.MultiplyRequest(
                        a=ma, b=mb, c=matrix(c0), transpose_a=ta, transpose_b=tb, alpha=1.5,
                        beta=-0.5, compute=COMPUTE[precision], output_dtype=out_type,
                        split=pb.SPLIT_ALWAYS), timeout=120)
                    what = f"{precision} {m}x{n}x{k} ta={ta} tb={tb}"
                    if r.device.split()[0].count("+") != self.devices - 1:
                        failures.append(f"{what}: ran on {r.device!r}, not on all {self.devices} GPUs")
                    limit = gemm_bound.bound(*sent, precision, DATA[precision], OUT[precision],
                                             alpha=1.5, beta=-0.5, c0=c0)
                    msg = gemm_bound.check(decode(r.c), 1.5 * want - 0.5 * c0.astype(np.float64), limit)
                    if msg is not None:
                        failures.append(f"{what}: {msg}")
        self.assertEqual(failures, [])

    def test_resident_operands_and_result_over_every_gpu(self):
        a, b = rand(1500, 700), rand(700, 900)
        ha = self.stub.Upload(pb.UploadRequest(matrix=matrix(a))).resident
        hb = self.stub.Upload(pb.UploadRequest(matrix=matrix(b), colocate_with=ha.handle)).resident
        r = self.stub.Multiply(pb.MultiplyRequest(a_handle=ha.handle, b_handle=hb.handle,
                                                  keep_result=True, split=pb.SPLIT_ALWAYS))
        self.assertEqual(r.device.split()[0].count("+"), self.devices - 1, r.device)
        self.assertTrue(r.device.startswith(ha.device + "+"), r.device)
        self.assertEqual(r.result.device, ha.device)  # the result is assembled where A and B live
        got = decode(self.stub.Download(pb.DownloadRequest(handle=r.result.handle)).matrix)
        want = a.astype(np.float64) @ b
        gemm_bound.assert_within(self, got, want, gemm_bound.bound(a, b, "fp32", "fp32", "fp32"))

    def test_small_or_unasked_products_stay_on_one_gpu(self):
        a, b = rand(300, 200), rand(200, 100)
        for split in (pb.SPLIT_DEFAULT, pb.SPLIT_NEVER):  # default: far below the size threshold
            r = self.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(b), split=split))
            self.assertNotIn("+", r.device, split)
            self.assertLess(rel_l2(decode(r.c), a.astype(np.float64) @ b), 1e-5)
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(b), split=7))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("split", ctx.exception.details())


if __name__ == "__main__":
    unittest.main()
