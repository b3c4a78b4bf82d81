"""End-to-end: batched multiplication on the real server, always on the CPU backend (whatever
MATSERVE_BACKEND says: the tests below count on its one execution slot and its OpenBLAS variant;
test_gpu_batching.py runs batched multiplies on the CUDA backend).

MultiplyBatched through the Python client: results against NumPy in float64 for every dtype, odd
shapes, broadcast operands, every transpose state, alpha/beta with a batched C, column-major
results, resident handle lists in and kept results out, verify; its errors (raw requests, so the
server's own checks are what is tested); the kernels and limits it reports. Then dynamic batching
of concurrent Multiply requests (--max_batch_size): merged launches give every request its own
result (fp8 e4m3 requests too, bit for bit), a lone request is not delayed, another shape is
never merged in, merged launches honour
every option, a merged request whose deadline is far too short fails alone while the others
succeed, and a kept result of a merged launch belongs to its own caller (an expected failure for
now: see MergedOwnersTest).

Merging needs requests to wait together: the tests hold the CPU backend's only execution slot
(--cpu_concurrency 1) with a long MultiplyBatched of another shape (`Blocker`) and read the
server's gauges (/metrics) to know when a request is queued or being served, rather than sleeping.
"""
import concurrent.futures
import math
import os
import re
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc
import numpy as np

import matserve_client as mc
from matserve.v1 import matrix_service_pb2 as pb
from matserve_client import Bfloat16, Client, Float8E4M3
from server_process import ServerProcess, matrix
from test_service import rand, rel_l2

TOLERANCE = {"fp64": 1e-12, "fp32": 1e-5, "fp16": 1e-2, "bf16": 1e-2}
NUMPY = {"fp64": np.float64, "fp32": np.float32, "fp16": np.float16}


def stack(batch, rows, cols, dtype=np.float32):
    """`batch` distinct random non-zero matrices, (batch, rows, cols)."""
    return np.stack([rand(rows, cols, dtype) for _ in range(batch)])


def as_f64(x):
    return (x.to_float32() if isinstance(x, Bfloat16) else np.asarray(x)).astype(np.float64)


def operand(x, dtype):
    """x in `dtype` as the client sends it (Bfloat16 for bf16)."""
    return Bfloat16.from_float(x) if dtype == "bf16" else x.astype(NUMPY[dtype])


def reference(a, b, c=None, alpha=1.0, beta=0.0, ta=False, tb=False):
    """alpha * op(A_i) @ op(B_i) + beta * C_i in float64; 2-D operands broadcast."""
    a, b = as_f64(a), as_f64(b)
    out = alpha * (np.swapaxes(a, -1, -2) if ta else a) @ (np.swapaxes(b, -1, -2) if tb else b)
    return out if c is None else out + beta * as_f64(c)


