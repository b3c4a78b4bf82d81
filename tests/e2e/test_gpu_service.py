"""End-to-end on the GPU: the real matserve binary with --backend=cuda, driven by Python grpcio.

Skips (visibly) when the server cannot start its CUDA backend: no GPU visible, or a CPU-only build.
Checks every GPU GEMM variant the server lists for every precision it claims, against NumPy in
float64, plus transposes, the timing breakdown and the device reported.
"""
import os
import unittest
import urllib.request

import grpc
import numpy as np

from matserve.v1 import matrix_service_pb2 as pb
from server_process import cuda_server_or_skip, health_check, matrix
from test_service import decode, from_bf16_bits, rand, rel_l2, to_bf16_bits  # noqa: I100
import gemm_bound  # noqa: E402  (tests/support; test_service put it on the path)

TOLERANCE = {"fp64": 1e-12, "fp32": 1e-5, "tf32": 5e-3, "fp16": 1e-2, "bf16": 1e-2, "fp8": 6e-2}
# fp8 runs on fp32 data, quantized on the device with per-tensor scales.
COMPUTE = {"fp64": pb.COMPUTE_DEFAULT, "fp32": pb.COMPUTE_FP32, "tf32": pb.COMPUTE_TF32,
           "fp16": pb.COMPUTE_DEFAULT, "bf16": pb.COMPUTE_DEFAULT, "fp8": pb.COMPUTE_FP8}


# The data type each precision's operands are sent in, and the type of its result.
DATA = {"fp64": "fp64", "fp32": "fp32", "tf32": "fp32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp32"}
OUT = {"fp64": "fp64", "fp32": "fp32", "tf32": "fp32", "fp16": "fp32", "bf16": "fp32", "fp8": "fp32"}


def operands(precision, m, n, k, ta, tb, values=None):
    """(request matrices, float64 reference) for one precision; `values`, a list, receives the
    float64 operands as sent."""
    a, b = rand(m, k), rand(k, n)
    if precision == "fp64":
        a, b = a.astype(np.float64), b.astype(np.float64)
    if precision == "fp16":
        a, b = a.astype(np.float16), b.astype(np.float16)
    if precision == "bf16":
        abits, bbits = to_bf16_bits(a), to_bf16_bits(b)
        a, b = from_bf16_bits(abits), from_bf16_bits(bbits)
    stored_a, stored_b = (a.T if ta else a), (b.T if tb else b)
    if precision == "bf16":
        sa, sb = to_bf16_bits(stored_a), to_bf16_bits(stored_b)
        ma = pb.Matrix(rows=sa.shape[0], cols=sa.shape[1], dtype=pb.BF16, data=sa.tobytes())
        mb = pb.Matrix(rows=sb.shape[0], cols=sb.shape[1], dtype=pb.BF16, data=sb.tobytes())
    else:
        ma, mb = matrix(np.ascontiguousarray(stored_a)), matrix(np.ascontiguousarray(stored_b))
    if values is not None:
        values.extend([a.astype(np.float64), b.astype(np.float64)])
    return ma, mb, a.astype(np.float64) @ b.astype(np.float64)


class GpuServiceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = cuda_server_or_skip()
        cls.stub = cls.server.stub
        # MATSERVE_TEST_VARIANTS=a,b limits the variants checked (as in the kernel GPU tests).
        only = set(filter(None, os.environ.get("MATSERVE_TEST_VARIANTS", "").split(",")))
        cls.kernels = [k for k in cls.stub.ListKernels(pb.ListKernelsRequest()).kernels
                       if not only or k.name in only]

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()

    def test_server_reports_a_cuda_device(self):
        info = self.stub.GetServerInfo(pb.GetServerInfoRequest())
        self.assertEqual(info.backend, "cuda")
        self.assertGreaterEqual(len(info.devices), 1)
        self.assertTrue(info.devices[0].compute_capability)
        self.assertGreater(info.devices[0].memory_total_bytes, 0)
        self.assertEqual(health_check(self.server.channel), 1)

    def test_every_gemm_variant_every_precision(self):
        shapes = [(1, 1, 1), (61, 17, 131), (300, 257, 129)]
        failures = []
        for kernel in self.kernels:
            if kernel.operation != pb.GEMM:
                continue
            for precision in kernel.precisions:
                for m, n, k in shapes:
                    for ta, tb in [(False, False), (True, True), (True, False), (False, True)]:
                        sent = []
                        ma, mb, want = operands(precision, m, n, k, ta, tb, sent)
                        try:
                            r = self.stub.Multiply(pb.MultiplyRequest(
                                a=ma, b=mb, transpose_a=ta, transpose_b=tb, variant=kernel.name,
                                compute=COMPUTE[precision],
                                output_dtype=pb.FP32 if precision in ("fp16", "bf16", "fp8") else 0),
                                timeout=120)
                        except grpc.RpcError as e:
                            if e.code() == grpc.StatusCode.FAILED_PRECONDITION:
                                continue  # a declared constraint
                            failures.append(f"{kernel.name} {precision} {m}x{n}x{k}: {e.code()} {e.details()}")
                            continue
                        self.assertEqual(r.variant, kernel.name)
                        self.assertEqual(r.precision, precision)
                        limit = gemm_bound.bound(*sent, precision, DATA[precision], OUT[precision])
                        msg = gemm_bound.check(decode(r.c), want, limit)
                        if msg is not None:
                            failures.append(f"{kernel.name} {precision} {m}x{n}x{k} ta={ta} tb={tb}: {msg}")
        self.assertEqual(failures, [])

    def test_fp8_e4m3_data_in_every_operand_order(self):
        # e4m3 operands as sent (no quantization, scale 1): K-major ones (A as is, B transposed)
        # go to the fp8 kernels directly, the others are repacked on the device first; sides
        # that are no multiple of 16 are padded for cuBLASLt. Each element within its bound, with
        # auto (cuBLASLt) and each other fp8 variant, in fp32, bf16 and (own kernel) fp16.
        from matserve_client.dtypes import fp8_e4m3_bits_to_float32
        rng = np.random.default_rng(8)

        def e4m3(rows, cols):
            bits = rng.integers(0, 256, size=(rows, cols), dtype=np.uint8)
            bits[(bits & 0x7F) == 0x7F] = 0x38  # NaN patterns -> 1.0
            return bits

        failures = []
        for m, n, k in [(33, 17, 45), (64, 48, 96), (1, 130, 7)]:
            for ta, tb in [(False, True), (False, False), (True, True), (True, False)]:
                sa, sb = e4m3(k if ta else m, m if ta else k), e4m3(n if tb else k, k if tb else n)
                a = fp8_e4m3_bits_to_float32(sa).astype(np.float64)
                b = fp8_e4m3_bits_to_float32(sb).astype(np.float64)
                a, b = (a.T if ta else a), (b.T if tb else b)
                # Full-range e4m3 sums reach 1e5, past fp16's 65504: fp16 results are scaled
                # down by alpha (a power of two, so the reference stays exact).
                for variant, out, out_name, alpha in [
                        ("auto", pb.FP32, "fp32", 1.0), ("auto", pb.BF16, "bf16", 1.0),
                        ("wgmma_fp8", pb.BF16, "bf16", 1.0), ("wgmma_fp8", pb.FP16, "fp16", 2.0**-8),
                        ("wgmma_fp8_fast", pb.FP32, "fp32", 1.0),
                        ("cublaslt_fp8_fast", pb.BF16, "bf16", 1.0)]:
                    r = self.stub.Multiply(pb.MultiplyRequest(
                        a=pb.Matrix(rows=sa.shape[0], cols=sa.shape[1], dtype=pb.FP8_E4M3, data=sa.tobytes()),
                        b=pb.Matrix(rows=sb.shape[0], cols=sb.shape[1], dtype=pb.FP8_E4M3, data=sb.tobytes()),
                        transpose_a=ta, transpose_b=tb, compute=pb.COMPUTE_FP8, output_dtype=out,
                        variant=variant, alpha=alpha), timeout=60)
                    limit = gemm_bound.bound(a, b, "fp8", "fp8_e4m3", out_name, alpha=alpha)
                    msg = gemm_bound.check(decode(r.c), alpha * (a @ b), limit)
                    if msg is not None:
                        failures.append(f"{variant} {m}x{n}x{k} ta={ta} tb={tb} -> {out_name}: {msg}")
        self.assertEqual(failures, [])

    def test_fp8_e4m3_data_with_the_callers_scales(self):
        # C = a_scale * b_scale * A B: the scales reach the fp8 kernel (in alpha), in every order.
        from matserve_client.dtypes import fp8_e4m3_bits_to_float32
        rng = np.random.default_rng(9)
        failures = []
        for ta, tb in [(False, True), (False, False), (True, True), (True, False)]:
            m, n, k = 37, 29, 53
            sa = rng.integers(0, 0x7E, size=(k, m) if ta else (m, k), dtype=np.uint8)
            sb = rng.integers(0, 0x7E, size=(n, k) if tb else (k, n), dtype=np.uint8) | 0x80
            a = fp8_e4m3_bits_to_float32(sa).astype(np.float64)
            b = fp8_e4m3_bits_to_float32(sb).astype(np.float64)
            a, b = (a.T if ta else a), (b.T if tb else b)
            r = self.stub.Multiply(pb.MultiplyRequest(
                a=pb.Matrix(rows=sa.shape[0], cols=sa.shape[1], dtype=pb.FP8_E4M3, data=sa.tobytes()),
                b=pb.Matrix(rows=sb.shape[0], cols=sb.shape[1], dtype=pb.FP8_E4M3, data=sb.tobytes()),
                transpose_a=ta, transpose_b=tb, compute=pb.COMPUTE_FP8, output_dtype=pb.FP32,
                a_scale=0.03, b_scale=0.5), timeout=60)
            limit = gemm_bound.bound(a, b, "fp8", "fp8_e4m3", "fp32", alpha=0.015)
            msg = gemm_bound.check(decode(r.c), 0.015 * (a @ b), limit)
            if msg is not None:
                failures.append(f"ta={ta} tb={tb}: {msg}")
        self.assertEqual(failures, [])

    def test_fp8_replies_state_the_scales_the_device_computed(self):
        # Data the server quantizes: each reply's scales are amax / 448 of its own operands, also
        # when the launch is a replayed graph (the same shape again with other values), for
        # every fp8 variant and for each product of a batch.
        rng = np.random.default_rng(13)
        failures = []
        for variant in ["auto", "wgmma_fp8", "cublaslt_fp8", "wgmma_fp8_fast"]:
            for call in range(4):
                a = (rng.standard_normal((96, 64)) * (call + 1)).astype(np.float32)
                b = (rng.standard_normal((64, 80)) * 0.5 ** call).astype(np.float32)
                r = self.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(b),
                                                          compute=pb.COMPUTE_FP8, variant=variant),
                                       timeout=60)
                want = (np.abs(a).max() / 448, np.abs(b).max() / 448)
                got = (r.fp8_scales.a_scale, r.fp8_scales.b_scale)
                if not np.allclose(got, want, rtol=1e-6):
                    failures.append(f"{variant} call {call}: {got} != {want}")
        stack_a = np.stack([rng.standard_normal((32, 48)) * (i + 1) for i in range(5)]).astype(np.float32)
        stack_b = np.stack([rng.standard_normal((48, 16)) * 0.5 ** i for i in range(5)]).astype(np.float32)
        batched = self.stub.MultiplyBatched(pb.MultiplyBatchedRequest(
            batch=5, a=matrix(stack_a), b=matrix(stack_b), compute=pb.COMPUTE_FP8), timeout=60)
        self.assertEqual(len(batched.fp8_scales), 5)
        for i, sc in enumerate(batched.fp8_scales):
            want = (np.abs(stack_a[i]).max() / 448, np.abs(stack_b[i]).max() / 448)
            if not np.allclose((sc.a_scale, sc.b_scale), want, rtol=1e-6):
                failures.append(f"batched product {i}: {(sc.a_scale, sc.b_scale)} != {want}")
        self.assertEqual(failures, [])

    def test_fp8_resident_operands_not_k_major_read_a_kept_transposed_copy(self):
        # Resident e4m3 operands in an order the fp8 kernels cannot read (A given as A^T, B as
        # k x n): the first product keeps a transposed copy of each, later ones read it; the
        # same matrix as both operands shares one copy; an in-place transpose (which changes the
        # bytes: scale 2, twice, back to the first shape) drops it, so the next product sees the
        # new values, where the backend transposes e4m3 in place (the CUDA one refuses to). Every
        # result against float64.
        from matserve_client.dtypes import fp8_e4m3_bits_to_float32
        rng = np.random.default_rng(10)
        m, n, k = 48, 32, 64
        sa = rng.integers(0, 0x50, size=(k, m), dtype=np.uint8)  # |values| <= 8: x4 stays finite
        sb = rng.integers(0, 0x50, size=(k, n), dtype=np.uint8) | 0x80
        a = fp8_e4m3_bits_to_float32(sa).astype(np.float64).T
        b = fp8_e4m3_bits_to_float32(sb).astype(np.float64)

        def upload(bits):
            return self.stub.Upload(pb.UploadRequest(matrix=pb.Matrix(
                rows=bits.shape[0], cols=bits.shape[1], dtype=pb.FP8_E4M3,
                data=bits.tobytes()))).resident.handle

        ha, hb = upload(sa), upload(sb)
        try:
            def product(variant, a_handle, b_handle, want, aa, bb):
                r = self.stub.Multiply(pb.MultiplyRequest(
                    a_handle=a_handle, b_handle=b_handle, transpose_a=True, compute=pb.COMPUTE_FP8,
                    output_dtype=pb.FP32, variant=variant), timeout=60)
                limit = gemm_bound.bound(aa, bb, "fp8", "fp8_e4m3", "fp32")
                return gemm_bound.check(decode(r.c), want, limit)

            failures = []
            for variant in ["auto", "auto", "wgmma_fp8", "cublaslt_fp8_fast", "auto"]:
                msg = product(variant, ha, hb, a @ b, a, b)
                if msg is not None:
                    failures.append(f"{variant}: {msg}")
            at = a.T  # the stored A as a k x m matrix: A^T A through one shared copy
            msg = product("auto", ha, ha, a @ at, a, at)
            if msg is not None:
                failures.append(f"A^T A: {msg}")
            self.assertEqual(failures, [])
            try:
                for _ in range(2):
                    self.stub.Transpose(pb.TransposeRequest(a_handle=ha, in_place=True, scale=2.0))
            except grpc.RpcError as e:  # no CUDA transpose of e4m3: its bytes cannot change
                self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION, e.details())
                self.assertIn("fp8_e4m3", e.details())
                return
            msg = product("auto", ha, hb, 4.0 * (a @ b), 4.0 * a, b)
            self.assertIsNone(msg, f"after the in-place transposes: {msg}")
        finally:
            self.stub.Release(pb.ReleaseRequest(handles=[ha, hb]))

    def test_fp32_data_computed_in_16_bit_on_the_device(self):
        a, b = rand(128, 64), rand(64, 96)
        want = a.astype(np.float64) @ b
        for compute, name in [(pb.COMPUTE_FP16, "fp16"), (pb.COMPUTE_BF16, "bf16"), (pb.COMPUTE_TF32, "tf32")]:
            r = self.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(b), compute=compute, verify=True))
            self.assertEqual(r.precision, name)
            self.assertEqual(r.c.dtype, pb.FP32)
            gemm_bound.assert_within(self, decode(r.c), want, gemm_bound.bound(a, b, name, "fp32", "fp32"), name)
            self.assertLess(r.verification.rel_l2_error, TOLERANCE[name])

    def test_auto_large_multiply_with_timing_breakdown(self):
        a, b = rand(1024, 1024), rand(1024, 1024)
        # The first call of a shape loads its kernels (CUDA loads modules lazily): warm up first.
        self.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(b), variant="auto"))
        r = self.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(b), variant="auto", verify=True))
        self.assertTrue(r.device.startswith("cuda:"), r.device)
        t = r.timing
        for stage in (t.host_to_device_us, t.launch_us, t.kernel_us, t.device_to_host_us):
            self.assertGreater(stage, 0)
        # The host's time to enqueue the device work is its own stage.
        self.assertGreaterEqual(t.total_us, t.host_to_device_us + t.launch_us + t.kernel_us +
                                t.device_to_host_us)
        self.assertGreater(r.gflops, 100)
        self.assertLess(r.verification.rel_l2_error, 1e-5)
        self.assertLess(rel_l2(decode(r.c), a.astype(np.float64) @ b), 1e-5)

    def test_every_transpose_variant_exact(self):
        for kernel in self.kernels:
            if kernel.operation != pb.TRANSPOSE or "in-place" in kernel.constraints:
                continue
            for dtype in (np.float64, np.float32, np.float16):
                for layout in (pb.ROW_MAJOR, pb.COL_MAJOR):
                    a = rand(33, 65, dtype)
                    try:
                        r = self.stub.Transpose(pb.TransposeRequest(a=matrix(a, layout=layout), variant=kernel.name))
                    except grpc.RpcError as e:
                        self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION, e.details())
                        continue
                    self.assertEqual(r.variant, kernel.name)
                    np.testing.assert_array_equal(decode(r.b), a.T.astype(np.float64), kernel.name)

    def test_in_place_transposes_of_resident_matrices(self):
        # Square: tile pairs swapped within the matrix. Rectangular with `auto`: the budget has
        # room for a second copy, so it is transposed out of place into a new block that replaces
        # the matrix's. Rectangular with the in-place kernel named: a small one (the stream's
        # workspace as scratch) and one of 192 MiB, whose staged sweep takes scratch from the pool.
        from test_resident import download_stream, upload_stream
        cases = [(1024, 1024, "auto", "transpose_inplace_square"),
                 (1000, 3001, "auto", "out of place"),
                 (4096, 12288, "auto", "out of place"),
                 (1000, 3001, "transpose_inplace_rect", "transpose_inplace_rect"),
                 (4096, 12288, "transpose_inplace_rect", "transpose_inplace_rect")]
        for rows, cols, asked, ran in cases:
            a = rand(rows, cols)
            h = upload_stream(self.stub, a, chunk=4 << 20).resident.handle
            try:
                before = self.stub.ListResident(pb.ListResidentRequest()).matrices
                r = self.stub.Transpose(pb.TransposeRequest(a_handle=h, in_place=True, variant=asked),
                                        timeout=120)
                self.assertEqual((r.result.rows, r.result.cols), (cols, rows))
                if ran == "out of place":
                    self.assertNotIn("inplace", r.variant, f"{rows}x{cols} {asked}")
                else:
                    self.assertEqual(r.variant, ran, f"{rows}x{cols} {asked}")
                after = self.stub.ListResident(pb.ListResidentRequest()).matrices
                self.assertEqual([(m.handle, m.bytes) for m in after],
                                 [(m.handle, m.bytes) for m in before])
                b, _ = download_stream(self.stub, h, chunk_bytes=4 << 20)
                np.testing.assert_array_equal(b, a.T.astype(np.float64), f"{rows}x{cols} {asked}")
                if rows * cols <= 4_000_000:  # the transposed matrix is an operand like any other
                    back = self.stub.Transpose(pb.TransposeRequest(a_handle=h), timeout=120)
                    np.testing.assert_array_equal(decode(back.b), a.astype(np.float64))
            finally:
                self.stub.Release(pb.ReleaseRequest(handle=h))


