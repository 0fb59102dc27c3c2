"""A bad dataset row ends nothing: `rlx up` refuses a row whose limit the verifier could never take
with one line naming the file, the line, the field and the value, before any service starts;
and a sample the run's verifier refuses at scoring time (its caps lower than a row's default
limit) is an ERROR verdict, counted in the step's `verifier_errors` and named in the controller
log, while the run trains on to its last step."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from up_helpers import CLI

from rlx_data import base_model_dir

ECHO_TESTS = [{"input": "1\n", "output": "1\n"}]


def _config(tmp_path: Path, rows: list[str], *extra: str) -> Path:
    data = tmp_path / "code.jsonl"
    data.write_text("".join(r + "\n" for r in rows))
    config = tmp_path / "run.toml"
    config.write_text(
        f"""
run_dir = {json.dumps(str(tmp_path / "run"))}
steps = 2
[model]
path = {json.dumps(str(base_model_dir()))}
[[datasets]]
name = "code"
path = {json.dumps(str(data))}
reward = "code"
program = "whole"
time_limit_field = "tl"
memory_field = "mem"
[batch]
prompts = 2
group_size = 2
max_prompt_tokens = 64
max_new_tokens = 8
[snapshots]
checkpoint_every = 2
"""
        + "\n".join(extra)
    )
    return config


def _config_with_a_row_never_taken(tmp_path: Path) -> Path:
    """A run config whose dataset's second row asks for 1e30 MiB of memory."""
    tests = json.dumps(ECHO_TESTS)
    return _config(
        tmp_path,
        [
            '{"prompt": "echo", "tests": ' + tests + "}",
            '{"prompt": "echo", "tests": ' + tests + ', "mem": 1e30}',
        ],
    )


def _refused(*args: str) -> str:
    """Run `rlx ARGS` expecting a refusal: a non-zero exit and one line of output, no traceback."""
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_up_refuses_a_row_the_verifier_could_never_take(tmp_path: Path) -> None:
    line = _refused("up", str(_config_with_a_row_never_taken(tmp_path)))
    assert line.startswith("rlx: ") and "datasets[0].memory_field" in line
    assert f"{tmp_path / 'code.jsonl'}:2: 'mem' = 1e+30: must be" in line
    assert "(verifier.judge.max_memory_mb)" in line
    # refused while loading: no service was started
    run = tmp_path / "run"
    assert not (run / "services.json").exists() and not (run / "metrics.jsonl").exists()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_sample_the_verifier_refuses_is_counted_logged_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    tests = json.dumps(ECHO_TESTS)
    # row 0 asks for the verifier's default limit (2 s), over this run's verifier cap of 1 s;
    # row 1 for 0.5 s, which it judges
    config = _config(
        tmp_path,
        [
            '{"prompt": "echo", "tests": ' + tests + "}",
            '{"prompt": "echo fast", "tests": ' + tests + ', "tl": 0.5}',
        ],
        "[verifier.judge]",
        "max_time_limit_s = 1.0",
    )
    proc = subprocess.run(
        [*CLI, "up", str(config)], capture_output=True, text=True, timeout=540, check=False
    )
    run = tmp_path / "run"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "verifier_errors" in r]
    assert [r["step"] for r in steps] == [1, 2]
    # each batch holds both rows (one epoch of 2), 2 samples each: row 0's are refused
    assert [r["verifier_errors"] for r in steps] == [2, 2]
    assert all(r["verdicts"].get("ERROR") == 2 and r["excluded"] == 2 for r in steps)
    assert all(sum(r["verdicts"].values()) == 4 for r in steps)
    log = (run / "controller.log").read_text()
    refused = [line for line in log.splitlines() if "not judged, left out of training" in line]
    assert len(refused) == 2 and all("code/0 (unit " in line for line in refused)
    assert all("2 of 2 samples" in line and "ERROR" in line for line in refused)
    assert all("max_time_limit_s" in line for line in refused)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2


def test_resume_refuses_a_row_added_since_as_one_line_before_any_service(tmp_path: Path) -> None:
    # a run whose dataset file gained a bad row after it started: `rlx resume` loads the datasets
    # with the same checks as `rlx up`, before starting anything
    config = _config_with_a_row_never_taken(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text(config.read_text())
    line = _refused("resume", str(run))
    assert line.startswith("rlx: ") and "datasets[0].memory_field" in line
    assert f"{tmp_path / 'code.jsonl'}:2: 'mem' = 1e+30: must be" in line, line
    assert not (run / "services.json").exists() and not (run / "metrics.jsonl").exists()
