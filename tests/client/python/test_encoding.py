"""Unit tests (no server) for matserve_client.encoding and transfer: layouts without reordering,
dtype conversion, byte-exact headers, decoding, and assembling a streamed download."""
import unittest

import grpc
import numpy as np

from matserve_client import Bfloat16, DataLoss
from matserve_client._stubs import pb
from matserve_client.encoding import decode, prepare
from matserve_client.transfer import _assemble_stream

RNG = np.random.default_rng(5)


class PrepareTest(unittest.TestCase):
    def test_c_and_fortran_arrays_travel_as_they_lie_in_memory(self):
        a = RNG.standard_normal((3, 5)).astype(np.float32)
        p = prepare(a)
        self.assertEqual((p.rows, p.cols, p.dtype, p.order), (3, 5, "fp32", "C"))
        self.assertTrue(np.shares_memory(p.flat, a))
        self.assertEqual(p.header(with_data=True).data, a.tobytes(order="C"))
        self.assertEqual(p.header().layout, pb.ROW_MAJOR)
        f = np.asfortranarray(a)
        p = prepare(f)
        self.assertEqual((p.rows, p.cols, p.order), (3, 5, "F"))
        self.assertTrue(np.shares_memory(p.flat, f))
        m = p.header(with_data=True)
        self.assertEqual((m.layout, m.data), (pb.COL_MAJOR, a.tobytes(order="F")))

    def test_strided_views_are_made_contiguous(self):
        big = RNG.standard_normal((8, 10))
        view = big[::2, 1::3]
        p = prepare(view)
        self.assertEqual((p.rows, p.cols, p.order, p.dtype), (4, 3, "C", "fp64"))
        self.assertEqual(p.header(with_data=True).data, np.ascontiguousarray(view).tobytes())

    def test_forced_order_and_dtype_conversion(self):
        a = RNG.standard_normal((4, 6))
        p = prepare(a, dtype="fp16", order="F")
        self.assertEqual((p.dtype, p.order, p.nbytes), ("fp16", "F", 48))
        np.testing.assert_array_equal(
            np.frombuffer(p.header(with_data=True).data, "<f2").reshape((4, 6), order="F"),
            a.astype(np.float16))

    def test_big_endian_input_is_sent_little_endian(self):
        a = np.arange(6, dtype=">f4").reshape(2, 3)
        p = prepare(a)
        self.assertEqual(p.header(with_data=True).data, a.astype("<f4").tobytes())

    def test_bf16_from_floats_wrapper_and_ambiguous_uint16(self):
        a = np.array([[1.0, 1 + 2**-8], [3.0, -0.5]], np.float32)
        p = prepare(a, dtype="bf16")
        self.assertEqual(p.dtype, "bf16")
        self.assertEqual(np.frombuffer(p.header(with_data=True).data, "<u2").tolist(),
                         [0x3F80, 0x3F80, 0x4040, 0xBF00])
        bits = Bfloat16(np.array([[0x3F80, 0x4000]], np.uint16))
        self.assertEqual(prepare(bits).header().dtype, pb.BF16)
        with self.assertRaisesRegex(TypeError, "Bfloat16"):
            prepare(np.zeros((2, 2), np.uint16), dtype="bf16")

    def test_lists_become_float64_and_bad_inputs_are_refused(self):
        self.assertEqual(prepare([[1, 2], [3, 4]]).dtype, "fp64")
        self.assertEqual(prepare([[1.5, 2], [3, 4]]).dtype, "fp64")
        self.assertEqual(prepare([[True, False]]).dtype, "fp64")
        with self.assertRaisesRegex(ValueError, "2-D"):
            prepare(np.ones(3, np.float32), what="a")
        with self.assertRaises(TypeError):
            prepare(np.ones((2, 2), np.int32))
        with self.assertRaises(TypeError):
            prepare(np.ones((2, 2), np.complex64))

    def test_array_likes_keep_their_dtype(self):
        # Anything with __array__ (a torch CPU tensor, a memoryview, a NumPy subclass) travels in
        # its own dtype, not widened to float64.
        class Tensor:
            def __init__(self, values):
                self.values = values

            def __array__(self, dtype=None, copy=None):
                return self.values if dtype is None else self.values.astype(dtype)

        for dtype, name in [(np.float32, "fp32"), (np.float16, "fp16"), (np.float64, "fp64")]:
            values = RNG.standard_normal((3, 5)).astype(dtype)
            for like in (Tensor(values), memoryview(values), values.tolist()):
                got = prepare(like)
                want = "fp64" if isinstance(like, list) else name
                self.assertEqual(got.dtype, want, (type(like), dtype))
                self.assertEqual((got.rows, got.cols), (3, 5))
            self.assertEqual(prepare(Tensor(values)).flat.tobytes(), values.tobytes())
        self.assertEqual(prepare(Tensor(np.ones((2, 2), np.float32)), dtype="fp64").dtype, "fp64")
        with self.assertRaises(TypeError):  # an integer tensor is no more accepted than an array
            prepare(Tensor(np.ones((2, 2), np.int32)))

    def test_chunks_cover_the_bytes_in_order(self):
        a = RNG.standard_normal((7, 9)).astype(np.float32)
        p = prepare(np.asfortranarray(a))
        chunks = list(p.chunks(40))
        self.assertEqual([len(c) for c in chunks[:-1]], [40] * (len(chunks) - 1))
        self.assertEqual(b"".join(chunks), a.tobytes(order="F"))


