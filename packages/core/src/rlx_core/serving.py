"""What every rlx service process shares: its `[server]` config, the Lifecycle servicer, and the
serving loop behind each `rlx-NAME` console script.

The loop prints the bound address (`127.0.0.1:PORT`) as the first line of stdout, so a parent
process can read it; logs go to stderr. SIGTERM, SIGINT and the Shutdown RPC drain the server,
let in-flight calls finish for `grace_s`, and exit 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol, TypeVar

import grpc

from rlx_core.errors import ConfigError, RlxError
from rlx_core.lifecycle import Lifecycle, State, StatusInfo
from rlx_core.proto.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from rlx_core.rpc.auth import resolve_token
from rlx_core.rpc.server import build_server

__all__ = [
    "LifecycleServicer",
    "ServerConfig",
    "ServiceConfig",
    "run_service",
    "service_main",
    "status_from_proto",
    "status_to_proto",
]

log = logging.getLogger(__name__)

Register = Callable[[grpc.Server], None]


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """How a service process listens."""

    host: str = "127.0.0.1"  # address to bind; "0.0.0.0" serves other hosts (mind the token)
    port: int = 0  # TCP port, 0-65535; 0 picks a free one (printed on stdout's first line)
    token_file: str | None = None  # bearer token file; unset: RLX_TOKEN, RLX_TOKEN_FILE, default
    max_workers: int = 16  # RPC handler threads, >= 1
    max_message_mib: int = 64  # largest message sent or received, MiB, >= 4
    grace_s: float = 5.0  # seconds in-flight calls may finish on shutdown, >= 0

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("must be 0-65535", field="port", value=self.port)
        if self.max_workers < 1:
            raise ConfigError("must be >= 1", field="max_workers", value=self.max_workers)
        if self.max_message_mib < 4:
            raise ConfigError("must be >= 4", field="max_message_mib", value=self.max_message_mib)
        if self.grace_s < 0:
            raise ConfigError("must be >= 0", field="grace_s", value=self.grace_s)


class ServiceConfig(Protocol):
    """Every service's config dataclass has a `server` section."""

    @property
    def server(self) -> ServerConfig: ...


C = TypeVar("C", bound=ServiceConfig)


def status_to_proto(status: StatusInfo) -> lifecycle_pb2.Status:
    return lifecycle_pb2.Status(
        service=status.service,
        version=status.version,
        state=status.state.value,  # type: ignore[arg-type]
        message=status.message,
        instance_id=status.instance_id,
        pid=status.pid,
        uptime_s=status.uptime_s,
        info=status.info,
    )


def status_from_proto(msg: lifecycle_pb2.Status) -> StatusInfo:
    return StatusInfo(
        service=msg.service,
        version=msg.version,
        state=State(msg.state) if msg.state else State.PENDING,
        message=msg.message,
        instance_id=msg.instance_id,
        pid=msg.pid,
        uptime_s=msg.uptime_s,
        info=dict(msg.info),
    )


class LifecycleServicer(lifecycle_pb2_grpc.LifecycleServicer):
    """GetStatus, Drain and Shutdown over a Lifecycle."""

    def __init__(self, lifecycle: Lifecycle) -> None:
        self._lifecycle = lifecycle

    def GetStatus(self, request: Any, context: grpc.ServicerContext) -> lifecycle_pb2.Status:
        return status_to_proto(self._lifecycle.status())

    def Drain(self, request: Any, context: grpc.ServicerContext) -> lifecycle_pb2.Status:
        self._lifecycle.drain(request.reason or "drain requested")
        return status_to_proto(self._lifecycle.status())

    def Shutdown(self, request: Any, context: grpc.ServicerContext) -> lifecycle_pb2.Status:
        self._lifecycle.request_shutdown(
            request.reason or "shutdown requested", request.grace_s or None
        )
        return status_to_proto(self._lifecycle.status())

    def register(self, server: grpc.Server) -> None:
        lifecycle_pb2_grpc.add_LifecycleServicer_to_server(self, server)


