"""Moving matrices to and from the server's device memory: unary Upload/Download for matrices that
fit in one gRPC message, client-/server-streaming UploadStream/DownloadStream in chunks for larger
ones (a protobuf message cannot exceed 2 GiB and servers usually allow far less).
"""
from __future__ import annotations

from typing import Iterator, Optional, Union

import grpc
import numpy as np

from . import dtypes
from ._stubs import pb
from .encoding import LAYOUT_TO_ORDER, PROTO_TO_DTYPE, Prepared, assemble, decode
from .errors import error_for, from_rpc_error

Array = Union[np.ndarray, dtypes.Bfloat16]


def _upload_chunks(prepared: Prepared, chunk_bytes: int,
                   colocate_with: str) -> Iterator["pb.UploadChunk"]:
    """The header first (with the first bytes), then the remaining bytes in order."""
    chunks = prepared.chunks(chunk_bytes)
    yield pb.UploadChunk(header=prepared.header(), data=next(chunks, b""),
                         colocate_with=colocate_with)
    for data in chunks:
        yield pb.UploadChunk(data=data)


def upload(stub, prepared: Prepared, stream: bool, chunk_bytes: int,
           timeout: Optional[float], colocate_with: str = "") -> "pb.ResidentInfo":
    """Uploads one matrix, in one message or streamed; returns the server's ResidentInfo.

    colocate_with: a resident handle whose device the new matrix goes to ("" = least-loaded).
    """
    try:
        if stream:
            reply = stub.UploadStream(_upload_chunks(prepared, chunk_bytes, colocate_with),
                                      timeout=timeout)
        else:
            reply = stub.Upload(pb.UploadRequest(matrix=prepared.header(with_data=True),
                                                 colocate_with=colocate_with),
                                timeout=timeout)
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None
    return reply.resident


def download(stub, handle: str, stream: bool, chunk_bytes: int, timeout: Optional[float],
             bf16_bits: bool = False) -> Array:
    """Downloads a resident matrix, in one message or streamed, as a NumPy array (or Bfloat16)."""
    request = pb.DownloadRequest(handle=handle)
    try:
        if not stream:
            reply = stub.Download(request, timeout=timeout)
            return decode(reply.matrix, bf16_bits=bf16_bits, what=f"download {handle}")
        request.chunk_bytes = chunk_bytes
        return _assemble_stream(stub.DownloadStream(request, timeout=timeout), handle, bf16_bits)
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None


def _assemble_stream(replies, handle: str, bf16_bits: bool) -> Array:
    """Collects DownloadChunks into one preallocated buffer (one copy per byte)."""
    header = None
    buf: Optional[np.ndarray] = None
    filled = 0
    for chunk in replies:
        pieces = []
        if chunk.HasField("header"):
            if header is not None:
                raise error_for(grpc.StatusCode.DATA_LOSS, f"download {handle}: second header")
            header = chunk.header
            if header.dtype not in PROTO_TO_DTYPE:
                raise error_for(grpc.StatusCode.DATA_LOSS,
                                f"download {handle}: unknown dtype {header.dtype}")
            size = header.rows * header.cols * dtypes.itemsize(PROTO_TO_DTYPE[header.dtype])
            buf = np.empty(size, dtype=np.uint8)
            pieces.append(header.data)
        if header is None:
            raise error_for(grpc.StatusCode.DATA_LOSS, f"download {handle}: data before header")
        pieces.append(chunk.data)
        for piece in pieces:
            if filled + len(piece) > buf.nbytes:
                raise error_for(grpc.StatusCode.DATA_LOSS,
                                f"download {handle}: more than the {buf.nbytes} bytes announced")
            buf[filled:filled + len(piece)] = np.frombuffer(piece, dtype=np.uint8)
            filled += len(piece)
    if header is None:
        raise error_for(grpc.StatusCode.DATA_LOSS, f"download {handle}: empty stream")
    return assemble(header.rows, header.cols, PROTO_TO_DTYPE[header.dtype],
                    LAYOUT_TO_ORDER.get(header.layout, "C"), buf[:filled], bf16_bits=bf16_bits,
                    what=f"download {handle}")


def release(stub, handle: str, timeout: Optional[float]) -> int:
    """Frees a resident matrix; returns the bytes freed."""
    try:
        return stub.Release(pb.ReleaseRequest(handle=handle), timeout=timeout).bytes_freed
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None
