"""Routing over several replicas: one channel per replica, calls on a handle to the replica whose id
the handle carries ("<replica id>/<32 hex>"), everything else round robin.

A target names several replicas as a comma-separated list ("host:port,host:port") or as a
"dns:///name:port" whose name resolves to several addresses (resolved here, once, one channel per
address). `RoutingStub` and `AsyncRoutingStub` stand in for the generated MatrixService stub, so the
clients' calls are unchanged; docs/client.md describes the rules.
"""
from __future__ import annotations

import asyncio
import ipaddress
import itertools
import random
import socket
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import grpc

from ._stubs import pb

SEPARATOR = "/"
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-")
MAX_REPLICA_ID = 48

# Request fields that name resident handles (any message, any depth), and the field of a
# SharedMemoryRef that names a region.
HANDLE_FIELDS = frozenset({"handle", "handles", "a_handle", "b_handle", "c_handle", "a_handles",
                           "b_handles", "c_handles", "colocate_with"})
# Calls answered by every replica together (their repeated fields concatenated).
BROADCAST = frozenset({"ListResident", "ListSharedMemory"})
REGISTER = frozenset({"RegisterSharedMemory", "RegisterCudaMemory"})


def handle_replica(handle: str) -> Optional[str]:
    """The replica id a handle carries; None for a handle without one."""
    at = handle.rfind(SEPARATOR)
    if at <= 0:
        return None
    replica = handle[:at]
    if len(replica) > MAX_REPLICA_ID or not set(replica) <= _ID_CHARS:
        return None
    return replica


def _host_port(name: str) -> Tuple[str, str]:
    if name.startswith("["):
        host, _, rest = name[1:].partition("]")
        return host, rest.lstrip(":") or "443"
    host, _, port = name.rpartition(":")
    if not host:
        return port, "443"
    return host, port


def _address(ip: str, port: str) -> str:
    return f"ipv6:[{ip}]:{port}" if ipaddress.ip_address(ip).version == 6 else f"ipv4:{ip}:{port}"


def resolve(name: str) -> List[str]:
    """Every address "host:port" resolves to, as gRPC targets ("ipv4:1.2.3.4:50051",
    "ipv6:[::1]:50051"), in the resolver's order, without repeats."""
    host, port = _host_port(name)
    infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    out: List[str] = []
    for info in infos:
        address = _address(info[4][0], port)
        if address not in out:
            out.append(address)
    return out


def replica_addresses(target: str,
                      resolver: Callable[[str], List[str]] = resolve) -> Optional[List[str]]:
    """The replicas a target names, one gRPC target each: a comma-separated list, or a
    "dns:///name:port" (every address it resolves to); None for any other target, which keeps one
    channel as gRPC resolves it."""
    if "," in target:
        parts = [p.strip() for p in target.split(",")]
        if any(not p for p in parts):
            raise ValueError(f"target {target!r}: an empty address in the list")
        return parts
    if target.startswith("dns:///"):
        addresses = resolver(target[len("dns:///"):])
        if not addresses:
            raise ValueError(f"target {target!r}: resolves to no address")
        return addresses
    return None


def dns_authority(target: str) -> Optional[str]:
    """The "name:port" of a dns:/// target (the authority and TLS name of its channels)."""
    return target[len("dns:///"):] if target.startswith("dns:///") else None


def channel_options(target: str, options: Sequence[Tuple[str, Any]] = ()) -> List[Tuple[str, Any]]:
    """Channel options of a replica's channel: a dns:/// target's channels, each made to one
    resolved address, keep the name as their authority and TLS name (unless `options` set them)."""
    name = dns_authority(target)
    if name is None:
        return []
    set_already = {key for key, _ in options}
    out = []
    if "grpc.default_authority" not in set_already:
        out.append(("grpc.default_authority", name))
    if "grpc.ssl_target_name_override" not in set_already:
        out.append(("grpc.ssl_target_name_override", _host_port(name)[0]))
    return out


def _repeated(field) -> bool:
    """Whether a field is repeated: protobuf 5.28+ says is_repeated (and newer ones dropped
    label); older ones only have label."""
    repeated = getattr(field, "is_repeated", None)
    if repeated is None:
        return field.label == field.LABEL_REPEATED
    return bool(repeated() if callable(repeated) else repeated)


