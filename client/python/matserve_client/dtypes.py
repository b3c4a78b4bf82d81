"""Element types: NumPy dtypes <-> matserve DataType names; bf16 and fp8 e4m3 carried as bits.

NumPy has no bfloat16, so bf16 matrices travel as their upper 16 bits in a uint16 array, wrapped in
`Bfloat16`. `Bfloat16.from_float` rounds to nearest, ties to even (float64 input is rounded once,
directly, not through float32); NaN stays NaN and overflow becomes infinity, as IEEE rounding does.
fp8 e4m3 matrices (Multiply operands only) travel as their 8-bit patterns, wrapped in `Float8E4M3`;
nothing here rounds to fp8 (compute="fp8" quantizes fp32/fp16/bf16 data on the device).
ml_dtypes' bfloat16 and float8_e4m3fn are recognised by their dtype names (interop.py), so the
client needs no ml_dtypes.
"""
from __future__ import annotations

from typing import Any, Union

import numpy as np

# matserve's names for the element types, in the order of the proto's DataType enum.
FP64, FP32, FP16, BF16, FP8_E4M3 = "fp64", "fp32", "fp16", "bf16", "fp8_e4m3"
DTYPE_NAMES = (FP64, FP32, FP16, BF16, FP8_E4M3)

_NUMPY_TO_NAME = {np.dtype(np.float64): FP64, np.dtype(np.float32): FP32,
                  np.dtype(np.float16): FP16}
_NAME_TO_NUMPY = {FP64: np.dtype("<f8"), FP32: np.dtype("<f4"), FP16: np.dtype("<f2"),
                  BF16: np.dtype("<u2"), FP8_E4M3: np.dtype("u1")}
# Also the names of ml_dtypes' NumPy dtypes ("bfloat16", "float8_e4m3fn"): dtype_name takes those
# dtypes by name.
_ALIASES = {"float64": FP64, "double": FP64, "float32": FP32, "float": FP32, "single": FP32,
            "float16": FP16, "half": FP16, "bfloat16": BF16, "float8_e4m3fn": FP8_E4M3,
            "e4m3": FP8_E4M3}

DTypeLike = Union[str, np.dtype, type]


def itemsize(name: str) -> int:
    """Bytes per element of a matserve dtype name."""
    return _NAME_TO_NUMPY[name].itemsize


def wire_dtype(name: str) -> np.dtype:
    """The little-endian NumPy dtype a matserve dtype travels as (uint16 for bf16, uint8 for
    fp8_e4m3)."""
    return _NAME_TO_NUMPY[name]


def dtype_name(dtype: DTypeLike) -> str:
    """Normalises "fp32", "float32", np.float32, np.dtype("f4"), ml_dtypes.bfloat16 ... to a
    matserve dtype name."""
    if isinstance(dtype, str):
        key = dtype.lower()
        if key in DTYPE_NAMES:
            return key
        if key in _ALIASES:
            return _ALIASES[key]
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        np_dtype = None
    if np_dtype is not None and np_dtype.kind == "f":
        name = _NUMPY_TO_NAME.get(np_dtype.newbyteorder("="))
        if name:
            return name
    if np_dtype is not None and np_dtype.name in ("bfloat16", "float8_e4m3fn"):  # ml_dtypes'
        name = _ALIASES[np_dtype.name]
        if np_dtype.itemsize == itemsize(name):
            return name
    raise TypeError(f"unsupported dtype {dtype!r}: matserve takes fp64, fp32, fp16, bf16 or "
                    "fp8_e4m3 (float64, float32, float16 arrays; Bfloat16 or an ml_dtypes "
                    "bfloat16 array for bf16; Float8E4M3 or an ml_dtypes float8_e4m3fn array for "
                    "fp8_e4m3)")


def _round_float64_to_odd_float32(x: np.ndarray) -> np.ndarray:
    """float32 bits of x rounded toward zero, with the last bit set when inexact ("round to odd").

    Rounding this once more to bf16 (nearest-even) equals rounding x to bf16 directly, because the
    float32 keeps 16 more bits than bf16: no double-rounding error.
    """
    with np.errstate(over="ignore"):
        near = x.astype(np.float32)  # nearest-even; may round away from zero
    bits = near.view(np.uint32).copy()
    wide = near.astype(np.float64)
    away = np.abs(wide) > np.abs(x)
    bits[away] -= 1  # one ulp toward zero (same sign, so the magnitude bits step down)
    inexact = wide != x
    bits[inexact] |= 1
    return bits


