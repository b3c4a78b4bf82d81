"""Exceptions: every failed call raises a MatservError carrying the gRPC status code and message.

There is one subclass per gRPC status code (InvalidArgument, FailedPrecondition, ResourceExhausted,
DeadlineExceeded, Unavailable, ...), so callers can catch exactly the class of failure they handle.
"""
from __future__ import annotations

from typing import Dict, Type

import grpc


class MatservError(Exception):
    """A failed matserve call: `code` is the grpc.StatusCode, `message` the server's explanation."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(code, message)

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class Cancelled(MatservError):
    code = grpc.StatusCode.CANCELLED


class Unknown(MatservError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(MatservError):
    """The request is malformed: a missing operand, bad shape or dtype, unknown variant, ..."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(MatservError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(MatservError):
    """E.g. a resident-matrix handle that was released or expired."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(MatservError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(MatservError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(MatservError):
    """A matrix or message above the server's limits, or device memory exhausted."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(MatservError):
    """The request is well formed but cannot run here (e.g. a variant of another backend)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(MatservError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(MatservError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(MatservError):
    """The server does not offer this RPC (e.g. an older server)."""

    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(MatservError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(MatservError):
    """The server cannot be reached, or is shutting down."""

    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(MatservError):
    """Raised by the client too when a reply's bytes do not match its declared shape."""

    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(MatservError):
    code = grpc.StatusCode.UNAUTHENTICATED


ERROR_CLASSES: Dict[grpc.StatusCode, Type[MatservError]] = {
    cls.code: cls
    for cls in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
                PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
                Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)
}


def error_for(code: grpc.StatusCode, message: str) -> MatservError:
    """The MatservError subclass instance for a status code."""
    cls = ERROR_CLASSES.get(code, MatservError)
    return cls(code, message)


def from_rpc_error(error: grpc.RpcError) -> MatservError:
    """Converts a grpc.RpcError (a failed call) into the matching MatservError."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else None
    return error_for(code or grpc.StatusCode.UNKNOWN, details or str(error))
