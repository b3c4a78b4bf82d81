"""Exceptions: every failed call raises a MatserveError carrying the gRPC status code and message.

There is one subclass per gRPC status code (InvalidArgument, FailedPrecondition, ResourceExhausted,
DeadlineExceeded, Unavailable, ...), so callers can catch exactly the class of failure they handle.
"""
from __future__ import annotations

from typing import Dict, Type

import grpc


class MatserveError(Exception):
    """A failed matserve call: `code` is the grpc.StatusCode, `message` the server's explanation."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(code, message)

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class Cancelled(MatserveError):
    code = grpc.StatusCode.CANCELLED


class Unknown(MatserveError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(MatserveError):
    """The request is malformed: a missing operand, bad shape or dtype, unknown variant, ..."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(MatserveError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(MatserveError):
    """E.g. a resident-matrix handle that was released or expired."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(MatserveError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(MatserveError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(MatserveError):
    """A matrix or message above the server's limits, or device memory exhausted."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(MatserveError):
    """The request is well formed but cannot run here (e.g. a variant of another backend)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(MatserveError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(MatserveError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(MatserveError):
    """The server does not offer this RPC (e.g. an older server)."""

    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(MatserveError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(MatserveError):
    """The server cannot be reached, or is shutting down."""

    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(MatserveError):
    """Raised by the client too when a reply's bytes do not match its declared shape."""

    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(MatserveError):
    code = grpc.StatusCode.UNAUTHENTICATED


# The base class's former name, kept for one release so that `except MatservError` still catches
# every failure; new code names MatserveError.
MatservError = MatserveError

ERROR_CLASSES: Dict[grpc.StatusCode, Type[MatserveError]] = {
    cls.code: cls
    for cls in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
                PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
                Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)
}


def error_for(code: grpc.StatusCode, message: str) -> MatserveError:
    """The MatserveError subclass instance for a status code."""
    cls = ERROR_CLASSES.get(code, MatserveError)
    return cls(code, message)


def from_rpc_error(error: grpc.RpcError) -> MatserveError:
    """Converts a grpc.RpcError (a failed call) into the matching MatserveError."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else None
    return error_for(code or grpc.StatusCode.UNKNOWN, details or str(error))
