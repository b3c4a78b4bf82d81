"""Unit tests (no server) for batched operands: prepare_batch/decode_batch byte layouts (stacked
batch-major, each matrix row- or column-major, no copy when already laid out), and
Client.multiply_batched against a fake MultiplyBatched stub: the request it builds (batch, stacks,
broadcast, handle lists, options), results decoded per product, keep_result, and stacks and results
too large for one message moved through temporary resident matrices."""
import unittest

import grpc
import numpy as np

import matserve_client as mc
from matserve_client import Bfloat16, Client, DataLoss
from matserve_client._stubs import pb
from matserve_client.batched import whole_stack
from matserve_client.encoding import (assemble_batch, batch_memory_order, decode_batch, prepare,
                                      prepare_batch)
from fakes import FakeRpcError

RNG = np.random.default_rng(23)
KINDS = {pb.FP64: "<f8", pb.FP32: "<f4", pb.FP16: "<f2", pb.BF16: "<u2"}


def rand(*shape, dtype=np.float32):
    """Non-zero values in [-1, -0.01] U [0.01, 1]: a dropped or swapped matrix shows."""
    mag = RNG.uniform(0.01, 1.0, size=shape)
    return (mag * np.where(RNG.random(shape) < 0.5, -1.0, 1.0)).astype(dtype)


class PrepareBatchTest(unittest.TestCase):
    def test_c_stack_travels_batch_major_row_major_without_a_copy(self):
        x = rand(4, 3, 5)
        p = prepare_batch(x, what="a")
        self.assertEqual((p.batch, p.rows, p.cols, p.dtype, p.order), (4, 3, 5, "fp32", "C"))
        self.assertTrue(np.shares_memory(p.flat, x))
        m = p.header(with_data=True)
        self.assertEqual((m.batch, m.rows, m.cols, m.layout), (4, 3, 5, pb.ROW_MAJOR))
        self.assertEqual(m.data, b"".join(x[i].tobytes(order="C") for i in range(4)))

    def test_stack_of_fortran_matrices_travels_column_major_without_a_copy(self):
        x = rand(3, 6, 2)
        f = np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)  # each f[i] F-ordered
        self.assertTrue(all(f[i].flags.f_contiguous for i in range(3)))
        self.assertEqual(batch_memory_order(f), "F")
        p = prepare_batch(f)
        self.assertEqual((p.batch, p.rows, p.cols, p.order), (3, 6, 2, "F"))
        self.assertTrue(np.shares_memory(p.flat, f))
        m = p.header(with_data=True)
        self.assertEqual(m.layout, pb.COL_MAJOR)
        self.assertEqual(m.data, b"".join(x[i].tobytes(order="F") for i in range(3)))

    def test_forced_order_dtype_and_other_strides(self):
        x = rand(2, 4, 3, dtype=np.float64)
        p = prepare_batch(x, dtype="fp16", order="F")
        self.assertEqual((p.dtype, p.order, p.nbytes), ("fp16", "F", 2 * 4 * 3 * 2))
        want = b"".join(x[i].astype(np.float16).tobytes(order="F") for i in range(2))
        self.assertEqual(p.header(with_data=True).data, want)
        # A NumPy Fortran-ordered 3-D array has the batch as its fastest axis: not batch-major,
        # so it is laid out again (row-major by default).
        nf = np.asfortranarray(x)
        self.assertEqual(batch_memory_order(nf), "C")
        p = prepare_batch(nf)
        self.assertEqual(p.header(with_data=True).data, x.tobytes(order="C"))
        strided = rand(6, 5, 8)[::2, 1:, ::3]
        p = prepare_batch(strided)
        self.assertEqual((p.batch, p.rows, p.cols, p.order), (3, 4, 3, "C"))
        self.assertEqual(p.header(with_data=True).data, np.ascontiguousarray(strided).tobytes())
        big_endian = np.arange(12, dtype=">f4").reshape(2, 3, 2)
        self.assertEqual(prepare_batch(big_endian).header(with_data=True).data,
                         big_endian.astype("<f4").tobytes())

    def test_bf16_stacks_from_floats_and_bits(self):
        x = np.array([[[1.0, 1 + 2**-8]], [[3.0, -0.5]]], np.float32)  # (2, 1, 2)
        p = prepare_batch(x, dtype="bf16")
        self.assertEqual((p.dtype, p.batch), ("bf16", 2))
        self.assertEqual(np.frombuffer(p.header(with_data=True).data, "<u2").tolist(),
                         [0x3F80, 0x3F80, 0x4040, 0xBF00])
        bits = Bfloat16(np.array([[[0x3F80]], [[0x4000]]], np.uint16))
        m = prepare_batch(bits).header(with_data=True)
        self.assertEqual((m.dtype, m.batch, m.rows, m.cols), (pb.BF16, 2, 1, 1))

    def test_a_matrix_is_a_batch_of_one_and_headers_stay_as_before(self):
        x = rand(3, 4)
        p = prepare_batch(x)
        self.assertEqual(p.batch, 1)
        self.assertEqual(p.header(with_data=True), prepare(x).header(with_data=True))
        self.assertEqual(p.header().batch, 0)  # unset: plain Multiply refuses batch > 1
        one = prepare_batch(x[None])
        self.assertEqual((one.batch, one.header().batch), (1, 0))
        bf = prepare_batch(Bfloat16.from_float(x))
        self.assertEqual((bf.dtype, bf.batch), ("bf16", 1))

    def test_matrix_i_of_a_stack_is_a_view(self):
        x = rand(3, 2, 5)
        f = np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)
        for arr, order in ((x, "C"), (f, "F")):
            p = prepare_batch(arr)
            for i in range(3):
                one = p.matrix(i)
                self.assertEqual((one.batch, one.rows, one.cols, one.order), (1, 2, 5, order))
                self.assertTrue(np.shares_memory(one.flat, arr))
                self.assertEqual(one.header(with_data=True).data, x[i].tobytes(order=order))
            with self.assertRaises(IndexError):
                p.matrix(3)

    def test_bad_operands_are_refused(self):
        with self.assertRaisesRegex(ValueError, "a: must be a 3-D"):
            prepare_batch(np.ones(4, np.float32), what="a")
        with self.assertRaisesRegex(ValueError, "b: must be a 3-D"):
            prepare_batch(np.ones((2, 2, 2, 2), np.float32), what="b")
        with self.assertRaisesRegex(ValueError, "empty batch"):
            prepare_batch(np.ones((0, 2, 2), np.float32), what="a")
        with self.assertRaises(TypeError):
            prepare_batch(np.ones((2, 2, 2), np.int32))
        with self.assertRaisesRegex(TypeError, "Bfloat16"):
            prepare_batch(np.zeros((2, 2, 2), np.uint16), dtype="bf16")


