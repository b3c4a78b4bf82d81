"""End-to-end: the Python client package (client/python, `matserve_client`) against the real server.

Results are checked against NumPy in float64 for every dtype, transpose state and layout; every
error class must surface as its MatserveError subclass with the gRPC code and message; resident
handles and streamed transfers above the unary message limit; shared-memory regions (operands and
results in place, cleanup, errors); and an offline `pip install`.
"""
import concurrent.futures
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
from unittest import mock
from multiprocessing import shared_memory
from pathlib import Path

import grpc
import numpy as np

import matserve_client as mc
from matserve_client import shared_memory as shm_module
from matserve_client import Bfloat16, Client
from server_process import ClientServerTest, ServerProcess
from test_service import rand, rel_l2

REPO = Path(__file__).resolve().parents[2]
SHAPES = [(1, 1, 1), (7, 5, 3), (61, 17, 131), (1, 97, 1), (97, 1, 1)]
TOLERANCE = {"fp64": 1e-12, "fp32": 1e-5, "fp16": 1e-2, "bf16": 1e-2}


def as_f64(x):
    return (x.to_float32() if isinstance(x, Bfloat16) else np.asarray(x)).astype(np.float64)


class ClientTest(ClientServerTest):
    SERVER_ARGS = ("--max_matrix_bytes=67108864", "--max_dimension=100000")
    CLIENT_TIMEOUT = 120

    def assert_resident(self):
        """The server has the resident-matrix RPCs: UNIMPLEMENTED (mc.Unimplemented) fails the
        test, never skips it."""
        self.client.list_resident()

    # --- results vs NumPy -----------------------------------------------------------------------
    def test_multiply_every_dtype_and_transpose_state_matches_numpy(self):
        for m, n, k in SHAPES:
            for dtype in ("fp64", "fp32", "fp16", "bf16"):
                for ta in (False, True):
                    for tb in (False, True):
                        a, b = rand(m, k, np.float64), rand(k, n, np.float64)
                        if dtype == "bf16":  # the values the server sees
                            a, b = Bfloat16.from_float(a), Bfloat16.from_float(b)
                            sa, sb = (a.T if ta else a), (b.T if tb else b)
                        else:
                            np_type = {"fp64": np.float64, "fp32": np.float32,
                                       "fp16": np.float16}[dtype]
                            a, b = a.astype(np_type), b.astype(np_type)
                            sa, sb = (a.T.copy() if ta else a), (b.T.copy() if tb else b)
                        r = self.client.multiply(sa, sb, transpose_a=ta, transpose_b=tb)
                        want = as_f64(a) @ as_f64(b)
                        self.assertEqual(r.c.shape, (m, n))
                        self.assertEqual(r.precision, dtype)
                        expect = np.float32 if dtype == "bf16" else np_type
                        self.assertEqual(r.c.dtype, expect)
                        self.assertLess(rel_l2(r.c.astype(np.float64), want), TOLERANCE[dtype],
                                        (m, n, k, dtype, ta, tb))

    def test_bf16_paths_rounding_bits_and_fp32_output(self):
        a, b = rand(40, 24), rand(24, 16)
        ar, br = Bfloat16.from_float(a), Bfloat16.from_float(b)
        want = as_f64(ar) @ as_f64(br)
        by_dtype = self.client.multiply(a, b, dtype="bf16")  # float32 rounded on the client
        by_wrapper = self.client.multiply(ar, br)
        np.testing.assert_array_equal(by_dtype.c, by_wrapper.c)
        self.assertLess(rel_l2(by_wrapper.c.astype(np.float64), want), 1e-2)
        bits = self.client.multiply(ar, br, bf16_bits=True).c
        self.assertIsInstance(bits, Bfloat16)
        np.testing.assert_array_equal(bits.to_float32(), by_wrapper.c)
        wide = self.client.multiply(ar, br, out_dtype="fp32")
        self.assertEqual(wide.c.dtype, np.float32)
        self.assertLess(rel_l2(wide.c.astype(np.float64), want), 1e-5)

    def test_column_major_inputs_and_outputs(self):
        a, b, c = rand(13, 7), rand(7, 11), rand(13, 11)
        want = a.astype(np.float64) @ b
        r = self.client.multiply(np.asfortranarray(a), b)
        self.assertTrue(r.c.flags.c_contiguous)
        self.assertLess(rel_l2(r.c.astype(np.float64), want), 1e-5)
        r = self.client.multiply(np.asfortranarray(a), np.asfortranarray(b), out_order="F")
        self.assertTrue(r.c.flags.f_contiguous)
        self.assertLess(rel_l2(r.c.astype(np.float64), want), 1e-5)
        # C given column-major: the result follows its order.
        r = self.client.multiply(a, b, c=np.asfortranarray(c), beta=1.0)
        self.assertTrue(r.c.flags.f_contiguous)
        self.assertLess(rel_l2(r.c.astype(np.float64), want + c), 1e-5)
        # Strided views are sent contiguous.
        big = rand(26, 14)
        r = self.client.multiply(big[::2, ::2], b)
        self.assertLess(rel_l2(r.c.astype(np.float64), big[::2, ::2].astype(np.float64) @ b), 1e-5)

    def test_alpha_beta_and_c(self):
        a, b, c = rand(9, 6, np.float64), rand(6, 4, np.float64), rand(9, 4, np.float64)
        r = self.client.multiply(a, b, c=c, alpha=0.5, beta=-2.0)
        np.testing.assert_allclose(r.c, 0.5 * (a @ b) - 2.0 * c, rtol=1e-12, atol=1e-12)
        r = self.client.multiply(a, b, beta=3.0)  # no C: counts as zero
        np.testing.assert_allclose(r.c, a @ b, rtol=1e-12, atol=1e-12)
        # C in another dtype is converted to the output dtype.
        r = self.client.multiply(a.astype(np.float32), b.astype(np.float32), c=c, beta=1.0)
        self.assertLess(rel_l2(r.c.astype(np.float64), a @ b + c), 1e-5)

    def test_split_is_sent_and_one_device_computes_on_the_cpu(self):
        a, b = rand(9, 6, np.float64), rand(6, 4, np.float64)
        for split in (None, "default", "never", "always", "ALWAYS"):
            r = self.client.multiply(a, b, split=split)
            self.assertEqual(r.device, "cpu")  # one device: nothing to spread over
            np.testing.assert_allclose(r.c, a @ b, rtol=1e-12, atol=1e-12)
        with self.assertRaisesRegex(ValueError, "split: 'sometimes' is not one of default, never, always"):
            self.client.multiply(a, b, split="sometimes")

    def test_compute_modes_verify_timing_and_rate(self):
        a, b = rand(64, 96), rand(96, 40)
        want = a.astype(np.float64) @ b
        for compute, tol in [("tf32", 5e-3), ("fp16", 1e-2), ("bf16", 1e-2), ("fp32", 1e-5),
                             ("fp8", 6e-2)]:  # e4m3: 3 mantissa bits, per-tensor scales
            r = self.client.multiply(a, b, compute=compute, verify=True)
            self.assertEqual(r.precision, compute)  # the reply says what was computed
            self.assertEqual(r.c.dtype, np.float32)
            self.assertLess(rel_l2(r.c.astype(np.float64), want), tol, compute)
            self.assertLess(r.verification.rel_l2_error, tol, compute)
            if compute == "fp8":  # the scales the server quantized with: amax / 448
                np.testing.assert_allclose(r.fp8_scales, (np.abs(a).max() / 448,
                                                          np.abs(b).max() / 448), rtol=1e-6)
            else:
                self.assertIsNone(r.fp8_scales)
        r = self.client.multiply(rand(200, 300), rand(300, 100), variant="auto", verify=True)
        self.assertTrue(r.variant and r.device)
        t = r.timing
        self.assertIsInstance(t, mc.Timing)
        self.assertGreater(t.kernel_us, 0)
        self.assertGreaterEqual(t.total_us, t.queue_us + t.host_to_device_us + t.kernel_us +
                                t.device_to_host_us)
        self.assertAlmostEqual(r.gflops, 2 * 200 * 300 * 100 / (t.kernel_us * 1e3),
                               delta=1e-6 * r.gflops)
        self.assertGreater(r.verification.max_abs_error, 0)
        self.assertIsNone(self.client.multiply(rand(2, 2), rand(2, 2)).verification)

    def test_transpose_with_scale_every_dtype_and_order(self):
        for dtype in (np.float64, np.float32, np.float16):
            for order in ("C", "F"):
                a = np.asarray(rand(33, 65, dtype), order=order)
                r = self.client.transpose(a)
                self.assertEqual(r.b.shape, (65, 33))
                self.assertEqual(r.b.flags.f_contiguous and not r.b.flags.c_contiguous,
                                 order == "F")
                np.testing.assert_array_equal(r.b, a.T)
                self.assertGreater(r.gb_per_s, 0)
        a = rand(5, 8)
        r = self.client.transpose(a, scale=-2.0, verify=True)
        np.testing.assert_array_equal(r.b, -2.0 * a.T)
        self.assertEqual(r.verification.max_abs_error, 0.0)
        bits = Bfloat16.from_float(rand(3, 7))
        r = self.client.transpose(bits, bf16_bits=True)
        np.testing.assert_array_equal(r.b.bits, bits.bits.T)

    def test_health(self):
        self.assertEqual(self.client.health(), "SERVING")
        self.assertEqual(self.client.health("matserve.v1.MatrixService"), "SERVING")
        with self.assertRaises(mc.NotFound):
            self.client.health("no.such.Service")
        # A dns: target (round robin over what it resolves to) reaches the same server.
        port = self.server.target.rsplit(":", 1)[1]
        with mc.Client(f"dns:///localhost:{port}", timeout=30) as c:
            self.assertEqual(c.health(), "SERVING")
            self.assertEqual(c.multiply(np.eye(2), np.eye(2)).c.tolist(), [[1, 0], [0, 1]])

    def test_list_kernels_and_server_info(self):
        self.client.wait_ready(5)
        kernels = self.client.list_kernels()
        self.assertTrue(all(isinstance(k, mc.KernelInfo) for k in kernels))
        gemm = self.client.list_kernels("gemm")
        self.assertIn("cpu_openblas", [k.name for k in gemm])
        self.assertTrue(all(k.operation == "gemm" for k in gemm))
        self.assertIn("cpu_blocked", [k.name for k in self.client.list_kernels("transpose")])
        for k in kernels:
            self.assertTrue(k.description and k.family and k.precisions and k.backend, k)
        info = self.client.server_info()
        self.assertEqual(info.backend, "cpu")
        self.assertTrue(info.version)
        self.assertEqual(info.limits.max_matrix_bytes, 67108864)
        self.assertEqual(len(info.devices), 1)

    def test_messages_above_grpc_default_4_mib_and_threads_sharing_a_client(self):
        a = rand(1100, 1100)  # 4.8 MB per operand and result: over gRPC's default limit
        r = self.client.multiply(a, a)
        self.assertLess(rel_l2(r.c.astype(np.float64), a.astype(np.float64) @ a), 1e-5)

        def one(i):
            x, y = rand(40 + i, 30), rand(30, 20 + i)
            return rel_l2(self.client.multiply(x, y).c.astype(np.float64),
                          x.astype(np.float64) @ y)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            self.assertLess(max(pool.map(one, range(32))), 1e-5)

    # --- errors ---------------------------------------------------------------------------------
    def assert_error(self, cls, code, fragment, call, *args, **kw):
        with self.assertRaises(cls) as ctx:
            call(*args, **kw)
        e = ctx.exception
        self.assertIsInstance(e, mc.MatserveError)
        self.assertEqual(e.code, code, e.message)
        self.assertIn(fragment, e.message)
        self.assertIn(code.name, str(e))
        return e

    def test_every_error_class_surfaces_with_code_and_message(self):
        a, b = rand(4, 3), rand(3, 5)
        S = grpc.StatusCode
        mul = self.client.multiply
        self.assert_error(mc.InvalidArgument, S.INVALID_ARGUMENT,
                          "inner dimensions do not agree", mul, a, b, transpose_b=True)
        self.assert_error(mc.InvalidArgument, S.INVALID_ARGUMENT,
                          "variant: unknown GEMM kernel 'warp9'", mul, a, b, variant="warp9")
        self.assert_error(mc.InvalidArgument, S.INVALID_ARGUMENT, "alpha: must be a finite",
                          mul, a, b, alpha=float("nan"))
        self.assert_error(mc.InvalidArgument, S.INVALID_ARGUMENT, "b.dtype: FP64 differs",
                          mul, a, b.astype(np.float64))
        self.assert_error(mc.InvalidArgument, S.INVALID_ARGUMENT,
                          "compute: mode 'tf32' is not available for fp64", mul,
                          a.astype(np.float64), b.astype(np.float64), compute="tf32")
        self.assert_error(mc.InvalidArgument, S.INVALID_ARGUMENT, "is a GEMM kernel",
                          self.client.transpose, a, variant="cpu_openblas")
        if "cpu_inplace" in [k.name for k in self.client.list_kernels("transpose")]:
            # An in-place kernel asked for an out-of-place transpose (works in CPU-only builds,
            # which know no CUDA variant names at all).
            self.assert_error(mc.FailedPrecondition, S.FAILED_PRECONDITION, "is in-place",
                              self.client.transpose, a, variant="cpu_inplace")
        else:
            self.assert_error(mc.FailedPrecondition, S.FAILED_PRECONDITION,
                              "runs on the cuda backend", mul, a, b, variant="cublas")
        big = np.zeros((4100, 4100), np.float32)  # 67 MB > --max_matrix_bytes=64 MiB
        self.assert_error(mc.ResourceExhausted, S.RESOURCE_EXHAUSTED,
                          "exceeds the limit of 67108864 bytes per matrix", mul, big, rand(4100, 1))
        slow = rand(1500, 1500)
        self.assert_error(mc.DeadlineExceeded, S.DEADLINE_EXCEEDED, "", mul, slow, slow,
                          timeout=0.001)
        with Client("127.0.0.1:1", timeout=5) as nowhere:
            self.assert_error(mc.Unavailable, S.UNAVAILABLE, "", nowhere.server_info)
            self.assert_error(mc.Unavailable, S.UNAVAILABLE, "not reachable", nowhere.wait_ready,
                              0.2)
        # Client-side mistakes are ordinary Python errors, raised before any call.
        with self.assertRaises(TypeError):
            mul(np.ones((2, 2), np.int64), np.ones((2, 2), np.int64))
        with self.assertRaises(ValueError):
            mul(np.ones(3), np.ones(3))
        with self.assertRaises(ValueError):
            mul(a, b, compute="fp4")
        # And the server still answers correctly.
        self.assertLess(rel_l2(mul(a, b).c.astype(np.float64), a.astype(np.float64) @ b), 1e-5)

    def test_message_over_the_limit_without_streaming_is_resource_exhausted(self):
        with ServerProcess("--max_message_bytes=65536") as small:
            big = rand(200, 200)  # 160 KB per operand
            with Client(small.target, auto_stream=False, timeout=30) as client:
                e = self.assert_error(mc.ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                      "", client.multiply, big, big)
                self.assertTrue(e.message)
                self.assertEqual(client.multiply(rand(8, 8), rand(8, 8)).c.shape, (8, 8))
        # The client's own receive limit applies too.
        with Client(self.server.target, max_message_bytes=65536, auto_stream=False) as client:
            self.assert_error(mc.ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED, "",
                              client.multiply, rand(8, 100), rand(100, 4000))

    # --- resident matrices and streaming --------------------------------------------------------
    def test_resident_upload_download_release(self):
        self.assert_resident()
        for dtype in (np.float64, np.float32, np.float16):
            for order in ("C", "F"):
                a = np.asarray(rand(17, 29, dtype), order=order)
                with self.client.upload(a) as h:
                    self.assertIsInstance(h, mc.ResidentMatrix)
                    self.assertEqual((h.shape, h.order, h.nbytes), ((17, 29), order, a.nbytes))
                    self.assertIn(h.handle, [m.handle for m in self.client.list_resident()])
                    back = h.download()
                    np.testing.assert_array_equal(back, a)
                    self.assertEqual(back.flags.f_contiguous and not back.flags.c_contiguous,
                                     order == "F")
                self.assertTrue(h.released)
                self.assertNotIn(h.handle, [m.handle for m in self.client.list_resident()])
        bits = Bfloat16.from_float(rand(6, 5))
        h = self.client.upload(bits)
        np.testing.assert_array_equal(h.download(bf16_bits=True).bits, bits.bits)
        self.assertGreaterEqual(h.release(), bits.nbytes)  # whole pool blocks may be freed
        self.assertEqual(h.release(), 0)  # second release: nothing to do
        with self.assertRaises(ValueError):
            h.download()
        ghost = mc.ResidentMatrix(self.client, mc.ResidentInfo("0" * 32, 1, 1, "fp32", "C", 4,
                                                               "cpu", 0))
        self.assert_error(mc.NotFound, grpc.StatusCode.NOT_FOUND, "", ghost.download)

    def test_resident_operands_results_and_in_place_transpose(self):
        self.assert_resident()
        a, b, c = rand(30, 20), rand(20, 10), rand(30, 10)
        want = a.astype(np.float64) @ b
        with self.client.upload(a) as ha, self.client.upload(b, colocate_with=ha) as hb:
            self.assertEqual(hb.info.device, ha.info.device)
            r = self.client.multiply(ha, hb)
            self.assertLess(rel_l2(r.c.astype(np.float64), want), 1e-5)
            r = self.client.multiply(ha, b, c=c, beta=1.0, keep_result=True)
            self.assertIsNone(r.c)
            with r.resident as hc:
                self.assertEqual(hc.shape, (30, 10))
                r2 = self.client.multiply(ha.download(), hb, transpose_a=False)
                self.assertLess(rel_l2(hc.download().astype(np.float64), want + c), 1e-5)
                self.assertLess(rel_l2(r2.c.astype(np.float64), want), 1e-5)
            t = self.client.transpose(ha, keep_result=True, scale=2.0)
            with t.resident as ht:
                np.testing.assert_array_equal(ht.download(), 2.0 * a.T)
        sq = rand(16, 16)
        with self.client.upload(sq) as hs:
            r = self.client.transpose(hs, in_place=True)
            self.assertIs(r.resident, hs)
            np.testing.assert_array_equal(hs.download(), sq.T)

    def test_calls_release_the_matrices_named_in_release(self):
        self.assert_resident()
        a, b = rand(12, 12), rand(12, 12)
        listed = lambda: {m.handle for m in self.client.list_resident()}
        with self.client.upload(a) as ha, self.client.upload(b) as hb:
            r1 = self.client.multiply(ha, hb, keep_result=True).resident
            # The next result replaces r1; then a product releases its own operand.
            r2 = self.client.multiply(ha, hb, keep_result=True, release=[r1]).resident
            self.assertTrue(r1.released)
            r3 = self.client.multiply(r2, hb, keep_result=True, release=[r2]).resident
            self.assertTrue(r2.released)
            self.assertEqual(listed(), {ha.handle, hb.handle, r3.handle})
            want = (a.astype(np.float64) @ b) @ b
            self.assertLess(rel_l2(r3.download().astype(np.float64), want), 1e-5)
            batch = self.client.multiply_batched([ha, hb], [hb, ha], keep_result=True,
                                                 release=[r3])
            self.assertTrue(r3.released)
            t = self.client.transpose(ha, release=batch.residents)
            np.testing.assert_array_equal(t.b, a.T)
            self.assertTrue(all(r.released for r in batch.residents))
            self.assertEqual(listed(), {ha.handle, hb.handle})
            # Checked before the call; a refused call releases nothing.
            with self.assertRaises(ValueError):
                self.client.multiply(ha, hb, release=[r1])
            with self.assertRaises(TypeError):
                self.client.multiply(ha, hb, release=[ha.handle])
            r4 = self.client.multiply(ha, hb, keep_result=True).resident
            with self.assertRaises(mc.InvalidArgument):
                self.client.multiply(ha, rand(5, 3), release=[r4])
            self.assertFalse(r4.released)
            self.assertEqual(listed(), {ha.handle, hb.handle, r4.handle})
            r4.release()

    def test_streamed_matrices_above_the_unary_limit(self):
        with ServerProcess("--max_message_bytes=1048576") as small:
            with Client(small.target, timeout=120, chunk_bytes=256 << 10, stripes=0) as client:
                client.list_resident()  # UNIMPLEMENTED fails: the server has them
                self.assertLess(client.unary_limit_bytes(), 1 << 20)
                a = rand(700, 600)  # 1.68 MB: above the 1 MiB message limit
                with self.assertRaises(mc.ResourceExhausted):  # really above the unary limit
                    client.upload(a, stream=False)
                with client.upload(a) as h:  # streamed (UploadStream)
                    with self.assertRaises(mc.ResourceExhausted):
                        h.download(stream=False)
                    np.testing.assert_array_equal(h.download(), a)  # streamed (DownloadStream)
                    np.testing.assert_array_equal(h.download(stream=True), a)
                # Arrays above the limit in a plain multiply: uploaded, computed, streamed back.
                b = rand(600, 650)
                r = client.multiply(a, b)
                self.assertEqual(r.c.shape, (700, 650))
                self.assertLess(rel_l2(r.c.astype(np.float64), a.astype(np.float64) @ b), 1e-5)
                self.assertEqual(client.list_resident(), [])  # temporaries released
                r = client.transpose(a)
                np.testing.assert_array_equal(r.b, a.T)
                # Small ones still go unary, and forcing a stream works for them too.
                s = rand(3, 4)
                with client.upload(s, stream=True) as h:
                    np.testing.assert_array_equal(h.download(stream=True), s)