def launches(server, path):
    """matserve_launches_total{path=...} summed over devices."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                  timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("matserve_launches_total{") and f'path="{path}"' in line)


class Fp8TransposedCopyQuotaTest(unittest.TestCase):
    def test_a_kept_copy_counts_against_its_owners_quota(self):
        # Three 4 KiB blocks per caller: A and B (both read in an order the fp8 tensor cores
        # cannot) hold two, so only A's copy fits; once it is kept the caller's quota is full
        # (another matrix is refused, naming the limit), and releasing A gives both back.
        from matserve_client.dtypes import fp8_e4m3_bits_to_float32
        rng = np.random.default_rng(11)
        m, n, k = 48, 32, 64
        sa = rng.integers(0, 0x50, size=(k, m), dtype=np.uint8)
        sb = rng.integers(0, 0x50, size=(k, n), dtype=np.uint8)
        a = fp8_e4m3_bits_to_float32(sa).astype(np.float64).T
        b = fp8_e4m3_bits_to_float32(sb).astype(np.float64)
        with cuda_server_or_skip(f"--max_resident_bytes_per_owner={3 * 4096}") as server:
            stub = server.stub

            def upload(bits):
                return stub.Upload(pb.UploadRequest(matrix=pb.Matrix(
                    rows=bits.shape[0], cols=bits.shape[1], dtype=pb.FP8_E4M3,
                    data=bits.tobytes()))).resident.handle

            ha, hb = upload(sa), upload(sb)
            for _ in range(2):
                r = stub.Multiply(pb.MultiplyRequest(
                    a_handle=ha, b_handle=hb, transpose_a=True, compute=pb.COMPUTE_FP8,
                    output_dtype=pb.FP32), timeout=60)
                gemm_bound.assert_within(self, decode(r.c), a @ b,
                                         gemm_bound.bound(a, b, "fp8", "fp8_e4m3", "fp32"), "fp8")
            one = np.zeros((1, 1), dtype=np.uint8)
            with self.assertRaises(grpc.RpcError) as refused:
                upload(one)
            self.assertEqual(refused.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn("--max_resident_bytes_per_owner", refused.exception.details())
            stub.Release(pb.ReleaseRequest(handle=ha))
            hx = upload(one)  # A's block and its copy are both free again
            stub.Release(pb.ReleaseRequest(handles=[hb, hx]))


class LaunchGraphReplayTest(unittest.TestCase):
    """A request that repeats a launch (same shape, buffers, scalars, variant) on a stream is
    captured as a CUDA graph on its second call and replayed from the third. One stream, and operand sizes in distinct pool size classes, so
    every repeat gets the same buffers: the replays must compute on each call's new data."""

    @classmethod
    def setUpClass(cls):
        cls.server = cuda_server_or_skip("--streams_per_device=1")
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()

    def test_repeated_multiplies_replay_on_new_data(self):
        cases = [("cublas", "fp32"), ("cublaslt", "tf32"), ("warptile", "fp32")]
        names = {k.name for k in self.stub.ListKernels(pb.ListKernelsRequest()).kernels}
        cases = [(v, p) for v, p in cases if v in names]
        before = launches(self.server, "graph_replayed")
        for variant, precision in cases:
            for alpha in (1.0, 0.5, 0.5, 0.5, -2.0):
                a, b, c = rand(250, 500), rand(500, 60), rand(250, 60)
                r = self.stub.Multiply(pb.MultiplyRequest(
                    a=matrix(a), b=matrix(b), c=matrix(c), alpha=alpha, beta=1.5, variant=variant,
                    compute=COMPUTE[precision]), timeout=60)
                self.assertEqual(r.variant, variant)
                want = alpha * (a.astype(np.float64) @ b) + 1.5 * c
                gemm_bound.assert_within(self, decode(r.c), want,
                                         gemm_bound.bound(a, b, precision, "fp32", "fp32", alpha, 1.5, c),
                                         f"{variant} alpha={alpha}")
                self.assertGreater(r.timing.kernel_us, 0)
        # Per variant, the alpha = 0.5 launch runs directly, is captured when it repeats, and
        # replayed on its third call.
        self.assertGreaterEqual(launches(self.server, "graph_replayed") - before, len(cases))

    def test_repeated_transposes_replay_on_new_data(self):
        before = launches(self.server, "graph_replayed")
        # Input and output take blocks of one size class, which the pool may hand out in either
        # order: two launches alternate, each captured on its second call, replayed on its third.
        for _ in range(6):
            a = rand(301, 77)
            r = self.stub.Transpose(pb.TransposeRequest(a=matrix(a), variant="transpose_tiled"),
                                    timeout=60)
            np.testing.assert_array_equal(decode(r.b), a.T.astype(np.float64))
        self.assertGreaterEqual(launches(self.server, "graph_replayed") - before, 2)

    def test_graphs_off_launches_directly(self):
        with cuda_server_or_skip("--launch_graphs_per_stream=0") as server:
            for _ in range(3):
                a, b = rand(33, 17), rand(17, 9)
                r = server.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(b)), timeout=60)
                self.assertLess(rel_l2(decode(r.c), a.astype(np.float64) @ b), 1e-5)
            self.assertEqual(launches(server, "direct"), 3)
            self.assertEqual(launches(server, "graph_replayed"), 0)

    def test_gated_launches_give_the_same_results(self):
        # --gate_launches holds each call's stream until its work is enqueued: direct, captured
        # and replayed launches and a transpose all still run, and run once each.
        with cuda_server_or_skip("--streams_per_device=1", "--gate_launches") as server:
            a, b = rand(129, 67), rand(67, 31)
            for _ in range(4):
                r = server.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(b),
                                                            variant="cublas"), timeout=60)
                self.assertLess(rel_l2(decode(r.c), a.astype(np.float64) @ b), 1e-5)
                self.assertGreater(r.timing.kernel_us, 0)
            t = server.stub.Transpose(pb.TransposeRequest(a=matrix(a)), timeout=60)
            np.testing.assert_array_equal(decode(t.b), a.T.astype(np.float64))
            self.assertGreaterEqual(launches(server, "graph_replayed"), 2)
            self.assertGreaterEqual(launches(server, "direct"), 1)


if __name__ == "__main__":
    unittest.main()