class DecodeBatchTest(unittest.TestCase):
    def test_every_dtype_and_layout_round_trips_writable(self):
        x = rand(4, 3, 5, dtype=np.float64)
        for dtype in ("fp64", "fp32", "fp16"):
            for order in ("C", "F"):
                m = prepare_batch(x, dtype=dtype, order=order).header(with_data=True)
                out = decode_batch(m)
                self.assertEqual(out.shape, (4, 3, 5))
                self.assertTrue(out.flags.writeable)
                self.assertEqual(out[0].flags.f_contiguous and not out[0].flags.c_contiguous,
                                 order == "F")
                np.testing.assert_array_equal(out, x.astype(out.dtype))

    def test_bf16_comes_back_as_float32(self):
        x = np.array([[[1.5, -2.0]], [[0.25, 8.0]]], np.float32)
        for order in ("C", "F"):
            out = decode_batch(prepare_batch(x, dtype="bf16", order=order).header(with_data=True))
            self.assertEqual(out.dtype, np.float32)
            np.testing.assert_array_equal(out, x)

    def test_bf16_bits_come_back_unwidened(self):
        x = np.array([[[1.5, -2.0, 3.0], [4.0, 0.5, -8.0]],
                      [[0.25, 8.0, -0.5], [1.0, -1.0, 2.0]]], np.float32)
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # exact in bf16: the top half
        for order in ("C", "F"):
            out = decode_batch(prepare_batch(x, dtype="bf16", order=order).header(with_data=True),
                               bf16_bits=True)
            self.assertIsInstance(out, Bfloat16)
            self.assertEqual(out.bits.dtype, np.uint16)
            np.testing.assert_array_equal(out.bits, bits)
            self.assertEqual(out.bits[0].flags.f_contiguous and not out.bits[0].flags.c_contiguous,
                             order == "F")
        # Other dtypes ignore the option.
        y = rand(2, 2, 3)
        np.testing.assert_array_equal(
            decode_batch(prepare_batch(y).header(with_data=True), bf16_bits=True), y)

    def test_unset_batch_is_one_matrix_and_byte_mismatch_is_data_loss(self):
        x = rand(2, 3)
        out = decode_batch(prepare(x).header(with_data=True))
        np.testing.assert_array_equal(out, x[None])
        m = pb.Matrix(rows=2, cols=2, batch=3, dtype=pb.FP32, data=b"\0" * 32)
        with self.assertRaises(DataLoss) as ctx:
            decode_batch(m)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.DATA_LOSS)
        self.assertIn("32 bytes for 3 matrices", ctx.exception.message)
        with self.assertRaisesRegex(DataLoss, "unknown dtype"):
            decode_batch(pb.Matrix(rows=1, cols=1, batch=1, dtype=99, data=b"\0"))
        fp8 = decode_batch(pb.Matrix(rows=1, cols=2, batch=2, dtype=pb.FP8_E4M3,
                                     data=bytes([0x38, 0xB8, 0x7E, 0x01])))  # 1 -1 448 2^-9
        np.testing.assert_array_equal(fp8, np.array([[[1, -1]], [[448, 2.0 ** -9]]], np.float32))
        np.testing.assert_array_equal(
            assemble_batch(2, 1, 2, "fp32", "C", np.arange(4, dtype="<f4").view(np.uint8)),
            [[[0, 1]], [[2, 3]]])


