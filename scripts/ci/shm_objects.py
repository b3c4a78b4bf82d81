"""POSIX shared-memory objects as a hostile or careless client handles them, for scripts/ci/soak and
scripts/ci/attack-shm.py: objects made, written and read through a descriptor only (never mapped
here, so truncating one behind the server's back cannot fault this process), and
RegisterSharedMemory with the server's possession check (its nonce written into the range)."""
import os
import secrets
import threading

import _posixshmem  # CPython's shm_open / shm_unlink, as multiprocessing.shared_memory uses them

NONCE_KEY = "matserve-shm-nonce"
# Registrations of this process take turns, handshake and all (as the Python client's do): two
# handshakes on one range at once would put back each other's nonce instead of the data.
REGISTRATION_LOCK = threading.Lock()


class ShmObject:
    """A fresh object of `size` bytes (sparse), unlinked by close()."""

    def __init__(self, size, prefix="matserve-ci", mode=0o600):
        self.key = f"/{prefix}-{os.getpid()}-{secrets.token_hex(6)}"
        self.fd = _posixshmem.shm_open(self.key, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode=mode)
        os.ftruncate(self.fd, size)
        self.size = size

    @property
    def path(self):
        return "/dev/shm" + self.key

    def write(self, offset, data):
        os.pwrite(self.fd, bytes(data), offset)

    def read(self, offset, n):
        return os.pread(self.fd, n, offset)

    def truncate(self, size):
        os.ftruncate(self.fd, size)
        self.size = size

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            try:
                _posixshmem.shm_unlink(self.key)
            except FileNotFoundError:
                pass


def nonce_of(error):
    """The nonce a refused RegisterSharedMemory (a grpc.RpcError) carries, or None."""
    for key, value in error.trailing_metadata() or ():
        if key == NONCE_KEY:
            return value.decode() if isinstance(value, bytes) else value
    return None


def register(stub, request, metadata=None, timeout=60, attempts=3):
    """stub.RegisterSharedMemory(request) with the possession handshake: a refusal that carries a
    nonce is answered by writing it at the range's start (through /dev/shm), calling again and
    putting back the bytes. Other errors are raised as they come."""
    with REGISTRATION_LOCK:
        return _register(stub, request, metadata, timeout, attempts)


def _register(stub, request, metadata, timeout, attempts):
    import grpc
    for attempt in range(attempts):
        try:
            return stub.RegisterSharedMemory(request, metadata=metadata, timeout=timeout)
        except grpc.RpcError as e:
            nonce = nonce_of(e)
            if e.code() != grpc.StatusCode.FAILED_PRECONDITION or nonce is None:
                raise
        fd = os.open("/dev/shm" + request.key, os.O_RDWR)
        try:
            saved = os.pread(fd, len(nonce), request.offset)
            os.pwrite(fd, nonce.encode(), request.offset)
            try:
                return stub.RegisterSharedMemory(request, metadata=metadata, timeout=timeout)
            except grpc.RpcError as e:
                if attempt == attempts - 1 or nonce_of(e) is None:
                    raise
            finally:
                os.pwrite(fd, saved, request.offset)
        finally:
            os.close(fd)
    raise AssertionError("unreachable")
