"""`rlx up` end to end through real service processes, and exact resume after SIGKILLs.

A small demo config runs uninterrupted, generation running ahead of training (π_old is the
version that generated each batch, recomputed by the trainer); the same config runs again: the
trainer is SIGKILLed at one step and the paramserver (with every version it held) at a later one
(each time the controller restarts it and resumes from its newest snapshot: the trainer comes
back from a checkpoint and must recompute π_old from versions older than it), the controller
itself is SIGKILLed at a later random step, and `rlx resume` finishes the run. The final params
hash and the sequence of consumed prompts must equal the uninterrupted run's.

The (1, 1) case keeps the killed run in S3 (moto's server on 127.0.0.1) and resumes it from a new,
empty work directory, as on another machine after the first one was lost.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from up_helpers import CLI, STEPS, consumed, small_sets, steps_done

from rlx_controller.metrics import read_uploaded
from rlx_core.storage import open_storage
from rlx_launch.local import read_services


def _up(run_dir: Path | str, extra: list[str], work: Path | None = None) -> subprocess.Popen[bytes]:
    sets = [*small_sets(), *(x for s in extra for x in ("--set", s))]
    where = ["--run-dir", str(run_dir)] + ([] if work is None else ["--work-dir", str(work)])
    return subprocess.Popen(
        [*CLI, "up", *where, *sets],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _wait_step(run_dir: Path, step: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 240
    while steps_done(run_dir) < step:
        assert proc.poll() is None, proc.communicate()[0].decode(errors="replace")
        assert time.monotonic() < deadline, f"step {step} not reached"
        time.sleep(0.05)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _summary(run_dir: Path | str) -> dict[str, object]:
    return dict(json.loads(open_storage(str(run_dir)).get("summary.json")))


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.integration
@pytest.mark.parametrize(
    ("reload", "accept", "lag", "dynamic", "remote"),
    [(1, 1, 1, False, True), (1, 2, 2, False, False), (2, 4, 1, True, False)],
)
def test_resume_after_sigkills_equals_an_uninterrupted_run(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    reload: int,
    accept: int,
    lag: int,
    dynamic: bool,
    remote: bool,
    clean_run: Callable[[tuple[str, ...]], Path],
) -> None:
    # lag >= 1: generation runs ahead of training (the demo itself runs lockstep, lag 0); at
    # (1, 2) batch b comes from version b - 2, at (2, 4) from b - 1 or b - 2
    extra = [f"staleness.reload={reload}", f"staleness.accept={accept}", f"staleness.lag={lag}"]
    # (2, 4) also runs DAPO dynamic sampling: refills must replay exactly too
    extra.append(f"dynamic_sampling.enabled={'true' if dynamic else 'false'}")
    rng = random.Random(reload * 100 + accept)

    clean = clean_run(tuple(extra))
    reference = _summary(clean)
    assert reference["steps"] == STEPS and reference["heldout_before"] is not None

    if remote:  # the run's state in S3, this machine's files in a work directory
        run: Path | str = request.getfixturevalue("new_root")("s3", "runs/killed")
        work = tmp_path / "work-lost"
    else:
        run = work = tmp_path / "killed"
    proc = _up(run, extra, work if remote else None)
    # components die mid-run: the controller restarts each and carries on from its snapshot
    for victim, step in (("trainer", rng.randint(1, 2)), ("paramserver-0", 3)):
        _wait_step(work, step, proc)
        os.kill(read_services(work)[victim].pid, signal.SIGKILL)
    # then the controller itself dies, without a chance to snapshot
    _wait_step(work, rng.randint(4, STEPS - 1), proc)
    controller = int((work / "controller.pid").read_text())
    os.kill(controller, signal.SIGKILL)
    proc.wait(timeout=60)
    assert steps_done(work) < STEPS

    resume = [*CLI, "resume", str(run)]
    if remote:
        # the machine is gone: its services stop, and the run resumes from an empty work dir
        down = subprocess.run(
            [*CLI, "down", str(run), "--work-dir", str(work)],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert down.returncode == 0 and b"is down" in down.stdout, down
        work = tmp_path / "work-new"
        resume += ["--work-dir", str(work)]
    resumed = subprocess.run(
        resume,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=240,
        check=False,
    )
    text = resumed.stdout.decode(errors="replace")
    assert resumed.returncode == 0, text
    assert f"finished at step {STEPS}" in text
    assert _summary(run)["params_hash"] == reference["params_hash"]
    assert consumed(work) == consumed(clean)  # a remote run's steps before the kill came from S3
    if remote:
        uploaded = read_uploaded(open_storage(str(run)))
        assert uploaded == (work / "metrics.jsonl").read_bytes()
    if dynamic:  # uniform groups were dropped and refilled
        assert any(r.get("refill_prompts", 0) > 0 for r in _records(clean))
    # no service of the killed controller is left running
    for handle in read_services(work).values():
        stat = Path(f"/proc/{handle.pid}/stat")
        assert not stat.exists() or stat.read_text().split()[2] == "Z"
