"""Client side: authenticated channels, a deadline on every call, retries only where safe."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from rlx_core.errors import DeadlineExceeded, RlxError, Unavailable
from rlx_core.rpc.auth import AuthClientInterceptor, resolve_token
from rlx_core.rpc.server import DEFAULT_MAX_MESSAGE_BYTES, channel_options
from rlx_core.rpc.status import from_rpc_error

__all__ = ["DEFAULT_TIMEOUT_S", "RetryPolicy", "call", "call_stream", "connect"]

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0


class RetryPolicy:
    """Exponential backoff with full jitter for UNAVAILABLE, used only on idempotent methods."""

    def __init__(
        self,
        *,
        attempts: int = 5,
        initial_backoff_s: float = 0.1,
        max_backoff_s: float = 5.0,
        multiplier: float = 2.0,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be >= 1")
        self.attempts = attempts
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self.multiplier = multiplier

    def delays(self) -> Iterator[float]:
        """Sleep before retry 1, 2, ... (attempts - 1 values)."""
        cap = self.initial_backoff_s
        for _ in range(self.attempts - 1):
            yield random.uniform(0, cap)
            cap = min(cap * self.multiplier, self.max_backoff_s)


NO_RETRY = RetryPolicy(attempts=1)


def connect(
    address: str,
    *,
    token: str | None = None,
    token_file: str | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> grpc.Channel:
    """An insecure channel to `address` that sends the bearer token on every call."""
    channel = grpc.insecure_channel(address, options=channel_options(max_message_bytes))
    interceptor = AuthClientInterceptor(resolve_token(token, token_file))
    return grpc.intercept_channel(channel, interceptor)


def call(
    method: Callable[..., T],
    request: Any,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    idempotent: bool = False,
    retry: RetryPolicy | None = None,
    target: str = "",
) -> T:
    """Call a unary method with a deadline; map failures to RlxError.

    UNAVAILABLE is retried with backoff only when `idempotent` is true; the deadline bounds the
    whole call including retries.
    """
    policy = (retry or RetryPolicy()) if idempotent else NO_RETRY
    deadline = time.monotonic() + timeout
    delays = policy.delays()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded(f"{target or 'call'}: no answer within {timeout:.1f} s")
        try:
            return method(request, timeout=remaining)
        except grpc.RpcError as e:
            error: RlxError = from_rpc_error(e, target=target)
        if not isinstance(error, Unavailable):
            raise error
        delay = next(delays, None)
        if delay is None or time.monotonic() + delay >= deadline:
            raise error
        time.sleep(delay)


def call_stream(
    method: Callable[..., Iterator[T]],
    request: Any,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    target: str = "",
) -> Iterator[T]:
    """Iterate a server-streaming (or bidi) method with a deadline, mapping failures to RlxError.

    Streams are not retried here: the caller knows whether a half-read stream can be restarted.
    """
    try:
        yield from method(request, timeout=timeout)
    except grpc.RpcError as e:
        raise from_rpc_error(e, target=target) from None
