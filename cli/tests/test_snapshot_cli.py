"""`rlx snapshot list` and `rlx snapshot inspect` on a run directory with a corrupt newest
snapshot."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_controller.mixture import MixtureState, PromptRef
from rlx_controller.schedule import WorkUnit
from rlx_controller.snapshot import Snapshot, SnapshotStore
from rlx_core.storage import open_storage

runner = CliRunner()


def _snap(step: int) -> Snapshot:
    unit = WorkUnit(
        unit_id=f"b{step:08d}.r0.u0000",
        batch=step,
        round=0,
        index=0,
        version=step,
        prompts=(PromptRef("add", 5, 0),),
        seeds=((1, 2, 3),),
        first_slot=0,
    )
    return Snapshot(
        run_id="r1",
        config_hash="c" * 64,
        step=step,
        version=step,
        checkpoint_step=None if step == 2 else step,
        checkpoint_uri="",
        params_hash="p" * 64,
        next_batch=step,
        mixture=MixtureState(step * 4, (step * 4,)),
        epochs={"add": 0},
        rng={"mixture_draws": step * 4},
        rollout_log={"records": step, "last_unit": "x"},
        outstanding=(unit,),
        metrics={"reward_sum": 1.5},
        created_unix=1.7e9 + step,
    )


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    store = SnapshotStore(open_storage(run))
    for step in (2, 4, 6):
        store.write(_snap(step))
    newest = run / "snapshots" / "s0000000006" / "snapshot.json"
    newest.write_bytes(newest.read_bytes()[:100])  # truncated
    return run


def test_list_shows_each_snapshot_and_the_corrupt_one(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    result = runner.invoke(app, ["snapshot", "list", str(run)])
    assert result.exit_code == 0, result.output
    assert "CORRUPT" in result.output and "truncated" in result.output
    assert "initial" in result.output  # step 2 refers to no checkpoint
    data = json.loads(runner.invoke(app, ["snapshot", "list", str(run), "--json"]).output)
    assert [(s["step"], s["ok"]) for s in data["snapshots"]] == [(2, True), (4, True), (6, False)]
    assert "s0000000006" in data["snapshots"][2]["problem"]


def test_inspect_newest_verified_and_by_step(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    result = runner.invoke(app, ["snapshot", "inspect", str(run), "--json"])
    assert result.exit_code == 0
    out = result.stdout.strip().splitlines()[-1]
    assert json.loads(out) == _snap(4).to_dict()
    assert "skipping snapshot" in result.stderr and "s0000000006" in result.stderr
    table = runner.invoke(app, ["snapshot", "inspect", str(run), "2"])
    assert table.exit_code == 0
    for field in (
        "run_id",
        "config_hash",
        "params_hash",
        "mixture",
        "outstanding",
        "rng",
        "rollout_log",
        "metrics",
        "none (initial weights)",
        "b00000002.r0.u0000",
    ):
        assert field in table.output
    bad = runner.invoke(app, ["snapshot", "inspect", str(run), "6"])
    assert bad.exit_code == 1 and "no snapshot verifies" in bad.stderr


def test_empty_run(tmp_path: Path) -> None:
    result = runner.invoke(app, ["snapshot", "inspect", str(tmp_path / "nothing")])
    assert result.exit_code == 1 and "no snapshots" in result.stderr
    assert "no snapshots" in runner.invoke(app, ["snapshot", "list", str(tmp_path)]).output
