"""Datasets as people have them: JSONL and Parquet files, chat-turn prompts, and gold answers
written as GSM8K and MATH write them (the real test splits, from testdata/)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlx_core.configs.run import DatasetConfig, loads_run_config
from rlx_core.errors import ConfigError
from rlx_core.storage import open_storage
from rlx_data import Prompt, boxed_answer, gsm8k_answer, load_dataset, read_jsonl, read_parquet

DATA = Path(__file__).resolve().parents[3] / "testdata" / "math"
GSM8K = DATA / "gsm8k_test.jsonl"
MATH500 = DATA / "math500_test.jsonl"


def _rows(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    """`records` as JSONL, JSONL.gz or Parquet, by the suffix of `path`."""
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(records), path)
    else:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        data = text.encode()
        path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def _load(path: Path | str, **fields: Any) -> list[Prompt]:
    ds = load_dataset(DatasetConfig(name="d", path=str(path), **fields), field_path="datasets[0]")
    return [ds.prompt(r) for r in range(len(ds))]


# --- gold answers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n#### 18", "18"),
        ("So the house is worth $200,000.\n#### 1,000", "1000"),
        ("#### 70000", "70000"),
        ("a loss of 3\n#### -3", "-3"),
        ("#### 2.5", "2.5"),
        ("first #### 5 then a correction\n#### 6", "6"),
        ("no final answer line: 18", None),
        ("#### eighteen", None),
        ("####", None),
    ],
)
def test_gsm8k_answer(text: str, expected: str | None) -> None:
    assert gsm8k_answer(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("\\boxed{1} then \\boxed{x^{2}+1}", "x^{2}+1"),
        ("the answer is \\boxed {42}.", "42"),
        ("the answer is \\fbox{7}", "7"),
        ("roots $\\boxed{\\{1\\pm\\sqrt{5},-2\\}}$", "\\{1\\pm\\sqrt{5},-2\\}"),
        ("\\boxed{ \\text{(C)} }", "\\text{(C)}"),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("never closed \\boxed{1 + {2}", None),
        ("\\boxed{}", None),
        ("no box: 42", None),
    ],
)
def test_boxed_answer(text: str, expected: str | None) -> None:
    assert boxed_answer(text) == expected


def test_gsm8k_test_split_loads_with_its_gold_numbers() -> None:
    rows = _rows(GSM8K)
    prompts = _load(GSM8K, prompt_field="question", answer_format="gsm8k")
    assert len(prompts) == len(rows) == 1319
    p = prompts[0]
    assert (p.id, p.answer, p.chat) == ("d/0", "18", True)
    assert p.text == rows[0]["question"]
    assert p.messages == ({"role": "user", "content": rows[0]["question"]},)
    # every gold is the text after "####", commas dropped (e.g. "#### 2,125" -> "2125")
    expected = [r["answer"].rsplit("####", 1)[1].strip().replace(",", "") for r in rows]
    assert [q.answer for q in prompts] == expected
    assert sum("," in r["answer"].rsplit("####", 1)[1] for r in rows) > 0


def test_math500_boxed_solution_is_the_answer_field() -> None:
    """All 500 MATH-500 solutions' last \\boxed{} is exactly the row's own `answer`, nested and
    escaped braces included (row 422's answer is `\\{1\\pm\\sqrt{5},-2\\}`)."""
    rows = _rows(MATH500)
    assert len(rows) == 500
    assert [boxed_answer(r["solution"]) for r in rows] == [r["answer"] for r in rows]
    prompts = _load(MATH500, prompt_field="problem", answer_field="solution", answer_format="math")
    assert [p.answer for p in prompts] == [r["answer"] for r in rows]
    # records keep only the fields the config uses
    ds = load_dataset(DatasetConfig(name="d", path=str(MATH500), prompt_field="problem"))
    assert set(ds.records[0]) == {"problem", "answer"}


# --- formats --------------------------------------------------------------------------------

PLAIN = [
    {"question": "What is 2+2?", "answer": "#### 4", "level": 1, "extra": {"a": [1, 2]}},
    {"question": "Half of 9?", "answer": "so\n#### 4.5", "level": 2, "extra": {"a": []}},
    {"question": "Sum of \u2028 lines?", "answer": "#### 1,000", "level": 3, "extra": {"a": [3]}},
]
CHAT = [
    {
        "messages": [{"role": "user", "content": "What is 2+2?"}],
        "solution": "so $\\boxed{4}$",
    },
    {
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "Simplify 2/4."},
            {"role": "assistant", "content": "Which form?"},
            {"role": "user", "content": "A fraction."},
        ],
        "solution": "$\\boxed{\\frac{1}{2}}$",
    },
]


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".parquet"])
def test_jsonl_gzip_and_parquet_give_the_same_prompts(tmp_path: Path, suffix: str) -> None:
    plain = {
        "prompt_field": "question",
        "template": "Level {level}. {prompt}\nAnswer:",
        "answer_format": "gsm8k",
        "chat_template": False,
    }
    jsonl = _load(_write(tmp_path / "p.jsonl", PLAIN), **plain)
    assert [p.text for p in jsonl] == [
        "Level 1. What is 2+2?\nAnswer:",
        "Level 2. Half of 9?\nAnswer:",
        "Level 3. Sum of \u2028 lines?\nAnswer:",
    ]
    assert [p.answer for p in jsonl] == ["4", "4.5", "1000"]
    assert jsonl[0].messages == ({"role": "user", "content": jsonl[0].text},)
    assert not jsonl[0].chat
    assert _load(_write(tmp_path / f"p{suffix}", PLAIN), **plain) == jsonl

    chat = {"messages_field": "messages", "answer_field": "solution", "answer_format": "math"}
    jsonl = _load(_write(tmp_path / "c.jsonl", CHAT), **chat)
    assert _load(_write(tmp_path / f"c{suffix}", CHAT), **chat) == jsonl
    assert jsonl[1].messages == tuple(CHAT[1]["messages"])
    assert (jsonl[1].text, jsonl[1].answer, jsonl[1].chat) == ("A fraction.", "\\frac{1}{2}", True)


