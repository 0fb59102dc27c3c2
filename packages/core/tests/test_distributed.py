"""Where a process stands among several: the config from a provider's variables and the servers'
flags (no JAX here; the processes themselves are tested by the trainer's and the inference's
test_multihost.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from rlx_core.distributed import DistributedConfig, distributed_main
from rlx_core.serving import ServerConfig

ENV = ("RLX_COORDINATOR", "RLX_NUM_PROCESSES", "RLX_PROCESS_ID")


@dataclass(frozen=True, kw_only=True)
class _Config:
    server: ServerConfig = field(default_factory=ServerConfig)


def _serve(argv: list[str]) -> tuple[int, list[tuple[_Config, dict[str, Any]]]]:
    """`distributed_main` with a serve that records what it was given."""
    calls: list[tuple[_Config, dict[str, Any]]] = []

    def serve(config: _Config, **kwargs: Any) -> int:
        calls.append((config, kwargs))
        return 0

    return distributed_main("probe", _Config, serve, argv), calls


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def test_a_coordinator_starts_jax_distributed_even_for_one_process() -> None:
    assert not DistributedConfig().multi_process
    one = DistributedConfig(coordinator="127.0.0.1:1234")
    assert one.multi_process and one.num_processes == 1  # gloo collectives, like several
    assert DistributedConfig(coordinator="auto").multi_process


def test_flags_win_over_the_environment_and_reach_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLX_COORDINATOR", "10.0.0.2:1234")
    monkeypatch.setenv("RLX_NUM_PROCESSES", "4")
    monkeypatch.setenv("RLX_PROCESS_ID", "3")
    code, calls = _serve(["--process-id", "1", "--set", "server.grace_s=2"])
    assert code == 0
    [(config, kwargs)] = calls
    assert config.server.grace_s == 2  # the rest of the command line is the service's
    assert kwargs["distributed"] == DistributedConfig(
        coordinator="10.0.0.2:1234", num_processes=4, process_id=1
    )
    assert callable(kwargs["on_ready"])
    code, calls = _serve([])
    assert calls[0][1]["distributed"].process_id == 3


def test_a_bad_value_exits_2_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _serve(["--num-processes", "2"]) == (2, [])
    assert "rlx-probe: ConfigError: coordinator: must be host:port" in capsys.readouterr().err
    monkeypatch.setenv("RLX_PROCESS_ID", "one")
    assert _serve([]) == (2, [])
    assert "RLX_PROCESS_ID: must be an integer" in capsys.readouterr().err
