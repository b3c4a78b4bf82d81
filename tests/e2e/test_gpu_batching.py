"""End-to-end on the GPU: MultiplyBatched and dynamic batching on the CUDA backend.

Skips (visibly) when the server cannot start its CUDA backend. Every batched GPU variant the server
lists, for each precision it claims: odd shapes (batches of one and of several), every transpose
state, broadcast operands and alpha/beta with a batched C, against NumPy in float64; each product
equal to a single Multiply of the same operands within the precision's tolerance; resident handle
lists in and kept results out; stacked resident operands and a result kept stacked (one strided
launch over places inside one block), in both orders and with a stacked C. Then a server with dynamic batching on: concurrent resident
requests each get their own correct result, merged or not, and a bad request among them fails
alone. (test_batching.py covers the batching logic itself on the CPU backend, where the one
execution slot makes merging deterministic.)
"""
import concurrent.futures
import threading
import unittest

import grpc
import numpy as np

import matserve_client as mc
from matserve_client import Client
from server_process import cuda_server_or_skip
from test_batching import operand, reference, stack
from test_service import rand, rel_l2

TOLERANCE = {"fp64": 1e-12, "fp32": 1e-5, "tf32": 5e-3, "fp16": 1e-2, "bf16": 1e-2}
# The data each precision is sent as (tf32: fp32 data computed on the tensor cores).
DATA = {"fp64": "fp64", "fp32": "fp32", "tf32": "fp32", "fp16": "fp16", "bf16": "bf16"}
DEVICE_PREFIX = "cuda:"  # what the replies' `device` starts with


def as_f64(x):
    return np.asarray(x.to_float32() if isinstance(x, mc.Bfloat16) else x, dtype=np.float64)


class GpuBatchedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = cuda_server_or_skip("--max_batch_products=256")
        cls.client = Client(cls.server.target, timeout=120)
        cls.kernels = [k for k in cls.client.list_kernels("gemm")
                       if k.batched and k.backend == "cuda"]

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        assert cls.server.stop() == 0, cls.server.output()

    def run_case(self, kernel, precision, a, b, failures, what, **kwargs):
        """One MultiplyBatched; a declared constraint (FAILED_PRECONDITION) is skipped."""
        try:
            r = self.client.multiply_batched(
                a, b, variant=kernel, compute=None if precision == DATA[precision] else precision,
                **kwargs)
        except mc.MatserveError as e:
            if e.code == grpc.StatusCode.FAILED_PRECONDITION:
                return None
            failures.append(f"{what}: {e}")
            return None
        self.assertEqual(r.variant, kernel, what)
        self.assertTrue(r.device.startswith(DEVICE_PREFIX), r.device)
        return r

    def test_a_batched_variant_is_listed(self):
        self.assertIn("cublas", [k.name for k in self.kernels])

    def test_every_batched_variant_every_precision_odd_shapes(self):
        failures, ran = [], 0
        for kernel in self.kernels:
            for precision in kernel.precisions:
                if precision not in DATA:
                    continue  # fp8 has no batched path to check here
                for m, n, k, batch in [(1, 1, 1, 1), (61, 17, 131, 5), (7, 33, 5, 3),
                                       (128, 64, 96, 2)]:
                    a = operand(stack(batch, m, k, np.float64), DATA[precision])
                    b = operand(stack(batch, k, n, np.float64), DATA[precision])
                    what = f"{kernel.name} {precision} {m}x{n}x{k} batch {batch}"
                    r = self.run_case(kernel.name, precision, a, b, failures, what)
                    if r is None:
                        continue
                    ran += 1
                    self.assertEqual(r.c.shape, (batch, m, n), what)
                    err = rel_l2(r.c.astype(np.float64), reference(a, b))
                    if not err < TOLERANCE[precision]:
                        failures.append(f"{what}: rel_l2 {err}")
        self.assertEqual(failures, [])
        self.assertGreater(ran, 0)

    def test_transposes_broadcast_and_alpha_beta(self):
        failures = []
        for kernel in self.kernels:
            precision = "fp32" if "fp32" in kernel.precisions else kernel.precisions[0]
            if precision not in DATA:
                continue
            dt = DATA[precision]
            for ta in (False, True):
                for tb in (False, True):
                    a = stack(4, 24, 40) if ta else stack(4, 40, 24)  # op(A) 40 x 24
                    b = stack(4, 16, 24) if tb else stack(4, 24, 16)  # op(B) 24 x 16
                    a, b = operand(a, dt), operand(b, dt)
                    what = f"{kernel.name} {precision} ta={ta} tb={tb}"
                    r = self.run_case(kernel.name, precision, a, b, failures, what,
                                      transpose_a=ta, transpose_b=tb)
                    if r is not None:
                        err = rel_l2(r.c.astype(np.float64), reference(a, b, ta=ta, tb=tb))
                        if not err < TOLERANCE[precision]:
                            failures.append(f"{what}: rel_l2 {err}")
            # One weight matrix for every product (B broadcast), then alpha/beta with a C stack.
            a, b2 = operand(stack(6, 40, 24), dt), operand(rand(24, 16).astype(np.float64), dt)
            r = self.run_case(kernel.name, precision, a, b2, failures, f"{kernel.name} broadcast")
            if r is not None:
                err = rel_l2(r.c.astype(np.float64), reference(a, b2))
                if not err < TOLERANCE[precision]:
                    failures.append(f"{kernel.name} broadcast: rel_l2 {err}")
            if dt in ("fp32", "fp64"):
                b6 = operand(stack(6, 24, 16), dt)
                c = stack(6, 40, 16).astype(np.float32 if dt == "fp32" else np.float64)
                r = self.run_case(kernel.name, precision, a, b6, failures,
                                  f"{kernel.name} alpha/beta", c=c, alpha=0.5, beta=-1.5)
                if r is not None:
                    want = reference(a, b6, c, alpha=0.5, beta=-1.5)
                    err = rel_l2(r.c.astype(np.float64), want)
                    if not err < TOLERANCE[precision]:
                        failures.append(f"{kernel.name} alpha/beta: rel_l2 {err}")
        self.assertEqual(failures, [])

    def test_fp8_batches_of_stacked_products(self):
        # cublaslt_fp8 takes a stacked batch one product after another: e4m3 data (with the
        # caller's scales) in every operand order, each product within its bound; fp32 data
        # quantized per product; resident handle lists (pointer arrays) computed alike.
        from matserve_client.dtypes import fp8_e4m3_bits_to_float32
        from matserve.v1 import matrix_service_pb2 as pb
        import gemm_bound
        stub = self.server.stub
        rng = np.random.default_rng(12)
        failures = []
        batch, m, n, k = 3, 37, 29, 53
        for ta, tb in [(False, True), (False, False), (True, True), (True, False)]:
            sa = rng.integers(0, 0x7E, size=(batch,) + ((k, m) if ta else (m, k)), dtype=np.uint8)
            sb = rng.integers(0, 0x7E, size=(batch,) + ((n, k) if tb else (k, n)), dtype=np.uint8)
            sb[1] |= 0x80  # one product with a negative B
            r = stub.MultiplyBatched(pb.MultiplyBatchedRequest(
                batch=batch,
                a=pb.Matrix(rows=sa.shape[1], cols=sa.shape[2], dtype=pb.FP8_E4M3, batch=batch,
                            data=sa.tobytes()),
                b=pb.Matrix(rows=sb.shape[1], cols=sb.shape[2], dtype=pb.FP8_E4M3, batch=batch,
                            data=sb.tobytes()),
                transpose_a=ta, transpose_b=tb, compute=pb.COMPUTE_FP8, output_dtype=pb.FP32,
                a_scale=0.5), timeout=60)
            got = np.frombuffer(r.c.data, np.float32).reshape(batch, m, n)
            for z in range(batch):
                a = fp8_e4m3_bits_to_float32(sa[z]).astype(np.float64)
                b = fp8_e4m3_bits_to_float32(sb[z]).astype(np.float64)
                a, b = (a.T if ta else a), (b.T if tb else b)
                limit = gemm_bound.bound(a, b, "fp8", "fp8_e4m3", "fp32", alpha=0.5)
                msg = gemm_bound.check(got[z], 0.5 * (a @ b), limit)
                if msg is not None:
                    failures.append(f"ta={ta} tb={tb} product {z}: {msg}")
            if r.variant != "cublaslt_fp8":
                failures.append(f"ta={ta} tb={tb}: ran {r.variant}")
        self.assertEqual(failures, [])
        a, b = stack(3, 40, 24).astype(np.float32), stack(3, 24, 16).astype(np.float32)
        r = self.client.multiply_batched(a, b, compute="fp8", out_dtype="fp32")
        self.assertEqual(r.variant, "wgmma_fp8")  # quantized on the device: the own kernel
        for z in range(3):
            want = a[z].astype(np.float64) @ b[z]
            self.assertLess(rel_l2(r.c[z].astype(np.float64), want), 6e-2, z)
        # Resident handle lists (separate matrices, a pointer-array batch): product by product,
        # each through the same path as a stacked one; three times (a repeat may replay its graph).
        ha = [self.client.upload(x) for x in a]
        hb = [self.client.upload(x) for x in b]
        try:
            for _ in range(3):
                r = self.client.multiply_batched(ha, hb, compute="fp8", out_dtype="fp32")
                for z in range(3):
                    want = a[z].astype(np.float64) @ b[z]
                    self.assertLess(rel_l2(r.c[z].astype(np.float64), want), 6e-2, z)
            # e4m3 data as handle lists: bit for bit the stacked call's products.
            sa = rng.integers(0, 0x7E, size=(3, 40, 24), dtype=np.uint8)
            sb = rng.integers(0, 0x7E, size=(3, 16, 24), dtype=np.uint8)
            ea = [self.client.upload(mc.Float8E4M3(x)) for x in sa]
            eb = [self.client.upload(mc.Float8E4M3(x)) for x in sb]
            stacked = self.client.multiply_batched(mc.Float8E4M3(sa), mc.Float8E4M3(sb),
                                                   transpose_b=True, out_dtype="fp32")
            for _ in range(3):
                listed = self.client.multiply_batched(ea, eb, transpose_b=True, out_dtype="fp32")
                np.testing.assert_array_equal(listed.c, stacked.c)
            for h in ea + eb:
                h.release()
        finally:
            for h in ha + hb:
                h.release()

    def test_each_product_matches_a_single_multiply(self):
        a, b = stack(5, 33, 20), stack(5, 20, 47)
        r = self.client.multiply_batched(a, b, variant="cublas")
        for i in range(5):
            single = self.client.multiply(a[i], b[i], variant="cublas")
            self.assertLess(rel_l2(r.c[i].astype(np.float64), as_f64(single.c)), 1e-6, i)

    def test_stacked_resident_operands_every_variant(self):
        # A client that stripes every call: each stack goes into one resident matrix (a_stacked),
        # the results come back kept stacked (keep_stacked). Row- and column-major stacks, and a
        # stacked C with beta: each product's place read and written inside one block.
        failures, ran = [], 0
        with Client(self.server.target, timeout=120, stripes=2,
                    stripe_threshold_bytes=1) as striped:
            for kernel in self.kernels:
                for precision in kernel.precisions:
                    if precision not in DATA:
                        continue
                    for m, n, k, batch in [(61, 17, 131, 5), (7, 33, 5, 3), (64, 64, 64, 40)]:
                        a64, b64 = stack(batch, m, k, np.float64), stack(batch, k, n, np.float64)
                        c64 = stack(batch, m, n, np.float64)
                        a, b = operand(a64, DATA[precision]), operand(b64, DATA[precision])
                        c = operand(c64, DATA[precision])
                        for order in ("C", "F"):
                            what = f"{kernel.name} {precision} {m}x{n}x{k} batch {batch} {order}"
                            try:
                                r = striped.multiply_batched(
                                    a, b, c=c, beta=0.5, out_order=order, variant=kernel.name,
                                    compute=None if precision == DATA[precision] else precision)
                            except mc.MatserveError as e:
                                if e.code != grpc.StatusCode.FAILED_PRECONDITION:
                                    failures.append(f"{what}: {e}")
                                continue
                            ran += 1
                            self.assertEqual(r.variant, kernel.name, what)
                            err = rel_l2(as_f64(r.c), reference(a, b, c, beta=0.5))
                            if not err < TOLERANCE[precision]:
                                failures.append(f"{what}: rel_l2 {err}")
            self.assertEqual(striped.list_resident(), [])
        self.assertEqual(failures, [])
        self.assertGreater(ran, 0)

    def test_resident_handle_lists_in_and_kept_results_out(self):
        a, b = stack(3, 30, 20), stack(3, 20, 10)
        ha = [self.client.upload(x) for x in a]
        hb = [self.client.upload(x) for x in b]
        try:
            r = self.client.multiply_batched(ha, hb, keep_result=True)
            self.assertEqual(len(r.residents), 3)
            for i, kept in enumerate(r.residents):
                self.assertLess(rel_l2(kept.download().astype(np.float64),
                                       a[i].astype(np.float64) @ b[i]), TOLERANCE["fp32"], i)
                kept.release()
        finally:
            for h in ha + hb:
                h.release()


