"""Shared-memory regions: operands and results by place in a POSIX shared-memory object, no bytes
in the messages (a client on the server's node only).

`Client.create_shared_memory` makes an object, registers it and returns its SharedMemoryRegion;
`Client.register_shared_memory` registers (and maps) an object the caller made itself. `put` copies
an array into the region and returns a ShmMatrix naming that place; `empty` reserves a place for a
result; `array` is a NumPy view of a place (no copy). Pass ShmMatrix objects to Client.multiply /
transpose as operands or as `out`.

multiprocessing's resource_tracker: an object made by create_shared_memory is registered with it on
purpose, as multiprocessing.shared_memory does, so that an object whose region is never closed
(a crash, a forgotten close) is still unlinked when the process exits; the tracker then warns about
that leak, and only then. close() unlinks the object, which also unregisters it from the tracker
(also when something else unlinked it first, so no warning follows). An object registered with
register_shared_memory belongs to the caller: it is mapped with shm_open + mmap directly, never
through the tracker, so it is neither unlinked at exit nor reported as leaked, and the caller's
own SharedMemory bookkeeping is left untouched.

Possession: the server registers an object only for a caller that can write it. It answers the
first RegisterSharedMemory with FAILED_PRECONDITION and a nonce in the trailing metadata
"matserve-shm-nonce"; the client writes the nonce into the first bytes of the range, registers
again, and then puts back the bytes that were there (`written_nonce`). Client.create_shared_memory
and Client.register_shared_memory do this themselves.
"""
from __future__ import annotations

import contextlib
import mmap
import os
import threading
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing import shared_memory as _mp_shm
from typing import TYPE_CHECKING, Any, Iterator, Optional, Union

import grpc
import numpy as np

from . import dtypes
from ._stubs import pb
from .encoding import DTYPE_TO_PROTO, ORDER_TO_LAYOUT, prepare
from .errors import MatserveError
from .results import SharedMemoryInfo

if TYPE_CHECKING:
    from .client import Client

ALIGNMENT = 256  # bytes: where put/empty without an offset place a matrix
NONCE_METADATA_KEY = "matserve-shm-nonce"  # the server's registration nonce (trailing metadata)

# Registrations of this process take turns, handshake and all: the nonce is written over bytes of
# the object that every thread here shares, so two handshakes on one range at once would put back
# each other's nonce instead of the data, and use up each other's nonces. One lock for the process,
# as the one owner of those writes (Client._register holds it).
REGISTRATION_LOCK = threading.Lock()


def nonce_of(error: Any) -> Optional[str]:
    """The registration nonce a refused RegisterSharedMemory carries (a grpc.RpcError), or None."""
    try:
        if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
            return None
        pairs = error.trailing_metadata() or ()
    except AttributeError:
        return None
    for key, value in pairs:
        if key == NONCE_METADATA_KEY:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def _open_object(key: str) -> int:
    try:
        import _posixshmem  # CPython's shm_open, as multiprocessing.shared_memory uses it
        return _posixshmem.shm_open(key, os.O_RDWR, mode=0o600)
    except ImportError:  # shm_open's objects are the files of /dev/shm on Linux
        return os.open("/dev/shm" + key, os.O_RDWR)


@contextlib.contextmanager
def written_nonce(key: str, offset: int, nonce: str) -> Iterator[None]:
    """Writes `nonce` at `offset` of the object `key` for the duration of the block (the proof of
    possession RegisterSharedMemory asks for), then puts back the bytes that were there."""
    data = nonce.encode()
    fd = _open_object(key)
    try:
        saved = os.pread(fd, len(data), offset)
        if len(saved) != len(data):
            raise ValueError(f"shared-memory object {key!r} ends before offset {offset} + "
                             f"{len(data)}: no room for the server's registration nonce")
        os.pwrite(fd, data, offset)
        try:
            yield
        finally:
            os.pwrite(fd, saved, offset)
    finally:
        os.close(fd)


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _map_object(key: str, length: int) -> mmap.mmap:
    """Maps the first `length` bytes of the POSIX shared-memory object `key`, read-write, without
    multiprocessing's resource_tracker (which would unlink the object when this process exits)."""
    fd = _open_object(key)
    try:
        size = os.fstat(fd).st_size
        if size < length:
            raise ValueError(f"shared-memory object {key!r} holds {size} bytes, fewer than the "
                             f"{length} registered")
        return mmap.mmap(fd, length)  # keeps its own descriptor
    finally:
        os.close(fd)


