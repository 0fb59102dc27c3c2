"""The local provider against real service processes (paramserver and verifier: no JAX, fast)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rlx_core.clients import LifecycleClient, ParamServerClient
from rlx_core.errors import InvalidArgument, Unavailable
from rlx_core.rpc.auth import create_token_file
from rlx_launch.local import KINDS, LocalProvider, ServiceSpec, read_services, runs_service


@pytest.fixture
def provider(tmp_path: Path):
    token_file = tmp_path / "token"
    create_token_file(token_file)
    p = LocalProvider(tmp_path / "run", token_file)
    yield p
    p.stop_all(grace_s=5)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); look at its state
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_start_restart_and_stop_real_services(provider: LocalProvider, tmp_path: Path) -> None:
    waits: list[tuple[str, float]] = []
    handles = provider.start_all(
        [
            ServiceSpec(name="paramserver-0", kind="paramserver", args=("--max-versions", "2")),
            ServiceSpec(name="verifier", kind="verifier"),
        ],
        on_wait=lambda name, t: waits.append((name, t)),
    )
    ps = handles["paramserver-0"]
    token = Path(provider.token_file).read_text().strip()
    client = ParamServerClient(ps.address, token=token)
    client.push(0, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    assert client.versions() == [0]

    # the recorded state is what another terminal reads
    recorded = read_services(provider.run_dir)
    assert {n: h.address for n, h in recorded.items()} == {n: h.address for n, h in handles.items()}
    assert Path(ps.log).exists()
    # the pid is still that service: its start time recorded, its run in its environment
    assert all(h.pid_start is not None for h in recorded.values())
    assert all(runs_service(h, provider.run_dir) for h in recorded.values())
    assert not any(runs_service(h, provider.run_dir / "other") for h in recorded.values())
    # a start time other than the recorded one: the pid names another process now
    moved = [replace(h, pid_start=(h.pid_start or 0) + 1) for h in recorded.values()]
    assert not any(runs_service(h, provider.run_dir) for h in moved)

    # SIGKILL the paramserver: the provider sees it dead and restarts it on the same port
    os.kill(ps.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while provider.alive("paramserver-0") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert provider.dead() == ["paramserver-0"]
    again = provider.restart("paramserver-0")
    assert again.address == ps.address
    assert again.pid != ps.pid and again.restarts == 1
    # in memory by design: the restarted replica is empty, and the old client reconnects
    assert client.versions() == []
    client.close()

    pids = [h.pid for h in provider.handles.values()]
    provider.stop_all(grace_s=5)
    assert not any(_pid_alive(pid) for pid in pids)
    assert "paramserver" in Path(ps.log).read_text()  # stderr logs went to the file
    for handle in handles.values():  # no module loaded twice by `python -m` (runpy's warning)
        assert "RuntimeWarning" not in Path(handle.log).read_text()
    with pytest.raises(Unavailable):
        LifecycleClient(ps.address, token=token, timeout=2).status(timeout=2)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_service_module_starts_without_a_runtime_warning(kind: str) -> None:
    """`python -m rlx_KIND` as the provider runs it: the package's `__init__` imports its server
    module, which `-m rlx_KIND.server` would then run a second time as __main__."""
    command = [sys.executable, "-m", KINDS[kind], "--help"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: rlx-{kind}")
    assert "RuntimeWarning" not in proc.stderr


def test_a_service_that_cannot_start_is_named_with_its_log(provider: LocalProvider) -> None:
    with pytest.raises(Unavailable, match=r"paramserver-bad.*exited with code 2"):
        provider.start(
            ServiceSpec(name="paramserver-bad", kind="paramserver", args=("--set", "nope=1"))
        )
    assert provider.dead() == ["paramserver-bad"]


def test_bad_specs_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="unknown kind 'trainerr'"):
        ServiceSpec(name="t", kind="trainerr")
    with pytest.raises(InvalidArgument, match="bad service name"):
        ServiceSpec(name="../x", kind="trainer")