def test_parquet_nested_columns_come_as_lists_and_dicts(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.parquet", CHAT)
    assert pa.types.is_list(pq.read_schema(path).field("messages").type)
    assert read_parquet(str(path)) == CHAT
    assert read_parquet(str(path), columns=["solution", "nope"]) == [
        {"solution": r["solution"]} for r in CHAT
    ]


def test_system_prompt_goes_first_when_a_record_has_none(tmp_path: Path) -> None:
    chat = _load(
        _write(tmp_path / "c.jsonl", CHAT),
        messages_field="messages",
        answer_field="solution",
        answer_format="math",
        system_prompt="Reason step by step.",
    )
    assert chat[0].messages == (
        {"role": "system", "content": "Reason step by step."},
        {"role": "user", "content": "What is 2+2?"},
    )
    assert chat[1].messages == tuple(CHAT[1]["messages"])  # it has its own system turn
    plain = _load(
        _write(tmp_path / "p.jsonl", PLAIN), prompt_field="question", system_prompt="Be brief."
    )
    assert plain[0].messages == (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
    )
    assert plain[0].text == "What is 2+2?" and plain[0].answer == "#### 4"  # plain: as is


def test_turn_keys_beyond_role_and_content_are_dropped(tmp_path: Path) -> None:
    record = {"m": [{"role": "user", "content": "hi", "name": "x"}], "answer": 3}
    (p,) = _load(_write(tmp_path / "c.jsonl", [record]), messages_field="m")
    assert p.messages == ({"role": "user", "content": "hi"},) and p.answer == "3"


def test_dataset_on_object_storage(run_root: str, tmp_path: Path) -> None:
    storage = open_storage(run_root)
    local = _write(tmp_path / "c.parquet", CHAT)
    storage.put("data/c.parquet", local.read_bytes())
    storage.put("data/p.jsonl.gz", _write(tmp_path / "p.jsonl.gz", PLAIN).read_bytes())
    chat = {"messages_field": "messages", "answer_field": "solution", "answer_format": "math"}
    remote = _load(run_root.rstrip("/") + "/data/c.parquet", **chat)
    assert remote == _load(local, **chat)
    assert len(read_jsonl(run_root.rstrip("/") + "/data/p.jsonl.gz")) == 3


# --- errors ---------------------------------------------------------------------------------

USER = {"role": "user", "content": "q"}
# (bad record, config fields, config field named, message); the last column: Parquet can hold
# the record beside good ones (same columns and types)
BAD_RECORDS = [
    ({"messages": "q", "answer": "1"}, {}, "messages_field", "must be a non-empty list", False),
    ({"messages": [], "answer": "1"}, {}, "messages_field", "must be a non-empty list", True),
    (
        {"messages": [{"role": "user"}], "answer": "1"},
        {},
        "messages_field",
        "'messages' turn 0 is not a {role, content} pair of strings",
        True,
    ),
    (
        {"messages": [{"role": "user", "content": 5}], "answer": "1"},
        {},
        "messages_field",
        "turn 0 is not a {role, content}",
        False,
    ),
    (
        {"messages": [USER, {"role": "assistant", "content": "a"}], "answer": "1"},
        {},
        "messages_field",
        "ends with a 'assistant' turn: the last turn must be the user's",
        True,
    ),
    (
        {"messages": [{"role": "human", "content": "q"}], "answer": "1"},
        {},
        "messages_field",
        "turn 0 has role 'human', not one of system, user, assistant, tool",
        True,
    ),
    (
        {"messages": [USER], "answer": "18"},
        {"answer_format": "gsm8k"},
        "answer_field",
        "'answer' holds no final '#### N' (answer_format = 'gsm8k'): '18'",
        True,
    ),
    (
        {"messages": [USER], "answer": "x = 2"},
        {"answer_format": "math"},
        "answer_field",
        "holds no \\boxed{...} (answer_format = 'math'): 'x = 2'",
        True,
    ),
    ({"messages": [USER], "answer": ["1"]}, {}, "answer_field", "string or a number", False),
    ({"messages": [USER], "answer": None}, {}, "answer_field", "field 'answer' is null", True),
    ({"messages": [USER]}, {}, "answer_field", "the record has no field 'answer'", False),
    ({"answer": "1"}, {}, "messages_field", "the record has no field 'messages'", False),
]


@pytest.mark.parametrize(
    ("suffix", "bad", "fields", "field", "message"),
    [(".jsonl", *case[:4]) for case in BAD_RECORDS]
    + [(".parquet", *case[:4]) for case in BAD_RECORDS if case[4]],
)
def test_bad_records_name_the_field_the_file_and_the_row(
    tmp_path: Path,
    suffix: str,
    bad: dict[str, Any],
    fields: dict[str, Any],
    field: str,
    message: str,
) -> None:
    good = {"messages": [USER], "answer": "\\boxed{1}\n#### 1"}
    path = tmp_path / f"d{suffix}"
    if suffix == ".parquet":
        _write(path, [good, good, bad])
        where = f"{path} row 2"
    else:  # a blank line counts: the bad record is on line 4
        path.write_text("\n".join([json.dumps(good), json.dumps(good), "", json.dumps(bad)]))
        where = f"{path}:4"
    with pytest.raises(ConfigError) as info:
        _load(path, messages_field="messages", **fields)
    assert info.value.field == f"datasets[0].{field}"
    assert f"datasets[0].{field}: {where}: " in str(info.value)
    assert message in str(info.value)


def test_bad_prompt_fields(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", [{"q": "a", "answer": "1"}, {"q": 7, "answer": "1"}])
    with pytest.raises(ConfigError, match=r"d.jsonl:2: 'q' must be a string, got 7") as info:
        _load(path, prompt_field="q")
    assert info.value.field == "datasets[0].prompt_field"
    with pytest.raises(ConfigError, match=r"d.jsonl:1: the record has no field 'topic'") as info:
        _load(path, prompt_field="q", template="{topic}: {prompt}")
    assert info.value.field == "datasets[0].template"
    # a Parquet file without the column: row 0, and the file's columns listed
    path = _write(tmp_path / "d.parquet", [{"q": "a", "answer": "1"}])
    with pytest.raises(ConfigError) as info:
        _load(path, prompt_field="question")
    assert info.value.field == "datasets[0].prompt_field"
    assert "d.parquet row 0: the record has no field 'question' (it has 'q', 'answer')" in str(
        info.value
    )
    (tmp_path / "x.parquet").write_text('{"q": "a"}\n')
    with pytest.raises(ConfigError, match="not a readable Parquet file") as info:
        _load(tmp_path / "x.parquet")
    assert info.value.field == "datasets[0].path"
    with pytest.raises(ConfigError, match="holds no records"):
        _load(_write(tmp_path / "e.jsonl", []))
    pq.write_table(pa.table({"prompt": pa.array([], pa.string())}), tmp_path / "e.parquet")
    with pytest.raises(ConfigError, match="holds no records"):
        _load(tmp_path / "e.parquet")


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ('messages_field = "m"\nchat_template = false', "chat_template", "needs chat_template"),
        ('messages_field = "m"\ntemplate = "Q: {prompt}"', "template", "prompt_field only"),
        ('messages_field = "m"\nprompt_field = "q"', "messages_field", "not both"),
        ('system_prompt = "Be brief."\nchat_template = false', "system_prompt", "needs chat"),
        ('reward = "code"\nanswer_format = "gsm8k"', "answer_format", "math datasets only"),
        ('format = "csv"', "format", "'csv'"),
    ],
)
def test_config_combinations(extra: str, field: str, message: str) -> None:
    head = 'run_dir = "r"\n[model]\npath = "m"\n'
    text = f'{head}[[datasets]]\nname = "a"\npath = "a.jsonl"\n{extra}\n'
    with pytest.raises(ConfigError, match=message) as info:
        loads_run_config(text)
    assert info.value.field == f"datasets[0].{field}"


def test_format_from_the_extension_or_the_field() -> None:
    assert DatasetConfig(name="a", path="s3://b/x.PARQUET").file_format == "parquet"
    assert DatasetConfig(name="a", path="gs://b/x.jsonl.gz").file_format == "jsonl"
    assert DatasetConfig(name="a", path="x.data", format="parquet").file_format == "parquet"
    with pytest.raises(ConfigError, match="cannot tell the format") as info:
        loads_run_config(
            'run_dir = "r"\n[model]\npath = "m"\n[[datasets]]\nname = "a"\npath = "a.json"\n'
        )
    assert info.value.field == "datasets[0].path"
