"""matserve_client: Python client for matserve, the GPU matrix service (gRPC, NumPy in and out).

    from matserve_client import Client
    with Client("localhost:50051") as client:
        r = client.multiply(a, b, compute="tf32", verify=True)
        print(r.c.shape, r.variant, r.device, r.timing.kernel_us, r.gflops)
        rb = client.multiply_batched(a_stack, b_stack)  # (batch, m, k) @ (batch, k, n)
        print(rb.c.shape, rb.timing.kernel_us)

Operands keep their dtype: float64/32/16 arrays, Bfloat16 / Float8E4M3 bits, ml_dtypes bfloat16
and float8_e4m3fn arrays, torch CPU tensors (interop.py). matserve_client.aio.AsyncClient is the
asyncio client (grpc.aio).
"""
from .auth import call_metadata
from .client import Client
from .dtypes import (Bfloat16, Float8E4M3, bf16_bits_to_float32, float_to_bf16_bits,
                     fp8_e4m3_bits_to_float32)
from .errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded,
                     FailedPrecondition, Internal, InvalidArgument, MatserveError, MatservError,
                     NotFound, OutOfRange, PermissionDenied, ResourceExhausted, Unauthenticated,
                     Unavailable, Unimplemented, Unknown)
from .batched import Stacked
from .resident import ResidentMatrix
from .results import (DeviceInfo, KernelInfo, MultiplyBatchedResult, MultiplyResult,
                      ResidentInfo, ServerInfo, ServerLimits, SharedMemoryInfo, Timing,
                      TransposeResult, Verification)
from .cuda_memory import CudaMatrix
from .native import tls_credentials
from .shared_memory import SharedMemoryRegion, ShmMatrix

__version__ = "0.1.0"

__all__ = [
    "Client", "call_metadata", "tls_credentials", "ResidentMatrix", "Stacked", "CudaMatrix",
    "SharedMemoryRegion", "ShmMatrix",
    "Bfloat16", "Float8E4M3", "float_to_bf16_bits", "bf16_bits_to_float32",
    "fp8_e4m3_bits_to_float32", "MultiplyResult", "MultiplyBatchedResult", "TransposeResult",
    "Timing", "Verification", "KernelInfo", "ServerInfo", "ServerLimits", "DeviceInfo",
    "ResidentInfo", "SharedMemoryInfo", "MatserveError", "MatservError", "Cancelled", "Unknown",
    "InvalidArgument", "DeadlineExceeded", "NotFound", "AlreadyExists", "PermissionDenied",
    "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange", "Unimplemented",
    "Internal", "Unavailable", "DataLoss", "Unauthenticated",
]
