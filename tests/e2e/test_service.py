"""End-to-end: the real matserve binary on loopback, driven by a Python grpcio client.

Results are checked against NumPy (float64), every bad-input class against its gRPC status code
and message, and health, reflection and graceful shutdown against their contracts.
"""
import concurrent.futures
import os
import signal
import sys
import time
import unittest

import grpc
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import gemm_bound  # noqa: E402  (tests/support, shared with the other GEMM tests)
from matserve.v1 import matrix_service_pb2 as pb
from server_process import ServerProcess, health_check, matrix, reflection_services

RNG = np.random.default_rng(7)


def rand(rows, cols, dtype=np.float32):
    """Random non-zero values in [-1, -0.01] U [0.01, 1]."""
    mag = RNG.uniform(0.01, 1.0, size=(rows, cols))
    sign = np.where(RNG.random((rows, cols)) < 0.5, -1.0, 1.0)
    return (mag * sign).astype(dtype)


def to_bf16_bits(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def from_bf16_bits(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def decode(m):
    """A reply Matrix as a float64 2-D array."""
    kinds = {pb.FP64: np.float64, pb.FP32: np.float32, pb.FP16: np.float16}
    if m.dtype == pb.BF16:
        flat = from_bf16_bits(np.frombuffer(m.data, dtype=np.uint16))
    else:
        flat = np.frombuffer(m.data, dtype=kinds[m.dtype])
    order = "F" if m.layout == pb.COL_MAJOR else "C"
    return flat.reshape((m.rows, m.cols), order=order).astype(np.float64)


def rel_l2(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


class ServiceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--max_matrix_bytes=67108864", "--max_dimension=100000")
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        assert code == 0, f"server exit code {code}\n{cls.server.output()}"

    def multiply(self, **kw):
        return self.stub.Multiply(pb.MultiplyRequest(**kw), timeout=60)

    def assert_code(self, code, fragment, call, *args):
        with self.assertRaises(grpc.RpcError) as ctx:
            call(*args)
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        self.assertIn(fragment, ctx.exception.details())
        return ctx.exception.details()

    # --- results ---------------------------------------------------------------------------------
    def test_fp32_fp64_all_transpose_states_and_odd_shapes(self):
        for m, n, k in [(1, 1, 1), (7, 5, 3), (61, 17, 131), (1, 97, 1), (97, 1, 1), (1, 1, 300)]:
            for dtype, name in [(np.float32, "fp32"), (np.float64, "fp64")]:
                for ta in (False, True):
                    for tb in (False, True):
                        a = rand(m, k, dtype)
                        b = rand(k, n, dtype)
                        r = self.multiply(a=matrix(a.T.copy() if ta else a),
                                          b=matrix(b.T.copy() if tb else b),
                                          transpose_a=ta, transpose_b=tb)
                        want = a.astype(np.float64) @ b.astype(np.float64)
                        self.assertEqual((r.c.rows, r.c.cols), (m, n))
                        gemm_bound.assert_within(self, decode(r.c), want,
                                                 gemm_bound.bound(a, b, name, name, name),
                                                 f"{m}x{n}x{k} {name} ta={ta} tb={tb}")

    def test_alpha_beta_input_c_and_column_major(self):
        a, b, c = rand(13, 7), rand(7, 11), rand(13, 11)
        r = self.multiply(a=matrix(a, layout=pb.COL_MAJOR), b=matrix(b), c=matrix(c, layout=pb.COL_MAJOR),
                          alpha=0.5, beta=2.0, output_layout=pb.COL_MAJOR)
        self.assertEqual(r.c.layout, pb.COL_MAJOR)
        want = 0.5 * (a.astype(np.float64) @ b) + 2.0 * c
        gemm_bound.assert_within(self, decode(r.c), want,
                                 gemm_bound.bound(a, b, "fp32", "fp32", "fp32", 0.5, 2.0, c))
        # beta without C: C counts as zero.
        r = self.multiply(a=matrix(a), b=matrix(b), beta=3.0)
        self.assertLess(rel_l2(decode(r.c), a.astype(np.float64) @ b), 1e-5)

    def test_identity_zero_single_element(self):
        x = rand(9, 9)
        r = self.multiply(a=matrix(np.eye(9, dtype=np.float32)), b=matrix(x))
        np.testing.assert_array_equal(decode(r.c), x.astype(np.float64))
        r = self.multiply(a=matrix(np.zeros((3, 4), np.float32)), b=matrix(rand(4, 5)))
        self.assertFalse(decode(r.c).any())
        r = self.multiply(a=matrix(np.array([[3.0]], np.float32)), b=matrix(np.array([[-2.0]], np.float32)))
        self.assertEqual(decode(r.c)[0, 0], -6.0)

    def test_reduced_precisions_report_what_ran(self):
        a, b = rand(64, 96), rand(96, 40)
        want = a.astype(np.float64) @ b
        for compute, name, tol in [(pb.COMPUTE_TF32, "tf32", 5e-3), (pb.COMPUTE_FP16, "fp16", 1e-2),
                                   (pb.COMPUTE_BF16, "bf16", 1e-2), (pb.COMPUTE_FP32, "fp32", 1e-5)]:
            r = self.multiply(a=matrix(a), b=matrix(b), compute=compute, verify=True)
            self.assertEqual(r.precision, name)
            gemm_bound.assert_within(self, decode(r.c), want,
                                     gemm_bound.bound(a, b, name, "fp32", "fp32"), name)
            self.assertLess(r.verification.rel_l2_error, tol, name)  # the server's own figure
        # fp16 and bf16 data, fp32 or 16-bit output.
        a16, b16 = a.astype(np.float16), b.astype(np.float16)
        want16 = a16.astype(np.float64) @ b16.astype(np.float64)
        r = self.multiply(a=matrix(a16), b=matrix(b16), output_dtype=pb.FP32)
        self.assertEqual(r.c.dtype, pb.FP32)
        gemm_bound.assert_within(self, decode(r.c), want16,
                                 gemm_bound.bound(a16, b16, "fp16", "fp16", "fp32"), "fp16 data, fp32 out")
        r = self.multiply(a=matrix(a16), b=matrix(b16))
        self.assertEqual(r.c.dtype, pb.FP16)
        gemm_bound.assert_within(self, decode(r.c), want16,
                                 gemm_bound.bound(a16, b16, "fp16", "fp16", "fp16"), "fp16 data, fp16 out")
        abf, bbf = to_bf16_bits(a), to_bf16_bits(b)
        wantbf = from_bf16_bits(abf).astype(np.float64) @ from_bf16_bits(bbf)
        r = self.multiply(a=pb.Matrix(rows=64, cols=96, dtype=pb.BF16, data=abf.tobytes()),
                          b=pb.Matrix(rows=96, cols=40, dtype=pb.BF16, data=bbf.tobytes()))
        self.assertEqual(r.precision, "bf16")
        gemm_bound.assert_within(self, decode(r.c), wantbf,
                                 gemm_bound.bound(from_bf16_bits(abf), from_bf16_bits(bbf), "bf16", "bf16", "bf16"),
                                 "bf16 data, bf16 out")

    def test_compute_precision_rounds_as_its_format(self):
        """fp32 data computed in tf32, fp16 or bf16 comes out exactly as that format rounds it: the
        probe values (times 1) tell every format from the others (tests/support/precision_probe.h)."""
        probe = np.array([[1 + 2**-9], [1 + 2**-12], [2**-20 * (1 + 2**-9)], [1 + 3 * 2**-11],
                          [1 + 3 * 2**-8]], np.float32)
        expected = {
            pb.COMPUTE_FP32: probe[:, 0],
            pb.COMPUTE_TF32: [1 + 2**-9, 1, 2**-20 * (1 + 2**-9), 1 + 2**-9, 1 + 3 * 2**-8],
            pb.COMPUTE_FP16: [1 + 2**-9, 1, 2**-20, 1 + 2**-9, 1 + 3 * 2**-8],
            pb.COMPUTE_BF16: [1, 1, 2**-20, 1, 1 + 2**-6],
        }
        cpu = self.stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=30).backend == "cpu"
        one = np.ones((1, 1), np.float32)
        for compute, want in expected.items():
            r = self.multiply(a=matrix(probe), b=matrix(one), compute=compute)
            got = decode(r.c)[:, 0]
            for i, (g, w) in enumerate(zip(got, want)):
                if compute == pb.COMPUTE_TF32 and i == 3 and not cpu:
                    continue  # tensor cores may truncate to tf32: the tie is the CPU backend's only
                self.assertEqual(g, np.float32(w), (pb.ComputeMode.Name(compute), i, float(probe[i, 0])))

    def test_reply_carries_variant_device_timing_and_rate(self):
        a, b = rand(200, 300), rand(300, 100)
        r = self.multiply(a=matrix(a), b=matrix(b), variant="auto", verify=True)
        self.assertTrue(r.variant)
        self.assertTrue(r.device)
        t = r.timing
        self.assertGreater(t.kernel_us, 0)
        self.assertGreaterEqual(t.total_us, t.queue_us + t.host_to_device_us + t.kernel_us +
                                t.device_to_host_us)
        self.assertAlmostEqual(r.gflops, 2 * 200 * 300 * 100 / (t.kernel_us * 1e3), delta=1e-6 * r.gflops)
        self.assertLess(r.verification.rel_l2_error, 1e-5)
        self.assertGreater(r.verification.max_abs_error, 0)

    def test_transpose_every_dtype_both_layouts_and_scale(self):
        for dtype in (np.float64, np.float32, np.float16):
            for layout in (pb.ROW_MAJOR, pb.COL_MAJOR):
                a = rand(33, 65, dtype)
                r = self.stub.Transpose(pb.TransposeRequest(a=matrix(a, layout=layout)))
                self.assertEqual((r.b.rows, r.b.cols, r.b.layout), (65, 33, layout))
                np.testing.assert_array_equal(decode(r.b), a.T.astype(np.float64))
                self.assertGreater(r.gb_per_s, 0)
        a = rand(5, 8)
        r = self.stub.Transpose(pb.TransposeRequest(a=matrix(a), scale=-2.0, verify=True))
        np.testing.assert_array_equal(decode(r.b), -2.0 * a.T.astype(np.float64))
        self.assertEqual(r.verification.max_abs_error, 0.0)
        bits = to_bf16_bits(rand(3, 7))
        r = self.stub.Transpose(pb.TransposeRequest(a=pb.Matrix(rows=3, cols=7, dtype=pb.BF16, data=bits.tobytes())))
        np.testing.assert_array_equal(np.frombuffer(r.b.data, np.uint16).reshape(7, 3), bits.T)

    def test_list_kernels_and_server_info(self):
        kernels = self.stub.ListKernels(pb.ListKernelsRequest()).kernels
        names = {k.name for k in kernels}
        self.assertIn("cpu_openblas", names)
        self.assertIn("cpu_blocked", names)
        for k in kernels:
            self.assertTrue(k.description and k.family and k.precisions and k.backend, k)
        info = self.stub.GetServerInfo(pb.GetServerInfoRequest())
        self.assertEqual(info.backend, "cpu")
        self.assertTrue(info.version)
        self.assertEqual(info.limits.max_matrix_bytes, 67108864)
        self.assertEqual(len(info.devices), 1)

    # --- bad input ------------------------------------------------------------------------------
    def test_every_bad_input_class_gets_a_precise_status(self):
        a, b = rand(4, 3), rand(3, 5)
        IA, FP, RE = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                      grpc.StatusCode.RESOURCE_EXHAUSTED)
        cases = [
            (IA, "a: missing", dict(b=matrix(b))),
            (IA, "b: missing", dict(a=matrix(a))),
            (IA, "variant: unknown GEMM kernel 'warp9'", dict(a=matrix(a), b=matrix(b), variant="warp9")),
            (IA, "is a transpose kernel", dict(a=matrix(a), b=matrix(b), variant="cpu_blocked")),
            (IA, "a.dtype: must be FP64, FP32, FP16, BF16 or FP8_E4M3",
             dict(a=pb.Matrix(rows=4, cols=3, data=a.tobytes()), b=matrix(b))),
            (IA, "a.dtype", dict(a=pb.Matrix(rows=4, cols=3, dtype=77, data=a.tobytes()), b=matrix(b))),
            (IA, "compute: mode 'tf32' is not available for fp64",
             dict(a=matrix(a.astype(np.float64)), b=matrix(b.astype(np.float64)), compute=pb.COMPUTE_TF32)),
            (IA, "compute: unknown compute mode 42", dict(a=matrix(a), b=matrix(b), compute=42)),
            (IA, "output_dtype: fp16 output is not available for fp32",
             dict(a=matrix(a), b=matrix(b), output_dtype=pb.FP16)),
            (IA, "a.rows: must be >= 1 (got 0)", dict(a=pb.Matrix(rows=0, cols=3, dtype=pb.FP32), b=matrix(b))),
            (IA, "a.cols: must be >= 1 (got -3)", dict(a=pb.Matrix(rows=4, cols=-3, dtype=pb.FP32), b=matrix(b))),
            (IA, "a.rows: 4611686018427387904 exceeds the limit of 100000",
             dict(a=pb.Matrix(rows=1 << 62, cols=1 << 62, dtype=pb.FP32), b=matrix(b))),
            (IA, "a.data: 47 bytes, expected 48", dict(a=pb.Matrix(rows=4, cols=3, dtype=pb.FP32, data=a.tobytes()[:-1]), b=matrix(b))),
            (IA, "b.dtype: FP64 differs from a.dtype FP32", dict(a=matrix(a), b=matrix(b.astype(np.float64)))),
            (IA, "inner dimensions do not agree: op(A) is 4x3, op(B) is 5x3",
             dict(a=matrix(a), b=matrix(b), transpose_b=True)),
            (IA, "c: is 5x4, expected 4x5", dict(a=matrix(a), b=matrix(b), c=matrix(rand(5, 4)), beta=1.0)),
            (IA, "c.dtype", dict(a=matrix(a), b=matrix(b), c=matrix(rand(4, 5).astype(np.float64)))),
            (IA, "alpha: must be a finite number", dict(a=matrix(a), b=matrix(b), alpha=float("nan"))),
            (IA, "beta: must be a finite number", dict(a=matrix(a), b=matrix(b), beta=float("inf"))),
            (RE, "exceeds the limit of 67108864 bytes per matrix",
             dict(a=pb.Matrix(rows=4100, cols=4100, dtype=pb.FP32, data=bytes(4100 * 4100 * 4)), b=matrix(b))),
            (RE, "c (the result)", dict(a=pb.Matrix(rows=90000, cols=1, dtype=pb.FP32, data=bytes(360000)),
                                         b=pb.Matrix(rows=1, cols=90000, dtype=pb.FP32, data=bytes(360000)))),
        ]
        if os.environ.get("MATSERVE_HAVE_CUDA") == "1":  # a CUDA build knows its GPU kernels
            cases.append((FP, "runs on the cuda backend", dict(a=matrix(a), b=matrix(b), variant="cublas")))
        else:
            cases.append((IA, "unknown GEMM kernel 'cublas'", dict(a=matrix(a), b=matrix(b), variant="cublas")))
        for code, fragment, kw in cases:
            with self.subTest(fragment=fragment):
                with self.assertRaises(grpc.RpcError) as ctx:
                    self.multiply(**kw)
                self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
                self.assertIn(fragment, ctx.exception.details())
        t = self.stub.Transpose
        self.assert_code(IA, "a: missing", t, pb.TransposeRequest())
        self.assert_code(IA, "scale: must be a finite number", t, pb.TransposeRequest(a=matrix(a), scale=float("nan")))
        self.assert_code(IA, "is a GEMM kernel", t, pb.TransposeRequest(a=matrix(a), variant="cpu_openblas"))
        self.assert_code(IA, "a.data", t, pb.TransposeRequest(a=pb.Matrix(rows=2, cols=2, dtype=pb.FP16, data=b"abc")))
        self.assert_code(FP, "is in-place", t, pb.TransposeRequest(a=matrix(a), variant="cpu_inplace"))
        # The server keeps serving correctly afterwards.
        r = self.multiply(a=matrix(a), b=matrix(b))
        self.assertLess(rel_l2(decode(r.c), a.astype(np.float64) @ b), 1e-5)

    def test_garbage_strings_are_quoted_short_in_errors(self):
        """A handle or variant of 200 KB is echoed cut short: the status itself stays receivable."""
        a = matrix(rand(2, 2))
        junk = "\x01'" + "x" * 200000
        NF, IA = grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT
        for code, fragment, call, req in [
            (NF, "handle: no resident matrix", self.stub.Release, pb.ReleaseRequest(handle=junk)),
            (NF, "handle: no resident matrix", self.stub.Download, pb.DownloadRequest(handle=junk)),
            (NF, "a_handle: no resident matrix", self.stub.Multiply,
             pb.MultiplyRequest(a_handle=junk, b=a)),
            (NF, "colocate_with: no resident matrix", self.stub.Upload,
             pb.UploadRequest(matrix=a, colocate_with=junk)),
            (IA, "variant: unknown GEMM kernel", self.stub.Multiply,
             pb.MultiplyRequest(a=a, b=a, variant=junk)),
            (IA, "variant: unknown transpose kernel", self.stub.Transpose,
             pb.TransposeRequest(a=a, variant=junk)),
        ]:
            with self.subTest(fragment=fragment):
                details = self.assert_code(code, fragment, call, req)
                self.assertIn("\\x01\\'xxx", details)
                self.assertIn("...' (200002 bytes)", details)
                self.assertLess(len(details), 300)
        # A handle that is not UTF-8 fails to parse (gRPC answers for the server); nothing breaks.
        raw = self.server.channel.unary_unary("/matserve.v1.MatrixService/Release",
                                              request_serializer=lambda b: b,
                                              response_deserializer=lambda b: b)
        with self.assertRaises(grpc.RpcError) as ctx:
            raw(b"\x0a\x02\xff\xfe", timeout=10)
        self.assertNotEqual(ctx.exception.code(), grpc.StatusCode.OK)
        self.assertEqual(self.stub.ListResident(pb.ListResidentRequest()).total_bytes, 0)

    def test_verify_is_bounded(self):
        """verify's float64 reference runs on the server's CPU: a problem past the default
        --max_verify_flops (2 * 4096^3) is refused at once, before anything runs, and never
        takes minutes (a 16384^3 reference would take hours); the same problem runs without
        verify's reference being asked."""
        n = 4100  # 2 * 4100^3 = 1.378e11, just past the default
        big = pb.Matrix(rows=n, cols=n, dtype=pb.FP16, data=bytes(n * n * 2))
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT,
                         "verify: the float64 reference of this 4100x4100x4100 product is "
                         "1.37842e+11 flops of server CPU, above the limit of 1.37439e+11 "
                         "(--max_verify_flops)", self.stub.Multiply,
                         pb.MultiplyRequest(a=big, b=big, verify=True))
        with ServerProcess("--max_verify_flops=1e6", "--max_verify_bytes=100000") as tight:
            ok = tight.stub.Multiply(pb.MultiplyRequest(a=matrix(rand(50, 50)), b=matrix(rand(50, 50)),
                                                        verify=True), timeout=30)
            self.assertLess(ok.verification.rel_l2_error, 1e-5)
            for call, req, fragment in [
                (tight.stub.Multiply, pb.MultiplyRequest(a=matrix(rand(80, 80)), b=matrix(rand(80, 80)),
                                                         verify=True), "(--max_verify_flops)"),
                (tight.stub.Multiply, pb.MultiplyRequest(a=matrix(rand(2, 4000)), b=matrix(rand(4000, 2)),
                                                         verify=True), "(--max_verify_bytes)"),
                (tight.stub.Transpose, pb.TransposeRequest(a=matrix(rand(120, 120)), verify=True),
                 "needs 115200 bytes of server memory, above the limit of 100000 (--max_verify_bytes)"),
            ]:
                with self.subTest(fragment=fragment):
                    with self.assertRaises(grpc.RpcError) as ctx:
                        call(req, timeout=30)
                    self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                    self.assertIn(fragment, ctx.exception.details())
            # Without verify the same problems run.
            r = tight.stub.Transpose(pb.TransposeRequest(a=matrix(rand(120, 120))), timeout=30)
            self.assertEqual(r.b.rows, 120)

    def test_enums_out_of_range_and_shapes_that_lie(self):
        """Enum numbers the API does not define (proto3 lets any int32 through) and shapes that
        disagree with the bytes sent, each way, are refused naming the field."""
        a, b = rand(4, 3), rand(3, 5)
        IA, RE = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED
        raw = a.tobytes()
        cases = [
            (IA, "a.layout: must be ROW_MAJOR or COL_MAJOR (got 9)",
             dict(a=pb.Matrix(rows=4, cols=3, dtype=pb.FP32, layout=9, data=raw), b=matrix(b))),
            (IA, "a.dtype: must be FP64, FP32, FP16, BF16 or FP8_E4M3 (got -1)",
             dict(a=pb.Matrix(rows=4, cols=3, dtype=-1, data=raw), b=matrix(b))),
            (IA, "output_layout: must be ROW_MAJOR or COL_MAJOR (got -7)",
             dict(a=matrix(a), b=matrix(b), output_layout=-7)),
            (IA, "output_dtype: unknown data type 99", dict(a=matrix(a), b=matrix(b), output_dtype=99)),
            (IA, "compute: unknown compute mode -2", dict(a=matrix(a), b=matrix(b), compute=-2)),
            (IA, "c.layout", dict(a=matrix(a), b=matrix(b), c=matrix(rand(4, 5), layout=pb.COL_MAJOR))),
            (IA, "a.data: 49 bytes, expected 48",
             dict(a=pb.Matrix(rows=4, cols=3, dtype=pb.FP32, data=raw + b"x"), b=matrix(b))),
            (IA, "a.data: 48 bytes, expected 64000000",
             dict(a=pb.Matrix(rows=4000, cols=4000, dtype=pb.FP32, data=raw), b=matrix(b))),
            (RE, "a: 4294967296 bytes exceeds the limit of 67108864",
             dict(a=pb.Matrix(rows=32768, cols=32768, dtype=pb.FP32, data=raw), b=matrix(b))),
            (IA, "b.data: 0 bytes, expected 60", dict(a=matrix(a), b=pb.Matrix(rows=3, cols=5, dtype=pb.FP32))),
        ]
        for code, fragment, kw in cases:
            with self.subTest(fragment=fragment):
                self.assert_code(code, fragment, lambda: self.multiply(**kw))
        for req, fragment in [
            (pb.TransposeRequest(a=pb.Matrix(rows=4, cols=3, dtype=pb.FP32, layout=2, data=raw)), "a.layout"),
            (pb.UploadRequest(matrix=pb.Matrix(rows=4, cols=3, dtype=42, data=raw)), "matrix.dtype"),
            (pb.UploadRequest(matrix=pb.Matrix(rows=4, cols=3, dtype=pb.FP32, data=raw[:-4])), "matrix.data"),
            (pb.UploadRequest(), "matrix: missing"),
        ]:
            call = self.stub.Transpose if isinstance(req, pb.TransposeRequest) else self.stub.Upload
            with self.subTest(fragment=fragment):
                self.assert_code(IA, fragment, call, req)

    def test_nan_and_inf_data_are_computed_not_fatal(self):
        """NaN and Inf in the data are legal numbers: every dtype and compute mode runs, with and
        without verify (which reports infinite error), and so do alpha and scale that overflow
        the output type."""
        x = np.array([[np.nan, np.inf], [-np.inf, 1.0]])
        for dtype in (np.float64, np.float32, np.float16):
            computes = [pb.COMPUTE_DEFAULT] if dtype != np.float32 else [
                pb.COMPUTE_DEFAULT, pb.COMPUTE_TF32, pb.COMPUTE_FP16, pb.COMPUTE_BF16, pb.COMPUTE_FP8]
            for compute in computes:
                with self.subTest(dtype=dtype.__name__, compute=compute):
                    r = self.multiply(a=matrix(x.astype(dtype)), b=matrix(x.astype(dtype)), compute=compute,
                                      verify=True)
                    self.assertTrue(np.isnan(decode(r.c)).any())
                    self.assertEqual(r.verification.max_abs_error, float("inf"))
            t = self.stub.Transpose(pb.TransposeRequest(a=matrix(x.astype(dtype)), verify=True))
            np.testing.assert_array_equal(decode(t.b), x.T.astype(dtype).astype(np.float64))
        bits = np.array([[0x7FC0, 0x7F80], [0xFF80, 0x3F80]], np.uint16)  # bf16 NaN, +-Inf, 1
        r = self.multiply(a=pb.Matrix(rows=2, cols=2, dtype=pb.BF16, data=bits.tobytes()),
                          b=pb.Matrix(rows=2, cols=2, dtype=pb.BF16, data=bits.tobytes()), verify=True)
        self.assertEqual(r.c.dtype, pb.BF16)
        e4m3 = bytes([0x7F, 0x38, 0xFF, 0x7E])  # NaN, 1, -NaN, 448
        r = self.multiply(a=pb.Matrix(rows=2, cols=2, dtype=pb.FP8_E4M3, data=e4m3),
                          b=pb.Matrix(rows=2, cols=2, dtype=pb.FP8_E4M3, data=e4m3), output_dtype=pb.FP32,
                          verify=True)
        self.assertTrue(np.isnan(decode(r.c)).any())
        big = rand(3, 3)
        r = self.multiply(a=matrix(big), b=matrix(big), alpha=1e300, beta=-1e300, c=matrix(big))
        self.assertFalse(np.isfinite(decode(r.c)).any())
        t = self.stub.Transpose(pb.TransposeRequest(a=matrix(big.astype(np.float16)), scale=1e300))
        self.assertTrue(np.isinf(decode(t.b)).all())
        # The server is unharmed.
        r = self.multiply(a=matrix(big), b=matrix(big))
        self.assertLess(rel_l2(decode(r.c), big.astype(np.float64) @ big), 1e-5)

    def test_fp8_replies_state_the_scales_they_used(self):
        """COMPUTE_FP8 replies carry the dequantization scales: amax / 448 of each operand the
        server quantized (each product its own in a batch; 1 for an all-zero operand), the
        caller's for e4m3 data (1 when not given); other computations carry none."""
        rng = np.random.default_rng(12)
        a, b = rand(7, 5) * 3.0, rand(5, 9) * 0.25
        r = self.multiply(a=matrix(a), b=matrix(b), compute=pb.COMPUTE_FP8)
        self.assertTrue(r.HasField("fp8_scales"))
        self.assertAlmostEqual(r.fp8_scales.a_scale, np.abs(a).max() / 448, delta=1e-6 * np.abs(a).max())
        self.assertAlmostEqual(r.fp8_scales.b_scale, np.abs(b).max() / 448, delta=1e-6 * np.abs(b).max())
        zero = self.multiply(a=matrix(np.zeros((2, 3), np.float32)), b=matrix(b[:3]), compute=pb.COMPUTE_FP8)
        self.assertEqual(zero.fp8_scales.a_scale, 1.0)
        self.assertFalse(self.multiply(a=matrix(a), b=matrix(b)).HasField("fp8_scales"))
        bits = rng.integers(0, 0x7E, size=(4, 4), dtype=np.uint8).tobytes()
        e4m3 = pb.Matrix(rows=4, cols=4, dtype=pb.FP8_E4M3, data=bits)
        given = self.multiply(a=e4m3, b=e4m3, output_dtype=pb.FP32, a_scale=0.03)
        self.assertEqual((given.fp8_scales.a_scale, given.fp8_scales.b_scale), (0.03, 1.0))
        stack_a = np.stack([rand(6, 4) * (i + 1) for i in range(3)]).astype(np.float32)
        stack_b = np.stack([rand(4, 2) * 0.5 ** i for i in range(3)]).astype(np.float32)
        batched = self.stub.MultiplyBatched(pb.MultiplyBatchedRequest(
            batch=3, a=matrix(stack_a), b=matrix(stack_b), compute=pb.COMPUTE_FP8), timeout=60)
        self.assertEqual(len(batched.fp8_scales), 3)
        for i, s in enumerate(batched.fp8_scales):
            self.assertAlmostEqual(s.a_scale, np.abs(stack_a[i]).max() / 448, delta=1e-6 * (i + 1))
            self.assertAlmostEqual(s.b_scale, np.abs(stack_b[i]).max() / 448, delta=1e-6)

    def test_fp8_scales_of_the_caller_scale_the_product(self):
        rng = np.random.default_rng(5)
        # Finite e4m3 codes only (0x7F and 0xFF are NaN).
        codes = rng.integers(0, 0x7E, size=(2, 35), dtype=np.uint8)
        codes[1] |= rng.integers(0, 2, size=35, dtype=np.uint8) << 7  # some negative
        a = pb.Matrix(rows=5, cols=7, dtype=pb.FP8_E4M3, data=codes[0].tobytes())
        b = pb.Matrix(rows=7, cols=5, dtype=pb.FP8_E4M3, data=codes[1].tobytes())
        plain = decode(self.multiply(a=a, b=b, output_dtype=pb.FP32).c)
        r = self.multiply(a=a, b=b, output_dtype=pb.FP32, a_scale=0.5, b_scale=4.0, alpha=0.25,
                          verify=True)
        np.testing.assert_array_equal(decode(r.c), 0.5 * plain)  # powers of two: exact
        self.assertLess(r.verification.max_abs_error, 1e-3 * max(1.0, np.abs(plain).max()))
        batched = self.stub.MultiplyBatched(pb.MultiplyBatchedRequest(
            batch=1, a=a, b=b, output_dtype=pb.FP32, b_scale=0.25))
        np.testing.assert_array_equal(decode(batched.c).reshape(5, 5), 0.25 * plain)
        # fp16 results too (alpha keeps the sums inside fp16's range; a power of two: exact).
        r16 = self.multiply(a=a, b=b, output_dtype=pb.FP16, alpha=2.0**-8)
        self.assertEqual(r16.c.dtype, pb.FP16)
        np.testing.assert_array_equal(decode(r16.c), (plain * 2.0**-8).astype(np.float16))
        cases = [
            (dict(a=matrix(rand(5, 7)), b=matrix(rand(7, 5)), a_scale=2.0),
             "a_scale: only for FP8_E4M3 operands"),
            (dict(a=a, b=b, output_dtype=pb.FP32, a_scale=0.0), "a_scale: must be a finite number > 0"),
            (dict(a=a, b=b, output_dtype=pb.FP32, b_scale=float("inf")),
             "b_scale: must be a finite number > 0"),
            (dict(a=a, b=b, output_dtype=pb.FP32, a_scale=1e300, b_scale=1e300),
             "alpha * a_scale * b_scale: must be a finite number"),
        ]
        for kw, fragment in cases:
            with self.assertRaises(grpc.RpcError) as ctx:
                self.multiply(**kw)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(fragment, ctx.exception.details())

    def test_message_over_the_limit_is_resource_exhausted(self):
        with ServerProcess("--max_message_bytes=65536") as small:
            big = rand(200, 200)  # 160 KB
            with self.assertRaises(grpc.RpcError) as ctx:
                small.stub.Multiply(pb.MultiplyRequest(a=matrix(big), b=matrix(big)), timeout=10)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            ok = small.stub.Multiply(pb.MultiplyRequest(a=matrix(rand(8, 8)), b=matrix(rand(8, 8))))
            self.assertEqual(ok.c.rows, 8)

    def test_expired_deadline_is_deadline_exceeded(self):
        a = rand(1500, 1500)
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(a)), timeout=0.001)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_concurrent_requests_all_correct(self):
        def one(i):
            a, b = rand(50 + i, 40), rand(40, 30 + i)
            r = self.multiply(a=matrix(a), b=matrix(b))
            return rel_l2(decode(r.c), a.astype(np.float64) @ b)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            errors = list(pool.map(one, range(32)))
        self.assertLess(max(errors), 1e-5)

    # --- health, reflection ---------------------------------------------------------------------
    def test_health_and_reflection(self):
        self.assertEqual(health_check(self.server.channel), 1)
        self.assertEqual(health_check(self.server.channel, "matserve.v1.MatrixService"), 1)
        self.assertIn(b"matserve.v1.MatrixService", reflection_services(self.server.channel))


