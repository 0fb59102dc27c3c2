"""`rlx rollouts show` on a rollout log written by RolloutLog, its prompts rendered with a real
checkpoint tokenizer (Qwen2's tokenizer.json and chat template)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_controller.rollout_log import RolloutLog
from rlx_core.rollout import Judgement, RolloutGroup, RolloutSample, RolloutUnit
from rlx_core.storage import open_storage
from rlx_core.tokenizer import Tokenizer, load_tokenizer

runner = CliRunner()
QWEN2 = Path(__file__).resolve().parents[2] / "packages/model/tests/testdata/qwen2"
QUESTIONS = {3: "What is 2+3?", 8: "Combien font 7×6 ?"}


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer(str(QWEN2))


def _config(run: Path, model: Path) -> str:
    return (
        f'run_dir = "{run}"\n[model]\npath = "{model}"\n'
        '[[datasets]]\nname = "gsm8k"\npath = "gsm8k.jsonl"\n'
    )


def _unit(tok: Tokenizer, batch: int, round: int, index: int, rows: tuple[int, ...]) -> RolloutUnit:
    """A logged unit of G 2: sample 0 answers "5" and is right, sample 1 was not judged."""
    unit = {
        "unit_id": f"b{batch:08d}.r{round}.u{index:04d}",
        "batch": batch,
        "round": round,
        "index": index,
        "version": batch,
        "prompts": [{"dataset": "gsm8k", "row": r, "epoch": 0} for r in rows],
        "seeds": [[1, 2] for _ in rows],
        "first_slot": 0,
    }
    eos = tok.stop_ids[0]
    groups = []
    for row in rows:
        answer = f"The answer is {row + 2}."
        tokens = (*tok.encode(answer, add_special_tokens=False), eos)
        samples = (
            RolloutSample(
                tokens=tokens,
                logp_f32=np.full(len(tokens), -0.5, "<f4").tobytes(),
                finish="stop",
                text=answer,
                status="AC",
                reward=1.0,
            ),
            RolloutSample(
                tokens=(eos,),
                logp_f32=np.full(1, -2.0, "<f4").tobytes(),
                finish="stop",
                text="",
                status="INFRA",
                reward=None,
            ),
        )
        messages = [{"role": "user", "content": QUESTIONS[row]}]
        groups.append(
            RolloutGroup(
                prompt=f"gsm8k/{row}",
                prompt_ids=tuple(tok.prompt_ids(messages)),
                version=batch,
                samples=samples,
            )
        )
    return RolloutUnit(unit=unit, version=batch, generated_tokens=9, groups=tuple(groups))


@pytest.fixture
def run(tmp_path: Path, tok: Tokenizer) -> Path:
    """A run whose log holds batch 0 (two units of one prompt: training step 1's) and batch 1 (a
    unit of two prompts, and a refill unit: step 2's)."""
    run = tmp_path / "run"
    storage = open_storage(run)
    storage.put("config.toml", _config(run, QWEN2).encode())
    log = RolloutLog(storage)
    for record in (
        _unit(tok, 0, 0, 0, (3,)),
        _unit(tok, 0, 0, 1, (8,)),
        _unit(tok, 1, 0, 0, (8, 3)),
        _unit(tok, 1, 1, 0, (3,)),
    ):
        log.append(record)
    return run


def _json_rows(args: list[str]) -> list[dict[str, Any]]:
    result = runner.invoke(app, ["rollouts", "show", *args, "--json"])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_json_rows_of_a_step_with_the_prompt_as_the_model_saw_it(run: Path, tok: Tokenizer) -> None:
    rows = _json_rows([str(run), "--step", "1", "--limit", "3"])
    rendered = tok.render([{"role": "user", "content": QUESTIONS[3]}])
    assert rendered.startswith("<|im_start|>")  # the chat template's markers, kept
    ids = tok.prompt_ids([{"role": "user", "content": QUESTIONS[3]}])
    answer_ids = tok.encode("The answer is 5.", add_special_tokens=False)
    eos = tok.stop_ids[0]
    # step 1 trains batch 0 (metrics.jsonl's numbering)
    common = {"step": 1, "batch": 0, "unit_id": "b00000000.r0.u0000", "round": 0, "version": 0}
    assert rows[0] == {
        **common,
        "prompt_id": "gsm8k/3",
        "sample": 0,
        "prompt": rendered,
        "prompt_ids": ids,
        "response": "The answer is 5.",
        "response_ids": [*answer_ids, eos],
        "reward": 1.0,
        "status": "AC",
        "finish": "stop",
        "tokens": len(answer_ids) + 1,
        "tests_passed": 0,
        "tests_total": 0,
        "first_failed": None,
        "message": "",
        "compile_output": "",
        "judge_s": 0.0,
    }
    assert rows[1] == {
        **common,
        "prompt_id": "gsm8k/3",
        "sample": 1,
        "prompt": rendered,
        "prompt_ids": ids,
        "response": "",
        "response_ids": [eos],
        "reward": None,
        "status": "INFRA",
        "finish": "stop",
        "tokens": 1,
        "tests_passed": 0,
        "tests_total": 0,
        "first_failed": None,
        "message": "",
        "compile_output": "",
        "judge_s": 0.0,
    }
    # --limit 3: the third row is the next unit's first sample
    assert (rows[2]["unit_id"], rows[2]["prompt_id"], rows[2]["sample"]) == (
        "b00000000.r0.u0001",
        "gsm8k/8",
        0,
    )
    assert rows[2]["prompt"] == tok.render([{"role": "user", "content": QUESTIONS[8]}])
    assert len(rows) == 3


def test_the_newest_step_is_the_default_refills_included(run: Path) -> None:
    rows = _json_rows([str(run), "--limit", "100"])
    assert [(r["unit_id"], r["prompt_id"], r["sample"]) for r in rows] == [
        ("b00000001.r0.u0000", "gsm8k/8", 0),
        ("b00000001.r0.u0000", "gsm8k/8", 1),
        ("b00000001.r0.u0000", "gsm8k/3", 0),
        ("b00000001.r0.u0000", "gsm8k/3", 1),
        ("b00000001.r1.u0000", "gsm8k/3", 0),
        ("b00000001.r1.u0000", "gsm8k/3", 1),
    ]
    assert {r["step"] for r in rows} == {2} and {r["version"] for r in rows} == {1}
    assert len(_json_rows([str(run)])) == 6  # the default limit, 8, holds the whole step


def test_the_table_shows_prompt_response_and_verdicts(run: Path) -> None:
    result = runner.invoke(
        app, ["rollouts", "show", str(run), "--step", "2"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "step 2 of" in out and "2 work units logged" in out and "6 samples shown" in out
    assert "gsm8k/8  version 1  b00000001.r0.u0000" in out
    assert "<|im_start|>user" in out and QUESTIONS[8] in out and "<|im_start|>assistant" in out
    assert "The answer is 10." in out and "The answer is 5." in out
    assert "AC" in out and "INFRA" in out and "excluded" in out


def test_code_verdicts_show_their_tests_message_and_compiler_output(run: Path) -> None:
    """A code unit of batch 2: a program failing the second of three tests, one that did not
    compile, and a response without a program."""
    log = RolloutLog(open_storage(run))
    judged = (
        (
            "WA",
            0.0,
            Judgement(
                message="expected '7', found '8'",
                tests_passed=1,
                tests_total=3,
                first_failed=1,
                run_s=0.05,
            ),
        ),
        (
            "CE",
            0.0,
            Judgement(
                compile_output="main.cpp:1: error: 'x' was not declared",
                tests_total=3,
                compile_s=0.4,
            ),
        ),
        ("NO_CODE", 0.0, Judgement(message="no program: no ```python block", tests_total=3)),
    )
    samples = tuple(
        RolloutSample(
            tokens=(1,),
            logp_f32=np.full(1, -1.0, "<f4").tobytes(),
            finish="stop",
            text=f"response {k}",
            status=status,
            reward=reward,
            judgement=j,
        )
        for k, (status, reward, j) in enumerate(judged)
    )
    unit = {"unit_id": "b00000002.r0.u0000", "batch": 2, "round": 0, "index": 0, "version": 2}
    # the rest of a work unit: its one prompt, a seed per sample
    unit |= {"prompts": [{"dataset": "code", "row": 4, "epoch": 0}], "first_slot": 0}
    unit["seeds"] = [list(range(len(samples)))]
    group = RolloutGroup(prompt="code/4", prompt_ids=(1, 2), version=2, samples=samples)
    log.append(RolloutUnit(unit=unit, version=2, generated_tokens=3, groups=(group,)))

    rows = _json_rows([str(run), "--step", "3"])
    assert [
        (r["status"], r["tests_passed"], r["tests_total"], r["first_failed"]) for r in rows
    ] == [
        ("WA", 1, 3, 1),
        ("CE", 0, 3, None),
        ("NO_CODE", 0, 3, None),
    ]
    assert rows[1]["judge_s"] == 0.4 and "not declared" in rows[1]["compile_output"]
    result = runner.invoke(
        app, ["rollouts", "show", str(run), "--step", "3"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "verdicts: CE 1, NO_CODE 1, WA 1" in out
    assert "1/3 (#1 failed)" in out and "expected '7', found '8'" in out
    assert "'x' was not declared" in out and "no program" in out


def test_without_a_tokenizer_the_prompts_show_as_ids(run: Path, tmp_path: Path) -> None:
    (run / "config.toml").write_text(_config(run, tmp_path / "elsewhere"))
    result = runner.invoke(app, ["rollouts", "show", str(run), "--json", "--limit", "1"])
    assert result.exit_code == 0, result.output
    assert "prompts shown as ids" in result.stderr and "elsewhere" in result.stderr
    row = json.loads(result.stdout)
    assert row["prompt"] is None and row["prompt_ids"] and row["response"] == "The answer is 10."


def test_a_torn_record_is_named_and_skipped(run: Path) -> None:
    path = run / "rollouts" / "b00000001.r0.u0000.rec"
    path.write_bytes(path.read_bytes()[:50])
    result = runner.invoke(app, ["rollouts", "show", str(run), "--json"])
    assert result.exit_code == 0, result.output
    assert "b00000001.r0.u0000: torn record, skipped" in result.stderr
    assert {json.loads(line)["unit_id"] for line in result.stdout.splitlines()} == {
        "b00000001.r1.u0000"
    }


def _error(args: list[str]) -> str:
    result = runner.invoke(app, ["rollouts", "show", *args])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_run_without_rollouts_is_an_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    open_storage(run).put("config.toml", _config(run, QWEN2).encode())
    assert (
        _error([str(run)])
        == f"rlx: NotFound: {run}: no rollouts logged yet (its rollouts/ holds no record)"
    )


def test_a_step_without_rollouts_and_a_missing_run_are_errors(run: Path, tmp_path: Path) -> None:
    assert _error([str(run), "--step", "7"]) == (
        f"rlx: NotFound: {run}: no rollouts of step 7 logged (2 steps logged, 1 to 2)"
    )
    missing = tmp_path / "nothing"
    assert _error([str(missing)]) == f"rlx: NotFound: {missing}: no such run (no config.toml there)"


def test_a_run_on_s3(new_root: Any, tok: Tokenizer) -> None:
    root = new_root("s3", "runs/r1")
    storage = open_storage(root)
    storage.put("config.toml", _config(Path("/unused"), QWEN2).encode())
    RolloutLog(storage).append(_unit(tok, 4, 0, 0, (3,)))
    rows = _json_rows([root])
    assert [(r["step"], r["unit_id"], r["reward"]) for r in rows] == [
        (5, "b00000004.r0.u0000", 1.0),
        (5, "b00000004.r0.u0000", None),
    ]
    assert rows[0]["prompt"] == tok.render([{"role": "user", "content": QUESTIONS[3]}])
