"""Client.multiply_batched: many products of one shape in one MultiplyBatched call.

Each operand is a 3-D (batch, rows, cols) array, a 2-D matrix that every product uses
("broadcast"), a list of ResidentMatrix handles (one per product, or one for all), or a `Stacked`
resident matrix that holds every product's matrix (the request's a_stacked: one strided launch,
as torch.bmm's 3-D tensors); the batch is the largest operand count. Stacks that together reach the client's stripe_threshold_bytes
are written striped, each stack into one temporary resident matrix (the request's a_stacked /
b_stacked / c_stacked), the results kept stacked in one resident matrix (keep_stacked) and read
back striped into one array: one strided launch on the server, whatever the matrices' size. With
auto_stream, stacks too large for one message are uploaded matrix by matrix as temporary resident
operands, and results too large for the reply are kept on the server, downloaded one by one and
released.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from . import dtypes
from ._stubs import pb
from .encoding import (DTYPE_TO_PROTO, ORDER_TO_LAYOUT, Prepared, assemble_batch,
                       batch_memory_order, decode_batch, prepare_batch, set_fp8_scales)
from .errors import error_for
from .resident import ResidentMatrix, mark_released, name_for_release
from .results import MultiplyBatchedResult, ResidentInfo, Timing, Verification
from .shared_memory import ShmMatrix

if TYPE_CHECKING:
    from .client import Client



@dataclass(frozen=True)
class Stacked:
    """A resident matrix holding `batch` matrices stacked batch-major, as a multiply_batched
    operand: row-major (batch * rows) x cols, column-major rows x (batch * cols) (what
    `client.upload(x.reshape(batch * rows, cols))` makes of a C-ordered 3-D array x)."""

    resident: ResidentMatrix
    batch: int

    def __post_init__(self) -> None:
        rows, cols = self.resident.shape
        stacked = cols if self.resident.order == "F" else rows
        if self.batch < 1 or stacked % self.batch:
            raise ValueError(f"Stacked: a {rows}x{cols} {self.resident.order}-ordered resident "
                             f"matrix does not hold {self.batch} matrices stacked batch-major")

    @property
    def shape(self) -> tuple:
        """One product's matrix: (rows, cols)."""
        rows, cols = self.resident.shape
        if self.resident.order == "F":
            return rows, cols // self.batch
        return rows // self.batch, cols


BatchOperand = Union[np.ndarray, dtypes.Bfloat16, ResidentMatrix, Sequence[ResidentMatrix],
                     Stacked, Any]
# One operand as it goes into the request: a stack of matrices, handles, or a stacked handle.
_Op = Union[Prepared, List[ResidentMatrix], Stacked]


def operand(x: BatchOperand, dtype: Optional[dtypes.DTypeLike], what: str,
            order: Optional[str] = None) -> _Op:
    """An array as a Prepared stack (batch 1 for a 2-D matrix), or handles as a list (a lone
    ResidentMatrix: one handle for every product), a Stacked handle as it is. Handles are neither
    converted nor reordered."""
    if isinstance(x, Stacked):
        if x.resident.released:
            raise ValueError(f"{what}: resident matrix {x.resident.handle} was released")
        return x
    if isinstance(x, ResidentMatrix):
        x = [x]
    if isinstance(x, (list, tuple)):
        if not x:
            raise ValueError(f"{what}: an empty list of resident matrices")
        for i, h in enumerate(x):
            if not isinstance(h, ResidentMatrix):
                raise TypeError(f"{what}[{i}]: a list operand holds ResidentMatrix handles, got "
                                f"{type(h).__name__} (stack arrays into one 3-D array instead)")
            if h.released:
                raise ValueError(f"{what}[{i}]: resident matrix {h.handle} was released")
        return list(x)
    if isinstance(x, ShmMatrix):
        raise TypeError(f"{what}: shared-memory matrices are not batched operands; pass a 3-D "
                        "array, a 2-D matrix or ResidentMatrix handles")
    return prepare_batch(x, dtype, what, order=order)


def count(op: _Op) -> int:
    return op.batch if isinstance(op, (Prepared, Stacked)) else len(op)


def shape(op: _Op) -> tuple:
    if isinstance(op, Prepared):
        return op.rows, op.cols
    return op.shape if isinstance(op, Stacked) else op[0].shape


