"""tools/bench/e2e/sim.py keeps working: the real controller loop with simulated services, tiny.

No timing is asserted (speed lives in the benchmark's output); what is checked is that the
simulation drives the real Driver through every step with one unit per simulated worker, logs
every unit, and fills every batch.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from rlx_data import DEMO_TASK, write_addition_jsonl


def test_simulation_runs_the_real_driver_with_simulated_workers(
    sim: ModuleType, tmp_path: Path
) -> None:
    write_addition_jsonl(tmp_path / "data", DEMO_TASK)
    model = sim.LatencyModel().scaled(0.005)
    workers, steps = 4, 5
    r = sim.simulate(
        workers, steps=steps, skip=2, model=model, data_dir=tmp_path / "data", tmp_root=tmp_path
    )
    # every batch's units (one per worker) went through generate, verify and the rollout log
    assert sorted(r["logged_units"]) == sorted(
        f"b{b:08d}.r0.u{u:04d}" for b in range(steps) for u in range(workers)
    )
    trained = [m for m in r["metrics"] if "step_s" in m]
    assert [m["step"] for m in trained] == list(range(1, steps + 1))
    assert all(m["groups"] == workers and len(m["prompt_ids"]) == workers for m in trained)
    assert r["units"] == workers * (steps - 2)
    assert r["cpu"]["score+log stage"][2] > 0 and r["units_per_s"] > 0