class FakeStub:
    """MultiplyBatched, Multiply and the resident RPCs, in-process, computed with NumPy."""

    def __init__(self, max_message_bytes=1 << 30):
        self.max_message_bytes = max_message_bytes
        self.residents = {}
        self.calls = []
        self.next = 0

    def GetServerInfo(self, request, timeout=None):
        return pb.GetServerInfoReply(limits=pb.ServerLimits(
            max_message_bytes=self.max_message_bytes))

    def _store(self, m):
        self.next += 1
        handle = f"{self.next:032x}"
        self.residents[handle] = pb.Matrix(rows=m.rows, cols=m.cols, dtype=m.dtype,
                                           layout=m.layout, data=m.data)
        return pb.ResidentInfo(handle=handle, rows=m.rows, cols=m.cols, dtype=m.dtype,
                               layout=m.layout, bytes=len(m.data), device="cpu")

    def Upload(self, request, timeout=None):
        self.calls.append(("Upload", request))
        return pb.UploadReply(resident=self._store(request.matrix))

    def Download(self, request, timeout=None):
        self.calls.append(("Download", request))
        return pb.DownloadReply(matrix=self.residents[request.handle])

    def DownloadStream(self, request, timeout=None):
        """As the server: the header first, then the bytes in chunks of chunk_bytes."""
        self.calls.append(("DownloadStream", request))
        m = self.residents[request.handle]
        yield pb.DownloadChunk(header=pb.Matrix(rows=m.rows, cols=m.cols, dtype=m.dtype,
                                                layout=m.layout))
        for at in range(0, len(m.data), request.chunk_bytes):
            yield pb.DownloadChunk(data=m.data[at:at + request.chunk_bytes])

    def Release(self, request, timeout=None):
        """As the server: `handle` and every one of `handles` released; the first missing one is
        the call's error."""
        self.calls.append(("Release", request))
        freed, missing = 0, None
        for h in ([request.handle] if request.handle else []) + list(request.handles):
            m = self.residents.pop(h, None)
            if m is None:
                missing = missing or h
            else:
                freed += len(m.data)
        if missing is not None:
            raise FakeRpcError(grpc.StatusCode.NOT_FOUND, f"handle {missing}: no resident matrix")
        return pb.ReleaseReply(bytes_freed=freed)

    def _stack(self, m, handles, stacked="", batch=1):
        """An operand as a list of float64 matrices (one per matrix sent or named; a stacked
        resident matrix split batch-major)."""
        if stacked:
            whole = decode_batch(self.residents[stacked])[0].astype(np.float64)
            axis = 1 if self.residents[stacked].layout == pb.COL_MAJOR else 0
            return np.split(whole, batch, axis=axis)
        if handles:
            return [decode_batch(self.residents[h])[0].astype(np.float64) for h in handles]
        return list(decode_batch(m).astype(np.float64))

    def MultiplyBatched(self, request, timeout=None):
        self.calls.append(("MultiplyBatched", request))
        a = self._stack(request.a, request.a_handles, request.a_stacked, request.batch)
        b = self._stack(request.b, request.b_handles, request.b_stacked, request.batch)
        c = (self._stack(request.c, request.c_handles, request.c_stacked, request.batch)
             if (request.HasField("c") or request.c_handles or request.c_stacked) else [])
        for name, ops in (("a", a), ("b", b), ("c", c)):
            if ops and len(ops) not in (1, request.batch):
                raise FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"{name}.batch: {len(ops)} matrices")
        dtype = request.output_dtype or (
            request.a.dtype if request.HasField("a") else
            self.residents[request.a_stacked or request.a_handles[0]].dtype)
        results = []
        for i in range(request.batch):
            ai, bi = a[i % len(a)], b[i % len(b)]
            value = request.alpha * ((ai.T if request.transpose_a else ai) @
                                     (bi.T if request.transpose_b else bi))
            if c and request.beta:
                value = value + request.beta * c[i % len(c)]
            results.append(value)
        stack = np.stack(results)
        order = "F" if request.output_layout == pb.COL_MAJOR else "C"
        p = prepare_batch(stack.astype(KINDS[dtype]) if dtype != pb.BF16 else stack,
                          dtype="bf16" if dtype == pb.BF16 else None, order=order)
        reply = pb.MultiplyBatchedReply(variant="fake_batched", device="cpu", precision="fp32",
                                        gflops=1.5)
        reply.timing.kernel_us = 7.0
        reply.timing.merged_requests = 1
        reply.c.CopyFrom(p.header(with_data=not (request.keep_result or request.keep_stacked)))
        reply.c.batch = request.batch
        if request.keep_stacked:  # one matrix holding them all
            reply.results.append(self._store(whole_stack(p).header(with_data=True)))
        elif request.keep_result:
            for i in range(request.batch):
                reply.results.append(self._store(p.matrix(i).header(with_data=True)))
        if request.verify:
            reply.verification.max_abs_error = 1e-7
        return reply

    def sent(self, method):
        return [r for m, r in self.calls if m == method]


