"""What a killed run leaves, and what a resume does with it: the temporaries of interrupted writes
(`.rlx-tmp-*` in rollouts/, snapshots/, checkpoints/) are never read and are gone after `rlx
resume`; a rollout-log record whose checksum holds around hostile content is one line in `rlx
rollouts show` and in the resume, which regenerates the unit and still ends bit-identical to an
uninterrupted run; the killed controller's services are stopped by the resume."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from up_helpers import CLI, STEPS, consumed, small_sets, steps_done

from rlx_controller.rollout_log import RolloutLog, decode_record
from rlx_core.processes import start_time
from rlx_core.proto.rollout.v1 import rollout_pb2 as pb
from rlx_core.storage import open_storage
from rlx_launch.local import read_services

HOSTILE = f"b{STEPS - 1:08d}.r0.u0000"  # a unit of the last batch: the resume needs it
TMP = ".rlx-tmp-0123456789ab-"  # rlx_core.storage's local backend names a write in progress so


def _hostile_copy(data: bytes) -> bytes:
    """A genuine record made the last batch's, with a string batch: its sha256 is right."""
    body = data.partition(b"\n")[2]
    msg = pb.Unit.FromString(body)
    unit = json.loads(msg.unit_json)
    unit |= {"unit_id": HOSTILE, "batch": str(STEPS - 1)}
    msg.unit_json = json.dumps(unit)
    body = msg.SerializeToString()
    return b"RLXROLL2 %s %d\n" % (hashlib.sha256(body).hexdigest().encode(), len(body)) + body


def _kill_at(run: Path, step: int) -> list[int]:
    """`rlx up` of the small demo, its controller SIGKILLed once `step` is done; the pids of
    the services it leaves running."""
    up = subprocess.Popen(
        [*CLI, "up", "--run-dir", str(run), *small_sets()],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 300
    while steps_done(run) < step:
        assert up.poll() is None, up.communicate()[0].decode(errors="replace")
        assert time.monotonic() < deadline, f"step {step} not reached"
        time.sleep(0.05)
    up.send_signal(signal.SIGKILL)
    up.communicate(timeout=60)
    return [h.pid for h in read_services(run).values() if start_time(h.pid) == h.pid_start]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_resume_sweeps_litter_and_regenerates_a_hostile_record(
    tmp_path: Path, clean_run: Callable[[tuple[str, ...]], Path]
) -> None:
    run = tmp_path / "run"
    left = _kill_at(run, 2)
    assert steps_done(run) < STEPS - 1  # the last batch is still to come
    assert left, "the killed controller left no service running"

    genuine = (run / "rollouts" / "b00000000.r0.u0000.rec").read_bytes()
    (run / "rollouts" / f"{HOSTILE}.rec").write_bytes(_hostile_copy(genuine))
    snapshot = max(p.name for p in (run / "snapshots").iterdir())
    litter = [  # what a SIGTERM during a write leaves: whole records, under temporary names
        f"rollouts/{TMP}b{STEPS - 2:08d}.r0.u0000.rec",
        f"snapshots/{snapshot}/{TMP}snapshot.json",
        f"checkpoints/{TMP}x",
    ]
    for name in litter:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(_hostile_copy(genuine))

    # never read: the log lists no temporary, and showing the last step names the hostile record
    assert not any("rlx-tmp" in u for u in RolloutLog(open_storage(str(run))).unit_ids())
    shown = subprocess.run(
        [*CLI, "rollouts", "show", str(run), "--step", str(STEPS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 1
    lines = shown.stderr.strip().splitlines()
    assert len(lines) == 1, shown.stderr
    where = run / "rollouts" / f"{HOSTILE}.rec"
    assert lines[0].startswith(f"rlx: Corrupt: {where}: unit.batch: expected an integer >= 0")

    resumed = subprocess.run(
        [*CLI, "resume", str(run)], capture_output=True, text=True, timeout=600, check=False
    )
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out
    assert "Traceback" not in out
    assert f"finished at step {STEPS}" in resumed.stdout
    named = [line for line in out.splitlines() if f"{where}: unit.batch" in line]
    assert len(named) == 1 and "will be regenerated" in named[0], out
    # (the killed controller may have left temporaries of its own)
    swept = [line for line in out.splitlines() if "temporaries of interrupted writes" in line]
    assert len(swept) == 1 and all(name in swept[0] for name in litter), out
    assert "stopped services left by the previous controller" in out, out
    assert all(start_time(pid) is None for pid in left)

    assert not [name for name in litter if (run / name).exists()]
    regenerated = decode_record((run / "rollouts" / f"{HOSTILE}.rec").read_bytes())
    assert regenerated is not None and regenerated.unit["batch"] == STEPS - 1
    clean = clean_run(())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["params_hash"] == json.loads((clean / "summary.json").read_text())["params_hash"]
    assert consumed(run) == consumed(clean)
