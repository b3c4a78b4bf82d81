"""NumPy arrays <-> matserve.v1.Matrix messages (raw little-endian bytes, row- or column-major).

C-contiguous arrays travel ROW_MAJOR and Fortran-contiguous ones COL_MAJOR, as they lie in memory
(no reordering); other arrays are made C-contiguous first. Streaming reads the same bytes in chunks.
A batch (MultiplyBatched) is a 3-D array (batch, rows, cols): its matrices travel stacked one after
another (batch-major), each row-major, or column-major when every x[i] is Fortran-contiguous.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional, Union

import grpc
import numpy as np

from . import dtypes, interop
from ._stubs import pb
from .errors import error_for

ArrayLike = Union[np.ndarray, dtypes.BitPatterns, Any]

DTYPE_TO_PROTO = {dtypes.FP64: pb.FP64, dtypes.FP32: pb.FP32, dtypes.FP16: pb.FP16,
                  dtypes.BF16: pb.BF16, dtypes.FP8_E4M3: pb.FP8_E4M3}
PROTO_TO_DTYPE = {v: k for k, v in DTYPE_TO_PROTO.items()}
ORDER_TO_LAYOUT = {"C": pb.ROW_MAJOR, "F": pb.COL_MAJOR}
LAYOUT_TO_ORDER = {pb.ROW_MAJOR: "C", pb.COL_MAJOR: "F"}


@dataclass(frozen=True)
class Prepared:
    """One matrix ready to send: its header fields and its bytes as a flat uint8 view."""

    rows: int
    cols: int
    dtype: str  # matserve name: fp64, fp32, fp16, bf16, fp8_e4m3
    order: str  # "C" (ROW_MAJOR) or "F" (COL_MAJOR)
    flat: np.ndarray  # uint8, batch * rows * cols * itemsize bytes, each matrix in `order`
    batch: int = 1  # matrices stacked in `flat` (prepare_batch); 1 for every other use

    @property
    def nbytes(self) -> int:
        return self.flat.nbytes

    def header(self, with_data: bool = False) -> "pb.Matrix":
        """The Matrix message; with_data copies the bytes in (one copy, as protobuf needs)."""
        return pb.Matrix(rows=self.rows, cols=self.cols, dtype=DTYPE_TO_PROTO[self.dtype],
                         layout=ORDER_TO_LAYOUT[self.order],
                         data=self.flat.tobytes() if with_data else b"",
                         batch=self.batch if self.batch != 1 else 0)

    def matrix(self, i: int) -> "Prepared":
        """Matrix i of a stack, as a one-matrix Prepared (a view, no copy)."""
        if not 0 <= i < self.batch:
            raise IndexError(f"matrix {i} of a batch of {self.batch}")
        one = self.nbytes // self.batch
        return Prepared(self.rows, self.cols, self.dtype, self.order,
                        self.flat[i * one:(i + 1) * one])

    def chunks(self, chunk_bytes: int) -> Iterator[bytes]:
        """The bytes in order, `chunk_bytes` at a time (each chunk is copied once, on demand)."""
        for start in range(0, self.nbytes, chunk_bytes):
            yield self.flat[start:start + chunk_bytes].tobytes()


def memory_order(x: Any) -> str:
    """"F" for a Fortran-ordered (and not also C-ordered) array, Bfloat16 or tensor, else "C"."""
    x = interop.native(x)
    arr = x.bits if isinstance(x, dtypes.BitPatterns) else x
    if isinstance(arr, np.ndarray) and arr.flags.f_contiguous and not arr.flags.c_contiguous:
        return "F"
    return "C"


def _as_wire(x: ArrayLike, dtype: Optional[dtypes.DTypeLike], what: str):
    """(array, matserve dtype name) of one operand, converted as `dtype` asks (any ndim)."""
    want = dtypes.dtype_name(dtype) if dtype is not None else None
    x = interop.native(x)  # torch CPU tensors, ml_dtypes bf16/fp8 arrays: their own dtype
    if isinstance(x, dtypes.BitPatterns):
        if want in (None, x.DTYPE):
            return x.bits, x.DTYPE
        x = x.to_float32()
    if not isinstance(x, np.ndarray):
        # Array-likes keep their dtype (a float32 memoryview goes as fp32, an integer one is
        # refused like an integer array); nested lists of Python numbers go as fp64.
        numbers = isinstance(x, (list, tuple))
        x = np.asarray(x)
        if numbers and want is None and x.dtype.kind in "biu":
            x = x.astype(np.float64)
    if want == dtypes.FP8_E4M3:
        raise TypeError(f"{what}: values are not rounded to fp8 here; pass fp8 e4m3 data as it "
                        "is (an ml_dtypes float8_e4m3fn array, a torch.float8_e4m3fn tensor or "
                        "Float8E4M3(bits)), or compute='fp8' to quantize fp32/fp16/bf16 data on "
                        "the device")
    if want == dtypes.BF16:
        if x.dtype == np.uint16:
            raise TypeError(f"{what}: uint16 data is ambiguous; wrap bf16 bit patterns in "
                            "Bfloat16(bits) instead of passing dtype='bf16'")
        return dtypes.float_to_bf16_bits(x), dtypes.BF16
    arr = x
    if want is not None:
        arr = arr.astype(dtypes.wire_dtype(want), order="K", copy=False)
    return arr, dtypes.dtype_name(arr.dtype)  # raises TypeError for ints, complex, ...


def prepare(x: ArrayLike, dtype: Optional[dtypes.DTypeLike] = None, what: str = "matrix",
            order: Optional[str] = None) -> Prepared:
    """Checks and lays out one 2-D operand.

    x: a float64/float32/float16 array (or an array-like, which keeps its dtype; lists of Python
    numbers become float64), a `Bfloat16` or `Float8E4M3`, an ml_dtypes bfloat16/float8_e4m3fn
    array or a torch CPU tensor (interop.py). dtype converts first:
    "bf16" rounds float values nearest-even, "fp32" etc. cast. order forces "C" or "F".
    """
    arr, name = _as_wire(x, dtype, what)
    if arr.ndim != 2:
        raise ValueError(f"{what}: must be a 2-D matrix, got shape {arr.shape}")
    wire = dtypes.wire_dtype(name)
    mem = order or memory_order(arr)
    if order is None and not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        mem = "C"
    arr = np.asarray(arr, dtype=wire, order=mem)  # no copy when already laid out and little-endian
    flat = arr.reshape(-1, order=mem).view(np.uint8)
    return Prepared(rows=int(arr.shape[0]), cols=int(arr.shape[1]), dtype=name, order=mem,
                    flat=flat)


def batch_memory_order(x: Any) -> str:
    """"F" for a 3-D array (or Bfloat16, tensor) whose matrices x[i] are each Fortran-contiguous and
    stacked batch-major (x.transpose(0, 2, 1) C-contiguous) but which is not C-contiguous;
    "C" otherwise. A 2-D array: memory_order."""
    x = interop.native(x)
    arr = x.bits if isinstance(x, dtypes.BitPatterns) else x
    if not isinstance(arr, np.ndarray) or arr.ndim != 3:
        return memory_order(x)
    if arr.transpose(0, 2, 1).flags.c_contiguous and not arr.flags.c_contiguous:
        return "F"
    return "C"


def prepare_batch(x: ArrayLike, dtype: Optional[dtypes.DTypeLike] = None, what: str = "matrix",
                  order: Optional[str] = None) -> Prepared:
    """Checks and lays out one MultiplyBatched operand: a 3-D (batch, rows, cols) stack, or a 2-D
    matrix (batch 1: every product uses it). Conversions as in prepare; the matrices travel in
    `order` ("C"/"F"), by default as they lie (batch_memory_order; no copy when they already do).
    """
    arr, name = _as_wire(x, dtype, what)
    if arr.ndim == 2:
        return prepare(dtypes.from_wire(arr, name), None, what, order)
    if arr.ndim != 3:
        raise ValueError(f"{what}: must be a 3-D (batch, rows, cols) stack or a 2-D matrix, got "
                         f"shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{what}: an empty batch (shape {arr.shape}); a batch has 1 or more "
                         "matrices")
    wire = dtypes.wire_dtype(name)
    mem = order or batch_memory_order(arr)
    # Matrix i's elements in `mem` order, matrices one after another.
    stacked = arr if mem == "C" else arr.transpose(0, 2, 1)
    flat = np.ascontiguousarray(stacked, dtype=wire).reshape(-1).view(np.uint8)
    return Prepared(rows=int(arr.shape[1]), cols=int(arr.shape[2]), dtype=name, order=mem,
                    flat=flat, batch=int(arr.shape[0]))


def set_fp8_scales(request, a_scale: Optional[float], b_scale: Optional[float]) -> None:
    """fp8_e4m3 operands' dequantization scales on a Multiply or MultiplyBatched request, when
    given (the server folds them into alpha)."""
    if a_scale is not None:
        request.a_scale = float(a_scale)
    if b_scale is not None:
        request.b_scale = float(b_scale)


def _wire_elements(data: Any, dtype: str, count: int, what: str, holding: str):
    """(flat view of `count` wire elements, whether the bytes are writable) of raw bytes (bytes,
    bytearray or uint8 array); DATA_LOSS naming what they should hold when the length is off."""
    wire = dtypes.wire_dtype(dtype)
    expected = count * wire.itemsize
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    if buf.nbytes != expected:
        raise error_for(grpc.StatusCode.DATA_LOSS,
                        f"{what}: {buf.nbytes} bytes for {holding}, expected {expected}")
    return buf.view(wire), buf.flags.writeable


def assemble(rows: int, cols: int, dtype: str, order: str, data: Any, bf16_bits: bool = False,
             what: str = "reply") -> Union[np.ndarray, dtypes.BitPatterns]:
    """A writable array from raw bytes (bytes, bytearray or uint8 array) of a known header.
    bf16 and fp8_e4m3 come back as float32 values, or with bf16_bits as Bfloat16 / Float8E4M3."""
    flat, writeable = _wire_elements(data, dtype, rows * cols, what,
                                     f"a {rows}x{cols} {dtype} matrix")
    if not writeable:
        flat = flat.copy()
    arr = flat.reshape((rows, cols), order=order)
    arr = arr.astype(arr.dtype.newbyteorder("="), copy=False)
    shown = dtypes.from_wire(arr, dtype)
    if isinstance(shown, dtypes.BitPatterns) and not bf16_bits:
        return shown.to_float32()
    return shown


def decode(m: "pb.Matrix", bf16_bits: bool = False,
           what: str = "reply") -> Union[np.ndarray, dtypes.BitPatterns]:
    """A reply Matrix as a NumPy array in its own memory order (float32 for bf16 by default)."""
    if m.dtype not in PROTO_TO_DTYPE:
        raise error_for(grpc.StatusCode.DATA_LOSS, f"{what}: unknown dtype {m.dtype}")
    return assemble(m.rows, m.cols, PROTO_TO_DTYPE[m.dtype], LAYOUT_TO_ORDER.get(m.layout, "C"),
                    m.data, bf16_bits=bf16_bits, what=what)


def assemble_batch(batch: int, rows: int, cols: int, dtype: str, order: str, data: Any,
                   what: str = "reply", bf16_bits: bool = False) -> Any:
    """A writable (batch, rows, cols) array from the raw bytes of a stack (float32 for bf16, or
    with bf16_bits the bits as they came, as `assemble`); with order "F" each x[i] is
    Fortran-contiguous (a view of the stacked bytes, no reordering).
    """
    flat, writeable = _wire_elements(data, dtype, batch * rows * cols, what,
                                     f"{batch} matrices of {rows}x{cols} {dtype}")
    flat = flat.astype(flat.dtype.newbyteorder("="), copy=False)
    shown = dtypes.from_wire(flat, dtype)
    if isinstance(shown, dtypes.BitPatterns) and not bf16_bits:
        flat = shown.to_float32()
    elif not writeable:
        flat = flat.copy()
    if order == "F":
        out = flat.reshape((batch, cols, rows)).transpose(0, 2, 1)
    else:
        out = flat.reshape((batch, rows, cols))
    return dtypes.from_wire(out, dtype) if bf16_bits else out


def decode_batch(m: "pb.Matrix", what: str = "reply", bf16_bits: bool = False) -> Any:
    """A reply's stacked results (Matrix.batch of them) as a (batch, rows, cols) array (a
    Bfloat16 of bits for bf16 with bf16_bits)."""
    if m.dtype not in PROTO_TO_DTYPE:
        raise error_for(grpc.StatusCode.DATA_LOSS, f"{what}: unknown dtype {m.dtype}")
    return assemble_batch(max(m.batch, 1), m.rows, m.cols, PROTO_TO_DTYPE[m.dtype],
                          LAYOUT_TO_ORDER.get(m.layout, "C"), m.data, what=what,
                          bf16_bits=bf16_bits)
