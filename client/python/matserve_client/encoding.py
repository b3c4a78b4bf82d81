"""NumPy arrays <-> matserve.v1.Matrix messages (raw little-endian bytes, row- or column-major).

C-contiguous arrays travel ROW_MAJOR and Fortran-contiguous ones COL_MAJOR, as they lie in memory
(no reordering); other arrays are made C-contiguous first. Streaming reads the same bytes in chunks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional, Union

import grpc
import numpy as np

from . import dtypes
from ._stubs import pb
from .errors import error_for

ArrayLike = Union[np.ndarray, dtypes.Bfloat16, Any]

DTYPE_TO_PROTO = {dtypes.FP64: pb.FP64, dtypes.FP32: pb.FP32, dtypes.FP16: pb.FP16,
                  dtypes.BF16: pb.BF16}
PROTO_TO_DTYPE = {v: k for k, v in DTYPE_TO_PROTO.items()}
ORDER_TO_LAYOUT = {"C": pb.ROW_MAJOR, "F": pb.COL_MAJOR}
LAYOUT_TO_ORDER = {pb.ROW_MAJOR: "C", pb.COL_MAJOR: "F"}


@dataclass(frozen=True)
class Prepared:
    """One matrix ready to send: its header fields and its bytes as a flat uint8 view."""

    rows: int
    cols: int
    dtype: str  # matserve name: fp64, fp32, fp16, bf16
    order: str  # "C" (ROW_MAJOR) or "F" (COL_MAJOR)
    flat: np.ndarray  # uint8, rows * cols * itemsize bytes, in `order`

    @property
    def nbytes(self) -> int:
        return self.flat.nbytes

    def header(self, with_data: bool = False) -> "pb.Matrix":
        """The Matrix message; with_data copies the bytes in (one copy, as protobuf needs)."""
        return pb.Matrix(rows=self.rows, cols=self.cols, dtype=DTYPE_TO_PROTO[self.dtype],
                         layout=ORDER_TO_LAYOUT[self.order],
                         data=self.flat.tobytes() if with_data else b"")

    def chunks(self, chunk_bytes: int) -> Iterator[bytes]:
        """The bytes in order, `chunk_bytes` at a time (each chunk is copied once, on demand)."""
        for start in range(0, self.nbytes, chunk_bytes):
            yield self.flat[start:start + chunk_bytes].tobytes()


def memory_order(x: Any) -> str:
    """"F" for a Fortran-ordered (and not also C-ordered) array or Bfloat16, else "C"."""
    arr = x.bits if isinstance(x, dtypes.Bfloat16) else x
    if isinstance(arr, np.ndarray) and arr.flags.f_contiguous and not arr.flags.c_contiguous:
        return "F"
    return "C"


def prepare(x: ArrayLike, dtype: Optional[dtypes.DTypeLike] = None, what: str = "matrix",
            order: Optional[str] = None) -> Prepared:
    """Checks and lays out one 2-D operand.

    x: a float64/float32/float16 array (or array-like), or a `Bfloat16`. dtype converts first:
    "bf16" rounds float values nearest-even, "fp32" etc. cast. order forces "C" or "F".
    """
    want = dtypes.dtype_name(dtype) if dtype is not None else None
    if isinstance(x, dtypes.Bfloat16):
        if want not in (None, dtypes.BF16):
            x = x.to_float32()
        else:
            want = dtypes.BF16
    if not isinstance(x, (np.ndarray, dtypes.Bfloat16)):
        x = np.asarray(x, dtype=np.float64 if want is None else None)
    if isinstance(x, np.ndarray) and want == dtypes.BF16:
        if x.dtype == np.uint16:
            raise TypeError(f"{what}: uint16 data is ambiguous; wrap bf16 bit patterns in "
                            "Bfloat16(bits) instead of passing dtype='bf16'")
        x = dtypes.Bfloat16.from_float(x)
    if isinstance(x, dtypes.Bfloat16):
        arr, name = x.bits, dtypes.BF16
    else:
        arr = x
        if want is not None:
            arr = arr.astype(dtypes.wire_dtype(want), order="K", copy=False)
        name = dtypes.dtype_name(arr.dtype)  # raises TypeError for ints, complex, ...
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


def assemble(rows: int, cols: int, dtype: str, order: str, data: Any, bf16_bits: bool = False,
             what: str = "reply") -> Union[np.ndarray, dtypes.Bfloat16]:
    """A writable array from raw bytes (bytes, bytearray or uint8 array) of a known header."""
    wire = dtypes.wire_dtype(dtype)
    expected = rows * cols * wire.itemsize
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    if buf.nbytes != expected:
        raise error_for(grpc.StatusCode.DATA_LOSS,
                        f"{what}: {buf.nbytes} bytes for a {rows}x{cols} {dtype} matrix, "
                        f"expected {expected}")
    flat = buf.view(wire)
    if not buf.flags.writeable:
        flat = flat.copy()
    arr = flat.reshape((rows, cols), order=order)
    if dtype == dtypes.BF16:
        bits = dtypes.Bfloat16(arr.astype(np.uint16, copy=False))
        return bits if bf16_bits else bits.to_float32()
    return arr.astype(arr.dtype.newbyteorder("="), copy=False)


def decode(m: "pb.Matrix", bf16_bits: bool = False, what: str = "reply") -> Union[np.ndarray,
                                                                                 dtypes.Bfloat16]:
    """A reply Matrix as a NumPy array in its own memory order (float32 for bf16 by default)."""
    if m.dtype not in PROTO_TO_DTYPE:
        raise error_for(grpc.StatusCode.DATA_LOSS, f"{what}: unknown dtype {m.dtype}")
    return assemble(m.rows, m.cols, PROTO_TO_DTYPE[m.dtype], LAYOUT_TO_ORDER.get(m.layout, "C"),
                    m.data, bf16_bits=bf16_bits, what=what)
