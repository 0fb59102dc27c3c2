"""The loop's reload snapshots are written on a snapshot thread while the next step trains: every
boundary still gets its snapshot, in order and verifying, and a failed write stops the run with
its error instead of being lost. Driven through the real Driver with tools/bench/e2e/sim.py's
simulated services (no JAX), so the test is quick."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rlx_controller.snapshot import Snapshot
from rlx_core.config import to_toml
from rlx_core.configs.run import loads_run_config
from rlx_core.errors import FailedPrecondition
from rlx_data import DEMO_TASK, write_addition_jsonl


def _driver(
    sim: ModuleType,
    tmp_path: Path,
    steps: int,
    sets: tuple[str, ...] = (),
    log: Callable[[str], None] = lambda _m: None,
) -> Any:
    write_addition_jsonl(tmp_path / "data", DEMO_TASK)
    run_dir = tmp_path / "run"
    cfg = sim.sim_config(run_dir, tmp_path / "data", 2, steps, 8)
    if sets:
        cfg = loads_run_config(to_toml(cfg, comments=False), overrides=list(sets))
    model = sim.LatencyModel().scaled(0.002)
    return sim.sim_driver(cfg, run_dir, model=model, timings=None, log=log)


def test_every_reload_boundary_gets_its_snapshot_in_order(sim: ModuleType, tmp_path: Path) -> None:
    driver = _driver(sim, tmp_path, steps=5)
    written: list[tuple[int, str]] = []
    write = driver.snapshots.write

    def record(snap: Snapshot) -> None:
        write(snap)
        written.append((snap.step, snap.reason))

    driver.snapshots.write = record  # type: ignore[method-assign]
    summary = driver.run(resume=False)
    assert summary.steps == 5
    assert written == [(1, "reload"), (2, "reload"), (3, "reload"), (4, "reload"), (5, "final")]
    entries = driver.snapshots.entries()
    assert [e.ok for e in entries] == [True] * 5, [e.problem for e in entries]
    latest = driver.snapshots.latest()
    assert latest is not None and latest.step == 5 and latest.params_hash


def test_a_failed_background_snapshot_stops_the_run_with_its_error(
    sim: ModuleType, tmp_path: Path
) -> None:
    driver = _driver(sim, tmp_path, steps=6)
    write = driver.snapshots.write

    def disk_full_at_3(snap: Snapshot) -> None:  # a storage failure, injected at step 3
        if snap.step == 3:
            raise OSError(28, "No space left on device")
        write(snap)

    driver.snapshots.write = disk_full_at_3  # type: ignore[method-assign]
    with pytest.raises(OSError, match="No space left"):
        driver.run(resume=False)
    steps = [e.snapshot.step for e in driver.snapshots.entries() if e.snapshot is not None]
    assert steps[:2] == [1, 2] and 3 not in steps
    assert all(e.ok for e in driver.snapshots.entries())


@pytest.mark.parametrize(("reload", "accept", "lag"), [(1, 1, 1), (2, 4, 2), (1, 1, 0)])
def test_a_snapshot_names_a_checkpoint_old_enough_to_regenerate_what_follows(
    sim: ModuleType, tmp_path: Path, reload: int, accept: int, lag: int
) -> None:
    """Batch S is generated with v(S) <= S - lag. A snapshot at S naming the checkpoint of step S
    left a resume without version v(S) whenever batch S was not yet in the rollout log: every
    `rlx resume` failed with NotFound. It names the newest checkpoint at or below v(S)."""
    sets = (
        f"staleness.reload={reload}",
        f"staleness.accept={accept}",
        f"staleness.lag={lag}",
        "snapshots.checkpoint_every=2",
    )
    driver = _driver(sim, tmp_path, steps=8, sets=sets)
    written: list[Snapshot] = []
    write = driver.snapshots.write

    def record(snap: Snapshot) -> None:
        write(snap)
        written.append(snap)

    driver.snapshots.write = record  # type: ignore[method-assign]
    assert driver.run(resume=False).steps == 8
    assert [s.step for s in written] == list(range(reload, 9, reload))
    for snap in written:
        need = snap.step if snap.step == 8 else driver.schedule.version(snap.step)
        want = max((c for c in range(0, 9, 2) if 0 < c <= need), default=None)
        assert snap.checkpoint_step == want, (snap.step, snap.checkpoint_step, want)
        assert snap.checkpoint_uri == ("" if want is None else f"sim://checkpoints/{want}")
    if lag == 0:  # lockstep: the snapshot can name the checkpoint of its own step
        assert written[3].checkpoint_step == 4
    else:
        assert all(s.checkpoint_step != s.step for s in written[:-1])


def test_an_unverifiable_snapshot_is_named_once_and_the_one_before_used(
    sim: ModuleType, tmp_path: Path
) -> None:
    assert _driver(sim, tmp_path, steps=4).run(resume=False).steps == 4
    newest = sorted((tmp_path / "run" / "snapshots").iterdir())[-1]
    (newest / "_COMMITTED").unlink()
    lines: list[str] = []
    resumed = _driver(sim, tmp_path, steps=4, log=lines.append)
    assert resumed.run(resume=True).steps == 4
    skipped = [line for line in lines if "skipping snapshot" in line]
    assert len(skipped) == 1 and skipped[0].count("skipping snapshot") == 1, skipped
    assert newest.name in skipped[0] and "incomplete" in skipped[0]
    assert any("resuming from snapshot at step 3" in line for line in lines), lines


def _trained(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The metrics line of each trained step (the last one written, a resume writes some again),
    without its timings."""
    out: dict[int, dict[str, Any]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "step_s" in record:
            out[record["step"]] = {
                k: v for k, v in record.items() if not k.endswith("_s") and "per_s" not in k
            }
    return out


def test_a_requested_snapshot_is_written_at_the_step_end_and_the_run_goes_on(
    sim: ModuleType, tmp_path: Path
) -> None:
    """request_snapshot() from another thread (here: a metrics listener at step 2's line) gets a
    committed snapshot of step 2, reason "manual", with the checkpoint of step 2 written first
    (lag 0: batch 2 is generated with version 2) as the SIGTERM path does; the run trains on to
    its final step; a request after the end gets the final snapshot's step. Resumed from the
    requested snapshot (the later ones lost), the run trains the same batches as the
    uninterrupted one."""
    sets = ("staleness.lag=0", "snapshots.every=3")
    driver = _driver(sim, tmp_path / "a", steps=5, sets=sets)
    with pytest.raises(FailedPrecondition, match="no step trained yet"):
        driver.request_snapshot().result(timeout=1)
    futures: list[Future[int]] = []
    lines: list[int] = []

    def listener(record: dict[str, Any]) -> None:
        lines.append(record["step"])
        if record["step"] == 2:
            futures.append(driver.request_snapshot())
        if record["step"] == 3:
            raise ValueError("a broken listener")  # logged; the loop goes on

    driver.add_metrics_listener(listener)
    written: list[Snapshot] = []
    write = driver.snapshots.write

    def record(snap: Snapshot) -> str:
        written.append(snap)
        return write(snap)

    driver.snapshots.write = record  # type: ignore[method-assign]
    assert driver.run(resume=False).steps == 5
    assert lines == [1, 2, 3, 4, 5]
    assert futures[0].result(timeout=1) == 2
    assert [(s.step, s.reason) for s in written] == [(2, "manual"), (3, "reload"), (5, "final")]
    assert written[0].checkpoint_step == 2
    assert driver.progress.last_snapshot == (5, "final")
    assert driver.progress.loaded == {"inference-0": 4, "inference-1": 4}
    assert driver.request_snapshot().result(timeout=1) == 5

    # the run dies after the requested snapshot: only it is left; resume from it
    b = tmp_path / "b"
    first = _driver(sim, b, steps=5, sets=sets)
    asked: list[Future[int]] = []
    first.add_metrics_listener(
        lambda r: asked.append(first.request_snapshot()) if r["step"] == 2 else None
    )
    write_b = first.snapshots.write

    def fail_after_2(snap: Snapshot) -> str:
        if snap.step > 2:
            raise OSError(28, "No space left on device")
        return write_b(snap)

    first.snapshots.write = fail_after_2  # type: ignore[method-assign]
    with pytest.raises(OSError, match="No space left"):
        first.run(resume=False)
    assert asked[0].result(timeout=1) == 2
    lines_b: list[str] = []
    resumed = _driver(sim, b, steps=5, sets=sets, log=lines_b.append)
    assert resumed.run(resume=True).steps == 5
    assert any("resuming from snapshot at step 2 (checkpoint 2)" in m for m in lines_b), lines_b
    assert _trained(b / "run") == _trained(tmp_path / "a" / "run")
