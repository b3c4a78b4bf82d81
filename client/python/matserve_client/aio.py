"""AsyncClient: the asyncio client (grpc.aio), for programs that keep many calls in flight from
one event loop.

    import asyncio
    from matserve_client.aio import AsyncClient

    async def main():
        async with AsyncClient("localhost:50051", timeout=60) as client:
            results = await asyncio.gather(*(client.multiply(a, b) for a, b in pairs))

It covers the calls such programs make: multiply and transpose (operands as arrays in the
message, striped over several connections above a size threshold as in `Client`, or resident
matrices), unary upload, download and release of resident matrices, the
server's kernels, information and health. Operands, options and results are those of the
synchronous `Client` (docs/client.md); matrices above one message, shared memory, CUDA IPC and
batched calls are the synchronous client's.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Union

import grpc
import grpc.aio

import numpy as np

from . import dtypes, health, routing, striped
from . import native as native_plane
from .auth import bearer, check_pairs, current_call_metadata
from ._stubs import pb, rpc
from .client import (_HEADROOM_BYTES, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_STRIPE_CHUNK_BYTES,
                     DEFAULT_STRIPE_THRESHOLD_BYTES, DEFAULT_STRIPES, _compute,
                     _multiply_request, _order)
from .encoding import Prepared, assemble, decode, memory_order, prepare
from .errors import NotFound, PermissionDenied, Unimplemented, from_rpc_error
from .resident import mark_released, name_for_release
from .results import (KernelInfo, MultiplyResult, ResidentInfo, ServerInfo, Timing,
                      TransposeResult, Verification, fp8_scales_of)


class AsyncResidentMatrix:
    """A matrix kept on the server (AsyncClient.upload or keep_result=True); awaitable download()
    and release(). Pass it to multiply/transpose of the client that made it."""

    def __init__(self, client: "AsyncClient", info: ResidentInfo) -> None:
        self._client = client
        self.info = info
        self._released = False

    handle = property(lambda self: self.info.handle)
    shape = property(lambda self: self.info.shape)
    dtype = property(lambda self: self.info.dtype)
    order = property(lambda self: self.info.order)
    nbytes = property(lambda self: self.info.nbytes)
    device = property(lambda self: self.info.device)
    released = property(lambda self: self._released)

    async def download(self, *, bf16_bits: bool = False, timeout: Optional[float] = None):
        """The matrix as a NumPy array (float32 for bf16, or Bfloat16 with bf16_bits)."""
        if self._released:
            raise ValueError(f"resident matrix {self.handle} was released")
        reply = await self._client._call("Download", pb.DownloadRequest(handle=self.handle),
                                         timeout)
        return decode(reply.matrix, bf16_bits=bf16_bits)

    async def read_bytes(self, offset: int, length: int, *,
                         timeout: Optional[float] = None) -> bytes:
        """`length` bytes of the matrix's storage from byte `offset` (ReadRange)."""
        if self._released:
            raise ValueError(f"resident matrix {self.handle} was released")
        return await self._client._read_range(self.handle, offset, length, timeout)

    async def release(self, *, timeout: Optional[float] = None) -> int:
        """Frees the device memory; the bytes freed (0 when already released or expired)."""
        if self._released:
            return 0
        try:
            reply = await self._client._call("Release", pb.ReleaseRequest(handle=self.handle),
                                             timeout)
            freed = reply.bytes_freed
        except NotFound:
            freed = 0
        self._released = True
        return freed

    def _mark_released(self) -> None:
        """A call that named this matrix in its release_handles succeeded."""
        self._released = True

    def __repr__(self) -> str:
        state = " released" if self._released else ""
        return (f"AsyncResidentMatrix({self.handle[:8]}..., shape={self.shape}, "
                f"dtype={self.dtype}, device={self.device!r}{state})")


AsyncOperand = Union[AsyncResidentMatrix, Any]