def dtype_of(op: _Op) -> str:
    if isinstance(op, Stacked):
        return op.resident.dtype
    return op.dtype if isinstance(op, Prepared) else op[0].dtype


def order_of(x: BatchOperand) -> str:
    """The order a result follows when c is given without out_order."""
    if isinstance(x, ResidentMatrix):
        return x.order
    if isinstance(x, Stacked):
        return x.resident.order
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], ResidentMatrix):
        return x[0].order
    return batch_memory_order(x)


def _anchor(ops: Dict[str, _Op]) -> Optional[ResidentMatrix]:
    """A resident operand of the call (uploads join its device), or None."""
    for v in ops.values():
        if isinstance(v, Stacked):
            return v.resident
        if isinstance(v, list):
            return v[0]
    return None


def whole_stack(p: Prepared) -> Prepared:
    """A stack as the one 2-D matrix that holds its matrices batch-major (what a_stacked names):
    row-major (batch * rows) x cols, column-major rows x (batch * cols)."""
    if p.order == "F":
        return Prepared(p.rows, p.batch * p.cols, p.dtype, p.order, p.flat)
    return Prepared(p.batch * p.rows, p.cols, p.dtype, p.order, p.flat)


def fill(client: "Client", request, ops: Dict[str, _Op], result_bytes: int, keep_result: bool,
         keep_stacked: bool, temporaries: List[ResidentMatrix],
         timeout: Optional[float]) -> Tuple[bool, bool]:
    """Puts operands in the request as stacks, handle lists or stacked handles (uploading stacks
    that do not fit in one message together, as temporaries, with auto_stream); returns whether
    the results are kept on the server (asked for, striped, or too large for the reply: one each
    with keep_result, else stacked in one) and whether the operands went striped (then the
    results come back striped too)."""
    inline = {k: v for k, v in ops.items() if isinstance(v, Prepared)}
    striped_call = False
    if client._stripes_for(sum(p.nbytes for p in inline.values()), ops.values()):
        anchor = _anchor(ops)
        names = list(inline)
        made = client._put_striped([whole_stack(inline[n]) for n in names], timeout, temporaries,
                                   anchor.handle if anchor is not None else "")
        if made is not None:
            for name, resident in zip(names, made):
                if inline[name].batch == 1:  # one matrix for every product
                    ops[name] = [resident]
                else:
                    del ops[name]
                    setattr(request, f"{name}_stacked", resident.handle)
            inline = {}
            striped_call = True
    limit = client.unary_limit_bytes() if client.auto_stream else 0
    if client.auto_stream and inline:
        # Operands of one request must share a device: uploads join the resident ones.
        anchor = _anchor(ops)
        for name in sorted(inline, key=lambda k: inline[k].nbytes, reverse=True):
            if sum(p.nbytes for p in inline.values()) <= limit:
                break
            stack = inline.pop(name)
            handles = []
            for i in range(stack.batch):
                resident = client._upload(stack.matrix(i), None, timeout, anchor)
                anchor = anchor or resident
                temporaries.append(resident)
                handles.append(resident)
            ops[name] = handles
    for name, op in ops.items():
        if isinstance(op, Stacked):
            setattr(request, f"{name}_stacked", op.resident.handle)
        elif isinstance(op, list):
            getattr(request, f"{name}_handles").extend(h.handle for h in op)
        else:
            getattr(request, name).CopyFrom(op.header(with_data=True))
    keep = (keep_result or keep_stacked or striped_call or
            (client.auto_stream and result_bytes > limit))
    if keep_result:  # the caller's: one each, as asked
        request.keep_result = True
    elif keep:  # the caller's (keep_stacked), or this client's to read back: one for all
        request.keep_stacked = True
    return keep, striped_call


