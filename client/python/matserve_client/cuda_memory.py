"""CUDA memory regions: GPU tensors of this process (PyTorch, CuPy, anything with
`__cuda_array_interface__`) shared with a server on the same node through CUDA IPC, so that the
server multiplies straight from and into them: no host copy, no bytes in the messages.

`Client.cuda_matrix(tensor)` exports the allocation that holds the tensor (cuIpcGetMemHandle),
registers the tensor's bytes with the server (RegisterCudaMemory) and returns a CudaMatrix that
goes wherever an operand or `out` does; `result.c` is then the tensor itself. close() (or `with`)
unregisters it; the tensor stays the caller's and must stay allocated while registered (freeing it
while the server holds it is the caller's error, as with any shared buffer).

The driver (libcuda.so.1) is reached through ctypes: no CUDA Python package is needed beyond the
framework that made the tensor.
"""
from __future__ import annotations

import ctypes
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Tuple

from . import dtypes
from ._stubs import pb
from .results import SharedMemoryInfo
from .shared_memory import ShmMatrix

if TYPE_CHECKING:
    from .client import Client

_TYPESTR = {"<f8": "fp64", "<f4": "fp32", "<f2": "fp16"}
_driver_lock = threading.Lock()
_driver_lib: Optional[ctypes.CDLL] = None


def _driver() -> ctypes.CDLL:
    global _driver_lib
    with _driver_lock:
        if _driver_lib is None:
            _driver_lib = ctypes.CDLL("libcuda.so.1")
        return _driver_lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what}: CUDA driver error {rc}")


def export_allocation(ptr: int) -> Tuple[bytes, int]:
    """(the 64-byte IPC handle of the allocation holding device pointer `ptr`, ptr's offset in
    it). The allocation's context must be current (it is, on a thread that used the tensor)."""
    lib = _driver()
    handle = (ctypes.c_char * 64)()
    _check(lib.cuIpcGetMemHandle(handle, ctypes.c_uint64(ptr)), "cuIpcGetMemHandle")
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                       ctypes.c_uint64(ptr)), "cuMemGetAddressRange")
    return bytes(handle), ptr - base.value


def describe(tensor: Any) -> Tuple[int, int, int, str, str]:
    """(device pointer, rows, cols, matserve dtype, order "C"/"F") of a dense 2-D GPU tensor."""
    name = type(tensor).__module__.split(".")[0]
    if name == "torch":  # also bf16 and e4m3, which __cuda_array_interface__ cannot describe
        import torch
        names = {torch.float64: "fp64", torch.float32: "fp32", torch.float16: "fp16",
                 torch.bfloat16: "bf16"}
        if hasattr(torch, "float8_e4m3fn"):  # torch 2.1 and later
            names[torch.float8_e4m3fn] = "fp8_e4m3"
        if not tensor.is_cuda or tensor.dim() != 2 or tensor.dtype not in names:
            raise ValueError("cuda_matrix: a 2-D CUDA tensor of float64/32/16, bfloat16 or "
                             "float8_e4m3fn")
        rows, cols = tensor.shape
        shape, strides, ptr, dtype = (rows, cols), tuple(tensor.stride()), tensor.data_ptr(), \
            names[tensor.dtype]
        item = tensor.element_size()
        strides = (strides[0] * item, strides[1] * item)
    else:
        cai = getattr(tensor, "__cuda_array_interface__", None)
        if cai is None or len(cai["shape"]) != 2 or cai["typestr"] not in _TYPESTR:
            raise ValueError("cuda_matrix: a 2-D GPU array of float64/32/16 "
                             "(__cuda_array_interface__) or a torch tensor")
        shape, ptr, dtype = tuple(cai["shape"]), cai["data"][0], _TYPESTR[cai["typestr"]]
        item = int(cai["typestr"][2])
        strides = cai.get("strides") or (shape[1] * item, item)
    rows, cols = shape
    if strides == (cols * item, item) or rows == 1:
        return ptr, rows, cols, dtype, "C"
    if strides == (item, rows * item) or cols == 1:
        return ptr, rows, cols, dtype, "F"
    raise ValueError("cuda_matrix: the tensor must be dense in C or F order (.contiguous())")


class CudaRegion:
    """One tensor's bytes registered with the server as CUDA memory. close() unregisters it."""

    def __init__(self, client: "Client", info: SharedMemoryInfo, tensor: Any) -> None:
        self._client = client
        self.info = info
        self.tensor = tensor
        self._closed = False

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def closed(self) -> bool:
        return self._closed

    def array(self, matrix: "CudaMatrix") -> Any:
        """The tensor itself: the server's result is already in it."""
        return self.tensor

    def close(self, *, timeout: Optional[float] = None) -> None:
        if self._closed:
            return
        self._closed = True
        self._client._unregister_region(self, timeout=timeout)

    def __enter__(self) -> "CudaRegion":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True, eq=False)
class CudaMatrix(ShmMatrix):
    """A matrix in a client GPU tensor registered with the server (Client.cuda_matrix): an operand
    or `out` of multiply/transpose. `with` or close() unregisters it."""

    def close(self) -> None:
        self.region.close()

    def __enter__(self) -> "CudaMatrix":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"CudaMatrix(region={self.region.name!r}, shape={self.shape}, "
                f"dtype={self.dtype}, order={self.order}, device={self.region.info.device!r})")


def register(client: "Client", tensor: Any, name: Optional[str],
             timeout: Optional[float]) -> CudaMatrix:
    ptr, rows, cols, dtype, order = describe(tensor)
    handle, offset = export_allocation(ptr)
    nbytes = rows * cols * dtypes.itemsize(dtype)
    name = name or f"cuda-{uuid.uuid4().hex[:16]}"
    reply = client._call("RegisterCudaMemory",
                         pb.RegisterCudaMemoryRequest(name=name, ipc_handle=handle, offset=offset,
                                                      byte_size=nbytes), timeout)
    region = CudaRegion(client, SharedMemoryInfo.from_proto(reply.region), tensor)
    client._track(region)
    return CudaMatrix(region, 0, rows, cols, dtype, order)