class DecodeTest(unittest.TestCase):
    def test_every_dtype_and_layout_round_trips_writable(self):
        a = RNG.standard_normal((5, 3))
        for dtype in ("fp64", "fp32", "fp16"):
            for order in ("C", "F"):
                m = prepare(a, dtype=dtype, order=order).header(with_data=True)
                out = decode(m)
                self.assertTrue(out.flags.writeable)
                self.assertEqual(out.flags.f_contiguous and not out.flags.c_contiguous,
                                 order == "F")
                np.testing.assert_array_equal(out, a.astype(np.dtype(out.dtype)))

    def test_bf16_comes_back_as_float32_or_bits(self):
        a = np.array([[1.5, -2.0, 0.25]], np.float32)
        m = prepare(a, dtype="bf16").header(with_data=True)
        out = decode(m)
        self.assertEqual(out.dtype, np.float32)
        np.testing.assert_array_equal(out, a)
        bits = decode(m, bf16_bits=True)
        self.assertIsInstance(bits, Bfloat16)
        self.assertEqual(bits.bits.tolist(), [[0x3FC0, 0xC000, 0x3E80]])

    def test_byte_count_mismatch_is_data_loss(self):
        m = pb.Matrix(rows=2, cols=2, dtype=pb.FP32, data=b"\0" * 15)
        with self.assertRaises(DataLoss) as ctx:
            decode(m)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.DATA_LOSS)
        self.assertIn("15 bytes", ctx.exception.message)


class StreamAssemblyTest(unittest.TestCase):
    def chunks(self, a, order, size):
        p = prepare(a, order=order)
        pieces = list(p.chunks(size))
        yield pb.DownloadChunk(header=p.header(), data=pieces[0])
        for piece in pieces[1:]:
            yield pb.DownloadChunk(data=piece)

    def test_chunks_assemble_into_the_matrix(self):
        a = RNG.standard_normal((31, 17)).astype(np.float32)
        for order in ("C", "F"):
            out = _assemble_stream(self.chunks(a, order, 100), "h", bf16_bits=False)
            np.testing.assert_array_equal(out, a)
            self.assertTrue(out.flags.writeable)

    def test_short_long_or_headerless_streams_are_data_loss(self):
        a = RNG.standard_normal((4, 4)).astype(np.float32)
        short = list(self.chunks(a, "C", 16))[:-1]
        with self.assertRaisesRegex(DataLoss, "48 bytes"):
            _assemble_stream(iter(short), "h", False)
        long = list(self.chunks(a, "C", 16)) + [pb.DownloadChunk(data=b"x")]
        with self.assertRaisesRegex(DataLoss, "more than"):
            _assemble_stream(iter(long), "h", False)
        with self.assertRaisesRegex(DataLoss, "before header"):
            _assemble_stream(iter([pb.DownloadChunk(data=b"abcd")]), "h", False)
        with self.assertRaisesRegex(DataLoss, "empty"):
            _assemble_stream(iter([]), "h", False)


if __name__ == "__main__":
    unittest.main()
