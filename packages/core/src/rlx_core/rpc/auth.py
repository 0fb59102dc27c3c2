"""Bearer-token authentication for every rlx gRPC call.

Where the token comes from, first match wins:
1. an explicit token or token file passed by the caller (a config's `token_file`);
2. the `RLX_TOKEN` environment variable;
3. the file named by `RLX_TOKEN_FILE`;
4. the per-user default file `$RLX_HOME/token` (`~/.config/rlx/token`). A server that finds none
   of these creates that file with a fresh random token (mode 0600), so `rlx-paramserver --port 0`
   works on one machine with no set-up, and every client run by the same user finds the same token.
   For several hosts, copy the file or set `RLX_TOKEN` from your secret manager.

A token has at least 16 characters, wherever it comes from (ConfigError naming the variable or
file otherwise). A token file that its group or others may read is used, with a warning (once per
file and mode) naming it and its mode, as ssh warns of an unprotected key: `chmod 600` it.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from rlx_core.errors import ConfigError, Unauthenticated
from rlx_core.rpc._handlers import rebuild

__all__ = [
    "AuthClientInterceptor",
    "AuthServerInterceptor",
    "create_token_file",
    "default_token_path",
    "resolve_token",
]

log = logging.getLogger(__name__)

_HEADER = "authorization"
_MIN_TOKEN_CHARS = 16
_warned: set[tuple[str, int]] = set()  # (token file, mode) already warned about


def default_token_path() -> Path:
    """`$RLX_HOME/token`, with RLX_HOME defaulting to `~/.config/rlx`."""
    home = os.environ.get("RLX_HOME") or os.path.join(os.path.expanduser("~"), ".config", "rlx")
    return Path(home) / "token"


def _check_length(token: str, what: str, field: str) -> str:
    if len(token) < _MIN_TOKEN_CHARS:
        raise ConfigError(
            f"{what} is {len(token)} characters; at least {_MIN_TOKEN_CHARS} are required",
            field=field,
        )
    return token


def _warn_if_unprotected(path: Path, mode: int) -> None:
    """One warning per (file, mode) when group or others have any access to a token file."""
    mode = stat.S_IMODE(mode)
    if not mode & 0o077 or (str(path), mode) in _warned:
        return
    _warned.add((str(path), mode))
    log.warning(
        "UNPROTECTED TOKEN FILE: %s has mode %04o (group or others may read it); "
        "run `chmod 600 %s`",
        path,
        mode,
        path,
    )


def _read_token_file(path: Path) -> str:
    try:
        with path.open() as f:
            mode = os.fstat(f.fileno()).st_mode
            token = f.read().strip()
    except FileNotFoundError:
        raise ConfigError(f"token file {path} does not exist", field="token_file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read token file {path}: {e}", field="token_file") from None
    _warn_if_unprotected(path, mode)
    return _check_length(token, f"token in {path}", "token_file")


def resolve_token(
    token: str | None = None, token_file: str | Path | None = None, *, create: bool = False
) -> str:
    """The bearer token to use, by the order in the module docstring.

    With `create=True` (servers), a missing default token file is created with a random token.
    """
    if token:
        return token
    if not token_file and os.environ.get("RLX_TOKEN"):
        return _check_length(os.environ["RLX_TOKEN"].strip(), "RLX_TOKEN", "RLX_TOKEN")
    path = Path(token_file or os.environ.get("RLX_TOKEN_FILE") or default_token_path())
    if not token_file and not os.environ.get("RLX_TOKEN_FILE") and not path.exists():
        if not create:
            raise Unauthenticated(
                f"no rlx token: set RLX_TOKEN or RLX_TOKEN_FILE, or start a server once to create "
                f"{path}"
            )
        create_token_file(path)
    return _read_token_file(path)


def create_token_file(path: str | Path) -> str:
    """Create `path` (mode 0600) holding a fresh random token, unless it exists; return the token
    the file holds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    # link() is atomic and fails if the name exists: when two servers race, one token wins and
    # nobody ever reads a half-written file.
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return _read_token_file(path)


def _abort_handler(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind as `handler` that rejects the call without running anything."""

    def reject(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    return rebuild(handler, lambda _behavior, _streaming: reject)


class AuthServerInterceptor(grpc.ServerInterceptor):
    """Rejects, with UNAUTHENTICATED and before any servicer code runs, every call whose
    `authorization` metadata is not `Bearer <token>`."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        sent = None
        for key, value in handler_call_details.invocation_metadata or ():
            if key == _HEADER:
                sent = value.encode() if isinstance(value, str) else value
                break
        if sent is None:
            return _abort_handler(handler, "missing bearer token (metadata 'authorization')")
        if not hmac.compare_digest(sent, self._expected):
            return _abort_handler(handler, "wrong bearer token")
        return handler


class _ClientCallDetails(grpc.ClientCallDetails):
    def __init__(self, base: grpc.ClientCallDetails, metadata: list[tuple[str, str]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = base.wait_for_ready
        self.compression = base.compression


class AuthClientInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds `authorization: Bearer <token>` to every outgoing call."""

    def __init__(self, token: str) -> None:
        self._header = (_HEADER, f"Bearer {token}")

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = [*(details.metadata or ()), self._header]
        return _ClientCallDetails(details, metadata)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)
