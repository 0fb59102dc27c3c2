"""The one rlx error hierarchy and the one table mapping it to gRPC status codes and back.

Every error a user or another component can see is an `RlxError`. Only servicers turn them into
gRPC statuses (`to_grpc_code`), and only client helpers turn statuses back (`from_grpc_code`). The
exact class travels in the trailing metadata key `rlx-error`, so a `ConfigError` raised by a server
arrives as a `ConfigError`, not just as an `InvalidArgument`.

This module must not import grpc: the code table is kept by name and resolved lazily.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ERROR_METADATA_KEY",
    "AlreadyExists",
    "Cancelled",
    "ConfigError",
    "Corrupt",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "RlxError",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "error_class_for",
]

ERROR_METADATA_KEY = "rlx-error"


class RlxError(Exception):
    """Base of every rlx error. `grpc_code` names the grpc.StatusCode member it maps to."""

    grpc_code: str = "UNKNOWN"
    retryable: bool = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __str__(self) -> str:
        return self.message


class InvalidArgument(RlxError):
    """A request or input is malformed: wrong shape, dtype, value or URI."""

    grpc_code = "INVALID_ARGUMENT"


class ConfigError(InvalidArgument):
    """A configuration field is unknown, of the wrong type, or has a value that is not allowed.

    `field` is the dotted path of the field (`trainer.optim.lr`), `value` the offending value.
    """

    def __init__(
        self, message: str, *, field: str = "", value: Any = None, allowed: str = ""
    ) -> None:
        text = message
        if field and not message.startswith(field):
            text = f"{field}: {message}"
        super().__init__(text, field=field, value=value, allowed=allowed)
        self.field = field
        self.value = value
        self.allowed = allowed


class NotFound(RlxError):
    """The named object (version, key, URI, run) does not exist."""

    grpc_code = "NOT_FOUND"


class AlreadyExists(RlxError):
    """The object to create exists already (for example a pushed weight version)."""

    grpc_code = "ALREADY_EXISTS"


class Unauthenticated(RlxError):
    """The call carried no token, or a wrong one."""

    grpc_code = "UNAUTHENTICATED"


class PermissionDenied(RlxError):
    """The caller is known but not allowed to do this."""

    grpc_code = "PERMISSION_DENIED"


class FailedPrecondition(RlxError):
    """The system is not in the state the call needs (for example another version is loaded)."""

    grpc_code = "FAILED_PRECONDITION"


class ResourceExhausted(RlxError):
    """A bounded resource is full (kept versions, cache memory, message size)."""

    grpc_code = "RESOURCE_EXHAUSTED"
    retryable = True


class Unavailable(RlxError):
    """The peer or backend cannot be reached right now; idempotent calls may retry."""

    grpc_code = "UNAVAILABLE"
    retryable = True


class DeadlineExceeded(RlxError):
    """The call did not finish before its deadline."""

    grpc_code = "DEADLINE_EXCEEDED"
    retryable = True


class Cancelled(RlxError):
    """The call was cancelled by its caller."""

    grpc_code = "CANCELLED"


class Corrupt(RlxError):
    """Data failed a checksum or could not be decoded: never returned as if it were good."""

    grpc_code = "DATA_LOSS"


class Unimplemented(RlxError):
    """The method or feature does not exist in this server."""

    grpc_code = "UNIMPLEMENTED"


class Internal(RlxError):
    """A bug or an unexpected failure inside rlx."""

    grpc_code = "INTERNAL"


_BY_NAME: dict[str, type[RlxError]] = {
    cls.__name__: cls
    for cls in (
        RlxError,
        InvalidArgument,
        ConfigError,
        NotFound,
        AlreadyExists,
        Unauthenticated,
        PermissionDenied,
        FailedPrecondition,
        ResourceExhausted,
        Unavailable,
        DeadlineExceeded,
        Cancelled,
        Corrupt,
        Unimplemented,
        Internal,
    )
}

# The canonical class for each status code, used when a status arrives without `rlx-error`
# (from a non-rlx peer, or from grpc itself, such as UNAVAILABLE on a refused connection).
_BY_CODE: dict[str, type[RlxError]] = {
    "INVALID_ARGUMENT": InvalidArgument,
    "OUT_OF_RANGE": InvalidArgument,
    "NOT_FOUND": NotFound,
    "ALREADY_EXISTS": AlreadyExists,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": PermissionDenied,
    "FAILED_PRECONDITION": FailedPrecondition,
    "ABORTED": FailedPrecondition,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
    "UNAVAILABLE": Unavailable,
    "DEADLINE_EXCEEDED": DeadlineExceeded,
    "CANCELLED": Cancelled,
    "DATA_LOSS": Corrupt,
    "UNIMPLEMENTED": Unimplemented,
    "INTERNAL": Internal,
    "UNKNOWN": Internal,
}


def error_class_for(code_name: str, rlx_name: str | None = None) -> type[RlxError]:
    """The RlxError class for a grpc status code name, preferring the exact `rlx-error` class."""
    if rlx_name is not None:
        cls = _BY_NAME.get(rlx_name)
        if cls is not None and cls.grpc_code == code_name:
            return cls
    return _BY_CODE.get(code_name, Internal)
