"""`rlx status` and `rlx down` on a run directory built by hand: a real paramserver process started
by the local provider, a dead inference worker, synthetic metrics and a real snapshot. (The
end-to-end version against `rlx up` is tests/test_status_down.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_controller.mixture import MixtureState
from rlx_controller.snapshot import Snapshot, SnapshotStore
from rlx_core.rpc.auth import create_token_file
from rlx_core.storage import open_storage
from rlx_launch.local import STATE_FILE, LocalProvider, ServiceSpec

runner = CliRunner()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _write_run(run: Path) -> None:
    run.mkdir()
    (run / "config.toml").write_text("steps = 10\n")
    lines = [{"step": 0, "heldout": 0.5}]
    times = [9.0, 1.0, 1.0, 2.0, 1.0, 3.0]
    for step, s in enumerate(times, start=1):
        lines.append({"step": step, "reward": step / 10, "staleness": step % 2, "step_s": s})
        lines[-1] |= {
            "trainer/mismatch_mean": 1e-6,
            "trainer/mismatch_p95": 5e-7,
            "trainer/mismatch_max": 2e-3,
            "trainer/lag_kl_k3": 0.01 * step * (step % 2),
            "trainer/lag_ratio_min": 1.0 - 0.1 * step * (step % 2),
            "trainer/lag_ratio_max": 1.0 + 0.2 * step * (step % 2),
        }
    # resumed: replaces step 6
    lines.append(
        {"step": 6, "reward": 0.65, "staleness": 1, "step_s": 2.0, "trainer/lag_kl_k3": 0.1}
    )
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    SnapshotStore(open_storage(str(run))).write(
        Snapshot(
            run_id="r1",
            config_hash="c" * 64,
            step=4,
            version=4,
            checkpoint_step=4,
            checkpoint_uri="x",
            params_hash="p" * 64,
            next_batch=4,
            mixture=MixtureState(16, (16,)),
            epochs={"add": 0},
            rng={"mixture_draws": 16},
            rollout_log={"records": 4, "last_unit": "x"},
            outstanding=(),
            reason="reload",
            created_unix=1.7e9,
        )
    )


def test_status_then_down_of_a_run_with_one_live_service(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(run)
    token = run / "token"
    create_token_file(token)
    provider = LocalProvider(run, token)
    handle = provider.start(ServiceSpec(name="paramserver-0", kind="paramserver"))
    state = json.loads((run / STATE_FILE).read_text())
    state["inference-0"] = {**state["paramserver-0"], "name": "inference-0", "kind": "inference"}
    state["inference-0"].update(pid=2**22 + 7, address="127.0.0.1:1")  # no such process
    (run / STATE_FILE).write_text(json.dumps(state))
    try:
        result = runner.invoke(app, ["status", str(run), "--json"])
        assert result.exit_code == 0, result.output
        status = json.loads(result.stdout)
        assert status["controller"] == {"pid": None, "alive": False, "address": None}
        assert status["live"] is None  # no controller service: the run directory alone
        assert status["services"]["paramserver-0"]["alive"] is True
        assert status["services"]["paramserver-0"]["pid"] == handle.pid
        assert status["services"]["inference-0"]["alive"] is False
        assert status["workers"] == {
            "inference-0": {"loaded_version": None, "error": "not running"}
        }
        assert status["step"] == 6 and status["steps"] == 10
        assert status["reward"] == 0.65  # the last line of step 6 won
        assert status["staleness"] == {"0": 2, "1": 4}  # steps 2, 4 and 1, 3, 5, 6
        assert status["heldout"] == {"0": 0.5}
        # the numerics of the newest step (its record has none), the lag apart, per staleness
        assert status["numerical_mismatch"] is None
        lag = status["policy_lag"]
        assert lag["0"] == {"steps": 2, "kl_k3": 0.0, "ratio_min": 1.0, "ratio_max": 1.0}
        assert lag["1"]["steps"] == 4 and lag["1"]["kl_k3"] == pytest.approx(
            (0.01 + 0.03 + 0.05 + 0.1) / 4
        )
        assert lag["1"]["ratio_min"] == pytest.approx(0.5) and lag["1"][
            "ratio_max"
        ] == pytest.approx(2.0)
        # step times 9, 1, 1, 2, 1, 2 (step 6 replaced): median 2.0 (upper), 4 steps left
        assert status["s_per_step"] == 2.0 and status["eta_s"] == 8.0
        assert status["last_snapshot"]["step"] == 4
        assert status["last_snapshot"]["reason"] == "reload"

        table = runner.invoke(app, ["status", str(run)])
        assert table.exit_code == 0
        assert "6 / 10" in table.stdout and "paramserver-0" in table.stdout
        assert "staleness 1: KL k3 0.0475, ratio 0.5-2 (4 steps)" in table.stdout

        down = runner.invoke(app, ["down", str(run)])
        assert down.exit_code == 0, down.output
        assert "services stopped here: paramserver-0" in down.stdout
        provider.stop_all(grace_s=1)  # reaps the child
        assert not _alive(handle.pid)

        again = runner.invoke(app, ["down", str(run)])
        assert again.exit_code == 0 and "already down" in again.stdout
    finally:
        provider.stop_all(grace_s=1)


def test_status_and_down_of_a_missing_run_fail_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    for command in ("status", "down"):
        result = runner.invoke(app, [command, str(missing)])
        assert result.exit_code == 1
        assert f"{missing}: no such run directory" in result.stderr


def test_status_of_a_run_without_metrics_or_snapshots(tmp_path: Path) -> None:
    result = runner.invoke(app, ["status", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["step"] == 0 and status["steps"] is None
    assert status["services"] == {} and status["last_snapshot"] is None
    assert status["eta_s"] is None and status["staleness"] == {}


def test_status_shows_a_hostile_services_file_escaped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(run)
    token = run / "token"
    create_token_file(token)
    provider = LocalProvider(run, token)
    provider.start(ServiceSpec(name="paramserver-0", kind="paramserver"))
    provider.stop_all(grace_s=1)
    state = json.loads((run / STATE_FILE).read_text())
    entry = state.pop("paramserver-0")
    name = "inference-0\x1b[2J[red]x[/red]"
    state[name] = {**entry, "name": name, "kind": "inference"}
    state[name].update(pid=2**22 + 7, address="127.0.0.1:1\x1b]52;c;aGk=\x07\nrlx: forged")
    (run / STATE_FILE).write_text(json.dumps(state))
    table = runner.invoke(app, ["status", str(run)])
    assert table.exit_code == 0, table.output
    assert "\x1b" not in table.stdout and "\x07" not in table.stdout
    assert "\\x1b[2J" in table.stdout and "[red]x[/red]" in table.stdout  # shown, not obeyed
    assert not any(line.lstrip().startswith("rlx: forged") for line in table.stdout.splitlines())
