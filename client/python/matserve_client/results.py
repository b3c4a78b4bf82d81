"""What calls return: the computed matrix, what ran, where, and how long each stage took.

Plain dataclasses built from the reply messages, so callers never touch protobuf types.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional, Tuple, Union

import numpy as np

from . import dtypes
from ._stubs import pb
from .encoding import LAYOUT_TO_ORDER, PROTO_TO_DTYPE

if TYPE_CHECKING:
    from .batched import Stacked
    from .resident import ResidentMatrix

Array = Union[np.ndarray, dtypes.Bfloat16]


@dataclass(frozen=True)
class Timing:
    """Wall time of each stage of one request, in microseconds (see docs/api.md)."""

    queue_us: float
    host_to_device_us: float
    kernel_us: float
    device_to_host_us: float
    total_us: float
    launch_us: float = 0.0  # host time to enqueue the device work (CUDA); not in kernel_us
    # Dynamic batching (server --max_batch_size): the time this request waited for others to join
    # its launch (part of queue_us), and how many requests that launch computed (1: it ran alone;
    # 0: not reported, an older server).
    batch_wait_us: float = 0.0
    merged_requests: int = 0

    @classmethod
    def from_proto(cls, t: "pb.Timing") -> "Timing":
        return cls(t.queue_us, t.host_to_device_us, t.kernel_us, t.device_to_host_us, t.total_us,
                   t.launch_us, getattr(t, "batch_wait_us", 0.0),
                   getattr(t, "merged_requests", 0))


@dataclass(frozen=True)
class Verification:
    """Error of the result against the server's float64 reference."""

    max_abs_error: float
    rel_l2_error: float

    @classmethod
    def from_reply(cls, reply) -> "Optional[Verification]":
        if not reply.HasField("verification"):
            return None
        v = reply.verification
        return cls(v.max_abs_error, v.rel_l2_error)


def fp8_scales_of(reply) -> Optional[Tuple[float, float]]:
    """A MultiplyReply's fp8_scales as (a_scale, b_scale), or None when it has none."""
    if not reply.HasField("fp8_scales"):
        return None
    return (reply.fp8_scales.a_scale, reply.fp8_scales.b_scale)


@dataclass
class MultiplyResult:
    """C = alpha * op(A) @ op(B) + beta * C, with what ran and how fast.

    `c` is None when the result was kept on the server (`keep_result=True`): see `resident`.
    """

    c: Optional[Array]
    variant: str
    device: str
    precision: str
    timing: Timing
    gflops: float
    verification: Optional[Verification] = None
    resident: "Optional[ResidentMatrix]" = None
    # compute="fp8": the (a_scale, b_scale) dequantization scales the product used (the caller's
    # for e4m3 data, amax / 448 of each operand the server quantized); None otherwise.
    fp8_scales: Optional[Tuple[float, float]] = None

    @property
    def kernel_ms(self) -> float:
        return self.timing.kernel_us / 1e3


@dataclass
class MultiplyBatchedResult:
    """C_i = alpha * op(A_i) @ op(B_i) + beta * C_i for every product i of one MultiplyBatched
    call, with what ran and how fast (timing and gflops of the whole batch; verification: the
    largest errors over the products).

    `c` is a (batch, m, n) array, None when the results were kept on the server: with
    `keep_result=True` `residents[i]` is then product i's ResidentMatrix, with `keep_stacked=True`
    `stacked` is one `Stacked` resident matrix holding them all (an operand of a next call).
    """

    c: Optional[np.ndarray]
    variant: str
    device: str
    precision: str
    timing: Timing
    gflops: float
    verification: Optional[Verification] = None
    residents: "List[ResidentMatrix]" = field(default_factory=list)
    stacked: "Optional[Stacked]" = None
    # compute="fp8": product i's (a_scale, b_scale) at index i (as MultiplyResult.fp8_scales).
    fp8_scales: List[Tuple[float, float]] = field(default_factory=list)

    @property
    def batch(self) -> int:
        """How many products were computed."""
        if self.stacked is not None:
            return self.stacked.batch
        return len(self.c) if self.c is not None else len(self.residents)

    @property
    def kernel_ms(self) -> float:
        return self.timing.kernel_us / 1e3