class GpuDynamicBatchingTest(unittest.TestCase):
    """--max_batch_size 16 --max_batch_delay_us 2000 on the CUDA backend."""

    @classmethod
    def setUpClass(cls):
        cls.server = cuda_server_or_skip("--max_batch_size=16", "--max_batch_delay_us=2000")
        cls.client = Client(cls.server.target, timeout=120)
        cls.pool = concurrent.futures.ThreadPoolExecutor(max_workers=32)

    @classmethod
    def tearDownClass(cls):
        cls.pool.shutdown()
        cls.client.close()
        assert cls.server.stop() == 0, cls.server.output()

    def test_concurrent_requests_each_get_their_own_result(self):
        pairs = []
        for _ in range(32):
            a, b = rand(96, 64), rand(64, 80)
            pairs.append((self.client.upload(a), self.client.upload(b),
                          a.astype(np.float64) @ b))
        barrier = threading.Barrier(len(pairs))

        def call(pair, keep):
            barrier.wait()
            return self.client.multiply(pair[0], pair[1], keep_result=keep)
        try:
            for keep in (False, True):
                futures = [self.pool.submit(call, p, keep) for p in pairs]
                results = [f.result() for f in futures]
                barrier.reset()
                for i, (r, (_, _, want)) in enumerate(zip(results, pairs)):
                    got = r.resident.download() if keep else r.c
                    self.assertLess(rel_l2(np.asarray(got, np.float64), want), TOLERANCE["fp32"],
                                    (keep, i))
                    self.assertGreaterEqual(r.timing.merged_requests, 1)
                    self.assertLessEqual(r.timing.merged_requests, 16)
                    if keep:
                        r.resident.release()
                if keep:
                    self.assertEqual(len({r.resident.handle for r in results}), 32)
        finally:
            for ha, hb, _ in pairs:
                ha.release()
                hb.release()

    def test_concurrent_fp8_requests_are_merged_bit_for_bit(self):
        # e4m3 data (16 pairs) and fp32 data quantized on the device (each request with its own
        # scales): merged launches give every request what it gets alone, bit for bit.
        rng = np.random.default_rng(21)
        cases = []
        for _ in range(16):
            a = mc.Float8E4M3(rng.integers(0, 0x7E, size=(64, 48), dtype=np.uint8))
            b = mc.Float8E4M3(rng.integers(0, 0x7E, size=(40, 48), dtype=np.uint8))
            cases.append((self.client.upload(a), self.client.upload(b), {}))
        for _ in range(16):
            a, b = rand(64, 48), rand(40, 48)
            cases.append((self.client.upload(a), self.client.upload(b), {"compute": "fp8"}))
        alone = [self.client.multiply(ha, hb, transpose_b=True, out_dtype="fp32", **kw).c
                 for ha, hb, kw in cases]
        barrier = threading.Barrier(len(cases))

        def call(case):
            barrier.wait()
            return self.client.multiply(case[0], case[1], transpose_b=True, out_dtype="fp32",
                                        **case[2])
        merged = []
        try:
            for _ in range(5):  # merging needs the requests to meet within 2 ms: retried
                results = [f.result() for f in [self.pool.submit(call, c) for c in cases]]
                barrier.reset()
                for i, r in enumerate(results):
                    np.testing.assert_array_equal(r.c, alone[i], f"request {i}")
                merged += [r.timing.merged_requests for r in results]
                if max(merged) > 1:
                    break
            self.assertGreater(max(merged), 1, "no fp8 request was merged")
        finally:
            for ha, hb, _ in cases:
                ha.release()
                hb.release()

    def test_a_bad_request_among_concurrent_ones_fails_alone(self):
        a, b = rand(64, 64), rand(64, 64)
        ha, hb = self.client.upload(a), self.client.upload(b)
        wrong = self.client.upload(rand(65, 64))  # inner dimensions differ: 64 against 65
        barrier = threading.Barrier(9)

        def call(right):
            barrier.wait()
            return self.client.multiply(ha, hb if right else wrong)
        try:
            futures = [self.pool.submit(call, i != 4) for i in range(9)]
            for i, f in enumerate(futures):
                if i == 4:
                    with self.assertRaises(mc.MatserveError) as ctx:
                        f.result()
                    self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
                else:
                    self.assertLess(rel_l2(np.asarray(f.result().c, np.float64),
                                           a.astype(np.float64) @ b), TOLERANCE["fp32"], i)
        finally:
            for h in (ha, hb, wrong):
                h.release()

if __name__ == "__main__":
    unittest.main()
