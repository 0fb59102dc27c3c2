"""What every rlx service process shares: its `[server]` config, the Lifecycle servicer, and the
serving loop behind each `rlx-NAME` console script.

The loop prints the bound address (`127.0.0.1:PORT`) as the first line of stdout, so a parent
process can read it; logs go to stderr. SIGTERM, SIGINT and the Shutdown RPC drain the server,
let in-flight calls finish for `grace_s`, and exit 0.

With `server.metrics_port` (`--metrics-port`) set, the process also serves Prometheus text at
`http://HOST:PORT/metrics`: process metrics, and per gRPC method the calls by status code
(`rlx_rpc_calls_total`) and their latency (`rlx_rpc_latency_seconds`), counted by a server
interceptor behind the token check (rejected calls never reach a servicer and are not counted).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import Any, Protocol, TypeVar

import grpc

from rlx_core.configs.server import ServerConfig
from rlx_core.errors import RlxError, Unavailable
from rlx_core.lifecycle import Lifecycle, State, StatusInfo
from rlx_core.proto.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from rlx_core.rpc._handlers import rebuild
from rlx_core.rpc.auth import resolve_token
from rlx_core.rpc.server import build_server

__all__ = [
    "LifecycleServicer",
    "RpcMetricsInterceptor",
    "ServerConfig",
    "ServiceConfig",
    "run_service",
    "service_main",
    "status_from_proto",
    "status_to_proto",
]

log = logging.getLogger(__name__)

Register = Callable[[grpc.Server], None]


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


# Seconds; up to 10 min because a Generate of a long unit on a slow host takes minutes.
LATENCY_BUCKETS = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0),
)


class RpcMetricsInterceptor(grpc.ServerInterceptor):
    """Counts every call by (method, status code) and observes its latency by method, into its
    own Prometheus registry (with the process collector), so several servers in one process do
    not clash. A streaming response is timed until its last message."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector

        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self.calls = Counter(
            "rlx_rpc_calls",
            "gRPC calls served, by full method name and status code.",
            ["method", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "rlx_rpc_latency_seconds",
            "Seconds from a call reaching its servicer to its last response.",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def _done(self, method: str, start: float, code: str) -> None:
        self.calls.labels(method, code).inc()
        self.latency.labels(method).observe(time.perf_counter() - start)

    @staticmethod
    def _code(context: grpc.ServicerContext, error: BaseException | None) -> str:
        if isinstance(error, RlxError):  # mapped to its status by ErrorMappingInterceptor
            return error.grpc_code
        code = context.code()  # set by context.abort / set_code
        if code is not None:
            return str(code.name)
        return "OK" if error is None else "INTERNAL"

    def _wrap(self, method: str, behavior: Callable[..., Any], streaming: bool) -> Any:
        if streaming:

            def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                start = time.perf_counter()
                try:
                    yield from behavior(request, context)
                except BaseException as e:
                    self._done(method, start, self._code(context, e))
                    raise
                self._done(method, start, self._code(context, None))

            return stream

        def unary(request: Any, context: grpc.ServicerContext) -> Any:
            start = time.perf_counter()
            try:
                response = behavior(request, context)
            except BaseException as e:
                self._done(method, start, self._code(context, e))
                raise
            self._done(method, start, self._code(context, None))
            return response

        return unary

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        return rebuild(handler, lambda behavior, streaming: self._wrap(method, behavior, streaming))


class _Details(grpc.HandlerCallDetails):
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


class _Intercepted(grpc.GenericRpcHandler):
    def __init__(self, inner: grpc.GenericRpcHandler, interceptor: grpc.ServerInterceptor) -> None:
        self._inner = inner
        self._interceptor = interceptor

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        return self._interceptor.intercept_service(self._inner.service, details)


class _InterceptingServer:
    """What a servicer's `add_*_to_server` sees: the real server, with `interceptor` put around
    every handler it adds (generic and registered ones), innermost, behind the server's own token
    and error-mapping interceptors (`build_server` fixes those)."""

    def __init__(self, server: grpc.Server, interceptor: grpc.ServerInterceptor) -> None:
        self._server = server
        self._interceptor = interceptor

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(
            tuple(_Intercepted(h, self._interceptor) for h in handlers)
        )

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        wrapped = {
            name: self._interceptor.intercept_service(
                lambda _d, h=h: h, _Details(f"/{service}/{name}")
            )
            for name, h in handlers.items()
        }
        self._server.add_registered_method_handlers(service, wrapped)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


def _metered(register: Register, interceptor: grpc.ServerInterceptor) -> Register:
    return lambda server: register(_InterceptingServer(server, interceptor))


def _start_metrics_http(config: ServerConfig, interceptor: RpcMetricsInterceptor) -> Any:
    from prometheus_client import start_http_server

    try:
        httpd, _thread = start_http_server(
            config.metrics_port, addr=config.host, registry=interceptor.registry
        )
    except OSError as e:
        raise Unavailable(
            f"cannot serve metrics on {config.host}:{config.metrics_port}: {e}",
            field="metrics_port",
        ) from None
    return httpd


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
    registers: list[Register] = [LifecycleServicer(lifecycle).register, *register]
    interceptor = RpcMetricsInterceptor() if config.metrics_port else None
    if interceptor is not None:
        registers = [_metered(r, interceptor) for r in registers]
    server, address = build_server(
        registers,
        token=token,
        host=config.host,
        port=config.port,
        max_workers=config.max_workers,
        max_message_bytes=config.max_message_mib << 20,
    )
    metrics_http = None
    if interceptor is not None:
        metrics_http = _start_metrics_http(config, interceptor)
        log.info("metrics on http://%s:%d/metrics", config.host, config.metrics_port)
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
    if metrics_http is not None:
        metrics_http.shutdown()
        metrics_http.server_close()
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
    parser.add_argument(
        "--metrics-port", type=int, help="serve Prometheus /metrics on this port (default: off)"
    )
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
    for key in ("host", "port", "token_file", "metrics_port"):
        value = getattr(args, key)
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
