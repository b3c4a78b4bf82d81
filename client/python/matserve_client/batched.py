"""Client.multiply_batched: many products of one shape in one MultiplyBatched call.

Each operand is a 3-D (batch, rows, cols) array, a 2-D matrix that every product uses
("broadcast"), or a list of ResidentMatrix handles (one per product, or one for all); the batch
is the largest operand count. Stacks that together reach the client's stripe_threshold_bytes
are written striped, each stack into one temporary resident matrix (the request's a_stacked /
b_stacked / c_stacked), the results kept stacked in one resident matrix (keep_stacked) and read
back striped into one array: one strided launch on the server, whatever the matrices' size. With
auto_stream, stacks too large for one message are uploaded matrix by matrix as temporary resident
operands, and results too large for the reply are kept on the server, downloaded one by one and
released.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from . import dtypes
from ._stubs import pb
from .encoding import (DTYPE_TO_PROTO, ORDER_TO_LAYOUT, Prepared, assemble_batch,
                       batch_memory_order, decode_batch, prepare_batch, set_fp8_scales)
from .errors import error_for
from .resident import ResidentMatrix
from .results import MultiplyBatchedResult, ResidentInfo, Timing, Verification
from .shared_memory import ShmMatrix

if TYPE_CHECKING:
    from .client import Client

BatchOperand = Union[np.ndarray, dtypes.Bfloat16, ResidentMatrix, Sequence[ResidentMatrix], Any]
# One operand as it goes into the request: a stack of matrices, or handles.
_Op = Union[Prepared, List[ResidentMatrix]]


def operand(x: BatchOperand, dtype: Optional[dtypes.DTypeLike], what: str,
            order: Optional[str] = None) -> _Op:
    """An array as a Prepared stack (batch 1 for a 2-D matrix), or handles as a list (a lone
    ResidentMatrix: one handle for every product). Handles are neither converted nor reordered."""
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
    return op.batch if isinstance(op, Prepared) else len(op)


def shape(op: _Op) -> tuple:
    return (op.rows, op.cols) if isinstance(op, Prepared) else op[0].shape


def dtype_of(op: _Op) -> str:
    return op.dtype if isinstance(op, Prepared) else op[0].dtype


def order_of(x: BatchOperand) -> str:
    """The order a result follows when c is given without out_order."""
    if isinstance(x, ResidentMatrix):
        return x.order
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], ResidentMatrix):
        return x[0].order
    return batch_memory_order(x)


def whole_stack(p: Prepared) -> Prepared:
    """A stack as the one 2-D matrix that holds its matrices batch-major (what a_stacked names):
    row-major (batch * rows) x cols, column-major rows x (batch * cols)."""
    if p.order == "F":
        return Prepared(p.rows, p.batch * p.cols, p.dtype, p.order, p.flat)
    return Prepared(p.batch * p.rows, p.cols, p.dtype, p.order, p.flat)


def fill(client: "Client", request, ops: Dict[str, _Op], result_bytes: int, keep_result: bool,
         temporaries: List[ResidentMatrix], timeout: Optional[float]) -> Tuple[bool, bool]:
    """Puts operands in the request as stacks or handle lists (uploading stacks that do not fit in
    one message together, as temporaries, with auto_stream); returns whether the results are kept
    on the server (asked for, striped, or too large for the reply) and whether the operands went
    striped (then the results come back striped too, kept stacked in one resident matrix)."""
    inline = {k: v for k, v in ops.items() if isinstance(v, Prepared)}
    striped_call = False
    if client._stripes_for(sum(p.nbytes for p in inline.values()), ops.values()):
        anchor = next((v[0] for v in ops.values() if isinstance(v, list)), None)
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
            request.keep_stacked = True  # the results come back striped (multiply_batched)
    limit = client.unary_limit_bytes() if client.auto_stream else 0
    if client.auto_stream and inline:
        # Operands of one request must share a device: uploads join the resident ones.
        anchor = next((v[0] for v in ops.values() if isinstance(v, list)), None)
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
        if isinstance(op, list):
            getattr(request, f"{name}_handles").extend(h.handle for h in op)
        else:
            getattr(request, name).CopyFrom(op.header(with_data=True))
    keep = keep_result or striped_call or (client.auto_stream and result_bytes > limit)
    if keep and not striped_call:
        request.keep_result = True
    elif keep_result:  # striped, and the caller keeps the results: one each, as asked
        request.keep_stacked = False
        request.keep_result = True
    return keep, striped_call


def multiply_batched(client: "Client", a: BatchOperand, b: BatchOperand, *,
                     c: Optional[BatchOperand], alpha: float, beta: float, transpose_a: bool,
                     transpose_b: bool, variant: str, compute: int,
                     dtype: Optional[dtypes.DTypeLike], out_dtype: Optional[dtypes.DTypeLike],
                     order: Optional[str], verify: bool, keep_result: bool,
                     timeout: Optional[float], bf16_bits: bool = False,
                     a_scale: Optional[float] = None,
                     b_scale: Optional[float] = None) -> MultiplyBatchedResult:
    """See Client.multiply_batched (`compute` and `order` already checked there)."""
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
    m = shape(ops["a"])[1 if transpose_a else 0]
    n = shape(ops["b"])[0 if transpose_b else 1]
    result_bytes = batch * m * n * dtypes.itemsize(out_name)
    temporaries: List[ResidentMatrix] = []
    try:
        kept, striped_call = fill(client, request, ops, result_bytes, keep_result, temporaries,
                                  timeout)
        reply = client._call("MultiplyBatched", request, timeout)
        if not kept:
            matrices, residents = decode_batch(reply.c, bf16_bits=bf16_bits), []
        else:
            residents = [ResidentMatrix(client, ResidentInfo.from_proto(r)) for r in reply.results]
            matrices = None
            if not keep_result:  # kept by this client (striped, or too large for the reply)
                try:
                    if striped_call:
                        matrices = _read_stacked_striped(client, residents, batch, m, n, order,
                                                         timeout, bf16_bits)
                    else:
                        matrices = _download_all(residents, batch, order, timeout, bf16_bits)
                finally:
                    client._release_quietly(residents)
                residents = []
            elif len(residents) != batch:
                client._release_quietly(residents)
                raise error_for(grpc.StatusCode.DATA_LOSS,
                                f"reply: {len(residents)} results for a batch of {batch}")
    finally:
        client._release_quietly(temporaries)
    return MultiplyBatchedResult(c=matrices, variant=reply.variant, device=reply.device,
                                 precision=reply.precision, timing=Timing.from_proto(reply.timing),
                                 gflops=reply.gflops, verification=Verification.from_reply(reply),
                                 residents=residents)


def _read_stacked_striped(client: "Client", residents: List[ResidentMatrix], batch: int, m: int,
                          n: int, order: str, timeout: Optional[float],
                          bf16_bits: bool = False) -> Any:
    """The results, kept stacked in one resident matrix, read striped into one preallocated
    buffer, as one (batch, m, n) array."""
    if len(residents) != 1:
        raise error_for(grpc.StatusCode.DATA_LOSS,
                        f"reply: {len(residents)} results for a batch kept stacked (want 1)")
    stacked = residents[0]
    buf = np.empty(stacked.nbytes, dtype=np.uint8)
    client._get_striped([stacked.handle], [buf], timeout)
    return assemble_batch(batch, m, n, stacked.dtype, order, buf, bf16_bits=bf16_bits)


def _download_all(residents: List[ResidentMatrix], batch: int, order: str,
                  timeout: Optional[float], bf16_bits: bool = False) -> Any:
    """Product i's kept result downloaded into out[i] of one (batch, m, n) array in `order` (a
    Bfloat16 of the bits for bf16 with bf16_bits)."""
    if len(residents) != batch:
        raise error_for(grpc.StatusCode.DATA_LOSS,
                        f"reply: {len(residents)} results for a batch of {batch}")
    out = None
    for i, r in enumerate(residents):
        got = r.download(bf16_bits=bf16_bits, timeout=timeout)
        x = got.bits if isinstance(got, dtypes.BitPatterns) else np.asarray(got)
        if out is None:
            rows, cols = x.shape
            out = (np.empty((batch, rows, cols), x.dtype) if order == "C"
                   else np.empty((batch, cols, rows), x.dtype).transpose(0, 2, 1))
        out[i] = x
    return dtypes.from_wire(out, residents[0].dtype) if bf16_bits else out