def fake_client(**stub_args):
    client = Client("127.0.0.1:1", timeout=5)
    client._stub = FakeStub(**stub_args)
    return client


def reference(a, b, c=None, alpha=1.0, beta=0.0, ta=False, tb=False):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    a = a.swapaxes(-1, -2) if ta else a
    b = b.swapaxes(-1, -2) if tb else b
    out = alpha * (a @ b)
    return out + beta * np.asarray(c, np.float64) if c is not None else out


class MultiplyBatchedRequestTest(unittest.TestCase):
    def setUp(self):
        self.client = fake_client()
        self.stub = self.client._stub

    def tearDown(self):
        self.client.close()

    def test_stacks_broadcast_options_and_result(self):
        a, b, c = rand(5, 7, 3), rand(3, 4), rand(5, 7, 4)
        r = self.client.multiply_batched(a, b, c=c, alpha=0.5, beta=-2.0, verify=True)
        req = self.stub.sent("MultiplyBatched")[-1]
        self.assertEqual((req.batch, req.a.batch, req.b.batch, req.c.batch), (5, 5, 0, 5))
        self.assertEqual((req.a.rows, req.a.cols, req.b.rows, req.b.cols), (7, 3, 3, 4))
        self.assertEqual((req.alpha, req.beta, req.verify, req.variant), (0.5, -2.0, True, "auto"))
        self.assertFalse(req.keep_result or req.a_handles or req.b_handles)
        self.assertIsInstance(r, mc.MultiplyBatchedResult)
        self.assertEqual((r.c.shape, r.batch, r.variant, r.device), ((5, 7, 4), 5, "fake_batched",
                                                                     "cpu"))
        self.assertEqual((r.timing.kernel_us, r.timing.merged_requests, r.gflops),
                         (7.0, 1, 1.5))
        self.assertEqual(r.verification.max_abs_error, 1e-7)
        self.assertEqual(r.residents, [])
        np.testing.assert_allclose(r.c, reference(a, b, c, 0.5, -2.0), rtol=1e-5, atol=1e-6)

    def test_transposes_compute_dtypes_and_column_major_results(self):
        a, b = rand(3, 4, 6), rand(3, 5, 4)  # stored A_i 4x6 (k x m), B_i 5x4 (n x k)
        r = self.client.multiply_batched(a, b, transpose_a=True, transpose_b=True,
                                         compute="tf32", out_order="F", out_dtype="fp64",
                                         dtype="fp32")
        req = self.stub.sent("MultiplyBatched")[-1]
        self.assertEqual((req.transpose_a, req.transpose_b, req.compute, req.output_dtype,
                          req.output_layout), (True, True, pb.COMPUTE_TF32, pb.FP64,
                                               pb.COL_MAJOR))
        self.assertEqual(r.c.shape, (3, 6, 5))
        self.assertEqual(r.c.dtype, np.float64)
        self.assertTrue(all(r.c[i].flags.f_contiguous for i in range(3)))
        np.testing.assert_allclose(r.c, reference(a, b, ta=True, tb=True), rtol=1e-5)
        with self.assertRaisesRegex(ValueError, "compute must be one of"):
            self.client.multiply_batched(a, b, compute="fp4")
        # precision= is the deprecated name of compute=: it still works, and warns.
        with self.assertWarnsRegex(DeprecationWarning, "use compute=") as warned:
            self.client.multiply_batched(a, b, transpose_a=True, transpose_b=True,
                                         precision="fp16")
        self.assertEqual(warned.filename, __file__)  # the warning points at the caller
        self.assertEqual(self.stub.sent("MultiplyBatched")[-1].compute, pb.COMPUTE_FP16)
        with self.assertRaisesRegex(TypeError, "disagree"):
            self.client.multiply_batched(a, b, compute="fp32", precision="tf32")
        with self.assertRaisesRegex(ValueError, "order"):
            self.client.multiply_batched(a, b, out_order="X")

    def test_c_converted_to_output_dtype_and_its_order_followed(self):
        a, b = rand(2, 3, 4, dtype=np.float64), rand(2, 4, 5, dtype=np.float64)
        c = np.ascontiguousarray(rand(2, 5, 3).transpose(0, 2, 1))  # float32, C order
        cf = np.ascontiguousarray(c.transpose(0, 2, 1)).transpose(0, 2, 1)
        r = self.client.multiply_batched(a, b, c=cf, beta=1.0)
        req = self.stub.sent("MultiplyBatched")[-1]
        self.assertEqual((req.c.dtype, req.c.layout, req.output_layout),
                         (pb.FP64, pb.COL_MAJOR, pb.COL_MAJOR))
        self.assertTrue(r.c[0].flags.f_contiguous)
        np.testing.assert_allclose(r.c, reference(a, b, c, beta=1.0), rtol=1e-6)
        self.client.multiply_batched(a, b, c=c[0], beta=1.0)  # one C for every product
        req = self.stub.sent("MultiplyBatched")[-1]
        self.assertEqual((req.c.batch, req.c.rows, req.c.cols), (0, 3, 5))

    def test_batch_is_the_largest_count_and_mismatches_reach_the_server(self):
        self.client.multiply_batched(rand(4, 2), rand(6, 2, 3))
        self.assertEqual(self.stub.sent("MultiplyBatched")[-1].batch, 6)
        with self.assertRaisesRegex(mc.InvalidArgument, "a.batch: 3"):
            self.client.multiply_batched(rand(3, 2, 2), rand(5, 2, 2))
        self.assertEqual(self.stub.sent("MultiplyBatched")[-1].batch, 5)

    def test_handle_lists_in_and_keep_result_out(self):
        a = [self.client.upload(rand(4, 3)) for _ in range(3)]
        b = self.client.upload(rand(3, 2))
        want = reference(np.stack([h.download() for h in a]), b.download())
        r = self.client.multiply_batched(a, b, keep_result=True)
        req = self.stub.sent("MultiplyBatched")[-1]
        self.assertEqual(list(req.a_handles), [h.handle for h in a])
        self.assertEqual(list(req.b_handles), [b.handle])
        self.assertFalse(req.HasField("a") or req.HasField("b"))
        self.assertTrue(req.keep_result)
        self.assertIsNone(r.c)
        self.assertEqual(r.batch, 3)
        self.assertTrue(all(isinstance(h, mc.ResidentMatrix) for h in r.residents))
        for i, h in enumerate(r.residents):
            self.assertEqual(h.shape, (4, 2))
            np.testing.assert_allclose(h.download(), want[i], rtol=1e-5)
        # [b] and b are the same broadcast operand.
        r2 = self.client.multiply_batched(a, [b])
        np.testing.assert_allclose(r2.c, want, rtol=1e-5)

    def test_bad_operands_are_refused_before_anything_is_sent(self):
        h = self.client.upload(rand(2, 2))
        h.release()
        shm = mc.ShmMatrix(region=None, offset=0, rows=2, cols=2, dtype="fp32", order="C")
        for args, exc, fragment in [
            (([], rand(2, 2, 2)), ValueError, "a: an empty list"),
            (([rand(2, 2)], rand(2, 2, 2)), TypeError, r"a\[0\]: a list operand"),
            ((rand(2, 2, 2), [h]), ValueError, r"b\[0\]: resident matrix .* released"),
            ((rand(2, 2, 2), rand(0, 2, 2)), ValueError, "b: an empty batch"),
            ((rand(2), rand(2, 2, 2)), ValueError, "a: must be a 3-D"),
            ((shm, rand(2, 2, 2)), TypeError, "a: shared-memory matrices"),
        ]:
            with self.subTest(fragment=fragment):
                with self.assertRaisesRegex(exc, fragment):
                    self.client.multiply_batched(*args)
        self.assertEqual(self.stub.sent("MultiplyBatched"), [])