class AsyncClient:
    """A grpc.aio connection to one matserve server. Arguments as for `Client`: target, default
    deadline `timeout` in seconds, `max_message_bytes`, TLS `credentials`, bearer `token`, extra
    channel `options` (several replicas, "host:port,host:port" or dns:///, routed as in Client),
    `metadata` pairs
    sent with every call (and those of enclosing `call_metadata()` blocks), and the striped
    transfer's `stripes`, `stripe_threshold_bytes`, `stripe_chunk_bytes` and `native` (the compiled
    data plane). Use it from one event loop; `async with` closes it."""

    def __init__(self, target: str, *, timeout: Optional[float] = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 token: Optional[str] = None,
                 options: Sequence[Tuple[str, Any]] = (),
                 metadata: Sequence[Tuple[str, str]] = (),
                 stripes: int = DEFAULT_STRIPES,
                 stripe_threshold_bytes: int = DEFAULT_STRIPE_THRESHOLD_BYTES,
                 stripe_chunk_bytes: int = DEFAULT_STRIPE_CHUNK_BYTES,
                 native: Optional[bool] = None) -> None:
        if stripes < 0 or stripe_chunk_bytes <= 0:
            raise ValueError("stripes must be 0 or more and stripe_chunk_bytes positive")
        self.stripes = int(stripes)
        self.stripe_threshold_bytes = int(stripe_threshold_bytes)
        self.stripe_chunk_bytes = int(stripe_chunk_bytes)
        self.target = target
        self.timeout = timeout
        self.max_message_bytes = int(max_message_bytes)
        limits = [("grpc.max_receive_message_length", self.max_message_bytes),
                  ("grpc.max_send_message_length", self.max_message_bytes), *options]
        addresses = routing.replica_addresses(target)
        fixed = check_pairs(metadata, "metadata")
        self._fixed_metadata = ((bearer(token),) if token else ()) + fixed
        self._credentials = credentials
        self._stripes: Optional[striped.AsyncStripes] = None  # made on first use
        self.native = native_plane.wanted(native, credentials, bool(options))
        self._no_ranges = False  # no ranged transfer on the server, or not for this token
        # Several replicas: a channel each, calls routed as in Client (routing.AsyncRoutingStub).
        self._table: Optional[routing.Table] = None
        if addresses is not None:
            opts = limits + routing.channel_options(target, options)
            self._channels = [grpc.aio.secure_channel(a, credentials, options=opts)
                              if credentials is not None
                              else grpc.aio.insecure_channel(a, options=opts) for a in addresses]
            self._table = routing.Table(target, [
                routing.Replica(a, c, rpc.MatrixServiceStub(c))
                for a, c in zip(addresses, self._channels)])
            self._stub = routing.AsyncRoutingStub(self._table, {
                a: c.unary_unary(health.METHOD, request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)
                for a, c in zip(addresses, self._channels)})
            self._health = self._stub.health
            self._channel = self._channels[0]
        else:
            opts = limits + health.balancing_options(target, options)
            if credentials is not None:
                self._channel = grpc.aio.secure_channel(target, credentials, options=opts)
            else:
                self._channel = grpc.aio.insecure_channel(target, options=opts)
            self._channels = [self._channel]
            self._stub = rpc.MatrixServiceStub(self._channel)
            self._health = self._channel.unary_unary(health.METHOD,
                                                     request_serializer=lambda b: b,
                                                     response_deserializer=lambda b: b)
        self._channel_options = opts

    def _metadata(self):
        """The client's pairs and those of the enclosing call_metadata() blocks (None: none)."""
        pairs = self._fixed_metadata + current_call_metadata()
        return pairs or None

    async def close(self) -> None:
        stripes, self._stripes = self._stripes, None
        if stripes is not None:
            await stripes.close()
        for channel in self._channels:
            await channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _call(self, method: str, request, timeout: Optional[float],
                    striped_call: bool = False):
        if striped_call and self.native:  # the striped call's own RPC, at the C++ client's cost
            return await self._stripes.call(method, request, getattr(pb, method + "Reply"),
                                            self._deadline(timeout))
        try:
            return await getattr(self._stub, method)(
                request, timeout=self.timeout if timeout is None else timeout,
                metadata=self._metadata())
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # --- information ----------------------------------------------------------------------------
    async def health(self, service: str = "", *, timeout: Optional[float] = None) -> str:
        """The standard gRPC health status ("SERVING", "NOT_SERVING" while draining)."""
        try:
            reply = await self._health(health.encode_request(service),
                                       timeout=self.timeout if timeout is None else timeout,
                                       metadata=self._metadata())
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return health.decode_status(reply)

    async def server_info(self, *, timeout: Optional[float] = None) -> ServerInfo:
        return ServerInfo.from_proto(await self._call("GetServerInfo",
                                                      pb.GetServerInfoRequest(), timeout))

    async def list_kernels(self, operation: Optional[str] = None, *,
                           timeout: Optional[float] = None) -> List[KernelInfo]:
        reply = await self._call("ListKernels", pb.ListKernelsRequest(), timeout)
        kernels = [KernelInfo.from_proto(k) for k in reply.kernels]
        if operation is not None:
            kernels = [k for k in kernels if k.operation == operation.lower()]
        return kernels

    # --- operations -----------------------------------------------------------------------------
    async def multiply(self, a: AsyncOperand, b: AsyncOperand, *, c: Optional[AsyncOperand] = None,
                       alpha: float = 1.0, beta: float = 0.0, transpose_a: bool = False,
                       transpose_b: bool = False, variant: str = "auto",
                       compute: Optional[str] = None, dtype: Optional[dtypes.DTypeLike] = None,
                       out_dtype: Optional[dtypes.DTypeLike] = None,
                       out_order: Optional[str] = None, verify: bool = False,
                       keep_result: bool = False, bf16_bits: bool = False,
                       timeout: Optional[float] = None,
                       precision: Optional[str] = None,
                       split: Optional[str] = None, a_scale: Optional[float] = None,
                       b_scale: Optional[float] = None,
                       release: Sequence[AsyncResidentMatrix] = ()) -> MultiplyResult:
        """C = alpha * op(A) @ op(B) + beta * C, as Client.multiply (precision: the deprecated
        name of compute); result.resident is an AsyncResidentMatrix with keep_result."""
        compute = _compute(compute, precision)
        request, ops, _, _ = _multiply_request(
            self._operand, a, b, c, dtype=dtype, out_dtype=out_dtype, order=_order(out_order),
            order_of=lambda x: x.order if isinstance(x, AsyncResidentMatrix) else memory_order(x),
            transpose_a=transpose_a, transpose_b=transpose_b, alpha=alpha, beta=beta,
            variant=variant, compute=compute, verify=verify, split=split, a_scale=a_scale,
            b_scale=b_scale)
        request.keep_result = keep_result
        released = name_for_release(request, release)
        made = await self._fill_striped(request, ops, timeout)
        try:
            reply = await self._call("Multiply", request, timeout, made is not None)
            mark_released(released)
            matrix, resident = await self._result(reply.c, reply.result, keep_result, bf16_bits,
                                                  made, timeout)
        finally:
            await self._release_handles(made)
        return MultiplyResult(c=matrix, variant=reply.variant, device=reply.device,
                              precision=reply.precision, timing=Timing.from_proto(reply.timing),
                              gflops=reply.gflops, verification=Verification.from_reply(reply),
                              resident=resident, fp8_scales=fp8_scales_of(reply))

    async def transpose(self, a: AsyncOperand, *, scale: float = 1.0, variant: str = "auto",
                        verify: bool = False, dtype: Optional[dtypes.DTypeLike] = None,
                        keep_result: bool = False, in_place: bool = False,
                        bf16_bits: bool = False,
                        timeout: Optional[float] = None,
                        release: Sequence[AsyncResidentMatrix] = ()) -> TransposeResult:
        """B = scale * A^T, as Client.transpose. in_place: `a` (an AsyncResidentMatrix) becomes
        its transpose on the server; the result's `b` is None and its `resident` is `a`."""
        request = pb.TransposeRequest(scale=float(scale), variant=variant or "auto",
                                      verify=verify, keep_result=keep_result)
        released = name_for_release(request, release)
        if in_place:
            if not isinstance(a, AsyncResidentMatrix):
                raise ValueError("in_place transposes an AsyncResidentMatrix (upload it first)")
            request.in_place = True
            request.a_handle = a.handle
            reply = await self._call("Transpose", request, timeout)
            mark_released(released)
            a.info = ResidentInfo.from_proto(reply.result)
            return TransposeResult(b=None, variant=reply.variant, device=reply.device,
                                   timing=Timing.from_proto(reply.timing),
                                   gb_per_s=reply.gb_per_s,
                                   verification=Verification.from_reply(reply), resident=a)
        made = await self._fill_striped(request, {"a": self._operand(a, dtype, "a")}, timeout)
        try:
            reply = await self._call("Transpose", request, timeout, made is not None)
            mark_released(released)
            matrix, resident = await self._result(reply.b, reply.result, keep_result, bf16_bits,
                                                  made, timeout)
        finally:
            await self._release_handles(made)
        return TransposeResult(b=matrix, variant=reply.variant, device=reply.device,
                               timing=Timing.from_proto(reply.timing), gb_per_s=reply.gb_per_s,
                               verification=Verification.from_reply(reply), resident=resident)

    # --- resident matrices ----------------------------------------------------------------------
    async def upload(self, x: Any, *, dtype: Optional[dtypes.DTypeLike] = None,
                     order: Optional[str] = None,
                     colocate_with: Optional[Union[str, AsyncResidentMatrix]] = None,
                     timeout: Optional[float] = None) -> AsyncResidentMatrix:
        """Copies a matrix into the server's memory: one message, or, at or above the stripe
        threshold, as ranges over the stripes (as a call's operands go)."""
        if isinstance(colocate_with, AsyncResidentMatrix):
            colocate_with = colocate_with.handle
        prepared = prepare(x, dtype, "matrix", order=_order(order))
        if (self.stripes > 0 and not self._no_ranges and self._table is None and
                prepared.nbytes >= self.stripe_threshold_bytes):
            infos = await self._put_striped([prepared], timeout, colocate_with or "")
            if infos is not None:
                return AsyncResidentMatrix(self, ResidentInfo.from_proto(infos[0]))
        reply = await self._call("Upload", pb.UploadRequest(
            matrix=prepared.header(with_data=True), colocate_with=colocate_with or ""), timeout)
        return AsyncResidentMatrix(self, ResidentInfo.from_proto(reply.resident))

    # --- helpers ----------------------------------------------------------------------------------
    def _operand(self, x: AsyncOperand, dtype, what: str,
                 order: Optional[str] = None) -> Union[Prepared, AsyncResidentMatrix]:
        if isinstance(x, AsyncResidentMatrix):
            if x.released:
                raise ValueError(f"{what}: resident matrix {x.handle} was released")
            if x._client is not self:
                raise ValueError(f"{what}: resident matrix {x.handle} belongs to another client")
            return x
        return prepare(x, dtype, what, order=order)

    async def _result(self, matrix, kept, keep_result: bool, bf16_bits: bool,
                      made: Optional[List[str]], timeout: Optional[float]):
        if keep_result:
            return None, AsyncResidentMatrix(self, ResidentInfo.from_proto(kept))
        if made is None:
            return decode(matrix, bf16_bits=bf16_bits), None
        # Striped: the result was kept for this call; read it back in ranges, then release it.
        made.append(kept.handle)
        info = ResidentInfo.from_proto(kept)
        buf = np.empty(info.nbytes, dtype=np.uint8)
        await self._stripes.get([info.handle], [buf], self._deadline(timeout), self._metadata())
        return assemble(info.rows, info.cols, info.dtype, info.order, buf,
                        bf16_bits=bf16_bits), None

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

    async def _fill_striped(self, request, ops, timeout: Optional[float]) -> Optional[List[str]]:
        """Operands into the request (as _fill). Array operands that together reach
        stripe_threshold_bytes are first written striped into resident matrices made for the call
        (the result is then kept and read back striped); returns the handles made, to release
        after the call, or None when the call goes inline."""
        inline = {k: v for k, v in ops.items() if isinstance(v, Prepared)}
        total = sum(p.nbytes for p in inline.values())
        if (self.stripes == 0 or self._no_ranges or total == 0 or self._table is not None or
                total < self.stripe_threshold_bytes):
            _fill(request, ops)
            return None
        names = list(inline)
        infos = await self._put_striped([inline[k] for k in names], timeout)
        if infos is None:
            _fill(request, ops)
            return None
        made = [info.handle for info in infos]
        for name, info in zip(names, infos):
            setattr(request, f"{name}_handle", info.handle)
        _fill(request, {k: v for k, v in ops.items() if k not in inline})
        request.keep_result = True
        return made

    async def _put_striped(self, prepared: List[Prepared], timeout: Optional[float],
                           colocate_with: str = "") -> Optional[list]:
        """The Prepared matrices written striped into resident matrices made for them (the first
        beside `colocate_with`, a handle or ""): their ResidentInfo messages; None (nothing made)
        when the server cannot take ranges (an older server, or no `resident` permission)."""
        made: List[str] = []
        try:
            stripes = await self._striper(timeout)
            return await stripes.put(prepared, self._deadline(timeout), self._metadata(), made,
                                     colocate_with)
        except (Unimplemented, PermissionDenied):
            if made:
                await self._release_handles(made)
                raise
            self._no_ranges = True
            return None
        except BaseException:
            await self._release_handles(made)
            raise

    async def _striper(self, timeout: Optional[float]) -> striped.AsyncStripes:
        if self._stripes is None:
            # A range fits one message of this client and of the server.
            limits = (await self._call("GetServerInfo", pb.GetServerInfoRequest(),
                                       timeout)).limits
            server = limits.max_message_bytes or self.max_message_bytes
            chunk = min(self.stripe_chunk_bytes,
                        max(min(self.max_message_bytes, server) - _HEADROOM_BYTES, 1))
            if self._stripes is None and self.native:
                self._stripes = native_plane.AsyncNativeStripes(
                    self.target, self.stripes, chunk, self.max_message_bytes,
                    lambda: self._fixed_metadata + current_call_metadata(), self._credentials)
            elif self._stripes is None:
                self._stripes = striped.AsyncStripes(self.target, self.stripes, chunk,
                                                     self._channel_options, self._credentials)
        return self._stripes

    async def _read_range(self, handle: str, offset: int, length: int,
                          timeout: Optional[float]) -> bytes:
        reply = await self._call("ReadRange", pb.ReadRangeRequest(handle=handle, offset=offset,
                                                                  length=length), timeout)
        return reply.data

    async def _release_handles(self, handles: Optional[List[str]]) -> None:
        if not handles:
            return
        if isinstance(self._stripes, native_plane.AsyncNativeStripes):  # one server: its stripes
            await self._stripes.release(handles, self.timeout)
            return
        try:
            await self._stub.Release(pb.ReleaseRequest(handles=handles), timeout=self.timeout,
                                     metadata=self._metadata())
        except grpc.RpcError:
            pass  # best effort: the server's idle TTL frees what a failed release leaves


def _fill(request, ops) -> None:
    """Operands into the request: resident ones by handle, arrays as bytes."""
    for name, op in ops.items():
        if isinstance(op, AsyncResidentMatrix):
            setattr(request, f"{name}_handle", op.handle)
        else:
            getattr(request, name).CopyFrom(op.header(with_data=True))