def shm_exists(key):
    return os.path.exists("/dev/shm" + key)


class SharedMemoryClientTest(ClientServerTest):
    """Client.create_shared_memory / register_shared_memory, ShmMatrix operands and `out`."""

    def setUp(self):
        self.region = self.client.create_shared_memory(4 << 20)

    def tearDown(self):
        self.region.close()
        self.client.unregister_shared_memory()  # whatever a failed test left registered
        self.assertFalse(shm_exists(self.region.key))

    def test_server_offers_shared_memory(self):
        info = self.client.server_info()
        self.assertTrue(info.limits.shared_memory)
        # The CUDA backend pins a region for DMA; the CPU backend has no use for it.
        self.assertEqual(self.region.pinned, info.backend == "cuda")

    def test_concurrent_registrations_of_one_range_keep_its_bytes(self):
        """Threads of one client registering the same range at once: each handshake writes the
        server's nonce over the range's first bytes and puts back what was there. Interleaved,
        a thread would put back another's nonce instead of the data (and run out of retries)."""
        obj = shared_memory.SharedMemory(create=True, size=4096)
        try:
            pattern = bytes(range(64))
            obj.buf[:64] = pattern
            key = "/" + obj.name
            for _ in range(3):
                with concurrent.futures.ThreadPoolExecutor(8) as pool:
                    regions = list(pool.map(lambda i: self.client.register_shared_memory(
                        f"same{i}", key, 4096), range(8)))  # raises if a registration failed
                self.assertEqual(bytes(obj.buf[:64]), pattern)
                for r in regions:
                    r.close()
        finally:
            obj.close()
            obj.unlink()

    def test_upload_reads_the_region(self):
        a = np.random.default_rng(5).uniform(-1, 1, (19, 23)).astype(np.float32)
        with self.client.upload(self.region.put(np.asfortranarray(a))) as h:
            self.assertEqual((h.shape, h.order), ((19, 23), "F"))
            np.testing.assert_array_equal(h.download(), a)

    def test_operands_and_result_in_shared_memory_match_numpy(self):
        r = self.region
        a, b, c = rand(37, 29, np.float64), rand(29, 13, np.float64), rand(37, 13, np.float64)
        for order in ("C", "F"):
            sa, sb = r.put(np.asarray(a, order=order)), r.put(np.asfortranarray(b))
            sc = r.put(np.asarray(c, order=order))
            out = r.empty(37, 13, "fp64", order=order)
            res = self.client.multiply(sa, sb, c=sc, alpha=0.5, beta=-2.0, out=out)
            self.assertTrue(np.shares_memory(res.c, out.array()))
            self.assertEqual(res.c.flags.f_contiguous and not res.c.flags.c_contiguous,
                             order == "F")
            np.testing.assert_allclose(res.c, 0.5 * a @ b - 2.0 * c, rtol=1e-12, atol=1e-12)
            # Transposed operands: op(A) = stored.T.
            at, bt = r.put(a.T.copy()), r.put(b.T.copy())
            out = r.empty(37, 13, "fp64", order=order)
            res = self.client.multiply(at, bt, transpose_a=True, transpose_b=True, out=out)
            np.testing.assert_allclose(out.array(), a @ b, rtol=1e-12, atol=1e-12)
            r.reset()
        a32, b32 = rand(64, 96), rand(96, 40)
        out = r.empty(64, 40, np.float32)
        res = self.client.multiply(r.put(a32), r.put(b32), out=out, verify=True)
        self.assertEqual(res.c.dtype, np.float32)
        self.assertLess(rel_l2(out.array().astype(np.float64), a32.astype(np.float64) @ b32),
                        1e-5)
        self.assertLess(res.verification.rel_l2_error, 1e-5)
        self.assertTrue(res.variant and res.device)
        # fp16 operands with an fp32 result (out_dtype), bf16 operands with a bf16 result.
        h = r.put(rand(8, 8, np.float16))
        res = self.client.multiply(h, h, out_dtype="fp32", out=r.empty(8, 8, "fp32"))
        want = h.array().astype(np.float64) @ h.array().astype(np.float64)
        self.assertLess(rel_l2(res.c.astype(np.float64), want), 1e-3)
        bf = r.put(Bfloat16.from_float(rand(8, 8)))
        res = self.client.multiply(bf, bf, out=r.empty(8, 8, "bf16"))
        self.assertIsInstance(res.c, Bfloat16)
        self.assertLess(rel_l2(res.c.to_float32().astype(np.float64),
                               as_f64(bf.array()) @ as_f64(bf.array())), 1e-2)

    def test_mixed_places(self):
        r = self.region
        a, b = rand(20, 31), rand(31, 11)
        want = a.astype(np.float64) @ b
        sa, sb = r.put(a), r.put(b)
        res = self.client.multiply(sa, b)  # a in shared memory, b sent, C in the reply
        self.assertFalse(np.shares_memory(res.c, sa.array()))
        self.assertLess(rel_l2(res.c.astype(np.float64), want), 1e-5)
        res = self.client.multiply(a, sb, out=r.empty(20, 11, "fp32"))  # b and C in the region
        self.assertLess(rel_l2(res.c.astype(np.float64), want), 1e-5)
        with self.client.upload(a) as ha:  # resident a, shared-memory b and C
            res = self.client.multiply(ha, sb, out=r.empty(20, 11, "fp32"))
            self.assertLess(rel_l2(res.c.astype(np.float64), want), 1e-5)
        with self.client.upload(sa) as hs:  # a ShmMatrix uploads its bytes
            np.testing.assert_array_equal(hs.download(), a)

    def test_transpose_into_shared_memory(self):
        r = self.region
        for dtype in (np.float64, np.float32, np.float16):
            for order in ("C", "F"):
                a = np.asarray(rand(33, 65, dtype), order=order)
                out = r.empty(65, 33, dtype, order=order)
                res = self.client.transpose(r.put(a), scale=2.0, out=out)
                self.assertTrue(np.shares_memory(res.b, out.array()))
                np.testing.assert_array_equal(res.b, (2.0 * a.T).astype(dtype))
                res = self.client.transpose(a, out=r.empty(65, 33, dtype, order=order))
                np.testing.assert_array_equal(res.b, a.T)
            r.reset()

    def test_list_and_unregister(self):
        with self.client.create_shared_memory(8192, name="second") as second:
            listed = {i.name: i for i in self.client.list_shared_memory()}
            self.assertEqual(sorted(listed), sorted([self.region.name, "second"]))
            self.assertIsInstance(listed["second"], mc.SharedMemoryInfo)
            self.assertEqual((listed["second"].key, listed["second"].offset,
                              listed["second"].byte_size), (second.key, 0, 8192))
            placed = second.put(rand(4, 4))
            self.assertEqual(self.client.unregister_shared_memory("second"), 1)
            self.assertEqual([i.name for i in self.client.list_shared_memory()],
                             [self.region.name])
            self.assertTrue(shm_exists(second.key))  # unregistered, still open here
            with self.assertRaises(mc.NotFound):
                self.client.multiply(placed, rand(4, 4))
            with self.assertRaises(mc.NotFound):
                self.client.unregister_shared_memory("second")
        self.assertFalse(shm_exists(second.key))
        self.assertEqual(self.client.unregister_shared_memory(), 1)  # every region of the caller
        self.assertEqual(self.client.list_shared_memory(), [])

    def test_context_manager_and_client_close_clean_up(self):
        with self.client.create_shared_memory(1 << 16) as region:
            res = self.client.multiply(region.put(rand(5, 5)), rand(5, 5),
                                       out=region.empty(5, 5, "fp32"))
            view = res.c
        self.assertTrue(region.closed)
        self.assertFalse(shm_exists(region.key))
        self.assertNotIn(region.name, [i.name for i in self.client.list_shared_memory()])
        self.assertEqual(view.shape, (5, 5))  # a view outlives the region (the pages stay mapped)
        self.assertTrue(np.isfinite(view).all())
        with Client(self.server.target, timeout=30) as other:
            kept = other.create_shared_memory(4096)
            self.assertIn(kept.name, [i.name for i in other.list_shared_memory()])
        self.assertTrue(kept.closed)
        self.assertFalse(shm_exists(kept.key))
        self.assertEqual([i.name for i in self.client.list_shared_memory()], [self.region.name])

    def test_registering_the_callers_own_object(self):
        own = shared_memory.SharedMemory(create=True, size=1 << 16)
        try:
            a, b = rand(8, 8, np.float64), rand(8, 8, np.float64)
            own.buf[5000:5032] = b"the caller's own first 32 bytes."
            with self.client.register_shared_memory("own", "/" + own.name, 8192,
                                                    offset=5000) as region:
                self.assertFalse(region.owned)
                # The server's nonce was written there to register, and the bytes put back.
                self.assertEqual(bytes(own.buf[5000:5032]), b"the caller's own first 32 bytes.")
                res = self.client.multiply(region.put(a), region.put(b),
                                           out=region.empty(8, 8, "fp64"))
                np.testing.assert_allclose(res.c, a @ b, rtol=1e-12, atol=1e-12)
                first = np.frombuffer(own.buf, np.float64, count=64, offset=5000)
                np.testing.assert_array_equal(first.reshape(8, 8), a)
                del first
            self.assertTrue(shm_exists("/" + own.name))  # the caller's to unlink
        finally:
            own.close()
            own.unlink()

    def test_errors_map_to_their_classes(self):
        r = self.region
        ok = rand(4, 4)
        S = grpc.StatusCode
        beyond = mc.ShmMatrix(r, r.byte_size - 32, 4, 4, "fp32", "C")
        e = self.assert_error(mc.InvalidArgument, S.INVALID_ARGUMENT, "exceeds region",
                              self.client.multiply, beyond, ok)
        self.assertIn(r.name, e.message)
        self.assert_error(mc.InvalidArgument, S.INVALID_ARGUMENT, "output_shm",
                          self.client.multiply, ok, ok,
                          out=mc.ShmMatrix(r, r.byte_size - 4, 4, 4, "fp32", "C"))
        sa = r.put(ok)
        self.assert_error(mc.InvalidArgument, S.INVALID_ARGUMENT, "overlaps",
                          self.client.multiply, sa, ok,
                          out=mc.ShmMatrix(r, sa.offset + 32, 4, 4, "fp32", "C"))
        gone = self.client.create_shared_memory(4096)
        placed = gone.put(ok)
        self.client.unregister_shared_memory(gone.name)
        self.assert_error(mc.NotFound, S.NOT_FOUND, f"no shared-memory region '{gone.name}'",
                          self.client.multiply, placed, ok)
        gone.close()
        self.assert_error(mc.NotFound, S.NOT_FOUND, "no shared-memory object",
                          self.client.register_shared_memory, "x",
                          f"/matserve-absent-{os.getpid()}", 16)
        self.assert_error(mc.InvalidArgument, S.INVALID_ARGUMENT, "exceeds",
                          self.client.register_shared_memory, "x", r.key, r.byte_size, offset=1)
        self.assert_error(mc.AlreadyExists, S.ALREADY_EXISTS, "registered already",
                          self.client.create_shared_memory, 64, name=r.name)
        # Client-side checks come before any call.
        with self.assertRaisesRegex(ValueError, "out: not with keep_result"):
            self.client.multiply(sa, ok, keep_result=True, out=r.empty(4, 4, "fp32"))
        with self.assertRaisesRegex(ValueError, r"out: shape \(4, 5\) differs"):
            self.client.multiply(sa, ok, out=r.empty(4, 5, "fp32"))
        # And the region still works.
        res = self.client.multiply(sa, ok, out=r.empty(4, 4, "fp32"))
        self.assertLess(rel_l2(res.c.astype(np.float64), ok.astype(np.float64) @ ok), 1e-5)

    def test_switched_off_server_refuses_and_leaves_no_object(self):
        # Every object the client makes is recorded (other tests beside this one make their own).
        made = []
        real = shm_module._mp_shm.SharedMemory

        def recorded(*args, **kwargs):
            obj = real(*args, **kwargs)
            made.append(obj.name)
            return obj
        with ServerProcess("--shared_memory=false") as off, Client(off.target, timeout=30) as c, \
                mock.patch.object(shm_module._mp_shm, "SharedMemory", recorded):
            self.assertFalse(c.server_info().limits.shared_memory)
            self.assert_error(mc.FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION,
                              "--shared_memory=false", c.create_shared_memory, 4096)
        self.assertEqual([n for n in made if os.path.exists("/dev/shm/" + n.lstrip("/"))], [])

    assert_error = ClientTest.assert_error


