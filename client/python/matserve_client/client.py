"""Client: the Python face of matserve.v1.MatrixService, taking and returning NumPy arrays.

Wraps one gRPC channel (1 GiB message limits by default). Operands and results too large for one
message go through resident matrices and chunked streams automatically; every failure is raised as a
MatservError subclass carrying the gRPC status code and the server's message.
"""
from __future__ import annotations

import threading
from typing import Any, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from . import dtypes, transfer
from .auth import BearerToken
from ._stubs import pb, rpc
from .encoding import DTYPE_TO_PROTO, ORDER_TO_LAYOUT, Prepared, decode, memory_order, prepare
from .errors import MatservError, Unimplemented, error_for, from_rpc_error
from .resident import ResidentMatrix
from .results import (KernelInfo, MultiplyResult, ResidentInfo, ServerInfo, Timing,
                      TransposeResult, Verification)

Operand = Union[np.ndarray, dtypes.Bfloat16, ResidentMatrix, Any]

DEFAULT_MAX_MESSAGE_BYTES = 1 << 30
DEFAULT_CHUNK_BYTES = 4 << 20
# Room for the message's fields other than the matrix bytes when deciding "fits in one message".
_HEADROOM_BYTES = 64 << 10

PRECISIONS = {None: pb.COMPUTE_DEFAULT, "default": pb.COMPUTE_DEFAULT, "fp64": pb.COMPUTE_FP64,
              "fp32": pb.COMPUTE_FP32, "tf32": pb.COMPUTE_TF32, "fp16": pb.COMPUTE_FP16,
              "bf16": pb.COMPUTE_BF16}


def _order(order: Optional[str]) -> Optional[str]:
    if order is None:
        return None
    key = {"c": "C", "row_major": "C", "row": "C", "f": "F", "col_major": "F",
           "column_major": "F", "col": "F"}.get(str(order).lower())
    if key is None:
        raise ValueError(f"order must be 'C' (row-major) or 'F' (column-major), got {order!r}")
    return key