class AutoStreamTest(unittest.TestCase):
    """A small server message limit: stacks and results above it go through resident matrices."""

    def setUp(self):
        # The unary limit is the message limit less 64 KiB headroom: 80 KiB leaves 16 KiB.
        self.client = fake_client(max_message_bytes=80 << 10)
        self.stub = self.client._stub

    def tearDown(self):
        self.client.close()

    def test_large_stack_is_uploaded_matrix_by_matrix_and_released(self):
        a, b = rand(6, 32, 32), rand(32, 4)  # a: 24 KiB, over the 16 KiB left
        r = self.client.multiply_batched(a, b)
        req = self.stub.sent("MultiplyBatched")[-1]
        self.assertEqual(len(req.a_handles), 6)
        self.assertFalse(req.HasField("a"))
        self.assertTrue(req.HasField("b"))
        self.assertEqual(len(self.stub.sent("Upload")), 6)
        np.testing.assert_allclose(r.c, reference(a, b), rtol=1e-5)
        self.assertEqual(self.stub.residents, {})  # temporaries released

    def test_large_results_are_kept_stacked_downloaded_once_and_released(self):
        a, b = rand(5, 40, 2), rand(5, 2, 30)  # results 5 x 4.7 KiB = 23 KiB
        for order in ("C", "F"):
            r = self.client.multiply_batched(a, b, out_order=order)
            req = self.stub.sent("MultiplyBatched")[-1]
            self.assertTrue(req.keep_stacked)
            self.assertFalse(req.keep_result)
            streamed = self.stub.sent("DownloadStream")[-1]  # one download for the batch
            self.assertLessEqual(streamed.chunk_bytes, 40 << 10)  # half the server's limit
            self.assertEqual(r.residents, [])
            self.assertEqual(r.c.shape, (5, 40, 30))
            self.assertEqual(r.c[0].flags.f_contiguous, order == "F")
            np.testing.assert_allclose(r.c, reference(a, b), rtol=1e-5)
            self.assertEqual(self.stub.residents, {})

    def test_without_auto_stream_everything_goes_inline(self):
        self.client.auto_stream = False
        a, b = rand(6, 32, 32), rand(32, 4)
        self.client.multiply_batched(a, b)
        req = self.stub.sent("MultiplyBatched")[-1]
        self.assertEqual((req.a.batch, len(req.a_handles), req.keep_result), (6, 0, False))


class TimingTest(unittest.TestCase):
    def test_batching_fields_read_from_the_reply(self):
        t = mc.Timing.from_proto(pb.Timing(queue_us=30.0, batch_wait_us=25.0,
                                           merged_requests=4))
        self.assertEqual((t.queue_us, t.batch_wait_us, t.merged_requests), (30.0, 25.0, 4))
        self.assertEqual(mc.Timing.from_proto(pb.Timing()).merged_requests, 0)
        lim = mc.ServerInfo.from_proto(pb.GetServerInfoReply(limits=pb.ServerLimits(
            max_batch_products=9, max_batch_size=8, max_batch_delay_us=500))).limits
        self.assertEqual((lim.max_batch_products, lim.max_batch_size, lim.max_batch_delay_us),
                         (9, 8, 500))
        k = mc.KernelInfo.from_proto(pb.KernelInfo(name="x", operation=pb.GEMM, batched=True))
        self.assertTrue(k.batched)


if __name__ == "__main__":
    unittest.main()
