"""End-to-end: the Python client's operands from other array libraries, and its `compute=` keyword,
against the real CPU server.

Each operand must travel in its own dtype: ml_dtypes bfloat16 / float8_e4m3fn arrays (recognised
by dtype name; a stand-in dtype checks that path where ml_dtypes is not installed), Float8E4M3
bits, and torch CPU tensors (float64/32/16, bfloat16) through multiply, multiply_batched,
transpose and upload. The ml_dtypes and torch tests skip, visibly, where the package is absent.
"""
import importlib.util
import unittest
import warnings

import numpy as np

from matserve_client import Bfloat16, Float8E4M3, float_to_bf16_bits
from server_process import ClientServerTest
from test_service import rand, rel_l2

HAVE_ML_DTYPES = importlib.util.find_spec("ml_dtypes") is not None
HAVE_TORCH = importlib.util.find_spec("torch") is not None
E4M3 = np.array([[0x38, 0x40, 0x30], [0xB8, 0x7E, 0x01]], np.uint8)  # 1 2 .5 / -1 448 2^-9
E4M3_VALUES = np.array([[1, 2, 0.5], [-1, 448, 2.0 ** -9]])


class _NamedDtypeArray(np.ndarray):
    """An ndarray whose `dtype` reports another name (e.g. "bfloat16") over its real bits: what
    the client sees of an ml_dtypes array, which it recognises by the dtype's name alone."""

    def __array_finalize__(self, obj):
        self.fake_name = getattr(obj, "fake_name", None)

    @property
    def dtype(self):
        real = np.ndarray.dtype.__get__(self)
        return type("Dtype", (), {"name": self.fake_name, "itemsize": real.itemsize})()


def named_dtype_array(bits: np.ndarray, name: str) -> np.ndarray:
    arr = bits.view(_NamedDtypeArray)
    arr.fake_name = name
    return arr


class ServerTest(ClientServerTest):
    def check_bf16_operands(self, a, b, a_bits, b_bits):
        """a, b (bf16 in some form) multiply, transpose and upload exactly as their bits do."""
        want = self.client.multiply(Bfloat16(a_bits), Bfloat16(b_bits), out_dtype="fp32").c
        r = self.client.multiply(a, b, out_dtype="fp32", verify=True)
        np.testing.assert_array_equal(r.c, want)
        self.assertEqual(r.verification.max_abs_error, 0.0)  # fp32 accumulation of bf16 data
        t = self.client.transpose(a, bf16_bits=True).b
        np.testing.assert_array_equal(t.bits, a_bits.T)  # an exact bit copy
        with self.client.upload(a) as resident:
            self.assertEqual(resident.dtype, "bf16")
            np.testing.assert_array_equal(resident.download(bf16_bits=True).bits, a_bits)


class FloatBitsTest(ServerTest):
    def test_bf16_by_dtype_name(self):
        """An array whose dtype is named "bfloat16" goes as BF16 bits, unrounded and uncopied
        through float64: here a stand-in for ml_dtypes.bfloat16 over uint16 patterns."""
        a_bits = float_to_bf16_bits(rand(6, 5))
        b_bits = float_to_bf16_bits(rand(5, 4))
        a, b = named_dtype_array(a_bits, "bfloat16"), named_dtype_array(b_bits, "bfloat16")
        self.check_bf16_operands(a, b, a_bits, b_bits)
        # dtype= converts it as it converts Bfloat16: to fp32 values, exactly.
        r = self.client.multiply(a, b, dtype="fp32")
        self.assertEqual(r.c.dtype, np.float32)

    def test_fp8_e4m3_bits_and_dtype_name(self):
        """fp8 e4m3 operands (Float8E4M3 bits, or an array whose dtype is named float8_e4m3fn)
        go as FP8_E4M3; the server multiplies them into fp32 or bf16, keeps them resident and
        transposes them (exact bit copies: every value comes back, 448 and a subnormal too)."""
        want = E4M3_VALUES @ E4M3_VALUES.T
        for a in (Float8E4M3(E4M3), named_dtype_array(E4M3, "float8_e4m3fn")):
            r = self.client.multiply(a, a, transpose_b=True, out_dtype="fp32", verify=True)
            np.testing.assert_allclose(r.c, want, rtol=1e-7)  # fp32 accumulation
            self.assertLess(r.verification.rel_l2_error, 1e-7)
            np.testing.assert_array_equal(self.client.transpose(a).b, E4M3_VALUES.T)
        f8 = Float8E4M3(E4M3)
        with self.client.upload(f8) as resident:
            self.assertEqual(resident.dtype, "fp8_e4m3")
            np.testing.assert_array_equal(resident.download(), E4M3_VALUES)
            np.testing.assert_array_equal(resident.download(bf16_bits=True).bits, E4M3)
        bf16 = self.client.multiply(f8, f8, transpose_b=True, out_dtype="bf16")
        np.testing.assert_allclose(bf16.c, want, rtol=2 ** -8)  # rounded to bf16
        with self.assertRaisesRegex(TypeError, "not rounded to fp8 here"):
            self.client.multiply(rand(2, 2), rand(2, 2), dtype="fp8_e4m3")