class PipInstallTest(unittest.TestCase):
    """`pip install` of client/python, offline, into a temporary directory; the installed package
    (with the stubs it generated, and no `matserve` stubs on sys.path) then talks to a server."""

    def test_offline_pip_install_generates_stubs_and_works(self):
        for module in ("pip", "setuptools", "wheel"):
            self.assertIsNotNone(importlib.util.find_spec(module), f"{sys.executable} lacks "
                                 f"{module}: apt-get install python3-{module}")
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "src"
            # A copy, so the build's in-tree files never land in the shared source tree.
            shutil.copytree(REPO / "client" / "python", src / "client" / "python",
                            ignore=shutil.ignore_patterns("build", "*.egg-info", "_proto",
                                                          "__pycache__"))
            shutil.copytree(REPO / "proto", src / "proto")
            site = Path(tmp) / "site"
            pip = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                 "--no-deps", "--disable-pip-version-check", "--target", str(site),
                 str(src / "client" / "python")],
                capture_output=True, text=True, timeout=300)
            self.assertEqual(pip.returncode, 0, pip.stdout + pip.stderr)
            proto = site / "matserve_client" / "_proto"
            self.assertTrue((proto / "matrix_service_pb2.py").is_file())
            self.assertTrue((proto / "matrix_service_pb2_grpc.py").is_file())
            self.assertFalse((site / "matserve").exists())
            with ServerProcess() as server:
                script = (
                    "import importlib.util, numpy as np\n"
                    "from matserve_client import Client\n"
                    "import matserve_client._stubs as s\n"
                    "assert s.pb.__name__ == 'matserve_client._proto.matrix_service_pb2'\n"
                    "assert importlib.util.find_spec('matserve') is None\n"
                    f"c = Client('{server.target}', timeout=60)\n"
                    "a = np.arange(12, dtype=np.float32).reshape(3, 4)\n"
                    "r = c.multiply(a, a.T)\n"
                    "assert np.array_equal(r.c, a @ a.T), r.c\n"
                    "print('ok', r.variant, r.device)\n")
                env = dict(os.environ, PYTHONPATH=str(site))
                run = subprocess.run([sys.executable, "-s", "-c", script], cwd=tmp, env=env,
                                     capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertIn("ok", run.stdout)


class SdistWheelVenvTest(unittest.TestCase):
    """The package's release path, offline: an sdist built from client/python carries the proto
    files, a wheel builds from that sdist alone (no repository beside it), installs into a fresh
    virtual environment, and the installed client multiplies against the server: NumPy arrays,
    an array-like in its own dtype, fp8 compute, fp8 data (dtypes.py, interop.py), and the asyncio
    client."""

    def test_sdist_to_wheel_to_venv(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            src = tmp / "src"
            shutil.copytree(REPO / "client" / "python", src,
                            ignore=shutil.ignore_patterns("build", "*.egg-info", "_proto",
                                                          "__pycache__"))
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            sdist = subprocess.run(
                [sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp / "dist")],
                cwd=src, env=dict(env, MATSERVE_PROTO_DIR=str(REPO / "proto")),
                capture_output=True, text=True, timeout=300)
            self.assertEqual(sdist.returncode, 0, sdist.stdout + sdist.stderr)
            (archive,) = (tmp / "dist").glob("matserve*client-*.tar.gz")
            with tarfile.open(archive) as tar:
                names = tar.getnames()
            self.assertTrue(any(n.endswith("proto/matserve/v1/matrix_service.proto")
                                for n in names), names)
            package = REPO / "client" / "python" / "matserve_client"
            modules = {p.name for p in package.glob("*.py")}
            packed = {Path(n).name for n in names if "/matserve_client/" in n}
            self.assertLessEqual(modules, packed)  # every module of the package, interop.py too
            wheel = subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-index",
                 "--no-deps", "--no-cache-dir", "--disable-pip-version-check", "-w",
                 str(tmp / "wheels"), str(archive)],
                cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
            self.assertEqual(wheel.returncode, 0, wheel.stdout + wheel.stderr)
            (whl,) = (tmp / "wheels").glob("matserve_client-*.whl")
            venv = tmp / "venv"
            subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                            "--system-site-packages", str(venv)], check=True, timeout=120)
            python = str(venv / "bin" / "python")
            install = subprocess.run(
                [python, "-m", "pip", "install", "--no-index", "--no-deps",
                 "--disable-pip-version-check", str(whl)],
                cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
            self.assertEqual(install.returncode, 0, install.stdout + install.stderr)
            with ServerProcess() as server:
                script = (
                    "import asyncio, numpy as np, matserve_client\n"
                    f"assert matserve_client.__file__.startswith({str(venv)!r})\n"
                    "from matserve_client import Client\n"
                    "from matserve_client.aio import AsyncClient\n"
                    f"target = {server.target!r}\n"
                    "a = np.arange(12, dtype=np.float32).reshape(3, 4)\n"
                    "with Client(target, timeout=60) as c:\n"
                    "    r = c.multiply(a, a.T)\n"
                    "    assert np.array_equal(r.c, a @ a.T), r.c\n"
                    "    r = c.multiply(memoryview(a), memoryview(np.ascontiguousarray(a.T)))\n"
                    "    assert r.c.dtype == np.float32, r.c.dtype\n"
                    "    r = c.multiply(a, a.T, compute='fp8')\n"
                    "    assert r.precision == 'fp8', r.precision\n"
                    "    want = (a @ a.T).astype(np.float64)\n"
                    "    assert np.linalg.norm(r.c - want) < 0.06 * np.linalg.norm(want)\n"
                    "    e4m3 = np.array([[0x38, 0x40], [0x30, 0xB8]], np.uint8)  # 1 2 .5 -1\n"
                    "    f8 = matserve_client.Float8E4M3(e4m3)\n"
                    "    r = c.multiply(f8, f8, out_dtype='fp32')\n"
                    "    assert np.array_equal(r.c, [[2, 0], [0, 2]]), r.c\n"
                    "    r = c.multiply(f8, f8, out_dtype='fp32', a_scale=0.5, b_scale=4.0)\n"
                    "    assert np.array_equal(r.c, [[4, 0], [0, 4]]), r.c\n"
                    "async def main():\n"
                    "    async with AsyncClient(target, timeout=60) as c:\n"
                    "        r = await c.multiply(f8, f8, out_dtype='fp32', b_scale=0.5)\n"
                    "        assert np.array_equal(r.c, [[1, 0], [0, 1]]), r.c\n"
                    "        return await c.multiply(a, a.T)\n"
                    "assert np.array_equal(asyncio.run(main()).c, a @ a.T)\n"
                    "print('ok')\n")
                run = subprocess.run([python, "-c", script], cwd=tmp, env=env,
                                     capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertIn("ok", run.stdout)


if __name__ == "__main__":
    unittest.main()
