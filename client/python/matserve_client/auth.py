"""Metadata sent with calls: a channel interceptor that adds the client's fixed pairs (the bearer
token `authorization: Bearer <token>` that servers started with --auth_tokens_file require, and
any `metadata=` given to the Client) and the pairs of the enclosing `call_metadata()` blocks to
every call, unary and streaming."""
import collections
import contextlib
import contextvars
import re
from typing import Iterator, Sequence, Tuple

import grpc

Pair = Tuple[str, str]

_CALL_METADATA: "contextvars.ContextVar[Tuple[Pair, ...]]" = contextvars.ContextVar(
    "matserve_call_metadata", default=())
_KEY = re.compile(r"[0-9a-z_.-]+")


def check_pairs(pairs: Sequence[Pair], what: str) -> Tuple[Pair, ...]:
    """The pairs as a tuple; ValueError for a key gRPC would refuse (lower-case ASCII letters,
    digits, '_', '-', '.'; binary '-bin' keys are not supported) or a value that is not text."""
    out = []
    for pair in pairs:
        if len(pair) != 2:
            raise ValueError(f"{what}: {pair!r} is not a (key, value) pair")
        key, value = pair
        if not isinstance(key, str) or not _KEY.fullmatch(key) or key.endswith("-bin"):
            raise ValueError(f"{what}: key {key!r} must be lower-case letters, digits, '_', '-' "
                             "or '.' (and not a binary '-bin' key)")
        if not isinstance(value, str):
            raise ValueError(f"{what}: the value of {key!r} must be a str")
        out.append((key, value))
    return tuple(out)


@contextlib.contextmanager
def call_metadata(*pairs: Pair) -> Iterator[None]:
    """Sends `pairs` (e.g. ("x-request-id", "42")) with every call made inside the block, on
    top of the client's own, by any Client or AsyncClient (calls of the same thread or task;
    blocks nest)."""
    token = _CALL_METADATA.set(_CALL_METADATA.get() + check_pairs(pairs, "call_metadata"))
    try:
        yield
    finally:
        _CALL_METADATA.reset(token)


def current_call_metadata() -> Tuple[Pair, ...]:
    return _CALL_METADATA.get()


class _Details(collections.namedtuple(
        "_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                     "compression")), grpc.ClientCallDetails):
    pass


class CallMetadata(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                   grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the fixed pairs and those of the enclosing call_metadata() blocks to every call."""

    def __init__(self, fixed: Sequence[Pair] = ()) -> None:
        self._fixed = tuple(fixed)

    def pairs(self) -> Tuple[Pair, ...]:
        """The pairs a call made now gets: the fixed ones, then the enclosing blocks'."""
        return self._fixed + current_call_metadata()

    def _with_metadata(self, d):
        block = current_call_metadata()
        if not self._fixed and not block:
            return d  # nothing to add: the call goes out as it came
        metadata = list(d.metadata or []) + list(self._fixed) + list(block)
        return _Details(d.method, d.timeout, metadata, d.credentials,
                        getattr(d, "wait_for_ready", None), getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_metadata(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_metadata(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._with_metadata(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._with_metadata(details), request_iterator)


def bearer(token: str) -> Pair:
    """The authorization pair of a bearer token."""
    if not token:
        raise ValueError("token must not be empty")
    return ("authorization", f"Bearer {token}")