@unittest.skipUnless(HAVE_ML_DTYPES, "ml_dtypes is not installed (pip install ml_dtypes)")
class MlDtypesTest(ServerTest):
    def test_ml_dtypes_bfloat16_and_float8_arrays(self):
        import ml_dtypes

        a = rand(6, 5).astype(ml_dtypes.bfloat16)
        b = rand(5, 4).astype(ml_dtypes.bfloat16)
        self.check_bf16_operands(a, b, a.view(np.uint16), b.view(np.uint16))
        # Results come back float32 (exact), so the caller's own dtype is one astype away.
        c = self.client.multiply(a, b).c
        np.testing.assert_array_equal(c.astype(ml_dtypes.bfloat16).astype(np.float32), c)
        f8 = E4M3.view(ml_dtypes.float8_e4m3fn)
        np.testing.assert_array_equal(f8.astype(np.float64), E4M3_VALUES)
        r = self.client.multiply(f8, f8, transpose_b=True, out_dtype="fp32")
        np.testing.assert_allclose(r.c, E4M3_VALUES @ E4M3_VALUES.T, rtol=1e-7)
        batched = self.client.multiply_batched(np.stack([a, a]), b)
        np.testing.assert_array_equal(batched.c[1], c)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (apt install python3-torch)")
class TorchTest(ServerTest):
    def test_cpu_tensors_keep_their_dtype(self):
        import torch

        for dtype, np_type in ((torch.float64, np.float64), (torch.float32, np.float32),
                               (torch.float16, np.float16)):
            a = torch.from_numpy(rand(7, 5)).to(dtype)
            b = torch.from_numpy(rand(5, 3)).to(dtype).requires_grad_(dtype != torch.float16)
            r = self.client.multiply(a, b, verify=True)
            self.assertEqual(r.c.dtype, np_type, dtype)  # the result is in the operands' dtype
            want = a.double().numpy() @ b.detach().double().numpy()
            self.assertLess(rel_l2(r.c.astype(np.float64), want), 1e-2, dtype)
        a = torch.from_numpy(rand(7, 5))
        # A transposed view (column-major) travels as it lies, and its transpose comes back.
        np.testing.assert_array_equal(self.client.transpose(a.T).b, a.numpy())

    def test_bfloat16_tensors_go_as_their_bits(self):
        import torch

        a = torch.from_numpy(rand(6, 5)).to(torch.bfloat16)
        b = torch.from_numpy(rand(5, 4)).to(torch.bfloat16)
        a_bits = a.view(torch.int16).numpy().view(np.uint16)
        b_bits = b.view(torch.int16).numpy().view(np.uint16)
        self.check_bf16_operands(a, b, a_bits, b_bits)
        stack_a, stack_b = torch.stack([a, 2 * a]), torch.stack([b, b])
        r = self.client.multiply_batched(stack_a, stack_b, out_dtype="fp32")
        np.testing.assert_allclose(r.c, (stack_a.float() @ stack_b.float()).numpy(), rtol=1e-6)


class ComputeKeywordTest(ServerTest):
    def test_compute_and_its_deprecated_alias_precision(self):
        a, b = rand(16, 24), rand(24, 8)
        r = self.client.multiply(a, b, compute="bf16", verify=True)
        self.assertEqual(r.precision, "bf16")
        with self.assertWarnsRegex(DeprecationWarning, "precision= is deprecated") as warned:
            old = self.client.multiply(a, b, precision="bf16")
        self.assertEqual(warned.filename, __file__)
        np.testing.assert_array_equal(old.c, r.c)
        self.assertEqual(old.precision, "bf16")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # compute= warns nothing
            self.client.multiply_batched(a[None], b, compute="fp16")
        with self.assertWarns(DeprecationWarning):
            rb = self.client.multiply_batched(a[None], b, precision="fp16")
        self.assertEqual(rb.precision, "fp16")


if __name__ == "__main__":
    unittest.main()
