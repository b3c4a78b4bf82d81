"""Client: the Python face of matserve.v1.MatrixService, taking and returning NumPy arrays.

Wraps one gRPC channel (1 GiB message limits by default). Operands and results too large for one
message go through resident matrices and chunked streams automatically; every failure is raised as a
MatserveError subclass carrying the gRPC status code and the server's message.
"""
from __future__ import annotations

import threading
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from . import batched, dtypes, health, routing, shared_memory, striped, transfer
from . import native as native_plane
from .auth import CallMetadata, bearer, check_pairs
from ._stubs import pb, rpc
from .encoding import (DTYPE_TO_PROTO, ORDER_TO_LAYOUT, PROTO_TO_DTYPE, Prepared, assemble,
                       decode, memory_order, prepare, set_fp8_scales)
from .errors import (MatserveError, NotFound, PermissionDenied, Unimplemented, error_for,
                     from_rpc_error)
from .resident import ResidentMatrix, mark_released, name_for_release
from .results import (KernelInfo, MultiplyBatchedResult, MultiplyResult, ResidentInfo,
                      ServerInfo, SharedMemoryInfo, Timing, TransposeResult, Verification,
                      fp8_scales_of)
from . import cuda_memory
from .shared_memory import SharedMemoryRegion, ShmMatrix

Operand = Union[np.ndarray, dtypes.Bfloat16, ResidentMatrix, ShmMatrix, Any]

DEFAULT_MAX_MESSAGE_BYTES = 1 << 30
DEFAULT_CHUNK_BYTES = 4 << 20
# Striped transfer (docs/client.md): the best of a loopback sweep on an H100 node; striping wins
# from 1024^3 fp32 (8 MiB of operands) up. More than 8 stripes only adds threads contending for
# the GIL here (the C++ client's default is 16).
DEFAULT_STRIPES = 8
DEFAULT_STRIPE_THRESHOLD_BYTES = 8 << 20
DEFAULT_STRIPE_CHUNK_BYTES = 2 << 20
# Room for the message's fields other than the matrix bytes when deciding "fits in one message".
_HEADROOM_BYTES = 64 << 10

# The proto's ComputeMode by name: compute="tf32" is COMPUTE_TF32.
COMPUTE_MODES = {None: pb.COMPUTE_DEFAULT, "default": pb.COMPUTE_DEFAULT, "fp64": pb.COMPUTE_FP64,
                 "fp32": pb.COMPUTE_FP32, "tf32": pb.COMPUTE_TF32, "fp16": pb.COMPUTE_FP16,
                 "bf16": pb.COMPUTE_BF16, "fp8": pb.COMPUTE_FP8}


def _compute(compute: Optional[str], precision: Optional[str] = None) -> int:
    """The ComputeMode of a compute name (ValueError for an unknown one). `precision` is the
    deprecated spelling of `compute`: it warns (DeprecationWarning, at the caller's caller)."""
    if precision is not None:
        if compute is not None and compute.lower() != precision.lower():
            raise TypeError(f"compute={compute!r} and precision={precision!r} disagree; pass "
                            "compute= only")
        warnings.warn("precision= is deprecated; use compute= (the proto's ComputeMode)",
                      DeprecationWarning, stacklevel=3)
        compute = precision
    if compute is not None and compute.lower() not in COMPUTE_MODES:
        raise ValueError(f"compute must be one of default, fp64, fp32, tf32, fp16, bf16, fp8; "
                         f"got {compute!r}")
    return COMPUTE_MODES[compute.lower() if compute else None]


def _order(order: Optional[str]) -> Optional[str]:
    if order is None:
        return None
    key = {"c": "C", "row_major": "C", "row": "C", "f": "F", "col_major": "F",
           "column_major": "F", "col": "F"}.get(str(order).lower())
    if key is None:
        raise ValueError(f"order must be 'C' (row-major) or 'F' (column-major), got {order!r}")
    return key


def _multiply_request(operand, a, b, c, *, dtype, out_dtype, order: Optional[str], order_of,
                      transpose_a: bool, transpose_b: bool, alpha: float, beta: float,
                      variant: str, compute: int, verify: bool, split: Optional[str] = None,
                      a_scale: Optional[float] = None, b_scale: Optional[float] = None):
    """The MultiplyRequest that Client.multiply and AsyncClient.multiply send, all but the places
    of its operands (and keep_result), with the operands prepared: (request, ops, out_name,
    order). `operand(x, dtype, what, order=None)` prepares one operand for its client. The
    result's order: `order` when known (out_order, or the `out` place's), else c's
    (`order_of(c)`), else "C"; c is converted to the output's dtype and order."""
    ops = {"a": operand(a, dtype, "a"), "b": operand(b, dtype, "b")}
    out_name = dtypes.dtype_name(out_dtype) if out_dtype is not None else ops["a"].dtype
    if c is not None:
        if order is None:
            order = order_of(c)
        ops["c"] = operand(c, out_name, "c", order=order)
    order = order or "C"
    request = pb.MultiplyRequest(transpose_a=transpose_a, transpose_b=transpose_b,
                                 alpha=float(alpha), beta=float(beta),
                                 variant=variant or "auto", compute=compute, verify=verify,
                                 output_layout=ORDER_TO_LAYOUT[order])
    if out_dtype is not None:
        request.output_dtype = DTYPE_TO_PROTO[out_name]
    request.split = _split(split)
    set_fp8_scales(request, a_scale, b_scale)
    return request, ops, out_name, order


