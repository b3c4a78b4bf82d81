"""Striped transfer: large operands and results moved as byte ranges over several gRPC connections
at once (CreateResident, WriteRange, ReadRange; docs/client.md), with as few copies as Python
allows.

WriteRange requests are serialized by hand: the protobuf wire bytes of {handle, offset, data} are
one join of a small header and a memoryview of the operand's own bytes (one copy, where
protobuf's `data=slice.tobytes()` then SerializeToString make two). ReadRange replies are parsed
by hand: the data field is copied straight from the received bytes into its slice of one result
array allocated up front (one copy, where FromString, the field access and a join make three).
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, List, Optional, Sequence, Tuple

import grpc
import numpy as np

from ._stubs import pb
from ._wire import read_varint, varint
from .errors import error_for, from_rpc_error

CREATE = "/matserve.v1.MatrixService/CreateResident"
WRITE = "/matserve.v1.MatrixService/WriteRange"
READ = "/matserve.v1.MatrixService/ReadRange"
RELEASE = "/matserve.v1.MatrixService/Release"


def encode_write_range(handle: bytes, offset: int, data: memoryview) -> bytes:
    """The wire bytes of WriteRangeRequest{handle=1, offset=2, data=3}: one copy of `data`."""
    head = (b"\x0a" + varint(len(handle)) + handle + b"\x10" + varint(offset) + b"\x1a" +
            varint(data.nbytes))
    return b"".join((head, data))


def read_range_into(reply: bytes, out: np.ndarray) -> None:
    """Copies the data field of ReadRangeReply wire bytes into `out` (uint8, its exact size);
    other fields are skipped. One copy."""
    buf = memoryview(reply)
    pos = 0
    got = None
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = read_varint(buf, pos)
            if field == 1:
                got = (pos, length)
            pos += length
        elif wire == 0:
            _, pos = read_varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"wire type {wire}")
    if got is None or got[1] != out.nbytes:
        raise error_for(grpc.StatusCode.DATA_LOSS,
                        f"ReadRange returned {0 if got is None else got[1]} bytes for a range of "
                        f"{out.nbytes}")
    out[:] = np.frombuffer(reply, dtype=np.uint8, count=got[1], offset=got[0])


def _ranges(sizes: Sequence[int], chunk: int) -> List[Tuple[int, int, int]]:
    """(item, offset, length) of every range of every item."""
    return [(i, off, min(chunk, size - off)) for i, size in enumerate(sizes)
            for off in range(0, size, chunk)]


def _create_request(prepared, colocate_with: str) -> "pb.CreateResidentRequest":
    return pb.CreateResidentRequest(header=_header(prepared), colocate_with=colocate_with)


def _misplaced(infos: Sequence["pb.ResidentInfo"]) -> List[int]:
    """Indexes of the matrices not on the first one's device (created concurrently, a
    multi-GPU server may have placed them apart)."""
    return [i for i, info in enumerate(infos) if i and info.device != infos[0].device]


def _header(prepared) -> "pb.Matrix":
    return pb.Matrix(rows=prepared.rows, cols=prepared.cols, dtype=prepared.header().dtype,
                     layout=prepared.header().layout)


def _identity(b):
    return b


class Stripes:
    """One channel per stripe (distinct grpc.channel_id, own subchannel pool: own TCP
    connection), the same credentials and metadata as the client's main channel, and a thread
    pool of one worker per stripe."""

    def __init__(self, target: str, count: int, chunk_bytes: int, options: Sequence[Any],
                 credentials: Optional[grpc.ChannelCredentials], interceptor) -> None:
        self.chunk_bytes = int(chunk_bytes)
        self._channels = []
        self._calls = []
        for i in range(count):
            opts = [*options, ("grpc.channel_id", i + 1), ("grpc.use_local_subchannel_pool", 1)]
            channel = (grpc.secure_channel(target, credentials, options=opts)
                       if credentials is not None else grpc.insecure_channel(target, options=opts))
            self._channels.append(channel)
            calls = grpc.intercept_channel(channel, interceptor)
            self._calls.append((
                calls.unary_unary(CREATE,
                                  request_serializer=pb.CreateResidentRequest.SerializeToString,
                                  response_deserializer=pb.UploadReply.FromString),
                calls.unary_unary(WRITE, request_serializer=_identity,
                                  response_deserializer=pb.WriteRangeReply.FromString),
                calls.unary_unary(READ, request_serializer=pb.ReadRangeRequest.SerializeToString,
                                  response_deserializer=_identity),
                calls.unary_unary(RELEASE, request_serializer=pb.ReleaseRequest.SerializeToString,
                                  response_deserializer=pb.ReleaseReply.FromString)))
        self._pool = ThreadPoolExecutor(count, thread_name_prefix="matserve-stripe")

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for c in self._channels:
            c.close()

    def _run(self, ranges, one) -> None:
        """one(stripe_index, range) for every range, the stripes' workers taking them in turn."""
        it = iter(ranges)
        failed: List[BaseException] = []

        def worker(stripe: int) -> None:
            for r in it:  # next() on a list iterator is atomic under the GIL
                if failed:
                    return
                try:
                    one(stripe, r)
                except BaseException as e:  # noqa: B902 - reported below, the first one wins
                    failed.append(e)
                    return

        futures = [self._pool.submit(worker, s) for s in range(min(len(self._calls), len(ranges)))]
        for f in futures:
            f.result()
        if failed:
            raise failed[0]

    def _create(self, stripe: int, request, timeout: Optional[float]) -> "pb.ResidentInfo":
        try:
            return self._calls[stripe][0](request, timeout=timeout).resident
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def _create_all(self, prepared: Sequence[Any], timeout: Optional[float], made: List[str],
                    colocate_with: str) -> List["pb.ResidentInfo"]:
        """Creates one resident matrix per Prepared, all at once over the stripes' connections
        (one round trip, not one each), appending each handle to `made` as it arrives. A matrix
        a multi-GPU server placed off the first one's device is released and made again beside
        it."""
        requests = [_create_request(p, colocate_with) for p in prepared]
        futures = [self._pool.submit(self._create, i % len(self._calls), r, timeout)
                   for i, r in enumerate(requests[1:], start=1)]
        infos = []
        failed = None
        for f in [None, *futures]:  # every handle made is recorded, also when a create failed
            try:
                infos.append(self._create(0, requests[0], timeout) if f is None else f.result())
                made.append(infos[-1].handle)
            except BaseException as e:  # noqa: B902 - the first one is raised below
                failed = failed or e
        if failed is not None:
            raise failed
        for i in _misplaced(infos):
            # Released now; should that fail, it stays in `made` for the caller to release.
            if self._release(infos[i].handle, timeout):
                made.remove(infos[i].handle)
            infos[i] = self._create(0, _create_request(prepared[i], infos[0].handle), timeout)
            made.append(infos[i].handle)
        return infos

    def _release(self, handle: str, timeout: Optional[float]) -> bool:
        try:
            self._calls[0][3](pb.ReleaseRequest(handles=[handle]), timeout=timeout)
            return True
        except grpc.RpcError:
            return False

    def put(self, prepared: Sequence[Any], timeout: Optional[float], made: List[str],
            colocate_with: str = "") -> List["pb.ResidentInfo"]:
        """Creates one resident matrix per Prepared (all on one device, beside `colocate_with`
        when that names a handle) and writes all their ranges; returns their ResidentInfos.
        Handles are appended to `made` as they are created (the caller releases them, also
        after a failure)."""
        infos = self._create_all(prepared, timeout, made, colocate_with)
        keys = [info.handle.encode() for info in infos]
        views = [memoryview(p.flat) for p in prepared]

        def one(stripe: int, r) -> None:
            item, off, length = r
            try:
                self._calls[stripe][1](encode_write_range(keys[item], off,
                                                          views[item][off:off + length]),
                                       timeout=timeout)
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None

        self._run(_ranges([p.nbytes for p in prepared], self.chunk_bytes), one)
        return infos

    def get(self, handles: Sequence[str], outs: Sequence[np.ndarray],
            timeout: Optional[float]) -> None:
        """Reads each resident matrix into its uint8 array (its exact size), as ranges."""
        def one(stripe: int, r) -> None:
            item, off, length = r
            try:
                reply = self._calls[stripe][2](pb.ReadRangeRequest(
                    handle=handles[item], offset=off, length=length), timeout=timeout)
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
            read_range_into(reply, outs[item][off:off + length])

        self._run(_ranges([o.nbytes for o in outs], self.chunk_bytes), one)