@dataclass
class TransposeResult:
    """B = scale * A^T, with what ran and how fast (`b` is None when kept on the server)."""

    b: Optional[Array]
    variant: str
    device: str
    timing: Timing
    gb_per_s: float
    verification: Optional[Verification] = None
    resident: "Optional[ResidentMatrix]" = None

    @property
    def c(self) -> Optional[Array]:
        """The same as `b` (so code that reads `.c` works for both operations)."""
        return self.b


@dataclass(frozen=True)
class KernelInfo:
    """One variant the server can run (from ListKernels)."""

    name: str
    family: str
    operation: str  # "gemm" or "transpose"
    precisions: List[str]
    constraints: str
    description: str
    backend: str
    batched: bool = False  # computes a whole MultiplyBatched batch in one launch

    @classmethod
    def from_proto(cls, k: "pb.KernelInfo") -> "KernelInfo":
        op = {pb.GEMM: "gemm", pb.TRANSPOSE: "transpose"}.get(k.operation, "unspecified")
        return cls(k.name, k.family, op, list(k.precisions), k.constraints, k.description,
                   k.backend, getattr(k, "batched", False))


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    compute_capability: str
    memory_total_bytes: int
    memory_free_bytes: int
    multiprocessors: int


@dataclass(frozen=True)
class ServerLimits:
    max_message_bytes: int
    max_dimension: int
    max_matrix_bytes: int
    memory_budget_bytes: int = 0
    resident_ttl_ms: int = 0
    shared_memory: bool = False  # RegisterSharedMemory accepted (clients on the server's node)
    max_batch_products: int = 0  # products in one MultiplyBatched call
    # Dynamic batching: concurrent Multiply requests merged into one launch, at most this many
    # (0: off), each waiting at most max_batch_delay_us for the others.
    max_batch_size: int = 0
    max_batch_delay_us: int = 0


@dataclass(frozen=True)
class ServerInfo:
    version: str
    git_sha: str
    backend: str  # "cuda" or "cpu"
    devices: List[DeviceInfo] = field(default_factory=list)
    limits: Optional[ServerLimits] = None
    replica_id: str = ""  # the id in the handles this server makes (--replica_id)

    @classmethod
    def from_proto(cls, r: "pb.GetServerInfoReply") -> "ServerInfo":
        devices = [DeviceInfo(d.index, d.name, d.compute_capability, d.memory_total_bytes,
                              d.memory_free_bytes, d.multiprocessors) for d in r.devices]
        lim = r.limits
        extra = {}
        for name in ("memory_budget_bytes", "resident_ttl_ms", "shared_memory",  # newer fields
                     "max_batch_products", "max_batch_size", "max_batch_delay_us"):
            if name in lim.DESCRIPTOR.fields_by_name:
                extra[name] = getattr(lim, name)
        limits = ServerLimits(lim.max_message_bytes, lim.max_dimension, lim.max_matrix_bytes,
                              **extra)
        replica = r.replica_id if "replica_id" in r.DESCRIPTOR.fields_by_name else ""
        return cls(r.version, r.git_sha, r.backend, devices, limits, replica)


@dataclass(frozen=True)
class ResidentInfo:
    """Metadata of a matrix held in device memory by the server."""

    handle: str
    rows: int
    cols: int
    dtype: str
    order: str  # "C" (row-major) or "F" (column-major)
    nbytes: int
    device: str
    idle_expires_in_ms: int

    @property
    def shape(self) -> tuple:
        return (self.rows, self.cols)

    @classmethod
    def from_proto(cls, r) -> "ResidentInfo":
        return cls(r.handle, r.rows, r.cols, PROTO_TO_DTYPE.get(r.dtype, "unspecified"),
                   LAYOUT_TO_ORDER.get(r.layout, "C"), r.bytes, r.device, r.idle_expires_in_ms)


@dataclass(frozen=True)
class SharedMemoryInfo:
    """A shared-memory region registered with the server (from ListSharedMemory)."""

    name: str  # the caller's name for the region, as SharedMemoryRef and ShmMatrix name it
    key: str  # the POSIX shared-memory object's name, "/..."
    offset: int  # start of the registered range within the object, in bytes
    byte_size: int  # length of the registered range
    pinned: bool  # pinned for DMA by the server (CUDA backend): no staging copy
    device: str = ""  # CUDA memory (register_cuda_memory): the GPU holding it, e.g. "cuda:0"

    @classmethod
    def from_proto(cls, r) -> "SharedMemoryInfo":
        return cls(r.name, r.key, r.offset, r.byte_size, r.pinned, r.device)