def _messages(message) -> Iterator[Any]:
    """The message-typed values a message holds (set singular fields, repeated items), without
    touching its scalar and bytes fields (an inline operand's data is never copied)."""
    for field in message.DESCRIPTOR.fields:
        if field.type != field.TYPE_MESSAGE:
            continue
        if _repeated(field):
            yield from getattr(message, field.name)
        elif message.HasField(field.name):
            yield getattr(message, field.name)


def named_handles(message) -> List[str]:
    """Every resident handle a message names, in field order (nested messages too)."""
    out: List[str] = []
    for field in message.DESCRIPTOR.fields:
        if field.name in HANDLE_FIELDS and field.type == field.TYPE_STRING:
            value = getattr(message, field.name)
            out.extend(value if _repeated(field) else [value])
    for item in _messages(message):
        out.extend(named_handles(item))
    return [h for h in out if h]


def named_regions(message) -> List[str]:
    """Every shared-memory region a message's SharedMemoryRefs name (a.shm, output_shm, ...)."""
    out: List[str] = []
    for item in _messages(message):
        if item.DESCRIPTOR.name == "SharedMemoryRef":
            if item.region:
                out.append(item.region)
        else:
            out.extend(named_regions(item))
    return out


class RoutingError(grpc.RpcError):
    """A call the client could not route (or whose replica is gone), shaped like gRPC's errors:
    code() and details()."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class Replica:
    """One replica: its address, channel and calls; its id once known."""

    def __init__(self, address: str, channel, calls) -> None:
        self.address = address
        self.channel = channel
        self.calls = calls  # a stub over the (intercepted) channel
        self.id: Optional[str] = None

    def __repr__(self) -> str:
        return f"Replica({self.address!r}, id={self.id!r})"


class Table:
    """The replicas of a target: round robin (from a random one) for calls on no handle, ids
    learnt from handles the replicas return and from GetServerInfo, and the replica each
    shared-memory region was registered with. Shared by threads."""

    def __init__(self, target: str, replicas: Sequence[Replica],
                 start: Optional[int] = None) -> None:
        self.target = target
        self.replicas = list(replicas)
        self._lock = threading.Lock()
        # Round robin from a random replica (None): short-lived clients spread their first calls.
        self._turn = itertools.count(random.randrange(len(self.replicas)) if start is None
                                     else start)
        self._by_id: Dict[str, Replica] = {}
        self._regions: Dict[str, Replica] = {}
        self._down: set = set()  # addresses that last answered UNAVAILABLE

    def next(self, skip: Iterable[Replica] = ()) -> Optional[Replica]:
        """The next replica in turn, preferring those that did not just fail; None when every
        replica is in `skip`."""
        skipped = set(id(r) for r in skip)
        n = len(self.replicas)
        with self._lock:
            start = next(self._turn)
            order = [self.replicas[(start + i) % n] for i in range(n)]
            down = set(self._down)
        order = [r for r in order if id(r) not in skipped]
        order.sort(key=lambda r: r.address in down)  # stable: healthy ones first, in turn
        return order[0] if order else None

    def mark(self, replica: Replica, up: bool) -> None:
        with self._lock:
            (self._down.discard if up else self._down.add)(replica.address)

    def learn(self, replica: Replica, replica_id: str) -> None:
        if not replica_id:
            return
        with self._lock:
            replica.id = replica_id
            self._by_id[replica_id] = replica

    def learn_handles(self, replica: Replica, reply) -> None:
        """Records the replica id of handles a reply carries (the replica that made them)."""
        for handle in named_handles(reply):
            rid = handle_replica(handle)
            if rid:
                self.learn(replica, rid)

    def known(self, replica_id: str) -> Optional[Replica]:
        with self._lock:
            return self._by_id.get(replica_id)

    def unidentified(self) -> List[Replica]:
        with self._lock:
            return [r for r in self.replicas if r.id is None]

    def ids(self) -> List[str]:
        with self._lock:
            return sorted(self._by_id)

    def region(self, name: str) -> Optional[Replica]:
        with self._lock:
            return self._regions.get(name)

    def set_region(self, name: str, replica: Optional[Replica]) -> None:
        with self._lock:
            if replica is None:
                self._regions.pop(name, None)
            else:
                self._regions[name] = replica

    def forget_regions(self, replica: Replica) -> None:
        with self._lock:
            self._regions = {k: v for k, v in self._regions.items() if v is not replica}

    def unknown_error(self, handle: str, replica_id: Optional[str]) -> RoutingError:
        if replica_id is None:
            return RoutingError(grpc.StatusCode.NOT_FOUND,
                                f"handle {handle[:80]!r} names no replica, and target "
                                f"{self.target!r} names several: cannot route it")
        return RoutingError(grpc.StatusCode.NOT_FOUND,
                            f"handle {handle[:80]!r}: replica {replica_id!r} is not among the "
                            f"replicas of target {self.target!r} (known: "
                            f"{', '.join(self.ids()) or 'none'})")

    def gone_error(self, handle: str, replica: Replica, error: grpc.RpcError) -> RoutingError:
        details = error.details() if hasattr(error, "details") else str(error)
        return RoutingError(grpc.StatusCode.NOT_FOUND,
                            f"handle {handle[:80]!r}: replica {replica.id!r} "
                            f"({replica.address}) that holds it is not reachable: {details}")


def _unavailable(error: grpc.RpcError) -> bool:
    return hasattr(error, "code") and error.code() == grpc.StatusCode.UNAVAILABLE


def _merge(replies: List[Any]):
    """One reply of a broadcast call: the first reply with every repeated field of the others
    appended."""
    out = replies[0]
    for reply in replies[1:]:
        for field, value in reply.ListFields():
            if _repeated(field):
                getattr(out, field.name).extend(value)
    return out


class _Route:
    """Where one call goes: by handle, by region, or round robin."""

    def __init__(self, handle: Optional[str] = None, region: Optional[str] = None) -> None:
        self.handle, self.region = handle, region


def route_for(request) -> _Route:
    handles = named_handles(request)
    if handles:
        return _Route(handle=handles[0])
    regions = named_regions(request)
    return _Route(region=regions[0]) if regions else _Route()


class RoutingStub:
    """Stands in for MatrixServiceStub over several replicas (synchronous calls). `health` is the
    grpc.health.v1 Check call, round robin. Errors are grpc.RpcError, as the generated stub's."""

    def __init__(self, table: Table, health_calls: Dict[str, Callable]) -> None:
        self._table = table
        self._health_calls = health_calls  # by address

    # --- choosing a replica ---------------------------------------------------------------------
    def _by_handle(self, handle: str) -> Replica:
        rid = handle_replica(handle)
        if rid is None:
            raise self._table.unknown_error(handle, None)
        replica = self._table.known(rid)
        if replica is None:
            self._identify()
            replica = self._table.known(rid)
        if replica is None:
            raise self._table.unknown_error(handle, rid)
        return replica

    def _identify(self) -> None:
        """Asks every replica whose id is not known yet for it (GetServerInfo)."""
        for replica in self._table.unidentified():
            try:
                info = replica.calls.GetServerInfo(pb.GetServerInfoRequest(), timeout=10)
            except grpc.RpcError:
                continue
            self._table.learn(replica, info.replica_id)

    def _pinned(self, route: _Route) -> Optional[Replica]:
        if route.handle is not None:
            return self._by_handle(route.handle)
        if route.region is not None:
            return self._table.region(route.region)
        return None

    # --- calls ------------------------------------------------------------------------------------
    def _unary(self, method: str, request, **kwargs):
        if method in BROADCAST:
            return self._broadcast(method, request, **kwargs)
        if method == "Release" and len(request.handles) > 0:
            return self._release_groups(request, **kwargs)
        if method == "UnregisterSharedMemory" and not request.name:
            return self._unregister_all(request, **kwargs)
        route = route_for(request)
        if method == "UnregisterSharedMemory":
            route = _Route(region=request.name)
        if method in REGISTER:
            # Every try of a registration (the second carries the nonce the first was given)
            # goes to one replica: the region's, else the next in turn.
            route = _Route(region=request.name)
            if self._table.region(request.name) is None:
                self._table.set_region(request.name, self._table.next())
        replica = self._pinned(route)
        if replica is not None:
            try:
                reply = getattr(replica.calls, method)(request, **kwargs)
            except grpc.RpcError as e:
                if route.handle is not None and _unavailable(e):
                    raise self._table.gone_error(route.handle, replica, e) from None
                raise
            self._after(method, request, replica, reply)
            return reply
        return self._any(lambda r: getattr(r.calls, method)(request, **kwargs),
                         lambda r, reply: self._after(method, request, r, reply))

    def _any(self, call: Callable[[Replica], Any], after: Callable[[Replica, Any], None]):
        """Round robin; a replica that answers UNAVAILABLE is skipped for the next in turn."""
        tried: List[Replica] = []
        last: Optional[grpc.RpcError] = None
        while True:
            replica = self._table.next(tried)
            if replica is None:
                assert last is not None  # every replica tried: at least one exists
                raise last
            try:
                reply = call(replica)
            except grpc.RpcError as e:
                if not _unavailable(e):
                    raise
                self._table.mark(replica, False)
                tried.append(replica)
                last = e
                continue
            self._table.mark(replica, True)
            after(replica, reply)
            return reply

    def _after(self, method: str, request, replica: Replica, reply) -> None:
        self._table.learn_handles(replica, reply)
        if method in REGISTER:
            self._table.set_region(request.name, replica)
        elif method == "UnregisterSharedMemory":
            self._table.set_region(request.name, None)

    def _each(self, call: Callable[[Replica], Any]) -> List[Any]:
        replies, errors = [], []
        for replica in self._table.replicas:
            try:
                replies.append(call(replica))
            except grpc.RpcError as e:
                if not _unavailable(e):
                    raise
                errors.append(e)
        if not replies:
            raise errors[0]
        return replies

    def _broadcast(self, method: str, request, **kwargs):
        return _merge(self._each(lambda r: getattr(r.calls, method)(request, **kwargs)))

    def _unregister_all(self, request, **kwargs):
        replies = self._each(lambda r: r.calls.UnregisterSharedMemory(request, **kwargs))
        for replica in self._table.replicas:
            self._table.forget_regions(replica)
        out = replies[0]
        out.unregistered = sum(r.unregistered for r in replies)
        return out

    def _release_groups(self, request, **kwargs):
        """Release of several handles: one call per replica holding some of them."""
        groups: Dict[int, Tuple[Replica, List[str]]] = {}
        every = ([request.handle] if request.handle else []) + list(request.handles)
        for handle in every:
            replica = self._by_handle(handle)
            groups.setdefault(id(replica), (replica, []))[1].append(handle)
        freed = 0
        for replica, handles in groups.values():
            try:
                reply = replica.calls.Release(pb.ReleaseRequest(handles=handles), **kwargs)
            except grpc.RpcError as e:
                if _unavailable(e):
                    raise self._table.gone_error(handles[0], replica, e) from None
                raise
            freed += reply.bytes_freed
        return pb.ReleaseReply(bytes_freed=freed)

    def _upload_stream(self, chunks, **kwargs):
        chunks = iter(chunks)
        first = next(chunks, None)
        rest = itertools.chain([] if first is None else [first], chunks)
        colocate = first.colocate_with if first is not None else ""
        if colocate:
            replica = self._by_handle(colocate)
        else:
            replica = self._table.next()
        try:
            reply = replica.calls.UploadStream(rest, **kwargs)
        except grpc.RpcError as e:
            if colocate and _unavailable(e):
                raise self._table.gone_error(colocate, replica, e) from None
            raise
        self._table.learn_handles(replica, reply)
        return reply

    def _download_stream(self, request, **kwargs):
        replica = self._by_handle(request.handle)
        stream = replica.calls.DownloadStream(request, **kwargs)

        def chunks():
            try:
                yield from stream
            except grpc.RpcError as e:
                if _unavailable(e):
                    raise self._table.gone_error(request.handle, replica, e) from None
                raise
        return chunks()

    def health(self, request: bytes, **kwargs) -> bytes:
        return self._any(lambda r: self._health_calls[r.address](request, **kwargs),
                         lambda r, reply: None)

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        if method == "UploadStream":
            return self._upload_stream
        if method == "DownloadStream":
            return self._download_stream
        return lambda request, **kwargs: self._unary(method, request, **kwargs)


