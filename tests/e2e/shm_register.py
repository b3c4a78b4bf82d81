"""RegisterSharedMemory over the raw stub, with the server's possession check done as a client that
may write the object does it: the first call is refused with a nonce in the trailing metadata
"matserve-shm-nonce"; the nonce goes into the first bytes of the range, the call is made again,
and the bytes that were there are put back."""
import os

import grpc

NONCE_KEY = "matserve-shm-nonce"


def nonce_of(error):
    """The nonce a refused registration carries (a grpc.RpcError), or None."""
    if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
        return None
    for key, value in error.trailing_metadata() or ():
        if key == NONCE_KEY:
            return value
    return None


def write_object(key, offset, data):
    """Writes `data` at `offset` of the POSIX shared-memory object `key`; returns what was there."""
    fd = os.open("/dev/shm" + key, os.O_RDWR)
    try:
        old = os.pread(fd, len(data), offset)
        os.pwrite(fd, data, offset)
        return old
    finally:
        os.close(fd)


def register(method, request, token=None, timeout=60):
    """stub.RegisterSharedMemory(request) with the handshake; errors other than the request for
    a nonce are raised as they come."""
    metadata = [("authorization", f"Bearer {token}")] if token else None
    try:
        return method(request, metadata=metadata, timeout=timeout)
    except grpc.RpcError as e:
        nonce = nonce_of(e)
        if nonce is None:
            raise
    saved = write_object(request.key, request.offset, nonce.encode())
    try:
        return method(request, metadata=metadata, timeout=timeout)
    finally:
        write_object(request.key, request.offset, saved)
