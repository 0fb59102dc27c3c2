"""`rlx up` argument handling that needs no services: where the run directory comes from."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_controller.demo import DEMO_TASK, demo_config, write_addition_jsonl
from rlx_controller.services import base_model_dir
from rlx_core.config import to_toml


def _config(tmp_path: Path, run_dir: str) -> Path:
    data = tmp_path / "data"
    write_addition_jsonl(data, DEMO_TASK)
    text = to_toml(demo_config("placeholder", data, base_model_dir()), comments=False)
    path = tmp_path / "run.toml"
    path.write_text(re.sub(r'^run_dir = ".*"$', f'run_dir = "{run_dir}"', text, flags=re.M))
    return path


def test_remote_run_dir_is_refused_by_name_before_anything_starts(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["up", str(_config(tmp_path, "s3://bucket/runs/r1"))])
    assert result.exit_code == 1
    assert "run_dir: s3://bucket/runs/r1" in result.output and "--run-dir" in result.output
    assert not (tmp_path / "rlx-run").exists() and not list(tmp_path.glob("*/services.json"))
