"""RlxError <-> gRPC status, in one place.

Servers install `ErrorMappingInterceptor`, so a servicer just raises `NotFound(...)` and the client
receives NOT_FOUND with that message and the exact error class in the `rlx-error` trailer. Clients
turn any `grpc.RpcError` back into an `RlxError` with `from_rpc_error`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from rlx_core.errors import ERROR_METADATA_KEY, RlxError, error_class_for
from rlx_core.rpc._handlers import rebuild

__all__ = ["ErrorMappingInterceptor", "from_rpc_error", "status_code_of"]

log = logging.getLogger(__name__)


def status_code_of(error: RlxError) -> grpc.StatusCode:
    """The grpc.StatusCode an RlxError maps to."""
    return getattr(grpc.StatusCode, error.grpc_code)


def from_rpc_error(error: grpc.RpcError, *, target: str = "") -> RlxError:
    """The RlxError a failed call stands for, keeping the server's message and error class."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    rlx_name = None
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == ERROR_METADATA_KEY:
            rlx_name = value if isinstance(value, str) else value.decode()
    cls = error_class_for(code.name, rlx_name)
    message = details or code.name
    if target and rlx_name is None and code == grpc.StatusCode.UNAVAILABLE:
        message = f"{target}: {message}"
    return cls(message)


def _abort(context: grpc.ServicerContext, error: Exception) -> None:
    if isinstance(error, RlxError):
        context.set_trailing_metadata(((ERROR_METADATA_KEY, type(error).__name__),))
        context.abort(status_code_of(error), error.message)
    log.exception("unexpected error in a gRPC handler")
    context.set_trailing_metadata(((ERROR_METADATA_KEY, "Internal"),))
    context.abort(grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}")


def _wrap_unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return behavior(request, context)
        except Exception as e:
            if _already_aborted(context):
                raise
            _abort(context, e)

    return wrapped


def _wrap_stream(behavior: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            yield from behavior(request, context)
        except Exception as e:
            if _already_aborted(context):
                raise
            _abort(context, e)

    return wrapped


def _already_aborted(context: grpc.ServicerContext) -> bool:
    # context.abort() raises a bare Exception after setting the status code; let it through.
    return context.code() is not None


class ErrorMappingInterceptor(grpc.ServerInterceptor):
    """Maps exceptions raised by servicers to gRPC statuses (RlxError by its table, anything else
    to INTERNAL with the traceback logged)."""

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        return rebuild(
            handler,
            lambda behavior, streaming: (_wrap_stream if streaming else _wrap_unary)(behavior),
        )
