"""The node agent (`python -m rlx_launch.node`) as a real process with a real paramserver:
it waits for the controller's config, starts the service, restarts it when it dies or when the
config changes, and on SIGTERM reports to the run directory and stops the service."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlx_core.clients import LifecycleClient
from rlx_core.rpc.auth import create_token_file
from rlx_core.storage import open_storage
from rlx_launch.node import config_key, event_key, exit_key
from rlx_testing import free_port


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    q: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            q.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return q


def _expect(q: queue.Queue[str], pattern: str, timeout: float = 60) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        try:
            line = q.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"no line matching {pattern!r}; got:\n{''.join(seen)}")


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_agent_starts_restarts_and_reports_sigterm(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    storage = open_storage(str(run))
    token = tmp_path / "token"
    create_token_file(token)
    port = free_port()
    agent = subprocess.Popen(
        [
            *(sys.executable, "-m", "rlx_launch.node", "--run-dir", str(run)),
            *("--node", "n1", "--token-file", str(token), "--home", str(tmp_path / "home")),
            *("--bind", "127.0.0.1", "--poll", "0.2"),
            *("--service", f"paramserver-0:paramserver:{port}"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    out = _lines(agent)
    try:
        _expect(out, rf"services: paramserver-0:{port}")
        time.sleep(1)
        assert not list((tmp_path / "home" / "logs").iterdir())  # nothing before the config
        spec = {"args": ["--max-versions", "8"], "config": ""}
        storage.put(config_key("paramserver-0"), json.dumps(spec).encode())
        first = int(_expect(out, r"started paramserver-0 .*\(pid (\d+), start 1\)").group(1))
        address = f"127.0.0.1:{port}"
        with LifecycleClient(address, token_file=str(token)) as client:
            client.wait_ready(60)

        # the controller writes a new config (a resumed run): the service restarts with it
        spec["args"] = ["--max-versions", "4"]
        storage.put(config_key("paramserver-0"), json.dumps(spec).encode())
        _expect(out, r"changed the config of paramserver-0")
        second = int(_expect(out, r"started paramserver-0 .*\(pid (\d+), start 2\)").group(1))
        assert second != first and _gone(first)
        # the service dies: the agent starts it again
        os.kill(second, signal.SIGKILL)
        _expect(out, r"paramserver-0 exited with code -9; restarting it")
        report = json.loads(storage.get(exit_key("paramserver-0")))  # for the controller
        assert (report["node"], report["code"], report["starts"]) == ("n1", -9, 2)
        assert "paramserver" in report["tail"]
        third = int(_expect(out, r"started paramserver-0 .*\(pid (\d+), start 3\)").group(1))
        with LifecycleClient(address, token_file=str(token)) as client:
            client.wait_ready(60)

        # the VM is going away: the controller hears of it through the run directory
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=60) == 0
        event = json.loads(storage.get(event_key("n1", 0)))
        assert event["node"] == "n1" and event["signal"] == "SIGTERM" and event["worker"] == 0
        assert _gone(third)
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
