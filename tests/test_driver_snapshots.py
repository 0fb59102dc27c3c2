"""The loop's reload snapshots are written on a snapshot thread while the next step trains: every
boundary still gets its snapshot, in order and verifying, and a failed write stops the run with
its error instead of being lost. Driven through the real Driver with tools/bench/e2e/sim.py's
simulated services (no JAX), so the test is quick."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rlx_controller.demo import DEMO_TASK, write_addition_jsonl
from rlx_controller.snapshot import Snapshot


def _driver(sim: ModuleType, tmp_path: Path, steps: int) -> Any:
    write_addition_jsonl(tmp_path / "data", DEMO_TASK)
    run_dir = tmp_path / "run"
    cfg = sim.sim_config(run_dir, tmp_path / "data", 2, steps, 8)
    model = sim.LatencyModel().scaled(0.002)
    return sim.SimDriver(cfg, run_dir, model=model, timings=None, log=lambda _m: None)


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
