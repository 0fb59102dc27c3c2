"""The optional Prometheus port of a service: a real server on 127.0.0.1 with `metrics_port` set,
scraped over HTTP, its per-method counters and latency histogram moving with real calls."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rlx_core.clients import LifecycleClient
from rlx_core.errors import ConfigError, NotFound, RlxError
from rlx_core.lifecycle import Lifecycle
from rlx_core.rpc.client import connect
from rlx_core.serving import ServerConfig, service_main
from rlx_testing import TOKEN, WRONG_TOKEN, free_port, serve_in_thread

GET_STATUS = "/rlx.lifecycle.v1.Lifecycle/GetStatus"


def _missing(request: bytes, context: grpc.ServicerContext) -> bytes:
    raise NotFound("no such thing")


def _echo_stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
    yield from (request, request)


def _add_test_service(server: grpc.Server) -> None:
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "test.Probe",
                {
                    "Missing": grpc.unary_unary_rpc_method_handler(_missing),
                    "Echo": grpc.unary_stream_rpc_method_handler(_echo_stream),
                },
            ),
        )
    )


@pytest.fixture
def service() -> Iterator[tuple[str, int]]:
    """A service with the Lifecycle servicer and a test one; yields (gRPC address, metrics port)."""
    port = free_port()
    lifecycle = Lifecycle("probe", "0.0.0")
    config = ServerConfig(metrics_port=port, token_file=None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLX_TOKEN", TOKEN)
        address, thread = serve_in_thread(lifecycle, config, [_add_test_service])
    yield address, port
    lifecycle.request_shutdown("test over", 0)
    thread.join(10)
    assert not thread.is_alive()


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def _calls(samples: dict[Any, float], method: str, code: str) -> float:
    key = ("rlx_rpc_calls_total", frozenset({("method", method), ("code", code)}))
    return samples.get(key, 0.0)


def _latency_count(samples: dict[Any, float], method: str) -> float:
    return samples.get(("rlx_rpc_latency_seconds_count", frozenset({("method", method)})), 0.0)


def test_calls_move_the_counters_and_latency_histogram(service: tuple[str, int]) -> None:
    address, port = service
    before = _scrape(port)
    assert _calls(before, GET_STATUS, "OK") == 0
    assert ("process_cpu_seconds_total", frozenset()) in before  # process metrics are there

    client = LifecycleClient(address, token=TOKEN)
    client.status()
    client.status()
    after = _scrape(port)
    assert _calls(after, GET_STATUS, "OK") == 2
    assert _latency_count(after, GET_STATUS) == 2
    client.close()


def test_error_codes_and_streams_are_labelled(service: tuple[str, int]) -> None:
    address, port = service
    channel = connect(address, token=TOKEN)
    missing = channel.unary_unary("/test.Probe/Missing")
    with pytest.raises(grpc.RpcError) as caught:
        missing(b"x", timeout=10)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND  # the mapping still works
    echo = channel.unary_stream("/test.Probe/Echo")
    assert list(echo(b"hi", timeout=10)) == [b"hi", b"hi"]
    channel.close()
    samples = _scrape(port)
    assert _calls(samples, "/test.Probe/Missing", "NOT_FOUND") == 1
    assert _calls(samples, "/test.Probe/Missing", "OK") == 0
    assert _calls(samples, "/test.Probe/Echo", "OK") == 1
    assert _latency_count(samples, "/test.Probe/Echo") == 1


def test_unauthenticated_calls_are_rejected_before_the_counters(service: tuple[str, int]) -> None:
    address, port = service
    client = LifecycleClient(address, token=WRONG_TOKEN)
    with pytest.raises(RlxError, match=r"(?i)unauth|token"):
        client.status(timeout=10)
    client.close()
    assert _calls(_scrape(port), GET_STATUS, "UNAUTHENTICATED") == 0


def test_metrics_port_config_is_checked() -> None:
    with pytest.raises(ConfigError, match="metrics_port"):
        ServerConfig(metrics_port=70000)
    with pytest.raises(ConfigError, match="metrics_port"):
        ServerConfig(port=9000, metrics_port=9000)
    assert ServerConfig().metrics_port == 0  # off unless asked


@dataclass(frozen=True, kw_only=True)
class _ProbeConfig:
    server: ServerConfig = field(default_factory=ServerConfig)


def test_the_metrics_port_flag_sets_the_config() -> None:
    seen: list[Any] = []

    def serve(config: _ProbeConfig, on_ready: Any = None) -> int:
        seen.append(config)
        return 0

    assert service_main("probe", _ProbeConfig, serve, ["--metrics-port", "9464"]) == 0
    assert seen[0].server.metrics_port == 9464
    assert service_main("probe", _ProbeConfig, serve, []) == 0
    assert seen[1].server.metrics_port == 0