def in_flight(server):
    """The server's matserve_requests_in_flight gauge, from /metrics."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                  timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("matserve_requests_in_flight"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class ShutdownTest(unittest.TestCase):
    def test_sigterm_drains_in_flight_then_refuses_and_exits_zero(self):
        server = ServerProcess("--cpu_concurrency=1", env={"OPENBLAS_NUM_THREADS": "1"})
        a = rand(1400, 1400, np.float64)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            slow = pool.submit(server.stub.Multiply,
                               pb.MultiplyRequest(a=matrix(a), b=matrix(a)), timeout=120)
            # Wait until the server has the request (its in-flight gauge), then signal.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and in_flight(server) < 1:
                time.sleep(0.02)
            self.assertGreaterEqual(in_flight(server), 1)
            server.proc.send_signal(signal.SIGTERM)
            # Health turns NOT_SERVING, new calls are refused while the slow one finishes.
            deadline = time.monotonic() + 10
            status = None
            while time.monotonic() < deadline:
                try:
                    status = health_check(server.channel)
                except grpc.RpcError as e:
                    status = e.code()
                if status != 1:
                    break
                time.sleep(0.05)
            self.assertNotEqual(status, 1)
            try:
                reply = slow.result()
            except grpc.RpcError as e:  # say what the server did meanwhile
                server.proc.wait(timeout=60)
                self.fail(f"the in-flight call failed: {e.code()} {e.details()}; server exit "
                          f"{server.proc.returncode}, output:\n{server.output()}")
        self.assertEqual((reply.c.rows, reply.c.cols), (1400, 1400))
        self.assertLess(rel_l2(decode(reply.c), a @ a), 1e-12)
        self.assertEqual(server.proc.wait(timeout=60), 0, server.output())
        self.assertIn("SIGTERM received", server.output())
        self.assertIn("matserve: stopped", server.output())


class BadFlagsTest(unittest.TestCase):
    def test_malformed_flags_stop_the_server_with_a_message(self):
        import subprocess
        binary = os.environ.get("MATSERVE_SERVER", "matserve")
        for flag, fragment in [("--grpc_channel_args=nonsense", "grpc_channel_args: 'nonsense'"),
                               ("--max_shm_regions_per_owner=-1", "max_shm_regions_per_owner")]:
            p = subprocess.run([binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                                "--backend=cpu", flag], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn(fragment, p.stderr)


if __name__ == "__main__":
    unittest.main()
