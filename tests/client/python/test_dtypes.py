"""Unit tests (no server) for matserve_client.dtypes: dtype names, bf16 rounding to nearest-even
against an exact rational reference, NaN/inf/overflow, the Bfloat16 wrapper, and the fp8 e4m3
patterns' values (Float8E4M3)."""
import unittest
from fractions import Fraction

import numpy as np

from matserve_client import (Bfloat16, Float8E4M3, bf16_bits_to_float32, float_to_bf16_bits,
                             fp8_e4m3_bits_to_float32)
from matserve_client import dtypes

RNG = np.random.default_rng(11)


def bf16_value(bits: int) -> Fraction:
    return Fraction(float(np.array([bits << 16], np.uint32).view(np.float32)[0]))


def reference_bf16(x: float) -> int:
    """Exact round-to-nearest-even of a finite float to bf16, by comparing rationals."""
    approx = int(np.array([x], np.float32).view(np.uint32)[0] >> 16) & 0x7FFF
    sign = 0x8000 if np.signbit(x) else 0
    mag = abs(Fraction(x))
    best = None
    for cand in range(max(approx - 2, 0), min(approx + 3, 0x7F81)):
        dist = abs(bf16_value(cand) - mag) if cand < 0x7F80 else None
        if dist is None:
            continue
        if best is None or dist < best[0] or (dist == best[0] and cand % 2 == 0):
            best = (dist, cand)
    # Beyond the largest finite bf16 by half an ulp or more: infinity.
    if mag >= bf16_value(0x7F7F) + (bf16_value(0x7F7F) - bf16_value(0x7F7E)) / 2:
        return sign | 0x7F80
    return sign | best[1]


class DtypeNameTest(unittest.TestCase):
    def test_names_aliases_and_numpy_types(self):
        for spec, name in [("fp32", "fp32"), ("FP64", "fp64"), ("float16", "fp16"),
                           ("bfloat16", "bf16"), (np.float32, "fp32"), (np.dtype(">f8"), "fp64"),
                           ("half", "fp16")]:
            self.assertEqual(dtypes.dtype_name(spec), name, spec)

    def test_unsupported_types_are_refused_with_the_accepted_list(self):
        for spec in (np.int32, "int8", np.complex64, "fp8", np.uint8):
            with self.assertRaisesRegex(TypeError, "fp64, fp32, fp16, bf16 or fp8_e4m3"):
                dtypes.dtype_name(spec)

    def test_fp8_e4m3_names(self):
        for spec in ("fp8_e4m3", "float8_e4m3fn", "E4M3"):
            self.assertEqual(dtypes.dtype_name(spec), "fp8_e4m3", spec)
        self.assertEqual((dtypes.itemsize("fp8_e4m3"), dtypes.wire_dtype("fp8_e4m3")),
                         (1, np.dtype(np.uint8)))


