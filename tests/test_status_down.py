"""`rlx status` and `rlx down` from another terminal against a live `rlx up` run of real service
processes: what status reports (the run directory's view merged with the controller service's
answer), that down stops the run through the service and leaves a SIGTERM snapshot and no process
behind, and that status falls back to the run directory once the controller is gone."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from up_helpers import CLI, steps_done

from rlx_controller.snapshot import SnapshotStore
from rlx_core.storage import open_storage
from rlx_launch.local import read_services

# More steps than the run lives: at ~0.2 s per step a 40-step run can end before `rlx down`.
STEPS = 400
SETS = [
    f"steps={STEPS}",
    "batch.prompts=8",
    "batch.group_size=4",
    "eval.max_prompts=16",
    "eval.every=100",
]


def _rlx(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(420)
def test_status_then_down_of_a_live_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    sets = [x for s in SETS for x in ("--set", s)]
    up = subprocess.Popen(
        [*CLI, "up", "--run-dir", str(run), *sets],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 300
        while steps_done(run) < 2:
            assert up.poll() is None, up.communicate()[0].decode(errors="replace")
            assert time.monotonic() < deadline, "rlx up made no 2 steps"
            time.sleep(0.1)

        result = _rlx("status", str(run), "--json")
        assert result.returncode == 0, result.stderr
        status = json.loads(result.stdout)
        controller_pid = int((run / "controller.pid").read_text())
        served = json.loads((run / "controller.json").read_text())
        assert served["pid"] == controller_pid
        assert status["controller"] == {
            "pid": controller_pid,
            "alive": True,
            "address": served["address"],
        }
        # the controller service's answer: the loop's own view of the run
        live = status["live"]
        assert live["pid"] == controller_pid and live["run_dir"] == str(run)
        assert live["steps"] == STEPS and live["step"] >= 2
        assert live["phase"] in ("training", "evaluating")
        assert set(live["loaded"]) == {"inference-0"}
        assert set(live["components"]) >= {"trainer", "inference-0"}
        assert live["eta_s"] > 0 and len(live["run_id"]) == 12
        services = status["services"]
        assert set(services) == {"paramserver-0", "trainer", "inference-0", "verifier-0"}
        assert all(s["alive"] for s in services.values()), services
        assert {n: s["pid"] for n, s in services.items()} == {
            n: h.pid for n, h in read_services(run).items()
        }
        worker = status["workers"]["inference-0"]
        assert "error" not in worker, worker
        assert isinstance(worker["loaded_version"], int)
        assert 0 <= worker["loaded_version"] <= status["step"] + 1
        assert 2 <= status["step"] < STEPS and status["steps"] == STEPS
        assert status["eta_s"] > 0 and status["s_per_step"] > 0
        assert sum(status["staleness"].values()) >= 2
        assert "0" in status["heldout"]  # the base model's accuracy, before step 1

        pids = [controller_pid, *(s["pid"] for s in services.values())]
        result = _rlx("down", str(run))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "is down" in result.stdout
        assert f"through its service at {served['address']}" in result.stderr
        assert "snapshot at step" in result.stderr
        out, _ = up.communicate(timeout=60)
        text = out.decode(errors="replace")
        assert "stopped at step" in text, text
        assert f"plot               {run / 'plot.png'}" in text
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
            _rlx("down", str(run))
    assert not [p for p in pids if _alive(p)]

    snap = SnapshotStore(open_storage(str(run))).latest()
    assert snap is not None and snap.reason == "sigterm"
    listed = _rlx("snapshot", "list", str(run))
    assert listed.returncode == 0, listed.stderr
    assert "sigterm" in listed.stdout

    again = _rlx("down", str(run))
    assert again.returncode == 0 and "already down" in again.stdout
    after = json.loads(_rlx("status", str(run), "--json").stdout)
    assert after["controller"] == {"pid": None, "alive": False, "address": None}
    assert after["live"] is None  # no service: the run directory's view alone
    assert not (run / "controller.json").exists()
    assert not list(run.glob("controller-*.token"))
    assert after["step"] == snap.step
    assert not any(s["alive"] for s in after["services"].values())
    assert after["last_snapshot"]["reason"] == "sigterm"
    assert all(w["loaded_version"] is None for w in after["workers"].values())
