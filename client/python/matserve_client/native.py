"""The compiled data plane: striped transfers through matserve_native, the C++ client's striped
transfer behind Python's C API (client/python/native, built with the C++ client into the Python
stubs' folder). A call's operands are sent from the arrays' own memory and its result read into
one preallocated array, with no copy made in Python and the GIL released while bytes move; the
operation's own call and the final Release go through it too, at the C++ client's cost per RPC.

Used by Client and AsyncClient for striped calls when the module imports, the channel is
plaintext or made by `tls_credentials` (which keeps its PEMs for these connections) and no extra
channel options were given (native=None, the default), or always (native=True: ImportError when
it cannot be); native=False, or MATSERVE_NATIVE=0 in the environment, keeps the pure-Python path
(striped.py).
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Callable, List, Optional, Sequence, Tuple

import grpc
import numpy as np

from ._stubs import pb
from .errors import MatserveError, error_for
from .striped import _header

try:
    import matserve_native as _module
except ImportError:  # not built (no Python headers), or not on sys.path
    _module = None

_CODES = {code.value[0]: code for code in grpc.StatusCode}
_SERVICE = "/matserve.v1.MatrixService/"


def available() -> bool:
    """Whether the compiled module imports here."""
    return _module is not None


class TlsCredentials(grpc.ChannelCredentials):
    """grpc.ssl_channel_credentials that also keep their PEMs, so that the compiled data plane's
    own connections can use them (grpc's credentials do not give them back)."""

    def __init__(self, root_certificates: Optional[bytes] = None,
                 private_key: Optional[bytes] = None,
                 certificate_chain: Optional[bytes] = None) -> None:
        made = grpc.ssl_channel_credentials(root_certificates, private_key, certificate_chain)
        super().__init__(made._credentials)
        self.pems = (root_certificates, private_key, certificate_chain)


def tls_credentials(root_certificates: Optional[bytes] = None,
                    private_key: Optional[bytes] = None,
                    certificate_chain: Optional[bytes] = None) -> TlsCredentials:
    """TLS credentials for Client and AsyncClient (`credentials=`), as grpc.ssl_channel_credentials
    takes them (PEM bytes; no roots: the system's); unlike grpc's own, striped calls can use them
    on the compiled data plane."""
    return TlsCredentials(root_certificates, private_key, certificate_chain)


def wanted(native: Optional[bool], credentials: Optional[grpc.ChannelCredentials],
           extra_options: bool) -> bool:
    """Whether a client asked with `native` uses the compiled data plane (see the module's
    docstring); ImportError when native=True and it cannot."""
    usable = credentials is None or isinstance(credentials, TlsCredentials)
    if native is None:
        native = os.environ.get("MATSERVE_NATIVE", "1") != "0" and available()
        return native and usable and not extra_options
    if native and not available():
        raise ImportError("matserve_native is not importable: build the C++ client with Python's "
                          "headers (python3-dev) and put the Python stubs' folder on sys.path")
    if native and not usable:
        raise ValueError("the compiled data plane needs plaintext or tls_credentials(...); "
                         "pass native=None or False with other credentials")
    return bool(native)


def _error(e: BaseException) -> MatserveError:
    code, message = e.args
    return error_for(_CODES.get(code, grpc.StatusCode.UNKNOWN), message)


class NativeStripes:
    """striped.Stripes' put() and get() through matserve_native, plus the operation's call and
    Release. `pairs`: the metadata a call made now gets (token, call_metadata blocks)."""

    def __init__(self, target: str, count: int, chunk_bytes: int, max_message_bytes: int,
                 pairs: Callable[[], Sequence[Tuple[str, str]]],
                 credentials: Optional[TlsCredentials] = None) -> None:
        self.chunk_bytes = int(chunk_bytes)
        self._pairs = pairs
        self._handle = _module.open(target, int(count), self.chunk_bytes, int(max_message_bytes),
                                    None if credentials is None else credentials.pems)

    def close(self) -> None:
        self._handle = None  # the connections close with the last call holding them

    def put(self, prepared: Sequence[Any], timeout: Optional[float], made: List[str],
            colocate_with: str = "") -> List["pb.ResidentInfo"]:
        """As Stripes.put: every matrix created at once, then all their ranges written; each
        handle made is appended to `made`, also when a later step fails."""
        headers = [_header(p).SerializeToString() for p in prepared]
        buffers = [memoryview(np.ascontiguousarray(p.flat)).cast("B") for p in prepared]
        try:
            infos = _module.put(self._handle, headers, buffers, colocate_with, timeout,
                                list(self._pairs()), made)
        except _module.Error as e:
            raise _error(e) from None
        return [pb.ResidentInfo.FromString(b) for b in infos]

    def get(self, handles: Sequence[str], outs: Sequence[np.ndarray],
            timeout: Optional[float]) -> None:
        """Reads each resident matrix into its uint8 array (its exact size), as ranges."""
        try:
            _module.get(self._handle, list(handles), list(outs), timeout, list(self._pairs()))
        except _module.Error as e:
            raise _error(e) from None

    def call(self, method: str, request, reply_type, timeout: Optional[float]):
        """One unary call of the MatrixService `method` ("Multiply") on the first stripe."""
        try:
            reply = _module.unary(self._handle, _SERVICE + method, request.SerializeToString(),
                                  timeout, list(self._pairs()))
        except _module.Error as e:
            raise _error(e) from None
        return reply_type.FromString(reply)

    def release(self, handles: Sequence[str], timeout: Optional[float]) -> bool:
        """One Release of `handles`; whether it succeeded."""
        try:
            _module.release(self._handle, list(handles), timeout, list(self._pairs()))
            return True
        except _module.Error:
            return False


class AsyncNativeStripes:
    """NativeStripes for AsyncClient: each step runs in a worker thread (asyncio.to_thread, which
    carries the caller's call_metadata blocks), the module releasing the GIL while bytes move.
    The `metadata` arguments of AsyncStripes' methods are taken from `pairs` instead."""

    def __init__(self, target: str, count: int, chunk_bytes: int, max_message_bytes: int,
                 pairs: Callable[[], Sequence[Tuple[str, str]]],
                 credentials: Optional[TlsCredentials] = None) -> None:
        self._sync = NativeStripes(target, count, chunk_bytes, max_message_bytes, pairs,
                                   credentials)
        self.chunk_bytes = self._sync.chunk_bytes

    async def close(self) -> None:
        self._sync.close()

    async def put(self, prepared, timeout, metadata, made: List[str],
                  colocate_with: str = "") -> List["pb.ResidentInfo"]:
        return await asyncio.to_thread(self._sync.put, prepared, timeout, made, colocate_with)

    async def get(self, handles, outs, timeout, metadata) -> None:
        await asyncio.to_thread(self._sync.get, handles, outs, timeout)

    async def call(self, method: str, request, reply_type, timeout: Optional[float]):
        return await asyncio.to_thread(self._sync.call, method, request, reply_type, timeout)

    async def release(self, handles: Sequence[str], timeout: Optional[float]) -> bool:
        return await asyncio.to_thread(self._sync.release, handles, timeout)