@dataclass(frozen=True, eq=False)
class ShmMatrix:
    """A rows x cols matrix at `offset` bytes into a shared-memory region (from the start of its
    registered range), in `order` ("C" row-major, "F" column-major), densely packed."""

    region: "SharedMemoryRegion"
    offset: int
    rows: int
    cols: int
    dtype: str  # matserve name: fp64, fp32, fp16, bf16, fp8_e4m3
    order: str  # "C" (ROW_MAJOR) or "F" (COL_MAJOR)

    @property
    def shape(self) -> tuple:
        return (self.rows, self.cols)

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * dtypes.itemsize(self.dtype)

    def array(self) -> Union[np.ndarray, dtypes.BitPatterns]:
        """A NumPy view of the matrix in shared memory (no copy; Bfloat16 bits for bf16)."""
        return self.region.array(self)

    def ref(self) -> "pb.SharedMemoryRef":
        return pb.SharedMemoryRef(region=self.region.name, offset=self.offset)

    def header(self) -> "pb.Matrix":
        """The Matrix message naming this place instead of carrying bytes."""
        return pb.Matrix(rows=self.rows, cols=self.cols, dtype=DTYPE_TO_PROTO[self.dtype],
                         layout=ORDER_TO_LAYOUT[self.order], shm=self.ref())

    def __repr__(self) -> str:
        return (f"ShmMatrix(region={self.region.name!r}, offset={self.offset}, "
                f"shape={self.shape}, dtype={self.dtype}, order={self.order})")