def metric(server, name, **labels):
    """The sum of the samples of `name` on the server's /metrics whose labels include `labels`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                timeout=10) as r:
        text = r.read().decode()
    value = 0.0
    for m in re.finditer(rf"^{name}(?:\{{(.*)\}})? (\S+)$", text, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            value += float(m.group(2))
    return value


def wait_for(server, name, at_least, timeout=60, **labels):
    """Polls /metrics until `name` reaches `at_least` (a gauge or counter)."""
    deadline = time.monotonic() + timeout
    while metric(server, name, **labels) < at_least:
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}{labels} stayed below {at_least} for {timeout} s")
        time.sleep(0.005)


class BatchedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # A 1 MiB message limit: the client moves larger stacks and results through resident
        # matrices (test_stacks_and_results_above_the_message_limit).
        cls.server = ServerProcess("--max_batch_products=64", "--max_message_bytes=1048576",
                                   backend="cpu")
        cls.client = Client(cls.server.target, timeout=120)
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.server.stop()
        assert code == 0, f"server exit code {code}\n{cls.server.output()}"

    def tearDown(self):
        for m in self.client.list_resident():
            m.release()

    def check(self, r, want, dtype, what=""):
        self.assertIsInstance(r, mc.MultiplyBatchedResult)
        self.assertEqual(r.c.shape, want.shape, what)
        self.assertEqual(r.batch, want.shape[0], what)
        self.assertLess(rel_l2(r.c.astype(np.float64), want), TOLERANCE[dtype], what)

    # --- results vs NumPy -----------------------------------------------------------------------
    def test_batch_of_one_every_dtype(self):
        for dtype in ("fp64", "fp32", "fp16", "bf16"):
            a, b = operand(stack(1, 9, 4, np.float64), dtype), operand(stack(1, 4, 6), dtype)
            r = self.client.multiply_batched(a, b)
            self.check(r, reference(a, b), dtype, dtype)
            self.assertEqual(r.precision, dtype)
            self.assertEqual(r.c.dtype, np.float32 if dtype == "bf16" else NUMPY[dtype])
            self.assertEqual((r.variant, r.device), ("cpu_openblas", "cpu"))
        # bf16_bits: the same results as their bits, not widened to float32.
        a, b = operand(stack(3, 9, 4, np.float64), "bf16"), operand(stack(3, 4, 6), "bf16")
        widened = self.client.multiply_batched(a, b).c
        bits = self.client.multiply_batched(a, b, bf16_bits=True).c
        self.assertIsInstance(bits, Bfloat16)
        self.assertEqual((bits.bits.dtype, bits.shape), (np.uint16, (3, 9, 6)))
        np.testing.assert_array_equal(bits.to_float32(), widened)
        a, b = stack(6, 120, 80), stack(6, 80, 50)
        r = self.client.multiply_batched(a, b)
        t = r.timing
        self.assertGreater(t.kernel_us, 0)
        self.assertGreaterEqual(t.total_us, t.queue_us + t.kernel_us)
        self.assertEqual((t.merged_requests, t.batch_wait_us), (1, 0.0))
        self.assertAlmostEqual(r.gflops, 6 * 2 * 120 * 50 * 80 / (t.kernel_us * 1e3),
                               delta=1e-6 * r.gflops)

    def test_odd_shapes_every_dtype(self):
        for m, n, k, batch in [(7, 5, 3, 5), (1, 1, 1, 4), (61, 17, 131, 3), (1, 33, 1, 2)]:
            for dtype in ("fp64", "fp32", "fp16", "bf16"):
                a = operand(stack(batch, m, k, np.float64), dtype)
                b = operand(stack(batch, k, n, np.float64), dtype)
                r = self.client.multiply_batched(a, b)
                self.check(r, reference(a, b), dtype, (m, n, k, batch, dtype))

    def test_broadcast_a_and_b(self):
        a3, b3 = stack(4, 6, 5), stack(4, 5, 3)
        a2, b2 = rand(6, 5), rand(5, 3)
        for a, b, what in [(a2, b3, "A broadcast"), (a3, b2, "B broadcast"),
                           (a3[:1], b3, "A a stack of one"), (a3, b3[2:3], "B a stack of one")]:
            r = self.client.multiply_batched(a, b)
            self.check(r, reference(a, b), "fp32", what)
            # Products differ: the stacked operand's matrices were each used once, in order.
            self.assertGreater(np.abs(r.c[0] - r.c[1]).max(), 1e-3, what)
        # Both broadcast: a batch of one.
        self.check(self.client.multiply_batched(a2, b2), reference(a2, b2)[None], "fp32")

    def test_every_transpose_state(self):
        m, n, k, batch = 7, 4, 9, 3
        for ta in (False, True):
            for tb in (False, True):
                a = stack(batch, k, m) if ta else stack(batch, m, k)
                b = stack(batch, n, k) if tb else stack(batch, k, n)
                r = self.client.multiply_batched(a, b, transpose_a=ta, transpose_b=tb)
                self.check(r, reference(a, b, ta=ta, tb=tb), "fp32", (ta, tb))
                # One broadcast operand in this op state too.
                r = self.client.multiply_batched(a, b[0], transpose_a=ta, transpose_b=tb)
                self.check(r, reference(a, b[0], ta=ta, tb=tb), "fp32", (ta, tb, "broadcast"))

    def test_alpha_beta_with_a_batched_c(self):
        a, b, c = stack(4, 9, 6, np.float64), stack(4, 6, 5, np.float64), stack(4, 9, 5, np.float64)
        r = self.client.multiply_batched(a, b, c=c, alpha=0.5, beta=-2.0)
        self.check(r, reference(a, b, c, 0.5, -2.0), "fp64")
        r = self.client.multiply_batched(a, b, c=c[1], alpha=-1.0, beta=1.5)  # one C for all
        self.check(r, reference(a, b, c[1], -1.0, 1.5), "fp64", "broadcast C")
        # beta = 0: C is not read (NaN in it must not reach the results).
        r = self.client.multiply_batched(a, b, c=np.full((4, 9, 5), np.nan), alpha=2.0)
        self.assertTrue(np.isfinite(r.c).all())
        self.check(r, reference(a, b, alpha=2.0), "fp64", "beta 0")
        # fp32 products with a float64 C: C is converted to the output dtype.
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        r = self.client.multiply_batched(a32, b32, c=c, beta=1.0)
        self.assertEqual(r.c.dtype, np.float32)
        self.check(r, reference(a32, b32, c, beta=1.0), "fp32", "fp32 with fp64 C")

    def test_column_major_results_and_operands(self):
        a, b, c = stack(3, 13, 7), stack(3, 7, 11), stack(3, 13, 11)
        want = reference(a, b)
        r = self.client.multiply_batched(a, b, out_order="F")
        self.assertTrue(all(r.c[i].flags.f_contiguous and not r.c[i].flags.c_contiguous
                            for i in range(3)))
        self.check(r, want, "fp32", "F result")

        def fortran(x):  # each x[i] column-major, stacked batch-major
            return np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)
        r = self.client.multiply_batched(fortran(a), fortran(b))
        self.assertTrue(r.c[0].flags.c_contiguous)
        self.check(r, want, "fp32", "F operands")
        r = self.client.multiply_batched(a, b, c=fortran(c), beta=1.0)  # follows C's order
        self.assertTrue(r.c[0].flags.f_contiguous and not r.c[0].flags.c_contiguous)
        self.check(r, reference(a, b, c, beta=1.0), "fp32", "F C")
        r = self.client.multiply_batched(a, b, c=fortran(c), beta=1.0, out_order="C")
        self.assertTrue(r.c[0].flags.c_contiguous)
        self.check(r, reference(a, b, c, beta=1.0), "fp32", "F C, C result")

    def test_resident_handle_lists_in_and_kept_results_out(self):
        a, b, c = stack(4, 8, 5, np.float64), stack(4, 5, 6, np.float64), stack(4, 8, 6, np.float64)
        ha = [self.client.upload(x) for x in a]
        hb = self.client.upload(b[2])  # one handle for every product
        hc = [self.client.upload(x) for x in c]
        r = self.client.multiply_batched(ha, [hb], c=hc, beta=-1.0, keep_result=True)
        want = reference(a, b[2], c, beta=-1.0)
        self.assertIsNone(r.c)
        self.assertEqual((r.batch, len(r.residents)), (4, 4))
        listed = {m.handle for m in self.client.list_resident()}
        for i, h in enumerate(r.residents):
            self.assertIsInstance(h, mc.ResidentMatrix)
            self.assertEqual((h.shape, h.dtype), ((8, 6), "fp64"))
            self.assertIn(h.handle, listed)
            self.assertLess(rel_l2(h.download(), want[i]), TOLERANCE["fp64"], i)
        self.assertEqual(len({h.handle for h in r.residents}), 4)
        # Kept results as operands again, with an inline stack.
        d = stack(4, 6, 3, np.float64)
        r2 = self.client.multiply_batched(r.residents, d, out_order="F")
        self.check(r2, reference(want, d), "fp64", "chained")
        for h in r.residents:
            h.release()
        self.assertEqual({m.handle for m in self.client.list_resident()},
                         {h.handle for h in ha + [hb] + hc})

    def test_stacked_resident_operands_and_a_stacked_result(self):
        # Each operand one resident matrix holding its stack (a_stacked: row-major batch*rows x
        # cols), the results kept as one (keep_stacked), C read from a stacked one; verify reads
        # each product's place.
        a, b, c = stack(5, 9, 7, np.float64), stack(5, 7, 4, np.float64), stack(5, 9, 4, np.float64)
        ha = self.client.upload(a.reshape(45, 7))
        hb = self.client.upload(b.reshape(35, 4))
        hc = self.client.upload(c.reshape(45, 4))
        reply = self.stub.MultiplyBatched(pb.MultiplyBatchedRequest(
            batch=5, a_stacked=ha.handle, b_stacked=hb.handle, c_stacked=hc.handle, beta=0.5,
            keep_stacked=True, verify=True), timeout=30)
        self.assertEqual(len(reply.results), 1)
        kept = reply.results[0]
        self.assertEqual((kept.rows, kept.cols, kept.dtype), (45, 4, pb.FP64))
        self.assertLess(reply.verification.rel_l2_error, TOLERANCE["fp64"])
        got = mc.ResidentMatrix(self.client, mc.ResidentInfo.from_proto(kept)).download()
        self.assertLess(rel_l2(got.reshape(5, 9, 4), reference(a, b, c, beta=0.5)),
                        TOLERANCE["fp64"])
        # Column-major stacks: rows x batch*cols, each product's matrix a block of columns; a
        # stacked operand with a broadcast handle and an inline stack.
        fa = self.client.upload(np.asfortranarray(np.concatenate(list(a), axis=1)))
        hb0 = self.client.upload(b[0])
        reply = self.stub.MultiplyBatched(pb.MultiplyBatchedRequest(
            batch=5, a_stacked=fa.handle, b_handles=[hb0.handle], keep_stacked=True,
            output_layout=pb.COL_MAJOR), timeout=30)
        kept = reply.results[0]
        self.assertEqual((kept.rows, kept.cols, kept.layout), (9, 20, pb.COL_MAJOR))
        got = mc.ResidentMatrix(self.client, mc.ResidentInfo.from_proto(kept)).download()
        self.assertLess(rel_l2(np.stack(np.split(got, 5, axis=1)), reference(a, b[0])),
                        TOLERANCE["fp64"])
        reply = self.stub.MultiplyBatched(pb.MultiplyBatchedRequest(
            batch=5, a_stacked=ha.handle, b=self.stacked(b)), timeout=30)
        got = np.frombuffer(reply.c.data, np.float64).reshape(5, 9, 4)
        self.assertLess(rel_l2(got, reference(a, b)), TOLERANCE["fp64"])

    def test_stacked_operands_and_results_through_the_client(self):
        a, b = stack(6, 9, 7, np.float64), stack(6, 7, 5, np.float64)
        sa = mc.Stacked(self.client.upload(a.reshape(54, 7)), 6)
        self.assertEqual(sa.shape, (9, 7))
        r = self.client.multiply_batched(sa, b, keep_stacked=True)
        self.assertIsNone(r.c)
        self.assertEqual((r.batch, r.residents), (6, []))
        self.assertEqual(r.stacked.resident.shape, (54, 5))
        want = reference(a, b)
        self.assertLess(rel_l2(r.stacked.resident.download().reshape(6, 9, 5), want),
                        TOLERANCE["fp64"])
        d = stack(6, 5, 3, np.float64)
        chained = self.client.multiply_batched(r.stacked, d, out_order="F")
        self.assertTrue(chained.c[0].flags.f_contiguous)
        self.check(chained, reference(want, d), "fp64", "chained")
        # A column-major stack: rows x batch*cols, each product a block of columns.
        f = mc.Stacked(self.client.upload(np.asfortranarray(np.concatenate(list(a), axis=1))), 6)
        self.assertEqual(f.shape, (9, 7))
        self.check(self.client.multiply_batched(f, b), want, "fp64", "F stack")
        with self.assertRaises(ValueError):
            mc.Stacked(sa.resident, 4)  # 54 rows are not 4 matrices
        with self.assertRaises(ValueError):
            self.client.multiply_batched(sa, b, keep_result=True, keep_stacked=True)

    def test_stacked_operand_errors(self):
        a = self.client.upload(stack(1, 10, 3)[0])
        b = self.stacked(stack(4, 3, 2))
        details = self.assert_invalid(self.stub.MultiplyBatched, pb.MultiplyBatchedRequest(
            batch=4, a_stacked=a.handle, b=b), "a_stacked: the resident matrix is 10x3 row-major")
        self.assertIn("not a multiple of batch = 4", details)
        self.assert_invalid(self.stub.MultiplyBatched, pb.MultiplyBatchedRequest(
            batch=2, a_stacked=a.handle, a_handles=[a.handle], b=b),
            "a, a_handles and a_stacked: give one of them")
        self.assert_invalid(self.stub.MultiplyBatched, pb.MultiplyBatchedRequest(batch=2, b=b),
                            "a: missing (send a, a_handles or a_stacked)")
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.MultiplyBatched(pb.MultiplyBatchedRequest(
                batch=2, a_stacked="00" * 16, b=b), timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND, ctx.exception.details())
        self.assertIn("a_stacked", ctx.exception.details())

    def test_stacks_and_results_above_the_message_limit(self):
        a, b = stack(6, 200, 150, np.float64), rand(150, 300, np.float64)  # 1.4 MB; results 2.9 MB
        r = self.client.multiply_batched(a, b, out_order="F")
        self.assertTrue(r.c[0].flags.f_contiguous)
        self.check(r, reference(a, b), "fp64")
        self.assertEqual(self.client.list_resident(), [])  # the temporaries were released
        r = self.client.multiply_batched(a, b, keep_result=True, verify=True)
        self.assertEqual(len(r.residents), 6)
        self.assertLess(r.verification.rel_l2_error, TOLERANCE["fp64"])
        want = reference(a, b)
        for i, h in enumerate(r.residents):
            self.assertLess(rel_l2(h.download(), want[i]), TOLERANCE["fp64"], i)
        self.assertEqual({m.handle for m in self.client.list_resident()},
                         {h.handle for h in r.residents})

    def test_verify_reports_the_largest_error_over_the_products(self):
        r = self.client.multiply_batched(stack(3, 61, 131, np.float64),
                                         stack(3, 131, 17, np.float64), verify=True)
        self.assertLess(r.verification.rel_l2_error, TOLERANCE["fp64"])
        a, b = stack(3, 40, 64), stack(3, 64, 24)
        r = self.client.multiply_batched(a, b, verify=True)
        self.check(r, reference(a, b), "fp32")
        self.assertLess(r.verification.rel_l2_error, TOLERANCE["fp32"])
        self.assertGreater(r.verification.max_abs_error, 0)
        # Products 0 and 1 are small integers (exact in bf16, exact sums); product 2 is not: bf16
        # compute gives errors only in product 2, and verification must see them.
        ints = np.random.default_rng(3).integers(-3, 4, size=(2, 40, 64)).astype(np.float32)
        ints[ints == 0] = 1
        b_ints = np.random.default_rng(4).integers(-3, 4, size=(2, 64, 24)).astype(np.float32)
        exact = self.client.multiply_batched(ints, b_ints, compute="bf16", verify=True)
        self.assertEqual(exact.verification.max_abs_error, 0.0)
        mixed = self.client.multiply_batched(np.concatenate([ints, a[:1]]),
                                             np.concatenate([b_ints, b[:1]]), compute="bf16",
                                             verify=True)
        np.testing.assert_array_equal(mixed.c[:2], exact.c)
        self.assertGreater(mixed.verification.rel_l2_error, 1e-6)
        self.assertLess(mixed.verification.rel_l2_error, TOLERANCE["bf16"])
        self.assertIsNone(self.client.multiply_batched(a, b).verification)

    # --- errors (raw requests: the server's checks) ---------------------------------------------
    def assert_invalid(self, call, request, fragment):
        with self.assertRaises(grpc.RpcError) as ctx:
            call(request, timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                         ctx.exception.details())
        self.assertIn(fragment, ctx.exception.details())
        return ctx.exception.details()

    def stacked(self, x):
        m = matrix(x[0])
        m.data = x.tobytes()
        m.batch = x.shape[0]
        return m

    def test_batch_out_of_range(self):
        a, b = self.stacked(stack(2, 3, 4)), self.stacked(stack(2, 4, 5))
        for batch in (0, -1, 65, 1 << 40):
            with self.subTest(batch=batch):
                details = self.assert_invalid(
                    self.stub.MultiplyBatched, pb.MultiplyBatchedRequest(batch=batch, a=a, b=b),
                    f"batch: {batch} products")
                self.assertTrue(details.startswith("batch:"), details)
                self.assertIn("--max_batch_products", details)
        # 64, the limit, is served.
        big_a, big_b = stack(64, 2, 3), stack(64, 3, 2)
        reply = self.stub.MultiplyBatched(pb.MultiplyBatchedRequest(
            batch=64, a=self.stacked(big_a), b=self.stacked(big_b)), timeout=30)
        got = np.frombuffer(reply.c.data, np.float32).reshape(64, 2, 2)
        self.assertEqual(reply.c.batch, 64)
        self.assertLess(rel_l2(got.astype(np.float64), reference(big_a, big_b)), 1e-5)

    def test_operand_counts_that_are_neither_one_nor_the_batch(self):
        a3, b5 = self.stacked(stack(3, 3, 4)), self.stacked(stack(5, 4, 5))
        details = self.assert_invalid(self.stub.MultiplyBatched,
                                      pb.MultiplyBatchedRequest(batch=5, a=a3, b=b5), "a.batch: 3")
        self.assertTrue(details.startswith("a.batch:"), details)
        self.assert_invalid(self.stub.MultiplyBatched,
                            pb.MultiplyBatchedRequest(batch=3, a=a3, b=b5), "b.batch: 5")
        with self.assertRaises(mc.InvalidArgument) as ctx:  # through the client too
            self.client.multiply_batched(stack(3, 3, 4), stack(5, 4, 5))
        self.assertIn("a.batch", ctx.exception.message)
        b3 = self.stacked(stack(3, 4, 5))
        short = self.stacked(stack(2, 3, 4))
        short.batch = 3  # data for 2
        self.assert_invalid(self.stub.MultiplyBatched,
                            pb.MultiplyBatchedRequest(batch=3, a=short, b=b3), "a.data")
        h = [self.client.upload(rand(3, 4)).handle for _ in range(2)]
        self.assert_invalid(self.stub.MultiplyBatched,
                            pb.MultiplyBatchedRequest(batch=3, a_handles=h, b=b3),
                            "a_handles: 2 handles")

    def test_plain_multiply_refuses_a_stack(self):
        a, b = self.stacked(stack(2, 3, 4)), matrix(rand(4, 5))
        details = self.assert_invalid(self.stub.Multiply, pb.MultiplyRequest(a=a, b=b), "a.batch")
        self.assertTrue(details.startswith("a.batch:"), details)
        self.assert_invalid(self.stub.Multiply, pb.MultiplyRequest(a=matrix(rand(3, 4)),
                                                                   b=self.stacked(stack(2, 4, 5))),
                            "b.batch")
        ok = pb.MultiplyRequest(a=matrix(rand(3, 4)), b=matrix(rand(4, 5)))
        ok.a.batch = 1  # 1 (like 0) means one matrix
        self.assertEqual(self.stub.Multiply(ok, timeout=30).c.rows, 3)

    def test_handles_of_different_shapes_in_one_list(self):
        h = [self.client.upload(rand(4, 3)), self.client.upload(rand(5, 3))]
        with self.assertRaises(mc.InvalidArgument) as ctx:
            self.client.multiply_batched(h, rand(3, 2))
        self.assertIn("a_handles[1]", ctx.exception.message)
        h32 = [self.client.upload(rand(4, 3)), self.client.upload(rand(4, 3, np.float64))]
        with self.assertRaises(mc.InvalidArgument) as ctx:
            self.client.multiply_batched(rand(2, 4), h32)
        self.assertIn("b_handles[1]", ctx.exception.message)

    # --- what the server reports ----------------------------------------------------------------
    def test_list_kernels_and_server_info(self):
        gemm = {k.name: k for k in self.client.list_kernels("gemm")}
        self.assertTrue(gemm["cpu_openblas"].batched)
        self.assertTrue(all(not k.batched for k in self.client.list_kernels("transpose")))
        limits = self.client.server_info().limits
        self.assertEqual((limits.max_batch_products, limits.max_batch_size,
                          limits.max_batch_delay_us), (64, 0, 500))
        r = self.client.multiply(rand(3, 4), rand(4, 2))
        self.assertEqual((r.timing.merged_requests, r.timing.batch_wait_us), (1, 0.0))


class Blocker:
    """Holds the CPU backend's only execution slot (--cpu_concurrency 1) for about `seconds`: one
    MultiplyBatched of broadcast 256x16384 @ 16384x256 fp32 products, as many as the measured
    speed of one product says (requests of other shapes queue behind it meanwhile)."""

    def __init__(self, client):
        self.client = client
        self.a = client.upload(rand(256, 16384))
        self.b = client.upload(rand(16384, 256))
        r = client.multiply_batched([self.a] * 2, self.b)
        self.per_product_s = r.timing.kernel_us / 2 * 1e-6

    def start(self, server, pool, seconds):
        products = min(max(math.ceil(seconds / self.per_product_s), 2), 2048)
        busy = metric(server, "matserve_admissions_total")
        future = pool.submit(self.client.multiply_batched, [self.a] * products, self.b,
                             keep_result=True)
        wait_for(server, "matserve_admissions_total", busy + 1)
        wait_for(server, "matserve_execution_slots_in_use", 1)
        return future

    @staticmethod
    def finish(future):
        for h in future.result().residents:
            h.release()


class DynamicBatchingTest(unittest.TestCase):
    """--max_batch_size 8 --max_batch_delay_us 20000 --cpu_concurrency 1."""

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--max_batch_size=8", "--max_batch_delay_us=20000",
                                   "--cpu_concurrency=1", backend="cpu")
        cls.client = Client(cls.server.target, timeout=120)
        cls.client.unary_limit_bytes()  # asks GetServerInfo now, not amid the timed requests
        cls.blocker = Blocker(cls.client)
        cls.pool = concurrent.futures.ThreadPoolExecutor(max_workers=24)

    @classmethod
    def tearDownClass(cls):
        cls.pool.shutdown()
        cls.client.close()
        code = cls.server.stop()
        assert code == 0, f"server exit code {code}\n{cls.server.output()}"

    def upload_pairs(self, count, m=64, k=48, n=32):
        """`count` distinct (A, B) fp64 pairs, resident, with their float64 products."""
        pairs = []
        for _ in range(count):
            a, b = rand(m, k, np.float64), rand(k, n, np.float64)
            pairs.append((self.client.upload(a), self.client.upload(b), a @ b))
        return pairs

    def concurrently(self, calls):
        """Runs the calls at once (released together by a barrier); their futures."""
        barrier = threading.Barrier(len(calls))

        def run(call):
            barrier.wait()
            return call()
        return [self.pool.submit(run, call) for call in calls]

    def test_concurrent_requests_are_merged_and_each_gets_its_own_result(self):
        pairs = self.upload_pairs(16)
        odd = self.upload_pairs(1, m=40)[0]  # another shape, sent among them
        merged = []
        for attempt in range(3):  # merging needs them to meet within 20 ms: retried, not assumed
            for keep in (False, True):
                blocking = self.blocker.start(self.server, self.pool, seconds=1.5)
                calls = [lambda p=p, keep=keep: self.client.multiply(p[0], p[1], keep_result=keep,
                                                                     verify=keep)
                         for p in pairs]
                calls.append(lambda: self.client.multiply(odd[0], odd[1]))
                futures = self.concurrently(calls)
                results = [f.result() for f in futures]
                Blocker.finish(blocking)
                for i, (r, (_, _, want)) in enumerate(zip(results, pairs + [odd])):
                    got = r.c if not keep or i == 16 else r.resident.download()
                    self.assertEqual(got.shape, want.shape, i)
                    self.assertLess(rel_l2(got, want), TOLERANCE["fp64"], (attempt, keep, i))
                    t = r.timing
                    self.assertGreaterEqual(t.merged_requests, 1)
                    self.assertLessEqual(t.merged_requests, 8)  # --max_batch_size
                    self.assertGreaterEqual(t.queue_us, t.batch_wait_us)  # part of the queue time
                    if keep and i < 16:
                        self.assertLess(r.verification.rel_l2_error, TOLERANCE["fp64"])
                        r.resident.release()
                self.assertEqual(results[16].timing.merged_requests, 1)  # never with other shapes
                if keep:
                    self.assertEqual(len({r.resident.handle for r in results[:16]}), 16)
                merged += [r.timing.merged_requests for r in results[:16]]
            if max(merged) > 1:
                break
        self.assertGreater(max(merged), 1, f"no request was merged in {attempt + 1} rounds")

    def test_concurrent_fp8_requests_are_merged_bit_for_bit(self):
        # e4m3 operands (the caller's a_scale folded into alpha, so it is part of what must
        # match) merged with each other only, each result what the request gets alone.
        rng = np.random.default_rng(17)
        pairs = []
        for _ in range(8):
            a = Float8E4M3(rng.integers(0, 0x7E, size=(24, 40), dtype=np.uint8))
            b = Float8E4M3(rng.integers(0, 0x7E, size=(40, 16), dtype=np.uint8))
            pairs.append((self.client.upload(a), self.client.upload(b)))
        alone = [self.client.multiply(a, b, out_dtype="fp32", a_scale=0.5).c for a, b in pairs]
        merged = []
        for attempt in range(3):  # merging needs them to meet within 20 ms: retried, not assumed
            blocking = self.blocker.start(self.server, self.pool, seconds=1.5)
            futures = self.concurrently([
                lambda p=p: self.client.multiply(p[0], p[1], out_dtype="fp32", a_scale=0.5)
                for p in pairs])
            results = [f.result() for f in futures]
            Blocker.finish(blocking)
            for i, r in enumerate(results):
                np.testing.assert_array_equal(r.c, alone[i], f"attempt {attempt} request {i}")
            merged += [r.timing.merged_requests for r in results]
            if max(merged) > 1:
                break
        self.assertGreater(max(merged), 1, f"no fp8 request was merged in {attempt + 1} rounds")

    def test_merged_fp8_requests_each_state_their_own_scales(self):
        # fp32 data quantized by the server: requests merged into one launch are each quantized
        # with their own operands' scales, and each reply states its own (amax / 448).
        pairs = [(rand(24, 40) * (i + 1), rand(40, 16) * 0.5 ** i) for i in range(8)]
        merged = []
        for attempt in range(3):  # merging needs them to meet within 20 ms: retried, not assumed
            blocking = self.blocker.start(self.server, self.pool, seconds=1.5)
            futures = self.concurrently([
                lambda p=p: self.client.multiply(p[0], p[1], compute="fp8") for p in pairs])
            results = [f.result() for f in futures]
            Blocker.finish(blocking)
            for (a, b), r in zip(pairs, results):
                np.testing.assert_allclose(r.fp8_scales, (np.abs(a).max() / 448,
                                                          np.abs(b).max() / 448), rtol=1e-6)
            merged += [r.timing.merged_requests for r in results]
            if max(merged) > 1:
                break
        self.assertGreater(max(merged), 1, f"no fp8 request was merged in {attempt + 1} rounds")

    def test_a_lone_request_runs_at_once(self):
        # A server that holds a request up to 1 s (the longest it allows) for company: a lone
        # request that waited for it would report a wait of at least that. The median of three
        # is judged, so that one pause of the loaded machine does not decide.
        with ServerProcess("--max_batch_size=8", "--max_batch_delay_us=1000000",
                           "--cpu_concurrency=1", backend="cpu") as server:
            with Client(server.target, timeout=120) as client:
                a, b = rand(64, 48, np.float64), rand(48, 32, np.float64)
                waits = []
                for _ in range(3):
                    r = client.multiply(a, b)
                    self.assertLess(rel_l2(r.c, a @ b), TOLERANCE["fp64"])
                    self.assertEqual(r.timing.merged_requests, 1)
                    waits.append(r.timing.batch_wait_us)
                self.assertLess(sorted(waits)[1], 1e6, waits)

    def test_server_info_reports_batching(self):
        limits = self.client.server_info().limits
        self.assertEqual((limits.max_batch_size, limits.max_batch_delay_us), (8, 20000))


class OrderedArrivals:
    """A server with a long gathering window (--max_batch_delay_us 1 s) whose requests arrive in a
    known order: the blocker holds the slot; two requests of a kind are sent and wait for it (two
    launches of that kind in flight, so the next request gathers a batch: `fill_in_flight`); then
    the requests of the batch are sent one at a time, each once the server is serving the one
    before (`send`). Eight of them fill the batch, which then launches at once."""

    SERVER_ARGS = ("--max_batch_size=8", "--max_batch_delay_us=1000000", "--cpu_concurrency=1")

    @classmethod
    def start(cls, *extra_args):
        cls.server = ServerProcess(*cls.SERVER_ARGS, *extra_args, backend="cpu")
        cls.client = cls.connect()
        cls.blocker = Blocker(cls.client)
        cls.pool = concurrent.futures.ThreadPoolExecutor(max_workers=16)

    @classmethod
    def connect(cls, token=None):
        client = Client(cls.server.target, timeout=120, token=token)
        client.unary_limit_bytes()  # asks GetServerInfo now, not amid the ordered requests
        return client

    @classmethod
    def tearDownClass(cls):
        cls.pool.shutdown()
        cls.client.close()
        code = cls.server.stop()
        assert code == 0, f"server exit code {code}\n{cls.server.output()}"

    def send(self, call):
        """Starts call() and waits until the server is serving it; its future."""
        before = metric(self.server, "matserve_requests_in_flight")
        future = self.pool.submit(call)
        wait_for(self.server, "matserve_requests_in_flight", before + 1)
        return future

    def fill_in_flight(self, calls):
        """Sends two calls of a kind and waits until both wait for the slot; their futures."""
        queued = metric(self.server, "matserve_queue_depth")
        futures = [self.pool.submit(call) for call in calls]
        wait_for(self.server, "matserve_queue_depth", queued + len(calls))
        return futures


class MergedLaunchTest(OrderedArrivals, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.start()

    def test_merged_launches_honour_every_option(self):
        def make(m=9, k=6, n=4, dtype=np.float64, **options):
            """Options for client.multiply with fresh operands, and the float64 result."""
            a, b = rand(m, k, dtype), rand(k, n, dtype)
            c = rand(m, n, np.float64)
            sa = a.T.copy() if options.get("transpose_a") else a
            sb = b.T.copy() if options.get("transpose_b") else b
            if options.pop("bf16", False):
                sa, sb = Bfloat16.from_float(sa), Bfloat16.from_float(sb)
                a, b = as_f64(Bfloat16.from_float(a)), as_f64(Bfloat16.from_float(b))
            want = options.get("alpha", 1.0) * as_f64(a) @ as_f64(b)
            if "beta" in options:
                options["c"] = c
                want = want + options["beta"] * c
            return dict(a=sa, b=sb, **options), want
        cases = {
            "alpha, beta, C": (dict(alpha=0.5, beta=-2.0), "fp64"),
            "transposes": (dict(transpose_a=True, transpose_b=True), "fp64"),
            "column-major result": (dict(out_order="F"), "fp64"),
            "fp16": (dict(dtype=np.float16), "fp16"),
            "bf16 to fp32": (dict(dtype=np.float32, bf16=True, out_dtype="fp32"), "fp32"),
            "tf32": (dict(dtype=np.float32, compute="tf32"), "fp16"),
            "keep_result and verify": (dict(keep_result=True, verify=True), "fp64"),
        }
        for name, (options, tol) in cases.items():
            with self.subTest(name):
                # The order holds only while the blocker holds the slot: a round whose blocker
                # ended before the last request was in is run again with a longer one.
                for seconds in (1.5, 6.0, 24.0):
                    blocking = self.blocker.start(self.server, self.pool, seconds=seconds)
                    items = [make(**dict(options)) for _ in range(10)]
                    futures = self.fill_in_flight([lambda kw=kw: self.client.multiply(**kw)
                                                   for kw, _ in items[:2]])
                    futures += [self.send(lambda kw=kw: self.client.multiply(**kw))
                                for kw, _ in items[2:]]
                    held = not blocking.done()
                    results = [f.result() for f in futures]
                    Blocker.finish(blocking)
                    if held:
                        break
                    for r in results:
                        if r.resident is not None:
                            r.resident.release()
                self.assertTrue(held, "the blocker never held the slot until the batch was in")
                self.assertEqual([r.timing.merged_requests for r in results], [1, 1] + [8] * 8)
                for r, (kw, want) in zip(results, items):
                    got = r.resident.download() if kw.get("keep_result") else r.c
                    self.assertLess(rel_l2(np.asarray(got, np.float64), want), TOLERANCE[tol])
                    self.assertEqual(got.flags.f_contiguous and not got.flags.c_contiguous,
                                     kw.get("out_order") == "F")
                    if kw.get("verify"):
                        self.assertLess(r.verification.rel_l2_error, TOLERANCE[tol])
                    if r.resident is not None:
                        r.resident.release()
                if options.get("keep_result"):
                    self.assertEqual(len({r.resident.handle for r in results}), 10)

    def run_deadline_scenario(self, short_first):
        """Fillers, then (unless short_first) the request that gathers the batch, then the one
        with a 0.3 s deadline, then the rest of a full batch: the launch waits for the slot for
        seconds, so the short request's deadline passes while it is queued. Every other request
        must succeed with its own result; returns the batch's replies and how many admissions
        expired meanwhile."""
        pairs = []
        for _ in range(11):
            a, b = rand(32, 24, np.float64), rand(24, 16, np.float64)
            pairs.append((self.client.upload(a), self.client.upload(b), a @ b))

        def call(pair, timeout=None):
            return lambda: self.client.multiply(pair[0], pair[1], timeout=timeout)
        # The order holds only while the blocker holds the slot: a round whose blocker ended
        # before the last request was in is run again with a longer one.
        for seconds in (3.0, 12.0, 48.0):
            blocking = self.blocker.start(self.server, self.pool, seconds=seconds)
            fillers = self.fill_in_flight([call(p) for p in pairs[:2]])
            expired = metric(self.server, "matserve_admission_rejections_total", reason="expired")
            first = [] if short_first else [pairs[2]]
            rest = pairs[4:11] if short_first else pairs[4:10]  # 8 with the short one: batch full
            others = [self.send(call(p)) for p in first]
            short = self.send(call(pairs[3], timeout=0.3))
            others += [self.send(call(p)) for p in rest]
            held = not blocking.done()
            if held:
                with self.assertRaises(mc.DeadlineExceeded):
                    short.result()
            else:
                concurrent.futures.wait([short])
            ran = [f.result() for f in fillers + others]
            Blocker.finish(blocking)
            if held:
                break
        self.assertTrue(held, "the blocker never held the slot until the batch was in")
        served = pairs[:2] + first + rest
        self.assertEqual(len(ran), len(served))
        for r, (_, _, want) in zip(ran, served):
            self.assertLess(rel_l2(r.c, want), TOLERANCE["fp64"])
        for a, b, _ in pairs:
            a.release()
            b.release()
        return ran[2:], metric(self.server, "matserve_admission_rejections_total",
                               reason="expired") - expired

    def test_expired_request_at_the_front_of_a_merged_launch_fails_alone(self):
        # The short request gathers the batch, so the launch is admitted under its deadline,
        # which passes while it waits: the others must still be computed.
        batch, expired = self.run_deadline_scenario(short_first=True)
        self.assertEqual(len(batch), 7)
        self.assertGreaterEqual(expired, 1)
        for r in batch:
            self.assertLessEqual(r.timing.merged_requests, 7)  # the failed one is in no launch

    def test_expired_request_inside_a_merged_launch_fails_alone(self):
        batch, _ = self.run_deadline_scenario(short_first=False)
        self.assertEqual(len(batch), 7)
        for r in batch:
            self.assertEqual(r.timing.merged_requests, 8)  # computed with the expired one


class MergedOwnersTest(OrderedArrivals, unittest.TestCase):
    """Authentication on: a kept result belongs to the caller who asked for it, also when its
    request was merged with another caller's."""

    ALICE = "alice-token-0123456789"
    BOB = "bob-token-0123456789ab"

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        path = os.path.join(cls.dir.name, "tokens")
        with open(path, "w") as f:
            f.write(f"{cls.ALICE} alice\n{cls.BOB} bob\n")
        cls.server = ServerProcess(*cls.SERVER_ARGS, f"--auth_tokens_file={path}",
                                   backend="cpu")
        cls.client = cls.connect(cls.ALICE)
        cls.bob = cls.connect(cls.BOB)
        cls.blocker = Blocker(cls.client)
        cls.pool = concurrent.futures.ThreadPoolExecutor(max_workers=16)

    @classmethod
    def tearDownClass(cls):
        cls.bob.close()
        super().tearDownClass()
        cls.dir.cleanup()

    # Requests of different callers are never merged: each kept result belongs to its caller
    # (Bob can read his, Alice gets NOT_FOUND for it).
    def test_kept_results_of_a_merged_launch_belong_to_their_callers(self):
        def make():
            return rand(8, 8, np.float64), rand(8, 8, np.float64)
        blocking = self.blocker.start(self.server, self.pool, seconds=3.0)
        fillers = self.fill_in_flight([lambda: self.client.multiply(*make(), keep_result=True)
                                       for _ in range(2)])
        mine = [make() for _ in range(4)]
        theirs = [make() for _ in range(4)]
        futures = [self.send(lambda ab=ab: self.client.multiply(*ab, keep_result=True))
                   for ab in mine]
        futures += [self.send(lambda ab=ab: self.bob.multiply(*ab, keep_result=True))
                    for ab in theirs]
        results = [f.result() for f in futures]
        Blocker.finish(blocking)
        for f in fillers:
            f.result().resident.release()
        for i, (r, (a, b)) in enumerate(zip(results, mine + theirs)):
            owner, other = (self.client, self.bob) if i < 4 else (self.bob, self.client)
            with self.subTest(request=i, merged=r.timing.merged_requests):
                stranger = mc.ResidentMatrix(other, r.resident.info)
                with self.assertRaises(mc.NotFound):
                    stranger.download()
                mc.ResidentMatrix(owner, r.resident.info).download()
                self.assertLess(rel_l2(r.resident.download(), a @ b), TOLERANCE["fp64"])


if __name__ == "__main__":
    unittest.main()
