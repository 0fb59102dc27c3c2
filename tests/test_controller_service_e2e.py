"""The controller service of a live demo run, over real gRPC, from other processes.

One run does it all: `rlx up --detach` starts it in the background and returns once its service
answers; Status during training; a wrong token and malformed requests are refused while the run
goes on; the metrics stream replays the lines in metrics.jsonl, byte for byte; `rlx snapshot take`
writes a committed snapshot; the controller is SIGKILLed and `rlx resume --detach` continues from
that snapshot; `rlx down` stops the resumed run through Stop (its stop snapshot written first);
`rlx snapshot take` then says no controller runs it; and `rlx resume` finishes with the params
hash of the same run uninterrupted.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from up_helpers import CLI, steps_done

from rlx_controller.snapshot import SnapshotStore
from rlx_core.clients import ControllerClient
from rlx_core.errors import Unauthenticated
from rlx_core.processes import start_time
from rlx_core.proto.controller.v1 import controller_pb2 as pb
from rlx_core.proto.controller.v1 import controller_pb2_grpc as pb_grpc
from rlx_core.rpc.client import connect
from rlx_core.storage import open_storage
from rlx_testing import WRONG_TOKEN

# long enough that the run is still training while the test talks to it (~0.2 s a step alone)
STEPS = 120


def _rlx(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _wait(check: Callable[[], bool], what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _served(run: Path) -> dict[str, object]:
    return dict(json.loads((run / "controller.json").read_text()))


def _detached_pid(result: subprocess.CompletedProcess[str], run: Path) -> int:
    assert result.returncode == 0, result.stdout + result.stderr
    found = re.search(r"runs in the background \(pid (\d+)\)", result.stdout)
    assert found, result.stdout
    pid = int(found.group(1))
    served = _served(run)
    assert served["pid"] == pid and f"controller         {served['address']}" in result.stdout
    assert f"log                {run / 'rlx-detached.log'}" in result.stdout
    assert f"rlx down {run}" in result.stdout
    return pid


def _gone(pid: int) -> bool:
    return start_time(pid) is None


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_controller_service_of_a_live_run(
    tmp_path: Path, clean_run: Callable[[tuple[str, ...]], Path]
) -> None:
    from up_helpers import small_sets

    reference = json.loads((clean_run((f"steps={STEPS}",)) / "summary.json").read_text())
    run = tmp_path / "run"
    sets = [*small_sets(), "--set", f"steps={STEPS}"]
    pid = _detached_pid(_rlx("up", "--detach", "--run-dir", str(run), *sets), run)
    try:
        _wait(lambda: steps_done(run) >= 2, "2 steps")
        served = _served(run)
        address, token_file = str(served["address"]), str(served["token_file"])
        with ControllerClient(address, token_file=token_file) as client:
            s = client.status()
            assert s.pid == pid and s.run_dir == str(run) and s.steps == STEPS
            assert 2 <= s.step < STEPS and set(s.loaded) == {"inference-0"}
            assert 0 <= s.loaded["inference-0"] <= s.step + 1
            assert s.phase in ("training", "evaluating") and 0 in s.heldout

            with ControllerClient(address, token=WRONG_TOKEN) as stranger:
                with pytest.raises(Unauthenticated):
                    stranger.stop(wait=False)
            channel = connect(address, token_file=token_file)
            stub = pb_grpc.ControllerStub(channel)
            for call, request in (
                (stub.Snapshot, pb.SnapshotRequest(deadline_s=-1)),
                (stub.Stop, pb.StopRequest(reason="x\x1b[2J", wait=True)),
                (stub.Stop, pb.StopRequest(wait=True, deadline_s=float("nan"))),
            ):
                with pytest.raises(grpc.RpcError) as err:
                    call(request, timeout=30)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            channel.close()
            # the run unharmed: it trains on
            at = client.status().step
            _wait(lambda: client.status().step > at, "a step after the refusals")

            # the stream replays this process's lines exactly as metrics.jsonl holds them
            lines = list(itertools.islice(client.metrics(from_step=0), 3))
            written = (run / "metrics.jsonl").read_text().splitlines()[:3]
            assert lines == written

        taken = _rlx("snapshot", "take", str(run))
        assert taken.returncode == 0, taken.stderr
        found = re.search(r"at step (\d+)$", taken.stdout.strip())
        assert found, taken.stdout
        step = int(found.group(1))
        snap = SnapshotStore(open_storage(str(run))).load(step)
        assert snap.step == step and snap.reason == "manual"

        # the controller dies at once; resume continues from the newest snapshot
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: _gone(pid), "the killed controller gone", timeout=60)
        newest = SnapshotStore(open_storage(str(run))).latest()
        assert newest is not None
        pid = _detached_pid(_rlx("resume", str(run), "--detach"), run)
        resumed_from = f"resuming from snapshot at step {newest.step}"
        _wait(lambda: resumed_from in (run / "controller.log").read_text(), resumed_from)
        if newest.step == step:  # no reload snapshot came after it: resumed from the taken one
            assert newest.reason == "manual"

        _wait(lambda: steps_done(run) >= newest.step + 2, "2 steps after the resume")
        down = _rlx("down", str(run))
        assert down.returncode == 0, down.stdout + down.stderr
        assert "through its service" in down.stderr and "is down" in down.stdout
        stopped = re.search(r"snapshot at step (\d+)", down.stderr)
        assert stopped, down.stderr
        assert _gone(pid)
        last = SnapshotStore(open_storage(str(run))).latest()
        assert last is not None and last.step == int(stopped.group(1)) < STEPS
        assert last.reason == "sigterm"
    finally:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
            _rlx("down", str(run))

    status = json.loads(_rlx("status", str(run), "--json").stdout)
    assert status["live"] is None and status["controller"]["alive"] is False
    refused = _rlx("snapshot", "take", str(run))
    assert refused.returncode == 1
    assert "no controller is running" in refused.stderr and f"rlx resume {run}" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1

    resumed = _rlx("resume", str(run), timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"finished at step {STEPS}" in resumed.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["params_hash"] == reference["params_hash"]
