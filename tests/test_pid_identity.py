"""A recorded process is recognised by pid, start time and run, never by pid and name: `rlx
status`, `rlx down` and the stale-service cleanup leave alone a process that has the recorded pid
and the service's module name but another start time or another run (pids wrap and are reused),
and still stop the run's own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_controller.lease import LEASE_FILE, LeaseHolder
from rlx_core.processes import RUN_ENV, start_time
from rlx_core.storage import open_storage
from rlx_launch.local import STATE_FILE
from rlx_launch.services import kill_stale_services

runner = CliRunner()
SLEEP = "import time; time.sleep(600)"


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Long-running stand-ins, each in its own session (a group leader, as a service is);
    killed at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def _start(
    procs: list[subprocess.Popen[bytes]], *argv: str, run: Path | None = None
) -> subprocess.Popen[bytes]:
    """`python -c SLEEP ARGV...` (the arguments only show in its command line), with `run`
    named in its environment as a service of that run is."""
    env = {k: v for k, v in os.environ.items() if k != RUN_ENV}
    if run is not None:
        env[RUN_ENV] = str(run.resolve())
    proc = subprocess.Popen([sys.executable, "-c", SLEEP, *argv], env=env, start_new_session=True)
    procs.append(proc)
    deadline = time.monotonic() + 30
    while not Path(f"/proc/{proc.pid}/cmdline").read_bytes().endswith(argv[-1].encode() + b"\0"):
        assert time.monotonic() < deadline, "the stand-in did not start"
        time.sleep(0.01)  # until it has exec'd: its command line is the stand-in's
    return proc


def _entry(name: str, kind: str, pid: int, start: int | None = None) -> dict[str, object]:
    """A services.json entry; without `start` as rlx wrote them before start times were kept."""
    entry: dict[str, object] = {
        "name": name,
        "kind": kind,
        "address": "127.0.0.1:9",
        "pid": pid,
        "log": f"/nowhere/{name}.log",
        "port": 9,
        "restarts": 0,
        "started_at": 0.0,
        "alive": True,
    }
    if start is not None:
        entry["pid_start"] = start
    return entry


def _run_dir(path: Path, services: dict[str, dict[str, object]]) -> Path:
    path.mkdir(parents=True)
    (path / "config.toml").write_text("steps = 10\n")
    (path / STATE_FILE).write_text(json.dumps(services))
    return path


def _status(run: Path) -> dict[str, object]:
    result = runner.invoke(app, ["status", str(run), "--json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def _lease(run: Path, pid: int, start: int | None = None) -> None:
    """The run's lease held by `pid` on this host, with its start time (as a controller writes
    it once it holds the run), or with `start`."""
    holder = LeaseHolder.me(time.time())
    start = start_time(pid) if start is None else start
    holder = LeaseHolder(**{**asdict(holder), "pid": pid, "pid_start": start})
    open_storage(str(run)).put(LEASE_FILE, json.dumps(asdict(holder)).encode())


def test_status_and_down_leave_alone_what_reused_a_recorded_pid(
    tmp_path: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    old, other = tmp_path / "old", tmp_path / "other"
    other.mkdir()
    # a process of another run, under a pid the finished run recorded, with the module's name
    reused = _start(spawn, "-m", "rlx_paramserver", "--token-file", str(other / "token"))
    # another run's service, recorded here with its true start time: its run is not this one
    theirs = _start(spawn, "-m", "rlx_trainer", run=other)
    # this run's marker, but a later process than the one recorded (its start time differs)
    later = _start(spawn, "-m", "rlx_verifier", "--token-file", str(old / "token"), run=old)
    controller = _start(spawn, "-m", "rlx_cli", "resume", "rlx")  # "rlx" in its command line
    start = start_time(later.pid)
    assert start is not None
    run = _run_dir(
        old,
        {
            "paramserver-0": _entry("paramserver-0", "paramserver", reused.pid),
            "trainer": _entry("trainer", "trainer", theirs.pid, start_time(theirs.pid)),
            "verifier-0": _entry("verifier-0", "verifier", later.pid, start - 1),
        },
    )
    (run / "controller.pid").write_text(str(controller.pid))
    # the run's lease names that pid, but a process that started earlier: a killed controller's
    controller_start = start_time(controller.pid)
    assert controller_start is not None
    _lease(run, controller.pid, controller_start - 1)

    status = _status(run)
    assert status["controller"] == {"pid": None, "alive": False, "address": None}
    services = status["services"]
    assert isinstance(services, dict)
    assert {n: s["alive"] for n, s in services.items()} == {
        "paramserver-0": False,
        "trainer": False,
        "verifier-0": False,
    }

    down = runner.invoke(app, ["down", str(run)])
    assert down.exit_code == 0, down.output
    assert "is already down" in down.output
    assert kill_stale_services(run, log=lambda _m: None) == []
    assert all(p.poll() is None for p in spawn), "a process that is not the run's was signalled"


def test_down_and_the_stale_cleanup_stop_the_runs_own_processes(
    tmp_path: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    run = tmp_path / "run"
    token = str(run / "token")
    ours = _start(spawn, "-m", "rlx_paramserver", "--token-file", token, run=run)
    # started by an rlx without start times: the run check alone (its token file is the run's)
    older = _start(spawn, "-m", "rlx_verifier", "--port", "0", "--token-file", token)
    stranger = _start(spawn, "-m", "rlx_trainer")  # recorded pid, no start time, not the run's
    controller = _start(spawn, "-m", "rlx_cli", "up")
    _run_dir(
        run,
        {
            "paramserver-0": _entry("paramserver-0", "paramserver", ours.pid, start_time(ours.pid)),
            "verifier-0": _entry("verifier-0", "verifier", older.pid),
            "trainer": _entry("trainer", "trainer", stranger.pid),
        },
    )
    (run / "controller.pid").write_text(str(controller.pid))
    _lease(run, controller.pid)

    status = _status(run)
    assert status["controller"] == {"pid": controller.pid, "alive": True, "address": None}
    services = status["services"]
    assert isinstance(services, dict)
    assert {n: s["alive"] for n, s in services.items()} == {
        "paramserver-0": True,
        "verifier-0": True,
        "trainer": False,
    }

    down = runner.invoke(app, ["down", str(run)])
    assert down.exit_code == 0, down.output
    assert f"stopping the controller (pid {controller.pid})" in down.output
    assert "services stopped here: paramserver-0, verifier-0" in down.output
    for proc in (controller, ours, older):
        assert proc.wait(timeout=30) == -signal.SIGTERM
    assert stranger.poll() is None

    # a killed controller's leftovers: the stale cleanup stops only the run's service
    again = _start(spawn, "-m", "rlx_paramserver", "--token-file", token, run=run)
    (run / STATE_FILE).write_text(
        json.dumps(
            {
                "paramserver-0": _entry(
                    "paramserver-0", "paramserver", again.pid, start_time(again.pid)
                ),
                "trainer": _entry("trainer", "trainer", stranger.pid),
            }
        )
    )
    assert kill_stale_services(run, log=lambda _m: None) == ["paramserver-0"]
    assert again.wait(timeout=30) == -signal.SIGKILL
    assert stranger.poll() is None


def test_start_time_is_field_22_after_the_command_names_last_paren(
    tmp_path: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    # a command name with spaces and parentheses shifts every field a plain split() counts
    odd = tmp_path / "a) b (c"
    odd.symlink_to(sys.executable)
    proc = subprocess.Popen([str(odd), "-c", SLEEP, "marker"])
    spawn.append(proc)
    deadline = time.monotonic() + 30
    while b"marker" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    stat = Path(f"/proc/{proc.pid}/stat").read_text()
    assert "(a) b (c)" in stat
    ticks = os.sysconf("SC_CLK_TCK")
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    mine = start_time(os.getpid())
    theirs = start_time(proc.pid)
    assert mine is not None and theirs is not None
    assert mine <= theirs <= uptime * ticks + ticks  # started after this test's process, by now
    assert theirs == int(stat.rsplit(")", 1)[1].split()[19])
    proc.kill()
    proc.wait()
    assert start_time(proc.pid) is None