def run_service(
    lifecycle: Lifecycle,
    config: ServerConfig,
    register: Sequence[Register] = (),
    *,
    on_ready: Callable[[str], None] | None = None,
    install_signals: bool = True,
) -> int:
    """Serve until SIGTERM/SIGINT or a Shutdown call; return the process exit code.

    `on_ready(address)` runs once the server listens (the console script prints the address).
    """
    token = resolve_token(token_file=config.token_file, create=True)
    server, address = build_server(
        [LifecycleServicer(lifecycle).register, *register],
        token=token,
        host=config.host,
        port=config.port,
        max_workers=config.max_workers,
        max_message_bytes=config.max_message_mib << 20,
    )
    if install_signals:

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            lifecycle.request_shutdown(f"received {signal.Signals(signum).name}")

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    server.start()
    if lifecycle.state in (State.PENDING, State.STARTING):
        lifecycle.set(State.READY)
    log.info("%s %s serving on %s", lifecycle.service, lifecycle.version, address)
    if on_ready is not None:
        on_ready(address)
    # Wake up periodically so signal handlers run promptly on the main thread.
    while not lifecycle.wait_for_shutdown(0.5):
        pass
    grace = lifecycle.shutdown_grace_s if lifecycle.shutdown_grace_s is not None else config.grace_s
    log.info("%s draining (%s), grace %.1f s", lifecycle.service, lifecycle.status().message, grace)
    server.stop(grace).wait()
    lifecycle.set(State.STOPPED, lifecycle.status().message)
    log.info("%s stopped", lifecycle.service)
    return 0


def _parse_args(
    name: str, argv: Sequence[str] | None, extra_flags: Mapping[str, tuple[str, str]]
) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"rlx-{name}",
        description=f"Start the rlx {name} gRPC server. Prints its address (host:port) as the "
        "first line of stdout; SIGTERM or SIGINT drains it and exits 0.",
    )
    parser.add_argument("--config", help="TOML file with this service's config")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config field, e.g. --set server.grace_s=2 (repeatable)",
    )
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind; 0 picks a free one (default 0)")
    parser.add_argument("--token-file", help="file holding the bearer token")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    for flag, (key, help_text) in extra_flags.items():
        parser.add_argument(flag, dest=f"extra:{key}", metavar="VALUE", help=help_text)
    return parser.parse_args(argv)


def _print_address(address: str) -> None:
    print(address, flush=True)


def service_main(
    name: str,
    config_cls: type[C],
    serve: Callable[..., int],
    argv: Sequence[str] | None = None,
    *,
    extra_flags: Mapping[str, tuple[str, str]] | None = None,
) -> int:
    """The body of an `rlx-NAME` console script: parse flags and config, then
    `serve(config, on_ready=print_address)`.

    `extra_flags` adds service flags as shorthands for `--set`: `{"--max-versions":
    ("max_versions", "help text")}` makes `--max-versions 3` mean `--set max_versions=3`.

    Configuration errors are printed as one line naming the field, with exit code 2.
    """
    from rlx_core.config import apply_overrides, from_dict, load_config

    extra = dict(extra_flags or {})
    args = _parse_args(name, argv, extra)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s {name} %(levelname)s %(message)s",
        force=True,  # libraries imported before main (absl via JAX) may have claimed the root
    )
    overrides = list(args.set)
    for flag, key in (("host", "host"), ("port", "port"), ("token_file", "token_file")):
        value = getattr(args, flag)
        if value is not None:
            overrides.append(f"server.{key}={value}")
    for key, _help in extra.values():
        value = getattr(args, f"extra:{key}")
        if value is not None:
            overrides.append(f"{key}={value}")
    try:
        if args.config:
            config = load_config(config_cls, args.config, overrides=overrides)
        else:
            config = from_dict(config_cls, apply_overrides({}, overrides, cls=config_cls))
        return serve(config, on_ready=_print_address)
    except RlxError as e:
        print(f"rlx-{name}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