class SharedMemoryRegion:
    """A registered range of a POSIX shared-memory object, mapped into this process.

    Made by Client.create_shared_memory (owned: close() also unlinks the object) or
    Client.register_shared_memory (the caller's object: close() leaves it). close(), or leaving a
    `with` block, unregisters the region from the server and unmaps it; Client.close() closes the
    regions still open. Arrays from `array` stay valid until the last of them is gone, even after
    close() (the mapping lives as long as they do).

    Placing: put/empty without an offset take the next free bytes (aligned to 256 bytes) after
    everything placed so far; reset() starts again from the beginning. With an explicit offset they
    place exactly there; overlapping placements are then the caller's to avoid.
    """

    def __init__(self, client: "Client", info: SharedMemoryInfo, mapping: mmap.mmap,
                 owner: Optional[_mp_shm.SharedMemory] = None) -> None:
        self._client = client
        self.info = info
        self._mapping: Optional[mmap.mmap] = mapping
        self._owner = owner
        self._next = 0
        self._closed = False
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """The region's name on the server (what SharedMemoryRef names)."""
        return self.info.name

    @property
    def key(self) -> str:
        """The shared-memory object's name, "/...": /dev/shm/<key without "/"> on Linux."""
        return self.info.key

    @property
    def offset(self) -> int:
        """Start of the registered range within the object, in bytes."""
        return self.info.offset

    @property
    def byte_size(self) -> int:
        return self.info.byte_size

    @property
    def pinned(self) -> bool:
        """The server pinned the range for DMA (CUDA backend): no staging copy."""
        return self.info.pinned

    @property
    def owned(self) -> bool:
        """Made by create_shared_memory: close() unlinks the object."""
        return self._owner is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def used(self) -> int:
        """Bytes from the start of the range to the end of the last placement."""
        return self._next

    # --- placing ----------------------------------------------------------------------------------
    def put(self, array: Any, offset: Optional[int] = None, *,
            dtype: Optional[dtypes.DTypeLike] = None) -> ShmMatrix:
        """Copies a 2-D array (float64/float32/float16, Bfloat16, an ml_dtypes array or a torch
        CPU tensor, as Client.multiply takes them) into the region and returns its ShmMatrix. Its
        C or Fortran order is kept as the layout (other arrays go row-major); dtype converts
        first, as elsewhere in the client. offset: bytes from the start of the range; None takes
        the next free aligned place."""
        if isinstance(array, ShmMatrix):  # e.g. from another region: copied like an array
            array = array.array()
        prepared = prepare(array, dtype, "array")
        with self._lock:
            start = self._reserve(prepared.nbytes, offset)
            self._bytes(start, prepared.nbytes)[:] = prepared.flat
        return ShmMatrix(self, start, prepared.rows, prepared.cols, prepared.dtype,
                         prepared.order)

    def empty(self, rows: int, cols: int, dtype: dtypes.DTypeLike, order: str = "C", *,
              offset: Optional[int] = None) -> ShmMatrix:
        """Reserves a place for a rows x cols matrix (e.g. a result: Client.multiply's `out`).
        The bytes are left as they are; with an explicit offset this also describes a matrix the
        caller placed there by other means."""
        name = dtypes.dtype_name(dtype)
        key = {"C": "C", "F": "F"}.get(str(order).upper())
        if key is None:
            raise ValueError(f"order must be 'C' (row-major) or 'F' (column-major), got {order!r}")
        rows, cols = int(rows), int(cols)
        if rows < 0 or cols < 0:
            raise ValueError(f"rows and cols must not be negative, got {rows} x {cols}")
        with self._lock:
            start = self._reserve(rows * cols * dtypes.itemsize(name), offset)
        return ShmMatrix(self, start, rows, cols, name, key)

    def array(self, matrix: ShmMatrix) -> Union[np.ndarray, dtypes.BitPatterns]:
        """A NumPy view of `matrix` in this region (no copy): float64/32/16 arrays, or Bfloat16
        (Float8E4M3) wrapping the bits of a bf16 (fp8_e4m3) matrix. Writing to it writes the
        shared memory."""
        if matrix.region is not self:
            raise ValueError(f"{matrix!r} lies in region {matrix.region.name!r}, not {self.name!r}")
        with self._lock:
            self._check_open()
            if matrix.offset < 0 or matrix.offset + matrix.nbytes > self.byte_size:
                raise ValueError(f"{matrix!r}: {matrix.nbytes} bytes at offset {matrix.offset} "
                                 f"exceed region {self.name!r} of {self.byte_size} bytes")
            wire = dtypes.wire_dtype(matrix.dtype)
            flat = np.frombuffer(self._mapping, dtype=wire, count=matrix.rows * matrix.cols,
                                 offset=self.offset + matrix.offset)
        return dtypes.from_wire(flat.reshape(matrix.shape, order=matrix.order), matrix.dtype)

    def reset(self) -> None:
        """Places the next put/empty without an offset at the start of the range again (earlier
        ShmMatrix objects then describe bytes that later placements may overwrite)."""
        with self._lock:
            self._next = 0

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"shared-memory region {self.name!r} is closed")

    def _reserve(self, nbytes: int, offset: Optional[int]) -> int:
        """Start of `nbytes` bytes: at `offset`, or the next aligned free place (lock held)."""
        self._check_open()
        start = _align(self._next) if offset is None else int(offset)
        if start < 0:
            raise ValueError(f"offset must not be negative, got {start}")
        if start + nbytes > self.byte_size:
            hint = "; reset() places from the start again" if offset is None else ""
            raise ValueError(f"region {self.name!r}: {nbytes} bytes at offset {start} exceed its "
                             f"{self.byte_size} bytes{hint}")
        self._next = max(self._next, start + nbytes)
        return start

    def _bytes(self, start: int, nbytes: int) -> np.ndarray:
        # np.frombuffer holds a buffer export: the mapping cannot be closed under a view of it.
        return np.frombuffer(self._mapping, dtype=np.uint8, count=nbytes,
                             offset=self.offset + start)

    # --- lifetime ---------------------------------------------------------------------------------
    def close(self, *, timeout: Optional[float] = None) -> None:
        """Unregisters the region from the server (one already gone counts as unregistered),
        unmaps it, and unlinks the object when this client made it. Calling it again does
        nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._client._unregister_region(self, timeout=timeout)
        finally:
            self._release_local()

    def _release_local(self) -> None:
        mapping, self._mapping = self._mapping, None
        if mapping is not None:
            try:
                mapping.close()
            except BufferError:
                pass  # arrays still view it: unmapped when the last of them goes
        owner, self._owner = self._owner, None
        if owner is not None:
            _unlink(owner, self.key)

    def __enter__(self) -> "SharedMemoryRegion":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        kind = "owned" if self._owner is not None else "attached"
        return (f"SharedMemoryRegion({self.name!r}, key={self.key!r}, offset={self.offset}, "
                f"byte_size={self.byte_size}, {kind}{state})")


def _unlink(owner: _mp_shm.SharedMemory, key: str) -> None:
    """Unlinks an object this process made, and drops it from resource_tracker either way."""
    try:
        owner.unlink()  # shm_unlink, then resource_tracker.unregister
    except FileNotFoundError:  # unlinked by someone else: still tracked here, so untrack it
        resource_tracker.unregister(key, "shared_memory")


def create(client: "Client", byte_size: int, name: Optional[str],
           timeout: Optional[float]) -> SharedMemoryRegion:
    """Makes a shared-memory object of byte_size bytes, registers all of it under `name` (default:
    the object's own name) and maps it; the object is unlinked again when registering fails."""
    byte_size = int(byte_size)
    if byte_size <= 0:
        raise ValueError(f"byte_size must be positive, got {byte_size}")
    owner = _mp_shm.SharedMemory(create=True, size=byte_size)  # tracked: see the module doc
    key = "/" + owner.name
    mapping = None
    try:
        owner.close()  # its mapping: the region maps the object itself, so views outlive close()
        mapping = _map_object(key, byte_size)
        info = client._register(name or owner.name, key, 0, byte_size, timeout)
    except BaseException:
        if mapping is not None:
            mapping.close()
        _unlink(owner, key)
        raise
    return SharedMemoryRegion(client, info, mapping, owner)


def attach(client: "Client", name: str, key: str, byte_size: int, offset: int,
           timeout: Optional[float]) -> SharedMemoryRegion:
    """Registers [offset, offset + byte_size) of the caller's object `key` and maps it here."""
    info = client._register(name, key, int(offset), int(byte_size), timeout)
    try:
        mapping = _map_object(key, info.offset + info.byte_size)
    except BaseException:
        try:
            client._unregister_name(info.name, timeout)
        except MatserveError:
            pass  # the mapping's error is the one to report
        raise
    return SharedMemoryRegion(client, info, mapping)
