"""ResidentMatrix: a matrix kept in the server's device memory, named by an unguessable handle.

Pass it to Client.multiply/transpose instead of an array to skip the transfer; download() it when
wanted; release() it (or use `with`) to free the memory. The server also frees idle ones after
its resident TTL, so a forgotten handle does not leak forever; nothing is released on garbage
collection.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Union

import numpy as np

from . import dtypes
from .errors import NotFound
from .results import ResidentInfo

if TYPE_CHECKING:
    from .client import Client


class ResidentMatrix:
    """A handle to a matrix on the server (from Client.upload or keep_result=True)."""

    def __init__(self, client: "Client", info: ResidentInfo) -> None:
        self._client = client
        self.info = info
        self._released = False

    @property
    def handle(self) -> str:
        return self.info.handle

    @property
    def shape(self) -> tuple:
        return self.info.shape

    @property
    def dtype(self) -> str:
        """matserve dtype name: fp64, fp32, fp16, bf16 or fp8_e4m3."""
        return self.info.dtype

    @property
    def order(self) -> str:
        """"C" (row-major) or "F" (column-major) on the server."""
        return self.info.order

    @property
    def nbytes(self) -> int:
        return self.info.nbytes

    @property
    def device(self) -> str:
        return self.info.device

    @property
    def released(self) -> bool:
        return self._released

    def download(self, *, bf16_bits: bool = False, stream: Optional[bool] = None,
                 timeout: Optional[float] = None) -> Union[np.ndarray, dtypes.BitPatterns]:
        """Copies the matrix back as a NumPy array (float32 for bf16 and fp8_e4m3, or their bits
        with bf16_bits: Bfloat16, Float8E4M3).

        stream: None picks streaming when the matrix exceeds one message; True/False force it.
        """
        if self._released:
            raise ValueError(f"resident matrix {self.handle} was released")
        return self._client._download(self, bf16_bits=bf16_bits, stream=stream, timeout=timeout)

    def read_bytes(self, offset: int, length: int, *, timeout: Optional[float] = None) -> bytes:
        """`length` bytes of the matrix's storage from byte `offset` (ReadRange): a few rows of a
        row-major matrix without downloading the rest. At most ServerLimits.max_message_bytes
        less 1 KiB at a time."""
        if self._released:
            raise ValueError(f"resident matrix {self.handle} was released")
        return self._client._read_range(self.handle, offset, length, timeout=timeout)

    def release(self, *, timeout: Optional[float] = None) -> int:
        """Frees the device memory; returns the bytes freed. Calling it again does nothing (0);
        a handle the server already dropped (idle TTL) counts as released."""
        if self._released:
            return 0
        try:
            freed = self._client._release(self.handle, timeout=timeout)
        except NotFound:
            freed = 0
        self._released = True
        return freed

    def _mark_released(self) -> None:
        """The client released this matrix along with others (one Release call for several)."""
        self._released = True

    def _update(self, info: ResidentInfo) -> None:
        self.info = info

    def __enter__(self) -> "ResidentMatrix":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        state = " released" if self._released else ""
        return (f"ResidentMatrix({self.handle[:8]}..., shape={self.shape}, dtype={self.dtype}, "
                f"order={self.order}, device={self.device!r}{state})")


def name_for_release(request, release: Sequence[Any]) -> List[Any]:
    """Names the resident matrices in `release` in the request's release_handles: the server
    releases them once the call has succeeded (none when it fails). Returns them, to be marked
    released after the call."""
    matrices = list(release)
    for i, r in enumerate(matrices):
        if not hasattr(r, "handle") or not hasattr(r, "_mark_released"):
            raise TypeError(f"release[{i}]: must be a resident matrix of this client, got "
                            f"{type(r).__name__}")
        if r.released:
            raise ValueError(f"release[{i}]: resident matrix {r.handle} was already released")
        request.release_handles.append(r.handle)
    return matrices


def mark_released(matrices: Sequence[Any]) -> None:
    """The call that named `matrices` in its release_handles succeeded: they are gone."""
    for r in matrices:
        r._mark_released()