class Bf16RoundingTest(unittest.TestCase):
    def test_ties_go_to_even(self):
        one = 1.0
        cases = {one: 0x3F80, one + 2**-8: 0x3F80, one + 3 * 2**-8: 0x3F82,
                 one + 2**-8 + 2**-20: 0x3F81, -(one + 2**-8): 0xBF80}
        for x, bits in cases.items():
            for dtype in (np.float32, np.float64):
                got = int(float_to_bf16_bits(np.array([[x]], dtype))[0, 0])
                self.assertEqual(got, bits, (x, dtype))

    def test_float64_is_rounded_once_not_through_float32(self):
        # 1 + 2^-8 + 2^-30 rounds up in bf16; through float32 it would first become the tie
        # 1 + 2^-8 and then round down to 1.0.
        x = np.array([[1 + 2**-8 + 2**-30]])
        self.assertEqual(int(float_to_bf16_bits(x)[0, 0]), 0x3F81)
        self.assertEqual(int(float_to_bf16_bits(x.astype(np.float32))[0, 0]), 0x3F80)

    def test_random_float32_and_float64_match_exact_reference(self):
        f32 = RNG.integers(0, 2**32, size=3000, dtype=np.uint64).astype(np.uint32).view(np.float32)
        f32 = f32[np.isfinite(f32)]
        got = float_to_bf16_bits(f32)
        for x, g in zip(f32, got):
            self.assertEqual(int(g), reference_bf16(float(x)), float(x))
        f64 = RNG.standard_normal(3000) * np.exp2(RNG.integers(-140, 128, 3000))
        got = float_to_bf16_bits(f64)
        for x, g in zip(f64, got):
            self.assertEqual(int(g), reference_bf16(float(x)), float(x))

    def test_nan_inf_overflow_and_signed_zero(self):
        x = np.array([np.nan, -np.nan, np.inf, -np.inf, 3.4e38, -3.4e38, 0.0, -0.0, 1e-45],
                     np.float32)
        bits = float_to_bf16_bits(x)
        back = bf16_bits_to_float32(bits)
        self.assertTrue(np.isnan(back[0]) and np.isnan(back[1]))
        self.assertEqual(list(back[2:6]), [np.inf, -np.inf, np.inf, -np.inf])
        self.assertEqual(int(bits[6]), 0x0000)
        self.assertEqual(int(bits[7]), 0x8000)
        self.assertEqual(int(bits[8]), 0x0000)  # below half the smallest bf16 subnormal
        self.assertTrue(np.isnan(bf16_bits_to_float32(float_to_bf16_bits(np.array([np.nan])))[0]))

    def test_widening_is_exact_and_keeps_memory_order(self):
        bits = RNG.integers(0, 0x7F80, size=(5, 7), dtype=np.uint16)
        wide = bf16_bits_to_float32(np.asfortranarray(bits))
        self.assertTrue(wide.flags.f_contiguous)
        np.testing.assert_array_equal(float_to_bf16_bits(wide), bits)
        self.assertTrue(float_to_bf16_bits(wide).flags.f_contiguous)


class Bfloat16WrapperTest(unittest.TestCase):
    def test_wrapper_takes_bits_only_and_round_trips(self):
        with self.assertRaisesRegex(TypeError, "from_float"):
            Bfloat16(np.ones((2, 2), np.float32))
        values = np.array([[1.0, -2.5], [0.15625, 3.0]], np.float32)  # all exact in bf16
        b = Bfloat16.from_float(values)
        self.assertEqual(b.shape, (2, 2))
        self.assertEqual(b.nbytes, 8)
        np.testing.assert_array_equal(b.to_float32(), values)
        np.testing.assert_array_equal(b.T.to_float32(), values.T)


class Float8E4M3Test(unittest.TestCase):
    def test_every_pattern_widens_exactly(self):
        bits = np.arange(256, dtype=np.uint8).reshape(16, 16)
        values = Float8E4M3(bits).to_float32()
        self.assertEqual(values.dtype, np.float32)
        for b, v in zip(bits.ravel().tolist(), values.ravel().tolist()):
            sign, exponent, mantissa = b >> 7, (b >> 3) & 0xF, b & 7
            if exponent == 15 and mantissa == 7:
                self.assertTrue(np.isnan(v), hex(b))  # e4m3fn: NaN, no infinities
                continue
            magnitude = (Fraction(mantissa, 8) * Fraction(1, 64) if exponent == 0
                         else (1 + Fraction(mantissa, 8)) * Fraction(2) ** (exponent - 7))
            self.assertEqual(Fraction(v), -magnitude if sign else magnitude, hex(b))
        self.assertEqual(np.nanmax(values), 448)
        self.assertEqual(values[0, 1], 2.0 ** -9)
        self.assertTrue(np.signbit(values[8, 0]))  # 0x80: -0
        np.testing.assert_array_equal(Float8E4M3(bits).T.bits, bits.T)
        self.assertTrue(fp8_e4m3_bits_to_float32(np.asfortranarray(bits)).flags.f_contiguous)
        with self.assertRaisesRegex(TypeError, "uint8"):
            Float8E4M3(bits.astype(np.uint16))


if __name__ == "__main__":
    unittest.main()
