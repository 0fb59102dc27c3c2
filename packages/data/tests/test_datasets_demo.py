"""Datasets (JSONL, templates, pre-filter) and the built-in addition demo task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlx_core.clients.verifier import InlineTest
from rlx_core.configs.run import check_run_inputs, loads_run_config
from rlx_core.errors import ConfigError
from rlx_data import (
    DEMO_TASK,
    AdditionTask,
    addition_answer_correct,
    addition_splits,
    base_model_dir,
    demo_config,
    kept_rows,
    load_dataset,
    load_prefilter,
    read_jsonl,
    write_addition_jsonl,
)


def _cfg(tmp_path: Path, math: Path, code: Path, extra: str = "") -> str:
    return (
        f'run_dir = "{tmp_path}/run"\n'
        f'[model]\npath = "{tmp_path}/model"\n'
        f'[[datasets]]\nname = "m"\npath = "{math}"\ntemplate = "Q: {{prompt}} A:"\n'
        f'[[datasets]]\nname = "c"\npath = "{code}"\nreward = "code"\nprompt_field = "question"\n'
        + extra
    )


def test_load_render_and_prefilter(tmp_path: Path, math_jsonl: Path, code_jsonl: Path) -> None:
    cfg = loads_run_config(_cfg(tmp_path, math_jsonl, code_jsonl))
    math = load_dataset(cfg.datasets[0], field_path="datasets[0]")
    code = load_dataset(cfg.datasets[1], field_path="datasets[1]")
    p = math.prompt(3)
    assert (p.id, p.text, p.answer, p.reward, p.code) == ("m/3", "Q: 3+1= A:", "4", "math", None)
    c = code.prompt(2)
    assert c.text == "print 2" and c.answer is None and c.code is not None
    assert c.code.tests == (InlineTest("", "2\n"),) and c.code.language == "python"
    # pre-filter: m keeps rows with 0 < rate < 1; c is not in the file and stays whole
    pf = tmp_path / "pass.jsonl"
    rates = {0: 0.0, 1: 0.5, 2: 1.0, 3: 0.125}
    pf.write_text(
        "".join(
            json.dumps({"dataset": "m", "row": r, "pass_rate": v}) + "\n" for r, v in rates.items()
        )
    )
    table = load_prefilter(str(pf))
    assert table == {"m": rates}
    assert kept_rows(len(math), "m", table, cfg.prefilter) == [1, 3]
    assert kept_rows(len(code), "c", table, cfg.prefilter) == [0, 1, 2, 3]


def test_dataset_errors_name_field_file_and_line(tmp_path: Path, code_jsonl: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2="}\n')
    cfg = loads_run_config(_cfg(tmp_path, bad, code_jsonl))
    with pytest.raises(ConfigError) as info:
        load_dataset(cfg.datasets[0], field_path="datasets[0]")
    assert info.value.field == "datasets[0].answer_field"
    assert "bad.jsonl:2: the record has no field 'answer' (it has 'prompt')" in str(info.value)
    bad.write_text('{"prompt": "1+1=", "answer": "2"}\nnot json\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:2") as info:
        load_dataset(cfg.datasets[0], field_path="datasets[0]")
    assert info.value.field == "datasets[0].path"


def test_jsonl_from_object_storage(run_root: str) -> None:
    from rlx_core.storage import open_storage

    open_storage(run_root).put("data/x.jsonl", b'{"prompt": "a", "answer": "b"}\n\n')
    assert read_jsonl(run_root.rstrip("/") + "/data/x.jsonl") == [{"prompt": "a", "answer": "b"}]


def test_addition_splits_are_disjoint_and_fixed(tmp_path: Path) -> None:
    task = AdditionTask(digits=2, heldout=500, seed=0)
    train, heldout = addition_splits(task)
    assert len(train) == 9500 and len(heldout) == 500
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in heldout}
    assert addition_splits(task) == (train, heldout)
    assert addition_splits(AdditionTask(digits=2, heldout=500, seed=1))[1] != heldout
    for r in heldout[:50]:
        a, b = r["prompt"].rstrip("=").split("+")
        assert len(a) == len(b) == 2 and int(r["answer"]) == int(a) + int(b)
    assert task.target("7") == "007" and task.max_answer_chars == 3
    unpadded = AdditionTask(digits=2, heldout=10, padded=False)
    assert unpadded.record(3, 45) == {"prompt": "3+45=", "answer": "48"}
    paths = write_addition_jsonl(tmp_path / "demo", task)
    assert [json.loads(line) for line in paths[1].read_text().splitlines()] == heldout


@pytest.mark.parametrize(
    ("response", "answer", "ok"),
    [
        ("57", "57", True),
        ("057", "57", True),
        (" 57 ", "57", True),
        ("5 7", "57", False),
        ("the sum is 57", "57", True),
        ("56", "57", False),
        ("", "57", False),
        ("1,057", "1057", True),
        ("57.0", "57", True),
        ("abc", "0", False),
    ],
)
def test_math_answer_rule(response: str, answer: str, ok: bool) -> None:
    assert addition_answer_correct(response, answer) is ok


def test_demo_config_loads_its_data(tmp_path: Path) -> None:
    write_addition_jsonl(tmp_path / "data", DEMO_TASK)
    cfg = demo_config(str(tmp_path / "run"), tmp_path / "data", base_model_dir())
    check_run_inputs(cfg)
    assert cfg.model.path == str(base_model_dir())
    assert (cfg.batch.prompts, cfg.batch.group_size) == (32, 8)
    assert cfg.staleness.max_staleness == 0  # lockstep: batch b from version b
    # <|im_start|> user \n 9 9 + 9 9 = <|im_end|> \n <|im_start|> assistant \n; 1 9 8 <|im_end|>
    assert (cfg.batch.max_prompt_tokens, cfg.batch.max_new_tokens) == (14, 4)
    heldout = load_dataset(cfg.eval.datasets[0])
    assert len(heldout) == DEMO_TASK.heldout
    assert heldout.prompt(0).text == addition_splits(DEMO_TASK)[1][0]["prompt"]


def test_task_validation() -> None:
    with pytest.raises(ValueError, match="heldout"):
        AdditionTask(digits=1, heldout=100)
    with pytest.raises(ValueError, match="digits"):
        AdditionTask(digits=0)


@pytest.mark.parametrize(
    "line",
    [
        '{"dataset": "m", "row": 1e400, "pass_rate": 0.5}',
        '{"dataset": "m", "row": 0, "pass_rate": 1%s}' % ("0" * 400),
    ],
)
def test_a_prefilter_record_whose_number_no_int_or_float_holds_is_a_config_error(
    tmp_path: Path, line: str
) -> None:
    pf = tmp_path / "pf.jsonl"
    pf.write_text(line + "\n")
    with pytest.raises(ConfigError, match="record 1 needs dataset, row and pass_rate") as info:
        load_prefilter(str(pf))
    assert info.value.field == "prefilter.file"