_SPLITS = {"default": 0, "never": 1, "always": 2}  # the proto's Split values


def _split(split: Optional[str]) -> int:
    """The proto's Split for `split`: None/"default" (the server's flags decide), "never" (one
    GPU), "always" (every GPU the server has free, whatever the size)."""
    name = "default" if split is None else str(split).lower()
    if name not in _SPLITS:
        raise ValueError(f"split: {split!r} is not one of {', '.join(_SPLITS)}")
    return _SPLITS[name]


class Client:
    """A connection to one matserve server.

    >>> from matserve_client import Client
    >>> with Client("localhost:50051") as client:
    ...     r = client.multiply(a, b, compute="tf32", verify=True)
    ...     r.c, r.variant, r.timing.kernel_us, r.verification.rel_l2_error

    target: "host:port". timeout: default deadline in seconds for every call (None: none).
    max_message_bytes: gRPC send/receive limit of this client (default 1 GiB; the server has its
    own). chunk_bytes: chunk size of streamed transfers. auto_stream: move operands and results
    larger than one message through resident matrices and streams instead of failing with
    RESOURCE_EXHAUSTED.
    credentials: grpc.ChannelCredentials for TLS; token: a bearer token sent with every call
    (servers started with --auth_tokens_file); options: extra gRPC channel options.
    Several replicas: a target "host:port,host:port" or "dns:///name:port" (every address the name
    resolves to now) gets one channel per replica; calls on no handle go round robin, every call
    naming a resident handle goes to the replica whose id the handle carries, a call naming a
    shared-memory region to the replica it was registered with (docs/client.md). Striped transfer
    needs a single-replica target. metadata: (key, value) pairs sent with every
    call; `with matserve_client.call_metadata(("x-request-id", "42")):` adds pairs to the calls
    made inside the block.
    stripes, stripe_threshold_bytes, stripe_chunk_bytes: multiply, multiply_batched and transpose
    calls whose array operands together carry at least stripe_threshold_bytes move them, and the
    result, as ranges of stripe_chunk_bytes over `stripes` more connections at once (through
    resident matrices the call makes and releases; the token needs the `resident` permission,
    else the call goes inline). stripes=0: every call inline, as one message.
    native: whether striped calls go through the compiled data plane (matserve_native, built
    with the C++ client; native.py): None (default) when it imports, the channel is plaintext or
    made by `matserve_client.tls_credentials(...)`, and no `options` were given; True always
    (ImportError when it cannot); False never.
    """

    def __init__(self, target: str, *, timeout: Optional[float] = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, auto_stream: bool = True,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 token: Optional[str] = None,
                 options: Sequence[Tuple[str, Any]] = (),
                 metadata: Sequence[Tuple[str, str]] = (),
                 stripes: int = DEFAULT_STRIPES,
                 stripe_threshold_bytes: int = DEFAULT_STRIPE_THRESHOLD_BYTES,
                 stripe_chunk_bytes: int = DEFAULT_STRIPE_CHUNK_BYTES,
                 native: Optional[bool] = None) -> None:
        if chunk_bytes <= 0:
            raise ValueError("chunk_bytes must be positive")
        if stripes < 0 or stripe_chunk_bytes <= 0:
            raise ValueError("stripes must be 0 or more and stripe_chunk_bytes positive")
        self.stripes = int(stripes)
        self.stripe_threshold_bytes = int(stripe_threshold_bytes)
        self.stripe_chunk_bytes = int(stripe_chunk_bytes)
        self.target = target
        self.timeout = timeout
        self.max_message_bytes = int(max_message_bytes)
        self.chunk_bytes = int(chunk_bytes)
        self.auto_stream = auto_stream
        limits = [("grpc.max_receive_message_length", self.max_message_bytes),
                  ("grpc.max_send_message_length", self.max_message_bytes), *options]
        addresses = routing.replica_addresses(target)
        fixed = check_pairs(metadata, "metadata")
        if token:
            fixed = (bearer(token),) + fixed
        self._interceptor = CallMetadata(fixed)
        self._credentials = credentials
        self._stripes: Optional[striped.Stripes] = None  # made on first use
        self.native = native_plane.wanted(native, credentials, bool(options))
        self._no_ranges = False  # the server has no ranged transfer, or the token may not use it
        # Several replicas (docs/client.md): a channel each, calls routed by routing.RoutingStub.
        self._table: Optional[routing.Table] = None
        self._channels: List[grpc.Channel] = []
        if addresses is not None:
            opts = limits + routing.channel_options(target, options)
            replicas, health_calls = [], {}
            for address in addresses:
                channel = (grpc.secure_channel(address, credentials, options=opts)
                           if credentials is not None
                           else grpc.insecure_channel(address, options=opts))
                self._channels.append(channel)
                calls = grpc.intercept_channel(channel, self._interceptor)
                replicas.append(routing.Replica(address, channel, rpc.MatrixServiceStub(calls)))
                health_calls[address] = calls.unary_unary(
                    health.METHOD, request_serializer=lambda b: b,
                    response_deserializer=lambda b: b)
            self._table = routing.Table(target, replicas)
            self._stub = routing.RoutingStub(self._table, health_calls)
            self._health = self._stub.health
            self._channel = self._channels[0]
            self._channel_options = opts
        else:
            opts = limits + health.balancing_options(target, options)
            if credentials is not None:
                self._channel = grpc.secure_channel(target, credentials, options=opts)
            else:
                self._channel = grpc.insecure_channel(target, options=opts)
            self._channels = [self._channel]
            self._channel_options = opts
            calls = grpc.intercept_channel(self._channel, self._interceptor)
            self._stub = rpc.MatrixServiceStub(calls)
            self._health = calls.unary_unary(health.METHOD, request_serializer=lambda b: b,
                                             response_deserializer=lambda b: b)
        self._server_max_message: Optional[int] = None
        self._lock = threading.Lock()
        self._regions: List[SharedMemoryRegion] = []  # open ones, made or registered here
        self._registered: Dict[str, SharedMemoryRegion] = {}  # of those, still registered
        self._regions_lock = threading.Lock()

    # --- connection ------------------------------------------------------------------------------
    def close(self) -> None:
        """Closes the shared-memory regions still open (unregistered; the ones this client made
        unlinked too), then the channel. Resident matrices stay on the server until released or
        expired."""
        try:
            with self._regions_lock:
                regions = list(self._regions)
            for region in regions:
                try:
                    region.close()
                except MatserveError:
                    pass  # closed locally all the same; the server unmaps it at its own exit
        finally:
            with self._lock:
                stripes, self._stripes = self._stripes, None
            if stripes is not None:
                stripes.close()
            for channel in self._channels:
                channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Blocks until the channel (every replica's, for a target naming several) is connected;
        raises Unavailable after `timeout` seconds."""
        try:
            for channel in self._channels:  # every replica of the target
                grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise error_for(grpc.StatusCode.UNAVAILABLE,
                            f"{self.target}: not reachable within {timeout} s") from None

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

    def _call(self, method: str, request, timeout: Optional[float], striped_call: bool = False):
        if striped_call and self.native:  # the striped call's own RPC, at the C++ client's cost
            return self._striper().call(method, request, getattr(pb, method + "Reply"),
                                        self._deadline(timeout))
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
    def health(self, service: str = "", *, timeout: Optional[float] = None) -> str:
        """The server's standard gRPC health status: "SERVING", or "NOT_SERVING" while it drains;
        `service` (e.g. "matserve.v1.MatrixService") asks about one service. Raises NotFound for
        a service the server does not know, Unavailable when it cannot be reached."""
        try:
            reply = self._health(health.encode_request(service),
                                 timeout=self._deadline(timeout))
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return health.decode_status(reply)

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
                 compute: Optional[str] = None, dtype: Optional[dtypes.DTypeLike] = None,
                 out_dtype: Optional[dtypes.DTypeLike] = None, out_order: Optional[str] = None,
                 verify: bool = False, keep_result: bool = False, bf16_bits: bool = False,
                 out: Optional[ShmMatrix] = None, timeout: Optional[float] = None,
                 precision: Optional[str] = None,
                 split: Optional[str] = None, a_scale: Optional[float] = None,
                 b_scale: Optional[float] = None,
                 release: Sequence[ResidentMatrix] = ()) -> MultiplyResult:
        """C = alpha * op(A) @ op(B) + beta * C on the server.

        a, b: 2-D float64/float32/float16 arrays, `Bfloat16`/`Float8E4M3` bits, ml_dtypes
        bfloat16/float8_e4m3fn arrays, torch CPU tensors (each sent in its own dtype),
        `ResidentMatrix` handles, or `ShmMatrix` places in shared memory; with transpose_a the
        stored `a` is k x m and op(A) = a.T (likewise b). Both must have one dtype; `dtype`
        converts array operands first (dtype="bf16" rounds floats nearest-even).
        c: optional input C (m x n), converted to the output dtype and order; read when beta != 0
        (a ShmMatrix c must already have the output dtype and order).
        compute: the proto's ComputeMode, None/"default" (the data's own), "fp64", "fp32", "tf32"
        (fp32 data on tensor cores), "fp16", "bf16" (fp32 data rounded on the device), "fp8"
        (e4m3 tensor cores: the data quantized on the device with per-tensor scales; a GPU with
        fp8 tensor cores, the result fp32, bf16 or fp16). precision: its deprecated name
        (DeprecationWarning). out_dtype: e.g. "fp32" for fp16/bf16 inputs (required for fp8_e4m3
        data). out_order: "C" or "F" (default: out's order, else c's, else "C").
        verify: the server also computes a float64 reference; see result.verification.
        keep_result: leave C on the server; result.resident is its ResidentMatrix, result.c None.
        bf16_bits: return bf16 results as Bfloat16 bits instead of float32 values.
        out: a ShmMatrix (e.g. region.empty(m, n, dtype)) the server writes C into; it must have
        the result's shape, dtype (out_dtype, else the inputs') and order (ValueError otherwise).
        result.c is then out.array(), a view of the shared memory (Bfloat16 bits for bf16).
        split: whether the server may spread this one product over several of its GPUs: None or
        "default" (above its --split_gemm_min_flops), "never", "always"; result.device names
        every GPU that ran ("cuda:0+cuda:1 ...").
        a_scale, b_scale: for fp8_e4m3 data only, the per-tensor scales it was quantized with
        (A as sent times a_scale is the A meant): C = alpha * a_scale * b_scale * op(A) @ op(B)
        + beta * C. Default 1.
        release: resident matrices (e.g. the result this one replaces, or an operand) that the
        server releases once this call has succeeded, in the same round trip; a call that fails
        releases none of them.
        Raises a MatserveError subclass (InvalidArgument, FailedPrecondition, ...) on failure.
        """
        compute = _compute(compute, precision)
        _check_out_place(out, keep_result)
        order = _order(out_order)
        if order is None and out is not None:
            order = out.order
        request, ops, out_name, order = _multiply_request(
            self._operand, a, b, c, dtype=dtype, out_dtype=out_dtype, order=order,
            order_of=lambda x: (x.order if isinstance(x, (ResidentMatrix, ShmMatrix))
                                else memory_order(x)),
            transpose_a=transpose_a, transpose_b=transpose_b, alpha=alpha, beta=beta,
            variant=variant, compute=compute, verify=verify, split=split, a_scale=a_scale,
            b_scale=b_scale)
        released = name_for_release(request, release)
        m = _shape(ops["a"])[1 if transpose_a else 0]
        n = _shape(ops["b"])[0 if transpose_b else 1]
        result_bytes = m * n * dtypes.itemsize(out_name)
        if out is not None:
            _check_out_matches(out, (m, n), out_name, order,
                               "out_dtype, else the inputs' dtype", "out_order")
            request.output_shm.CopyFrom(out.ref())
            result_bytes = 0  # not in the reply
        temporaries: List[ResidentMatrix] = []
        try:
            kept, striped_call = self._fill_operands(request, ops, result_bytes, keep_result,
                                                     temporaries,
                                       timeout)
            reply = self._call("Multiply", request, timeout, striped_call)
            mark_released(released)
            if out is not None:
                matrix, resident = _out_view(out, reply.c), None
            else:
                matrix, resident = self._result(reply.c, reply.result if kept else None,
                                                keep_result, bf16_bits, timeout, striped_call,
                                                temporaries)
        finally:
            self._release_quietly(temporaries)
        return MultiplyResult(c=matrix, variant=reply.variant, device=reply.device,
                              precision=reply.precision, timing=Timing.from_proto(reply.timing),
                              gflops=reply.gflops, verification=Verification.from_reply(reply),
                              resident=resident, fp8_scales=fp8_scales_of(reply))

    def multiply_batched(self, a: batched.BatchOperand, b: batched.BatchOperand, *,
                         c: Optional[batched.BatchOperand] = None, alpha: float = 1.0,
                         beta: float = 0.0, transpose_a: bool = False,
                         transpose_b: bool = False, variant: str = "auto",
                         compute: Optional[str] = None,
                         dtype: Optional[dtypes.DTypeLike] = None,
                         out_dtype: Optional[dtypes.DTypeLike] = None,
                         out_order: Optional[str] = None, verify: bool = False,
                         keep_result: bool = False, timeout: Optional[float] = None,
                         precision: Optional[str] = None,
                         bf16_bits: bool = False, a_scale: Optional[float] = None,
                         b_scale: Optional[float] = None,
                         keep_stacked: bool = False,
                         release: Sequence[ResidentMatrix] = ()) -> MultiplyBatchedResult:
        """C_i = alpha * op(A_i) @ op(B_i) + beta * C_i for i = 0 .. batch-1, in one launch.

        a, b: 3-D (batch, rows, cols) float64/float32/float16 arrays (or `Bfloat16` of 3-D
        bits), a 2-D matrix that every product uses ("broadcast"), a list of `ResidentMatrix`
        handles (one per product; one, or a lone ResidentMatrix, for every product), or a
        `Stacked` resident matrix holding every product's matrix batch-major (e.g.
        `Stacked(client.upload(x.reshape(batch * rows, cols)), batch)`, or a previous call's
        `result.stacked`): the fastest for resident batches of small matrices, one strided launch
        as torch.bmm's. The batch is the largest operand count; the others must have 1 or that many. Operands otherwise as in
        `multiply` (transpose_a: each stored A_i is k x m; `dtype` converts array operands).
        c: optional input C, (batch, m, n), 2-D or handles, converted to the output dtype and
        order; read when beta != 0. compute (precision: its deprecated name), out_dtype, variant
        ("auto" or a ListKernels entry that is `batched`): as in `multiply`. out_order: "C" or
        "F" for every result (default: c's order, else "C"); with "F" each result.c[i] is
        Fortran-contiguous.
        verify: the server checks every product against a float64 reference; result.verification
        holds the largest errors. keep_result: every result stays on the server,
        result.residents[i] is product i's ResidentMatrix and result.c is None. keep_stacked:
        the results stay on the server as one matrix, result.stacked (a `Stacked`), and
        result.c is None. With auto_stream,
        stacks and results too large for one message go through temporary resident matrices.
        bf16_bits: bf16 results come back as one Bfloat16 of (batch, m, n) bits instead of
        float32 values (no widening on the client). a_scale, b_scale, release: as in
        `multiply`.
        Returns a MultiplyBatchedResult: c is (batch, m, n) (float32 for bf16). Raises a
        MatserveError subclass on failure (InvalidArgument for mismatched counts or shapes).
        """
        return batched.multiply_batched(
            self, a, b, c=c, alpha=alpha, beta=beta, transpose_a=transpose_a,
            transpose_b=transpose_b, variant=variant, compute=_compute(compute, precision),
            dtype=dtype,
            out_dtype=out_dtype, order=_order(out_order), verify=verify,
            keep_result=keep_result, timeout=timeout, bf16_bits=bf16_bits, a_scale=a_scale,
            b_scale=b_scale, keep_stacked=keep_stacked, release=release)

    def transpose(self, a: Operand, *, scale: float = 1.0, variant: str = "auto",
                  verify: bool = False, dtype: Optional[dtypes.DTypeLike] = None,
                  keep_result: bool = False, in_place: bool = False, bf16_bits: bool = False,
                  out: Optional[ShmMatrix] = None,
                  timeout: Optional[float] = None,
                  release: Sequence[ResidentMatrix] = ()) -> TransposeResult:
        """B = scale * A^T on the server (same dtype and order as A).

        a: 2-D array (any that multiply takes), ResidentMatrix or ShmMatrix. in_place
        (ResidentMatrix only): transpose the resident matrix itself; afterwards `a` describes A^T
        and result.resident is `a`. keep_result: leave B on the server (result.resident).
        out: a ShmMatrix (cols x rows, A's dtype and order) the server writes B into; result.b is
        then out.array(), a view of the shared memory. Other arguments (release: not `a` with
        in_place) as in multiply.
        """
        if in_place and not isinstance(a, ResidentMatrix):
            raise ValueError("in_place transposes a ResidentMatrix (upload the array first)")
        _check_out_place(out, keep_result)
        if out is not None and in_place:
            raise ValueError("out: not with in_place (the result replaces the resident matrix)")
        op = self._operand(a, dtype, "a")
        request = pb.TransposeRequest(scale=float(scale), variant=variant or "auto",
                                      verify=verify)
        if in_place:
            request.in_place = True
        released = name_for_release(request, release)
        result_bytes = 0 if in_place else op.nbytes
        if out is not None:
            rows, cols = _shape(op)
            _check_out_matches(out, (cols, rows), op.dtype, op.order, "A's dtype", "A's order")
            request.output_shm.CopyFrom(out.ref())
            result_bytes = 0
        temporaries: List[ResidentMatrix] = []
        try:
            kept, striped_call = self._fill_operands(request, {"a": op}, result_bytes,
                                                     keep_result,
                                       temporaries, timeout)
            reply = self._call("Transpose", request, timeout, striped_call)
            mark_released(released)
            if out is not None:
                matrix, resident = _out_view(out, reply.b), None
            elif in_place:
                a._update(ResidentInfo.from_proto(reply.result))
                matrix, resident = None, a
            else:
                matrix, resident = self._result(reply.b, reply.result if kept else None,
                                                keep_result, bf16_bits, timeout, striped_call,
                                                temporaries)
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
        A ShmMatrix in a shared-memory region is read by the server from there (no bytes in the
        message; dtype and order must be its own); a CudaMatrix is sent as bytes.
        """
        if isinstance(x, ShmMatrix) and not isinstance(x, cuda_memory.CudaMatrix):
            x = self._operand(x, dtype, "matrix", order=_order(order))
            if isinstance(colocate_with, ResidentMatrix):
                colocate_with = colocate_with.handle
            info = self._call("Upload", pb.UploadRequest(matrix=x.header(),
                                                         colocate_with=colocate_with or ""),
                              timeout).resident
            return ResidentMatrix(self, ResidentInfo.from_proto(info))
        if isinstance(x, ShmMatrix):  # GPU memory: its bytes
            x = x.array().cpu().numpy() if hasattr(x.array(), "cpu") else x.array()
        return self._upload(prepare(x, dtype, "matrix", order=_order(order)), stream, timeout,
                            colocate_with)

    def list_resident(self, *, timeout: Optional[float] = None) -> List[ResidentMatrix]:
        """Every resident matrix the server holds (releasing one frees it for every client)."""
        reply = self._call("ListResident", pb.ListResidentRequest(), timeout)
        return [ResidentMatrix(self, ResidentInfo.from_proto(r)) for r in reply.matrices]

    def _upload(self, prepared: Prepared, stream: Optional[bool], timeout: Optional[float],
                colocate_with: Optional[Union[str, ResidentMatrix]] = None) -> ResidentMatrix:
        if isinstance(colocate_with, ResidentMatrix):
            colocate_with = colocate_with.handle
        if stream is None and self._stripes_for(prepared.nbytes, [prepared]):
            # Large: as ranges over the stripes' connections, as a striped call's operands go.
            temporaries: List[ResidentMatrix] = []
            made = self._put_striped([prepared], timeout, temporaries, colocate_with or "")
            if made is not None:
                return made[0]
        if stream is None:
            stream = prepared.nbytes > self.unary_limit_bytes()
        info = transfer.upload(self._stub, prepared, stream, self.chunk_bytes,
                               self._deadline(timeout), colocate_with or "")
        return ResidentMatrix(self, ResidentInfo.from_proto(info))

    def _download(self, matrix: ResidentMatrix, *, bf16_bits: bool, stream: Optional[bool],
                  timeout: Optional[float]):
        limit = self.unary_limit_bytes()
        if stream is None:
            stream = matrix.nbytes > limit
        # A chunk is at most half of the smaller message limit (what the server accepts).
        chunk = max(4096, min(self.chunk_bytes, (limit + _HEADROOM_BYTES) // 2))
        return transfer.download(self._stub, matrix.handle, stream, chunk,
                                 self._deadline(timeout), bf16_bits=bf16_bits)

    def _release(self, handle: str, *, timeout: Optional[float]) -> int:
        return transfer.release(self._stub, handle, self._deadline(timeout))

    def _read_range(self, handle: str, offset: int, length: int, *,
                    timeout: Optional[float]) -> bytes:
        return self._call("ReadRange", pb.ReadRangeRequest(handle=handle, offset=offset,
                                                           length=length), timeout).data

    # --- shared memory ------------------------------------------------------------------------
    def create_shared_memory(self, byte_size: int, name: Optional[str] = None, *,
                             timeout: Optional[float] = None) -> SharedMemoryRegion:
        """Makes a POSIX shared-memory object of byte_size bytes, registers it with the server
        under `name` (default: the object's own name) and returns its SharedMemoryRegion.

        Same node only: the server maps the object by name. region.close() (or `with`) unregisters
        it and unlinks the object. Raises FailedPrecondition when the server takes no shared
        memory (ServerLimits.shared_memory), AlreadyExists for a name this caller registered.
        """
        region = shared_memory.create(self, byte_size, name, timeout)
        self._track(region)
        return region

    def register_shared_memory(self, name: str, key: str, byte_size: int, offset: int = 0, *,
                               timeout: Optional[float] = None) -> SharedMemoryRegion:
        """Registers [offset, offset + byte_size) of a shared-memory object the caller made
        (key: its shm_open name, "/..."; for multiprocessing.shared_memory.SharedMemory
        "/" + shm.name) and maps it here for put/empty/array.

        region.close() unregisters and unmaps it; the object itself stays the caller's to unlink.
        Raises NotFound for an object the server cannot open, InvalidArgument for a range outside
        it or a malformed name or key, AlreadyExists for a name this caller registered.
        """
        region = shared_memory.attach(self, name, key, byte_size, offset, timeout)
        self._track(region)
        return region

    def cuda_matrix(self, tensor: Any, name: Optional[str] = None, *,
                    timeout: Optional[float] = None) -> "cuda_memory.CudaMatrix":
        """Shares a dense 2-D GPU tensor (PyTorch, CuPy, ...) with a server on this node through
        CUDA IPC and returns a CudaMatrix: an operand or `out` of multiply/transpose that the
        server reads and writes on the GPU in place (result.c is then the tensor). Close it (or
        use `with`) to unregister; keep the tensor allocated until then. Raises
        FailedPrecondition on a server without CUDA (or with shared memory off), InvalidArgument
        when the server cannot open the handle (another node, another container without the
        GPU)."""
        return cuda_memory.register(self, tensor, name, timeout)

    def unregister_shared_memory(self, name: Optional[str] = None, *,
                                 timeout: Optional[float] = None) -> int:
        """Unregisters one region by name, or with None every region of this caller (with
        authentication off, every caller is one: that is every client's region); returns how
        many. Regions of this client unregistered so stay mapped here until closed. Raises
        NotFound for a name that is not registered."""
        try:
            reply = self._call("UnregisterSharedMemory",
                               pb.UnregisterSharedMemoryRequest(name=name or ""), timeout)
        except NotFound:
            self._untrack(name)
            raise
        self._untrack(name)
        return reply.unregistered

    def list_shared_memory(self, *, timeout: Optional[float] = None) -> List[SharedMemoryInfo]:
        """The regions this caller has registered (every client's with authentication off)."""
        reply = self._call("ListSharedMemory", pb.ListSharedMemoryRequest(), timeout)
        return [SharedMemoryInfo.from_proto(r) for r in reply.regions]

    def _register(self, name: str, key: str, offset: int, byte_size: int,
                  timeout: Optional[float]) -> SharedMemoryInfo:
        """RegisterSharedMemory with the proof of possession the server asks for: its nonce
        written into the range's first bytes for the retry, then the bytes put back. A few tries:
        another process registering the same object at once may use up a nonce first. The
        registrations of this process take turns (shared_memory.REGISTRATION_LOCK)."""
        request = pb.RegisterSharedMemoryRequest(name=name, key=key, offset=offset,
                                                 byte_size=byte_size)
        nonce = None
        with shared_memory.REGISTRATION_LOCK:
            for attempt in range(3):
                try:
                    if nonce is None:
                        reply = self._stub.RegisterSharedMemory(request,
                                                                timeout=self._deadline(timeout))
                    else:
                        with shared_memory.written_nonce(key, offset, nonce):
                            reply = self._stub.RegisterSharedMemory(
                                request, timeout=self._deadline(timeout))
                    return SharedMemoryInfo.from_proto(reply.region)
                except grpc.RpcError as e:
                    nonce = shared_memory.nonce_of(e)
                    if nonce is None or attempt == 2:
                        raise from_rpc_error(e) from None
        raise AssertionError("unreachable")

    def _unregister_name(self, name: str, timeout: Optional[float]) -> None:
        try:
            self._call("UnregisterSharedMemory", pb.UnregisterSharedMemoryRequest(name=name),
                       timeout)
        except NotFound:
            pass  # gone already

    def _unregister_region(self, region: SharedMemoryRegion, *,
                           timeout: Optional[float]) -> None:
        """For region.close(): unregisters it unless unregister_shared_memory already did (its
        name may since name another registration)."""
        with self._regions_lock:
            if region in self._regions:
                self._regions.remove(region)
            if self._registered.get(region.name) is not region:
                return
            del self._registered[region.name]
        self._unregister_name(region.name, timeout)

    def _track(self, region: SharedMemoryRegion) -> None:
        with self._regions_lock:
            self._regions.append(region)
            self._registered[region.name] = region

    def _untrack(self, name: Optional[str]) -> None:
        """Regions no longer registered on the server (they stay open here until closed)."""
        with self._regions_lock:
            if name:
                self._registered.pop(name, None)
            else:
                self._registered.clear()

    # --- helpers ----------------------------------------------------------------------------------
    def _operand(self, x: Operand, dtype, what: str,
                 order: Optional[str] = None) -> Union[Prepared, ResidentMatrix, ShmMatrix]:
        if isinstance(x, ResidentMatrix):
            if x.released:
                raise ValueError(f"{what}: resident matrix {x.handle} was released")
            return x
        if isinstance(x, ShmMatrix):
            if x.region.closed:
                raise ValueError(f"{what}: shared-memory region {x.region.name!r} is closed")
            if dtype is not None and dtypes.dtype_name(dtype) != x.dtype:
                raise ValueError(f"{what}: the shared-memory matrix is {x.dtype}, not "
                                 f"{dtypes.dtype_name(dtype)} (it is not converted in place)")
            if order is not None and order != x.order:
                raise ValueError(f"{what}: the shared-memory matrix is in order {x.order}, not "
                                 f"{order} (it is not reordered in place)")
            return x
        return prepare(x, dtype, what, order=order)

    def _fill_operands(self, request, ops, result_bytes: int, keep_result: bool,
                       temporaries: List[ResidentMatrix],
                       timeout: Optional[float]) -> Tuple[bool, bool]:
        """Puts operands in the request as bytes or handles. Operands that together reach the
        stripe threshold are written striped first, as temporaries; otherwise, with auto_stream,
        operands that do not fit in one message together are uploaded (streamed) first. Returns
        whether the result is kept on the server (asked for, striped, or too large for the reply)
        and whether the operands went striped (then the result comes back striped too)."""
        inline = {k: v for k, v in ops.items() if isinstance(v, Prepared)}
        anchor = next((v for v in ops.values() if isinstance(v, ResidentMatrix)), None)
        striped_call = False
        # Not when the result goes to shared memory (result_bytes 0): it cannot also be kept.
        if result_bytes > 0 and self._stripes_for(sum(p.nbytes for p in inline.values()),
                                                  ops.values()):
            names = list(inline)
            made = self._put_striped([inline[k] for k in names], timeout, temporaries,
                                     anchor.handle if anchor is not None else "")
            if made is not None:
                for name, resident in zip(names, made):
                    ops[name] = resident
                inline = {}
                striped_call = True
                keep_result = True  # the result comes back striped (_result)
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
            elif isinstance(op, ShmMatrix):
                getattr(request, name).CopyFrom(op.header())
            else:
                getattr(request, name).CopyFrom(op.header(with_data=True))
        keep = keep_result or (self.auto_stream and result_bytes > self.unary_limit_bytes())
        if keep:
            request.keep_result = True
        return keep, striped_call

    def _result(self, matrix, kept, keep_result: bool, bf16_bits: bool, timeout,
                striped_call: bool, temporaries: List[ResidentMatrix]):
        """(array or None, ResidentMatrix or None) from a reply's matrix and kept result. A
        result kept only to be read back joins `temporaries` (released with the operands, in
        one call)."""
        if kept is None:
            return decode(matrix, bf16_bits=bf16_bits), None
        resident = ResidentMatrix(self, ResidentInfo.from_proto(kept))
        if keep_result:
            return None, resident
        temporaries.append(resident)
        # Kept by this client (striped, or too large for the reply): read it back.
        if striped_call:
            buf = np.empty(resident.nbytes, dtype=np.uint8)
            self._get_striped([resident.handle], [buf], timeout)
            return assemble(resident.shape[0], resident.shape[1], resident.dtype,
                            resident.order, buf, bf16_bits=bf16_bits), None
        return resident.download(bf16_bits=bf16_bits, timeout=timeout), None

    # --- striped transfer -------------------------------------------------------------------------
    def _stripes_for(self, inline_bytes: int, ops) -> bool:
        """Whether a call with these inline operand bytes goes striped (shared memory: never)."""
        return (self.stripes > 0 and not self._no_ranges and inline_bytes > 0 and
                self._table is None and
                inline_bytes >= self.stripe_threshold_bytes and
                not any(isinstance(op, ShmMatrix) for op in ops))

    def _striper(self) -> striped.Stripes:
        # A range fits one message of this client and of the server.
        chunk = min(self.stripe_chunk_bytes, self.unary_limit_bytes())
        with self._lock:
            if self._stripes is None and self.native:
                self._stripes = native_plane.NativeStripes(self.target, self.stripes, chunk,
                                                           self.max_message_bytes,
                                                           self._interceptor.pairs,
                                                           self._credentials)
            elif self._stripes is None:
                self._stripes = striped.Stripes(self.target, self.stripes, chunk,
                                                self._channel_options, self._credentials,
                                                self._interceptor)
            return self._stripes

    def _put_striped(self, prepared: List[Prepared], timeout: Optional[float],
                     temporaries: List[ResidentMatrix],
                     colocate_with: str) -> Optional[List[ResidentMatrix]]:
        """The Prepared matrices as resident temporaries (the first beside `colocate_with`, a
        handle or ""), written striped; None (nothing made) when the server cannot take ranges
        (an older server, or no `resident` permission)."""
        made: List[str] = []
        try:
            infos = self._striper().put(prepared, self._deadline(timeout), made, colocate_with)
        except (Unimplemented, PermissionDenied):
            if made:
                self._release_handles(made)
                raise
            self._no_ranges = True
            return None
        except BaseException:
            self._release_handles(made)
            raise
        residents = [ResidentMatrix(self, ResidentInfo.from_proto(i)) for i in infos]
        temporaries.extend(residents)
        return residents

    def _get_striped(self, handles: List[str], outs: List[np.ndarray],
                     timeout: Optional[float]) -> None:
        self._striper().get(handles, outs, self._deadline(timeout))

    def _release_handles(self, handles: List[str]) -> None:
        if not handles:
            return
        if isinstance(self._stripes, native_plane.NativeStripes):  # one server: its stripes
            self._stripes.release(handles, self.timeout)
            return
        try:
            self._stub.Release(pb.ReleaseRequest(handles=handles), timeout=self.timeout)
        except grpc.RpcError:
            pass  # best effort: the server's idle TTL frees what a failed release leaves

    def _release_quietly(self, matrices: List[ResidentMatrix]) -> None:
        """Releases the matrices not yet released in one Release call (the server releases each
        handle it still holds even when one fails); best effort: the server's idle TTL frees what
        a failed release leaves."""
        pending = [m for m in matrices if not m.released]
        self._release_handles([m.handle for m in pending])
        for m in pending:
            m._mark_released()


def _shape(op: Union[Prepared, ResidentMatrix, ShmMatrix]) -> Tuple[int, int]:
    if isinstance(op, ResidentMatrix):
        return op.shape
    return (op.rows, op.cols)


def _check_out_place(out: Optional[ShmMatrix], keep_result: bool) -> None:
    if out is None:
        return
    if not isinstance(out, ShmMatrix):
        raise TypeError(f"out: must be a ShmMatrix (region.empty(...) or region.put(...)), got "
                        f"{type(out).__name__}")
    if keep_result:
        raise ValueError("out: not with keep_result (the result goes to shared memory, not the "
                         "device)")
    if out.region.closed:
        raise ValueError(f"out: shared-memory region {out.region.name!r} is closed")


def _check_out_matches(out: ShmMatrix, shape: Tuple[int, int], dtype: str, order: str,
                       dtype_from: str, order_from: str) -> None:
    """ValueError naming the first way `out` differs from the result the call produces."""
    if out.shape != shape:
        raise ValueError(f"out: shape {out.shape} differs from the result's {shape}")
    if out.dtype != dtype:
        raise ValueError(f"out: dtype {out.dtype} differs from the result's {dtype} "
                         f"({dtype_from})")
    if out.order != order:
        raise ValueError(f"out: order {out.order} differs from the result's {order} "
                         f"({order_from})")


def _out_view(out: ShmMatrix, header) -> Union[np.ndarray, dtypes.Bfloat16]:
    """The view of `out` once the server wrote the result there, checked against the reply."""
    if (header.rows, header.cols) != out.shape or PROTO_TO_DTYPE.get(header.dtype) != out.dtype:
        raise error_for(grpc.StatusCode.DATA_LOSS,
                        f"reply: a {header.rows}x{header.cols} result for {out!r}")
    return out.array()