def multiply_batched(client: "Client", a: BatchOperand, b: BatchOperand, *,
                     c: Optional[BatchOperand], alpha: float, beta: float, transpose_a: bool,
                     transpose_b: bool, variant: str, compute: int,
                     dtype: Optional[dtypes.DTypeLike], out_dtype: Optional[dtypes.DTypeLike],
                     order: Optional[str], verify: bool, keep_result: bool,
                     timeout: Optional[float], bf16_bits: bool = False,
                     a_scale: Optional[float] = None, b_scale: Optional[float] = None,
                     keep_stacked: bool = False,
                     release: Sequence[ResidentMatrix] = ()) -> MultiplyBatchedResult:
    """See Client.multiply_batched (`compute` and `order` already checked there)."""
    if keep_result and keep_stacked:
        raise ValueError("keep_result and keep_stacked: give one of them (one resident result "
                         "per product, or one for all)")
    ops: Dict[str, _Op] = {"a": operand(a, dtype, "a"), "b": operand(b, dtype, "b")}
    out_name = dtypes.dtype_name(out_dtype) if out_dtype is not None else dtype_of(ops["a"])
    if c is not None:
        if order is None:
            order = order_of(c)
        ops["c"] = operand(c, out_name, "c", order=order)
    order = order or "C"
    batch = max(count(op) for op in ops.values())
    request = pb.MultiplyBatchedRequest(batch=batch, transpose_a=transpose_a,
                                        transpose_b=transpose_b, alpha=float(alpha),
                                        beta=float(beta), variant=variant or "auto",
                                        compute=compute, verify=verify,
                                        output_layout=ORDER_TO_LAYOUT[order])
    if out_dtype is not None:
        request.output_dtype = DTYPE_TO_PROTO[out_name]
    set_fp8_scales(request, a_scale, b_scale)
    released = name_for_release(request, release)
    m = shape(ops["a"])[1 if transpose_a else 0]
    n = shape(ops["b"])[0 if transpose_b else 1]
    result_bytes = batch * m * n * dtypes.itemsize(out_name)
    temporaries: List[ResidentMatrix] = []
    try:
        kept, striped_call = fill(client, request, ops, result_bytes, keep_result, keep_stacked,
                                  temporaries, timeout)
        reply = client._call("MultiplyBatched", request, timeout, striped_call)
        mark_released(released)
        matrices, residents, stacked = None, [], None
        if not kept:
            matrices = decode_batch(reply.c, bf16_bits=bf16_bits)
        else:
            residents = [ResidentMatrix(client, ResidentInfo.from_proto(r)) for r in reply.results]
            want = batch if keep_result else 1
            if len(residents) != want:
                client._release_quietly(residents)
                raise error_for(grpc.StatusCode.DATA_LOSS,
                                f"reply: {len(residents)} results, expected {want}")
            if keep_stacked:
                stacked, residents = Stacked(residents[0], batch), []
            elif not keep_result:  # kept by this client (striped, or too large for the reply)
                temporaries.extend(residents)  # released with the operands, in one call
                stack, residents = residents[0], []
                if striped_call:
                    matrices = _read_stacked_striped(client, stack, batch, m, n, order, timeout,
                                                     bf16_bits)
                else:
                    matrices = _download_stacked(stack, batch, m, n, order, timeout, bf16_bits)
    finally:
        client._release_quietly(temporaries)
    return MultiplyBatchedResult(c=matrices, variant=reply.variant, device=reply.device,
                                 precision=reply.precision, timing=Timing.from_proto(reply.timing),
                                 gflops=reply.gflops, verification=Verification.from_reply(reply),
                                 residents=residents, stacked=stacked,
                                 fp8_scales=[(s.a_scale, s.b_scale) for s in reply.fp8_scales])


def _read_stacked_striped(client: "Client", stacked: ResidentMatrix, batch: int, m: int,
                          n: int, order: str, timeout: Optional[float],
                          bf16_bits: bool = False) -> Any:
    """The results, kept stacked in one resident matrix, read striped into one preallocated
    buffer, as one (batch, m, n) array."""
    buf = np.empty(stacked.nbytes, dtype=np.uint8)
    client._get_striped([stacked.handle], [buf], timeout)
    return assemble_batch(batch, m, n, stacked.dtype, order, buf, bf16_bits=bf16_bits)


def _download_stacked(stacked: ResidentMatrix, batch: int, m: int, n: int, order: str,
                      timeout: Optional[float], bf16_bits: bool = False) -> Any:
    """The results, kept stacked in one resident matrix, downloaded (streamed when over one
    message) as one (batch, m, n) array in `order`."""
    got = stacked.download(bf16_bits=True, timeout=timeout)  # the bits, widened below if asked
    x = got.bits if isinstance(got, dtypes.BitPatterns) else np.asarray(got)
    flat = x.ravel(order="K").view(np.uint8)  # its storage order: the stack as it was kept
    return assemble_batch(batch, m, n, stacked.dtype, order, flat, bf16_bits=bf16_bits)
