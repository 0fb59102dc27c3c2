"""Every service's console script, as a real process: address on stdout's first line, a real
authenticated Lifecycle over gRPC, clean exit on SIGTERM, SIGINT and Shutdown, and config errors
that name the field."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlx_core.clients import LifecycleClient
from rlx_core.errors import Unauthenticated
from rlx_core.lifecycle import State
from rlx_testing import TOKEN, WRONG_TOKEN, ServiceProcess, serve_in_thread

SERVICES = ["paramserver", "inference", "trainer", "verifier", "controller"]
BIN = Path(sys.executable).parent


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "RLX_TOKEN": TOKEN, "RLX_HOME": str(tmp_path)}


def start(name: str, env: dict[str, str], *args: str) -> ServiceProcess:
    """`rlx-NAME --port 0 ARGS`, once it has printed its address (its readiness is the tests')."""
    return ServiceProcess([str(BIN / f"rlx-{name}"), "--port", "0", *args], env=env, token=None)


@pytest.fixture
def started(request: pytest.FixtureRequest, env: dict[str, str]) -> Iterator[ServiceProcess]:
    proc = start(request.param, env)
    yield proc
    if proc.proc.poll() is None:
        proc.proc.kill()
    proc.stop()


@pytest.mark.integration
@pytest.mark.parametrize("started", SERVICES, indirect=True)
def test_service_serves_lifecycle_and_stops_on_sigterm(started: ServiceProcess, request) -> None:
    name = request.node.callspec.params["started"]
    host, port = started.address.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0, started.address
    with LifecycleClient(started.address, token=TOKEN) as client:
        status = client.wait_ready(timeout=30)
        assert status.service == name and status.state is State.READY
        assert status.pid == started.proc.pid and status.version == "0.1.0"
    with LifecycleClient(started.address, token=WRONG_TOKEN) as bad:
        with pytest.raises(Unauthenticated):
            bad.status(timeout=5)
    started.proc.send_signal(signal.SIGTERM)
    code, err = started.finish()
    assert code == 0, err
    assert "draining (received SIGTERM)" in err and f"{name} stopped" in err


@pytest.mark.integration
@pytest.mark.parametrize("started", ["paramserver"], indirect=True)
def test_sigint_also_stops_cleanly(started: ServiceProcess) -> None:
    LifecycleClient(started.address, token=TOKEN).wait_ready(timeout=30)
    started.proc.send_signal(signal.SIGINT)
    code, err = started.finish()
    assert code == 0 and "received SIGINT" in err


@pytest.mark.integration
@pytest.mark.parametrize("started", ["verifier"], indirect=True)
def test_shutdown_rpc_drains_and_exits(started: ServiceProcess) -> None:
    with LifecycleClient(started.address, token=TOKEN) as client:
        client.wait_ready(timeout=30)
        status = client.shutdown("test says stop", grace_s=0.5)
        assert status.state is State.DRAINING and status.message == "test says stop"
    code, err = started.finish()
    assert code == 0 and "verifier stopped" in err


@pytest.mark.integration
def test_config_file_and_overrides(tmp_path: Path, env: dict[str, str]) -> None:
    config = tmp_path / "trainer.toml"
    config.write_text('[server]\nhost = "127.0.0.1"\ngrace_s = 0.25\n')
    proc = start("trainer", env, "--config", str(config), "--set", "server.max_workers=2")
    try:
        assert proc.address.startswith("127.0.0.1:")
        LifecycleClient(proc.address, token=TOKEN).wait_ready(timeout=30)
        proc.proc.send_signal(signal.SIGTERM)
        code, err = proc.finish()
        assert code == 0 and "grace 0.2" in err
    finally:
        if proc.proc.poll() is None:
            proc.proc.kill()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "server.port=99999"], "server.port"),
        (["--set", "server.grace=1"], "did you mean 'grace_s'"),
        (["--set", "server.max_workers=many"], "server.max_workers"),
    ],
)
def test_bad_config_exits_2_naming_the_field(
    args: list[str], expected: str, env: dict[str, str]
) -> None:
    result = subprocess.run(
        [str(BIN / "rlx-controller"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert expected in result.stderr and "ConfigError" in result.stderr


@pytest.mark.parametrize("name", SERVICES)
def test_service_object_serves_in_process(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same service without a subprocess: config from a dict, the Service object, and the
    serving loop in a thread; Shutdown over gRPC ends it with exit code 0."""
    import importlib

    from rlx_core.config import from_dict

    monkeypatch.setenv("RLX_TOKEN", TOKEN)
    package = importlib.import_module(f"rlx_{name}")
    config_cls = next(getattr(package, n) for n in package.__all__ if n.endswith("Config"))
    service_cls = next(getattr(package, n) for n in package.__all__ if n.endswith("Service"))
    config = from_dict(config_cls, {"server": {"port": 0, "grace_s": 0.1}})
    service = service_cls(config)
    assert service.lifecycle.state is State.PENDING and service.lifecycle.service == name
    address, thread = serve_in_thread(service.lifecycle, config.server)
    with LifecycleClient(address, token=TOKEN) as client:
        assert client.status().state is State.READY
        client.shutdown("done", grace_s=0.1)
    thread.join(30)
    assert thread.code == 0 and service.lifecycle.state is State.STOPPED
