"""`rlx up` / `resume` / `status` argument handling that needs no services: where the run directory
and the work directory come from (a remote one in moto's S3 server on 127.0.0.1)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_controller.lease import LEASE_FILE, LeaseHolder
from rlx_core.config import to_toml
from rlx_core.processes import start_time
from rlx_core.storage import open_storage
from rlx_data import (
    DEMO_STEPS,
    DEMO_TASK,
    base_model_dir,
    demo_config,
    write_addition_jsonl,
)


def _config(tmp_path: Path, run_dir: str) -> Path:
    data = tmp_path / "data"
    write_addition_jsonl(data, DEMO_TASK)
    text = to_toml(demo_config("placeholder", data, base_model_dir()), comments=False)
    path = tmp_path / "run.toml"
    path.write_text(re.sub(r'^run_dir = ".*"$', f'run_dir = "{run_dir}"', text, flags=re.M))
    return path


def test_a_bad_work_dir_is_refused_by_name_before_anything_starts(tmp_path: Path) -> None:
    config = _config(tmp_path, str(tmp_path / "run"))
    result = CliRunner().invoke(app, ["up", str(config), "--work-dir", str(tmp_path / "w")])
    assert result.exit_code == 1
    assert f"work_dir: {tmp_path / 'w'}" in result.output
    assert not (tmp_path / "run").exists() and not (tmp_path / "w").exists()


def test_resume_of_a_remote_run_that_does_not_exist_names_it(
    tmp_path: Path, new_root: Callable[[str, str], str]
) -> None:
    uri = new_root("s3", "runs/none")
    result = CliRunner().invoke(app, ["resume", uri, "--work-dir", str(tmp_path / "w")])
    assert result.exit_code == 1
    assert f"{uri}: no config.toml" in result.output


def test_status_of_a_remote_run_reads_its_config_and_snapshots_from_storage(
    tmp_path: Path, new_root: Callable[[str, str], str]
) -> None:
    uri = new_root("s3", "runs/r1")
    open_storage(uri).put("config.toml", _config(tmp_path, uri).read_bytes())
    result = CliRunner().invoke(app, ["status", uri, "--work-dir", str(tmp_path / "w"), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["run"] == uri and out["work_dir"] == str(tmp_path / "w")
    assert out["steps"] == DEMO_STEPS and out["step"] == 0 and out["last_snapshot"] is None
    assert out["controller"] == {"pid": None, "alive": False, "address": None}
    # the metrics uploaded with the run's snapshots show from a machine not running it
    lines = [{"step": 0, "heldout": 0.5}, {"step": 1, "reward": 0.25, "step_s": 2.0}]
    open_storage(uri).put("metrics.jsonl", "".join(json.dumps(r) + "\n" for r in lines).encode())
    result = CliRunner().invoke(app, ["status", uri, "--work-dir", str(tmp_path / "w"), "--json"])
    out = json.loads(result.stdout)
    assert out["step"] == 1 and out["reward"] == 0.25 and out["heldout"] == {"0": 0.5}


def test_up_on_a_run_directory_holding_a_run_refuses_and_leaves_it_alone(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "snapshots" / "s0000000004").mkdir(parents=True)
    (run / "snapshots" / "s0000000004" / "snapshot.json").write_text("{}")
    (run / "config.toml").write_text("the run's own config")
    result = CliRunner().invoke(app, ["up", "--run-dir", str(run)])
    assert result.exit_code == 1
    assert f"{run} already holds a run: `rlx resume {run}`" in result.output
    assert (run / "config.toml").read_text() == "the run's own config"
    assert not (run / "data").exists()


def test_resume_or_up_on_a_run_another_controller_holds_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text(_config(tmp_path, str(run)).read_text())
    (run / "controller.pid").write_text("4242")
    holder = subprocess.Popen(["sleep", "60"])  # stands for the live controller
    try:
        me = LeaseHolder.me(time.time())
        lease = replace(me, pid=holder.pid, pid_start=start_time(holder.pid))
        open_storage(str(run)).put(LEASE_FILE, json.dumps(asdict(lease)).encode())
        result = CliRunner().invoke(app, ["resume", str(run)])
        config = (run / "config.toml").read_text()
        up = CliRunner().invoke(app, ["up", "--run-dir", str(run)])  # a fresh run over it
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code == 1
    assert f"RunBusy: {run} is being run by host {me.host} pid {holder.pid}" in result.output
    assert (run / "controller.pid").read_text() == "4242"  # `rlx down` still finds the holder
    assert not (run / "services.json").exists()
    assert up.exit_code == 1 and f"{run} is being run by host {me.host}" in up.output
    assert (run / "config.toml").read_text() == config  # the live run's config untouched


def test_example_must_be_a_known_one_and_come_without_a_config(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for cmd in (["up"], ["prefilter"]):
        result = CliRunner().invoke(app, [*cmd, "--example", "chess", "--run-dir", str(run)])
        assert result.exit_code == 1 and "--example 'chess'" in result.output, result.output
        assert "addition, code" in result.output
    config = _config(tmp_path, str(run))
    result = CliRunner().invoke(app, ["up", str(config), "--example", "code"])
    assert result.exit_code == 1 and "not both" in result.output, result.output
    assert not run.exists()


def test_the_code_example_config_is_a_code_dataset_on_its_own_model(tmp_path: Path) -> None:
    """`rlx up --example code` trains on the code example's own data and base model, its
    programs judged as code (nothing of the addition demo)."""
    from rlx_cli.up_cmd import _load_config
    from rlx_controller.rundir import RunPaths
    from rlx_data import code_model_dir

    cfg = _load_config(None, RunPaths.of(tmp_path / "run"), [], "code")
    assert cfg.model.path == str(code_model_dir())
    for ds in (*cfg.datasets, *cfg.eval.datasets):
        assert ds.reward == "code" and ds.language == "python" and ds.program == "last_block"
        assert Path(ds.path).is_file()