class Client:
    """A connection to one matserve server.

    >>> from matserve_client import Client
    >>> with Client("localhost:50051") as client:
    ...     r = client.multiply(a, b, precision="tf32", verify=True)
    ...     r.c, r.variant, r.timing.kernel_us, r.verification.rel_l2_error

    target: "host:port". timeout: default deadline in seconds for every call (None: none).
    max_message_bytes: gRPC send/receive limit of this client (default 1 GiB; the server has its
    own). chunk_bytes: chunk size of streamed transfers. auto_stream: move operands and results
    larger than one message through resident matrices and streams instead of failing with
    RESOURCE_EXHAUSTED.
    credentials: grpc.ChannelCredentials for TLS; token: a bearer token sent with every call
    (servers started with --auth_tokens_file); options: extra gRPC channel options.
    """

    def __init__(self, target: str, *, timeout: Optional[float] = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, auto_stream: bool = True,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 token: Optional[str] = None,
                 options: Sequence[Tuple[str, Any]] = ()) -> None:
        if chunk_bytes <= 0:
            raise ValueError("chunk_bytes must be positive")
        self.target = target
        self.timeout = timeout
        self.max_message_bytes = int(max_message_bytes)
        self.chunk_bytes = int(chunk_bytes)
        self.auto_stream = auto_stream
        opts = [("grpc.max_receive_message_length", self.max_message_bytes),
                ("grpc.max_send_message_length", self.max_message_bytes), *options]
        if credentials is not None:
            self._channel = grpc.secure_channel(target, credentials, options=opts)
        else:
            self._channel = grpc.insecure_channel(target, options=opts)
        calls = self._channel
        if token:
            calls = grpc.intercept_channel(self._channel, BearerToken(token))
        self._stub = rpc.MatrixServiceStub(calls)
        self._server_max_message: Optional[int] = None
        self._lock = threading.Lock()

    # --- connection ------------------------------------------------------------------------------
    def close(self) -> None:
        """Closes the channel (resident matrices stay on the server until released or expired)."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Blocks until the channel is connected; raises Unavailable after `timeout` seconds."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise error_for(grpc.StatusCode.UNAVAILABLE,
                            f"{self.target}: not reachable within {timeout} s") from None

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

    def _call(self, method: str, request, timeout: Optional[float]):
        try:
            return getattr(self._stub, method)(request, timeout=self._deadline(timeout))
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def unary_limit_bytes(self) -> int:
        """Largest matrix payload sent or received in one message: the smaller of this client's
        and the server's message limits, less headroom (asks the server once)."""
        with self._lock:
            if self._server_max_message is None:
                try:
                    limits = self.server_info().limits
                    server = limits.max_message_bytes if limits else 0
                except Unimplemented:
                    server = 0
                self._server_max_message = server or self.max_message_bytes
            server = self._server_max_message
        return max(min(self.max_message_bytes, server) - _HEADROOM_BYTES, 1)

    # --- information ----------------------------------------------------------------------------
    def server_info(self, *, timeout: Optional[float] = None) -> ServerInfo:
        """Version, backend, devices and limits of the server."""
        return ServerInfo.from_proto(self._call("GetServerInfo", pb.GetServerInfoRequest(),
                                                timeout))

    def list_kernels(self, operation: Optional[str] = None, *,
                     timeout: Optional[float] = None) -> List[KernelInfo]:
        """Every variant the server can run; operation "gemm" or "transpose" filters."""
        kernels = [KernelInfo.from_proto(k) for k in
                   self._call("ListKernels", pb.ListKernelsRequest(), timeout).kernels]
        if operation is not None:
            kernels = [k for k in kernels if k.operation == operation.lower()]
        return kernels

    # --- operations -----------------------------------------------------------------------------
    def multiply(self, a: Operand, b: Operand, *, c: Optional[Operand] = None,
                 alpha: float = 1.0, beta: float = 0.0, transpose_a: bool = False,
                 transpose_b: bool = False, variant: str = "auto",
                 precision: Optional[str] = None, dtype: Optional[dtypes.DTypeLike] = None,
                 out_dtype: Optional[dtypes.DTypeLike] = None, out_order: Optional[str] = None,
                 verify: bool = False, keep_result: bool = False, bf16_bits: bool = False,
                 timeout: Optional[float] = None) -> MultiplyResult:
        """C = alpha * op(A) @ op(B) + beta * C on the server.

        a, b: 2-D float64/float32/float16 arrays, `Bfloat16`, or `ResidentMatrix` handles; with
        transpose_a the stored `a` is k x m and op(A) = a.T (likewise b). Both must have one dtype;
        `dtype` converts array operands first (dtype="bf16" rounds floats nearest-even).
        c: optional input C (m x n), converted to the output dtype and order; read when beta != 0.
        precision: compute mode, None/"default" (the data's own), "fp64", "fp32", "tf32" (fp32 data
        on tensor cores), "fp16", "bf16" (fp32 data rounded on the device). out_dtype: e.g. "fp32"
        for fp16/bf16 inputs. out_order: "C" or "F" (default: c's order, else "C").
        verify: the server also computes a float64 reference; see result.verification.
        keep_result: leave C on the server; result.resident is its ResidentMatrix, result.c None.
        bf16_bits: return bf16 results as Bfloat16 bits instead of float32 values.
        Raises a MatservError subclass (InvalidArgument, FailedPrecondition, ...) on failure.
        """
        if precision is not None and precision.lower() not in PRECISIONS:
            raise ValueError(f"precision must be one of default, fp64, fp32, tf32, fp16, bf16; "
                             f"got {precision!r}")
        compute = PRECISIONS[precision.lower() if precision else None]
        ops = {"a": self._operand(a, dtype, "a"), "b": self._operand(b, dtype, "b")}
        out_name = dtypes.dtype_name(out_dtype) if out_dtype is not None else ops["a"].dtype
        order = _order(out_order)
        if c is not None:
            if order is None:
                order = c.order if isinstance(c, ResidentMatrix) else memory_order(c)
            ops["c"] = self._operand(c, out_name, "c", order=order)
        order = order or "C"
        request = pb.MultiplyRequest(transpose_a=transpose_a, transpose_b=transpose_b,
                                     alpha=float(alpha), beta=float(beta),
                                     variant=variant or "auto", compute=compute, verify=verify,
                                     output_layout=ORDER_TO_LAYOUT[order])
        if out_dtype is not None:
            request.output_dtype = DTYPE_TO_PROTO[out_name]
        m = _shape(ops["a"])[1 if transpose_a else 0]
        n = _shape(ops["b"])[0 if transpose_b else 1]
        result_bytes = m * n * dtypes.itemsize(out_name)
        temporaries: List[ResidentMatrix] = []
        try:
            kept = self._fill_operands(request, ops, result_bytes, keep_result, temporaries,
                                       timeout)
            reply = self._call("Multiply", request, timeout)
            matrix, resident = self._result(reply.c, reply.result if kept else None,
                                            keep_result, bf16_bits, timeout)
        finally:
            self._release_quietly(temporaries)
        return MultiplyResult(c=matrix, variant=reply.variant, device=reply.device,
                              precision=reply.precision, timing=Timing.from_proto(reply.timing),
                              gflops=reply.gflops, verification=Verification.from_reply(reply),
                              resident=resident)

    def transpose(self, a: Operand, *, scale: float = 1.0, variant: str = "auto",
                  verify: bool = False, dtype: Optional[dtypes.DTypeLike] = None,
                  keep_result: bool = False, in_place: bool = False, bf16_bits: bool = False,
                  timeout: Optional[float] = None) -> TransposeResult:
        """B = scale * A^T on the server (same dtype and order as A).

        a: 2-D array, Bfloat16 or ResidentMatrix. in_place (ResidentMatrix only): transpose the
        resident matrix itself; afterwards `a` describes A^T and result.resident is `a`.
        keep_result: leave B on the server (result.resident). Other arguments as in multiply.
        """
        if in_place and not isinstance(a, ResidentMatrix):
            raise ValueError("in_place transposes a ResidentMatrix (upload the array first)")
        op = self._operand(a, dtype, "a")
        request = pb.TransposeRequest(scale=float(scale), variant=variant or "auto",
                                      verify=verify)
        if in_place:
            request.in_place = True
        temporaries: List[ResidentMatrix] = []
        try:
            kept = self._fill_operands(request, {"a": op}, 0 if in_place else op.nbytes,
                                       keep_result, temporaries, timeout)
            reply = self._call("Transpose", request, timeout)
            if in_place:
                a._update(ResidentInfo.from_proto(reply.result))
                matrix, resident = None, a
            else:
                matrix, resident = self._result(reply.b, reply.result if kept else None,
                                                keep_result, bf16_bits, timeout)
        finally:
            self._release_quietly(temporaries)
        return TransposeResult(b=matrix, variant=reply.variant, device=reply.device,
                               timing=Timing.from_proto(reply.timing), gb_per_s=reply.gb_per_s,
                               verification=Verification.from_reply(reply), resident=resident)

    # --- resident matrices ----------------------------------------------------------------------
    def upload(self, x: Any, *, dtype: Optional[dtypes.DTypeLike] = None,
               order: Optional[str] = None, stream: Optional[bool] = None,
               colocate_with: Optional[Union[str, ResidentMatrix]] = None,
               timeout: Optional[float] = None) -> ResidentMatrix:
        """Copies a matrix into the server's device memory and returns its ResidentMatrix.

        stream: None streams in chunks when the matrix exceeds one message; True/False force it.
        colocate_with: a resident matrix (or handle) whose device the new one goes to, so both can
        be operands of one request on a multi-GPU server; None: the least-loaded device.
        """
        return self._upload(prepare(x, dtype, "matrix", order=_order(order)), stream, timeout,
                            colocate_with)

    def list_resident(self, *, timeout: Optional[float] = None) -> List[ResidentMatrix]:
        """Every resident matrix the server holds (releasing one frees it for every client)."""
        reply = self._call("ListResident", pb.ListResidentRequest(), timeout)
        return [ResidentMatrix(self, ResidentInfo.from_proto(r)) for r in reply.matrices]

    def _upload(self, prepared: Prepared, stream: Optional[bool], timeout: Optional[float],
                colocate_with: Optional[Union[str, ResidentMatrix]] = None) -> ResidentMatrix:
        if stream is None:
            stream = prepared.nbytes > self.unary_limit_bytes()
        if isinstance(colocate_with, ResidentMatrix):
            colocate_with = colocate_with.handle
        info = transfer.upload(self._stub, prepared, stream, self.chunk_bytes,
                               self._deadline(timeout), colocate_with or "")
        return ResidentMatrix(self, ResidentInfo.from_proto(info))

    def _download(self, matrix: ResidentMatrix, *, bf16_bits: bool, stream: Optional[bool],
                  timeout: Optional[float]):
        if stream is None:
            stream = matrix.nbytes > self.unary_limit_bytes()
        return transfer.download(self._stub, matrix.handle, stream, self.chunk_bytes,
                                 self._deadline(timeout), bf16_bits=bf16_bits)

    def _release(self, handle: str, *, timeout: Optional[float]) -> int:
        return transfer.release(self._stub, handle, self._deadline(timeout))

    # --- helpers ----------------------------------------------------------------------------------
    def _operand(self, x: Operand, dtype, what: str,
                 order: Optional[str] = None) -> Union[Prepared, ResidentMatrix]:
        if isinstance(x, ResidentMatrix):
            if x.released:
                raise ValueError(f"{what}: resident matrix {x.handle} was released")
            return x
        return prepare(x, dtype, what, order=order)

    def _fill_operands(self, request, ops, result_bytes: int, keep_result: bool,
                       temporaries: List[ResidentMatrix], timeout: Optional[float]) -> bool:
        """Puts operands in the request as bytes or handles. With auto_stream, operands that do not
        fit in one message together are uploaded (streamed) first, as temporaries; returns whether
        the result is kept on the server (asked for, or too large to come back in the reply)."""
        inline = {k: v for k, v in ops.items() if isinstance(v, Prepared)}
        if self.auto_stream and inline:
            limit = self.unary_limit_bytes()
            # Operands of one request must share a device: uploads join the resident ones.
            anchor = next((v for v in ops.values() if isinstance(v, ResidentMatrix)), None)
            for name in sorted(inline, key=lambda k: inline[k].nbytes, reverse=True):
                if sum(p.nbytes for p in inline.values()) <= limit:
                    break
                resident = self._upload(inline.pop(name), None, timeout, anchor)
                anchor = anchor or resident
                temporaries.append(resident)
                ops[name] = resident
        for name, op in ops.items():
            if isinstance(op, ResidentMatrix):
                setattr(request, f"{name}_handle", op.handle)
            else:
                getattr(request, name).CopyFrom(op.header(with_data=True))
        keep = keep_result or (self.auto_stream and result_bytes > self.unary_limit_bytes())
        if keep:
            request.keep_result = True
        return keep

    def _result(self, matrix, kept, keep_result: bool, bf16_bits: bool, timeout):
        """(array or None, ResidentMatrix or None) from a reply's matrix and kept result."""
        if kept is None:
            return decode(matrix, bf16_bits=bf16_bits), None
        resident = ResidentMatrix(self, ResidentInfo.from_proto(kept))
        if keep_result:
            return None, resident
        try:  # kept only because it was too large for the reply: stream it back
            return resident.download(bf16_bits=bf16_bits, timeout=timeout), None
        finally:
            self._release_quietly([resident])

    def _release_quietly(self, matrices: List[ResidentMatrix]) -> None:
        for m in matrices:
            try:
                m.release()
            except MatservError:
                pass  # best effort: the server's idle TTL frees what a failed release leaves


def _shape(op: Union[Prepared, ResidentMatrix]) -> Tuple[int, int]:
    if isinstance(op, ResidentMatrix):
        return op.shape
    return (op.rows, op.cols)