class AsyncStripes:
    """Stripes for the asyncio client: one grpc.aio channel per stripe, one coroutine per stripe
    taking ranges in turn."""

    def __init__(self, target: str, count: int, chunk_bytes: int, options: Sequence[Any],
                 credentials: Optional[grpc.ChannelCredentials]) -> None:
        self.chunk_bytes = int(chunk_bytes)
        self._channels = []
        self._calls = []
        for i in range(count):
            opts = [*options, ("grpc.channel_id", i + 1), ("grpc.use_local_subchannel_pool", 1)]
            channel = (grpc.aio.secure_channel(target, credentials, options=opts)
                       if credentials is not None
                       else grpc.aio.insecure_channel(target, options=opts))
            self._channels.append(channel)
            self._calls.append((
                channel.unary_unary(CREATE,
                                    request_serializer=pb.CreateResidentRequest.SerializeToString,
                                    response_deserializer=pb.UploadReply.FromString),
                channel.unary_unary(WRITE, request_serializer=_identity,
                                    response_deserializer=pb.WriteRangeReply.FromString),
                channel.unary_unary(READ, request_serializer=pb.ReadRangeRequest.SerializeToString,
                                    response_deserializer=_identity),
                channel.unary_unary(RELEASE,
                                    request_serializer=pb.ReleaseRequest.SerializeToString,
                                    response_deserializer=pb.ReleaseReply.FromString)))

    async def close(self) -> None:
        for c in self._channels:
            await c.close()

    async def _run(self, ranges, one) -> None:
        it = iter(ranges)

        async def worker(stripe: int) -> None:
            for r in it:
                await one(stripe, r)

        tasks = [asyncio.ensure_future(worker(s))
                 for s in range(min(len(self._calls), len(ranges)))]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()

    async def _create(self, stripe: int, request, timeout, metadata) -> "pb.ResidentInfo":
        try:
            return (await self._calls[stripe][0](request, timeout=timeout,
                                                 metadata=metadata)).resident
        except grpc.aio.AioRpcError as e:
            raise from_rpc_error(e) from None

    async def put(self, prepared, timeout, metadata, made: List[str],
                  colocate_with: str = "") -> List["pb.ResidentInfo"]:
        """As Stripes.put: every matrix created at once, then every range written."""
        got = await asyncio.gather(
            *(self._create(i % len(self._calls), _create_request(p, colocate_with), timeout,
                           metadata) for i, p in enumerate(prepared)),
            return_exceptions=True)
        made.extend(g.handle for g in got if not isinstance(g, BaseException))
        failed = next((g for g in got if isinstance(g, BaseException)), None)
        if failed is not None:
            raise failed
        infos = list(got)
        for i in _misplaced(infos):
            # Released now; should that fail, it stays in `made` for the caller to release.
            try:
                await self._calls[0][3](pb.ReleaseRequest(handles=[infos[i].handle]),
                                        timeout=timeout, metadata=metadata)
                made.remove(infos[i].handle)
            except grpc.aio.AioRpcError:
                pass
            infos[i] = await self._create(0, _create_request(prepared[i], infos[0].handle),
                                          timeout, metadata)
            made.append(infos[i].handle)
        keys = [info.handle.encode() for info in infos]
        views = [memoryview(p.flat) for p in prepared]

        async def one(stripe: int, r) -> None:
            item, off, length = r
            try:
                await self._calls[stripe][1](
                    encode_write_range(keys[item], off, views[item][off:off + length]),
                    timeout=timeout, metadata=metadata)
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e) from None

        await self._run(_ranges([p.nbytes for p in prepared], self.chunk_bytes), one)
        return infos

    async def get(self, handles, outs, timeout, metadata) -> None:
        async def one(stripe: int, r) -> None:
            item, off, length = r
            try:
                reply = await self._calls[stripe][2](pb.ReadRangeRequest(
                    handle=handles[item], offset=off, length=length), timeout=timeout,
                    metadata=metadata)
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e) from None
            read_range_into(reply, outs[item][off:off + length])

        await self._run(_ranges([o.nbytes for o in outs], self.chunk_bytes), one)