class AsyncRoutingStub:
    """RoutingStub for grpc.aio: the same rules, coroutine calls (unary ones only: the asyncio
    client streams nothing)."""

    def __init__(self, table: Table, health_calls: Dict[str, Callable]) -> None:
        self._table = table
        self._health_calls = health_calls
        self._identifying: Optional[asyncio.Lock] = None

    async def _by_handle(self, handle: str) -> Replica:
        rid = handle_replica(handle)
        if rid is None:
            raise self._table.unknown_error(handle, None)
        replica = self._table.known(rid)
        if replica is None:
            await self._identify()
            replica = self._table.known(rid)
        if replica is None:
            raise self._table.unknown_error(handle, rid)
        return replica

    async def _identify(self) -> None:
        async def ask(replica: Replica) -> None:
            try:
                info = await replica.calls.GetServerInfo(pb.GetServerInfoRequest(), timeout=10)
            except grpc.RpcError:
                return
            self._table.learn(replica, info.replica_id)
        await asyncio.gather(*(ask(r) for r in self._table.unidentified()))

    async def _any(self, call, after):
        tried: List[Replica] = []
        last: Optional[grpc.RpcError] = None
        while True:
            replica = self._table.next(tried)
            if replica is None:
                assert last is not None  # every replica tried: at least one exists
                raise last
            try:
                reply = await call(replica)
            except grpc.RpcError as e:
                if not _unavailable(e):
                    raise
                self._table.mark(replica, False)
                tried.append(replica)
                last = e
                continue
            self._table.mark(replica, True)
            after(replica, reply)
            return reply

    async def _unary(self, method: str, request, **kwargs):
        if method in BROADCAST:
            replies = []
            for replica in self._table.replicas:
                try:
                    replies.append(await getattr(replica.calls, method)(request, **kwargs))
                except grpc.RpcError as e:
                    if not _unavailable(e) or (replica is self._table.replicas[-1] and
                                               not replies):
                        raise
            return _merge(replies)
        if method == "Release" and len(request.handles) > 0:
            freed = 0
            every = ([request.handle] if request.handle else []) + list(request.handles)
            groups: Dict[int, Tuple[Replica, List[str]]] = {}
            for handle in every:
                replica = await self._by_handle(handle)
                groups.setdefault(id(replica), (replica, []))[1].append(handle)
            for replica, handles in groups.values():
                try:
                    reply = await replica.calls.Release(pb.ReleaseRequest(handles=handles),
                                                        **kwargs)
                except grpc.RpcError as e:
                    if _unavailable(e):
                        raise self._table.gone_error(handles[0], replica, e) from None
                    raise
                freed += reply.bytes_freed
            return pb.ReleaseReply(bytes_freed=freed)
        route = route_for(request)
        if method in REGISTER:  # every try of a registration to one replica (its nonce)
            route = _Route(region=request.name)
            if self._table.region(request.name) is None:
                self._table.set_region(request.name, self._table.next())
        elif method == "UnregisterSharedMemory":
            route = _Route(region=request.name)
        if route.handle is not None:
            replica = await self._by_handle(route.handle)
        elif route.region is not None:
            replica = self._table.region(route.region)
        else:
            replica = None
        if replica is None:
            return await self._any(lambda r: getattr(r.calls, method)(request, **kwargs),
                                   self._table.learn_handles)
        try:
            reply = await getattr(replica.calls, method)(request, **kwargs)
        except grpc.RpcError as e:
            if route.handle is not None and _unavailable(e):
                raise self._table.gone_error(route.handle, replica, e) from None
            raise
        self._table.learn_handles(replica, reply)
        return reply

    async def health(self, request: bytes, **kwargs) -> bytes:
        return await self._any(lambda r: self._health_calls[r.address](request, **kwargs),
                               lambda r, reply: None)

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda request, **kwargs: self._unary(method, request, **kwargs)