def float_to_bf16_bits(values: Any) -> np.ndarray:
    """Rounds values (float16/32/64 or array-like) to bf16, nearest-even; returns uint16 bits.

    The result keeps the shape and memory order (C or Fortran) of a contiguous input.
    """
    x = np.asarray(values)
    if x.dtype.kind not in "fiu":
        raise TypeError(f"cannot round {x.dtype} values to bf16")
    order = "F" if (x.flags.f_contiguous and not x.flags.c_contiguous) else "C"
    if x.dtype == np.float64 or x.dtype.kind in "iu":
        x64 = np.asarray(x, dtype=np.float64, order=order)
        u = _round_float64_to_odd_float32(x64)
        nan = np.isnan(x64)
    else:
        x32 = np.asarray(x, dtype=np.float32, order=order)
        u = x32.view(np.uint32)
        nan = np.isnan(x32)
    u = u.astype(np.uint64)  # room for the carry; NaNs are handled apart
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)  # quiet NaN, sign kept
    return np.asarray(rounded, order=order)


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Exact widening of bf16 bits (uint16) to float32, keeping shape and memory order."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"bf16 bits must be uint16, got {bits.dtype}")
    order = "F" if (bits.flags.f_contiguous and not bits.flags.c_contiguous) else "C"
    wide = np.asarray(bits, order=order).astype(np.uint32, order=order) << 16
    return wide.view(np.float32)


def _e4m3_values() -> np.ndarray:
    """The float32 value of each of the 256 fp8 e4m3 bit patterns (OCP e4m3fn: bias 7,
    subnormals, no infinities, NaN at S.1111.111)."""
    bits = np.arange(256, dtype=np.int64)
    exponent, mantissa = (bits >> 3) & 0xF, bits & 7
    magnitude = np.where(exponent == 0, mantissa / 8.0 * 2.0 ** -6,
                         (1 + mantissa / 8.0) * 2.0 ** (exponent - 7))
    magnitude[(bits & 0x7F) == 0x7F] = np.nan
    return np.where(bits & 0x80, -magnitude, magnitude).astype(np.float32)


_E4M3_VALUES = _e4m3_values()


def fp8_e4m3_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Exact widening of fp8 e4m3 bits (uint8) to float32, keeping shape and memory order."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint8:
        raise TypeError(f"fp8 e4m3 bits must be uint8, got {bits.dtype}")
    order = "F" if (bits.flags.f_contiguous and not bits.flags.c_contiguous) else "C"
    return np.asarray(_E4M3_VALUES[bits], order=order)


class BitPatterns:
    """A matrix of a type NumPy lacks, as its raw bit patterns (`bits`, an unsigned array).

    Base of Bfloat16 and Float8E4M3: pass one to `Client.multiply` etc. to send the data unchanged.
    """

    __slots__ = ("bits",)
    DTYPE = ""  # the matserve dtype name
    _BITS: Any = None  # the unsigned NumPy type of the patterns
    _HINT = ""

    def __init__(self, bits: Any) -> None:
        arr = np.asarray(bits)
        if arr.dtype != self._BITS:
            raise TypeError(f"{type(self).__name__} takes {np.dtype(self._BITS).name} bit "
                            f"patterns, got {arr.dtype}{self._HINT}")
        if not arr.dtype.isnative:
            arr = arr.astype(self._BITS)
        self.bits = arr

    def to_float32(self) -> np.ndarray:
        """The values as float32 (exact)."""
        raise NotImplementedError

    @property
    def shape(self) -> tuple:
        return self.bits.shape

    @property
    def ndim(self) -> int:
        return self.bits.ndim

    @property
    def nbytes(self) -> int:
        return self.bits.nbytes

    @property
    def T(self) -> "BitPatterns":
        return type(self)(self.bits.T)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={self.bits.shape}, values={self.to_float32()!r})"


class Bfloat16(BitPatterns):
    """A bf16 matrix as its raw 16-bit patterns (`bits`, a uint16 array).

    Pass one to `Client.multiply`/`transpose`/`upload` to send bf16 data unchanged; results come
    back as one when asked for (`bf16_bits=True`). `from_float` rounds nearest-even.
    """

    __slots__ = ()
    DTYPE = BF16
    _BITS = np.uint16
    _HINT = "; use Bfloat16.from_float(values) to round floats"

    @classmethod
    def from_float(cls, values: Any) -> "Bfloat16":
        """Rounds float values to bf16 (round to nearest, ties to even)."""
        return cls(float_to_bf16_bits(values))

    def to_float32(self) -> np.ndarray:
        """The values as float32 (exact: every bf16 value is a float32 value)."""
        return bf16_bits_to_float32(self.bits)


class Float8E4M3(BitPatterns):
    """An fp8 e4m3 matrix as its raw 8-bit patterns (`bits`, a uint8 array; OCP e4m3fn, as
    ml_dtypes.float8_e4m3fn and torch.float8_e4m3fn). Multiply operands only (on a GPU with fp8
    tensor cores; the result is fp32, bf16 or fp16: pass out_dtype)."""

    __slots__ = ()
    DTYPE = FP8_E4M3
    _BITS = np.uint8

    def to_float32(self) -> np.ndarray:
        """The values as float32 (exact: every e4m3 value is a float32 value)."""
        return fp8_e4m3_bits_to_float32(self.bits)


_BITS_TYPES = {BF16: Bfloat16, FP8_E4M3: Float8E4M3}


def from_wire(arr: np.ndarray, name: str) -> Any:
    """`arr` (of wire_dtype(name)) as the client shows that dtype: a Bfloat16 or Float8E4M3 of
    the bits, the array itself otherwise."""
    kind = _BITS_TYPES.get(name)
    return kind(arr) if kind is not None else arr
