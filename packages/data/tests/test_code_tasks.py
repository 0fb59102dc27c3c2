"""Code datasets: finding the program in a response, and what a record says about judging it
(inline tests in three layouts, a manifest's linked tests and checker, assert harnesses, limits,
languages), with errors that name the config field and the record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlx_core.clients.verifier import InlineTest, TestLink
from rlx_core.configs.run import DatasetConfig
from rlx_core.errors import ConfigError
from rlx_data import NO_CODE, extract_program, load_dataset, no_code_result


def test_the_last_closed_block_of_the_language_is_the_program() -> None:
    two = "First try:\n```python\nprint(1)\n```\nBetter:\n```python\nprint(2)\n```\nDone."
    assert extract_program(two, "python") == "print(2)\n"
    # other spellings of the language, and untagged blocks, count; other languages do not
    assert extract_program("```py\nx=1\n```", "python") == "x=1\n"
    assert extract_program("```Python3\nx=1\n```", "python") == "x=1\n"
    assert extract_program("```\nx=1\n```", "python") == "x=1\n"
    mixed = "```python\nprint(1)\n```\n```cpp\nint main(){}\n```"
    assert extract_program(mixed, "python") == "print(1)\n"
    assert extract_program(mixed, "c++") == "int main(){}\n"
    # a longer fence holds a shorter one; tildes fence too
    assert extract_program("````python\n```\nx\n```\n````", "python") == "```\nx\n```\n"
    assert extract_program("~~~python\nx\n~~~", "python") == "x\n"
    # an unclosed block (the response was cut off) is not a program, nor is prose
    assert extract_program("```python\nprint(1)\n", "python") is None
    assert extract_program("print(1)", "python") is None
    assert extract_program("", "python") is None
    # "whole": the response as it is
    assert extract_program("print(1)", "python", "whole") == "print(1)"


def test_no_code_scores_zero_with_its_reason() -> None:
    r = no_code_result("u/0/1", "python", "last_block")
    assert (r.status, r.score, r.excluded) == (NO_CODE, 0.0, False)
    assert "```python" in r.message


def _write(tmp_path: Path, rows: list[dict[str, Any]], name: str = "code.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_inline_tests_in_every_layout(tmp_path: Path) -> None:
    rows = [
        {"prompt": "a", "tests": [{"input": "1\n", "output": "2\n"}]},
        {"prompt": "b", "tests": [{"stdin": "3\n", "answer": "4\n"}]},
        {"prompt": "c", "tests": {"inputs": ["5\n", "6\n"], "outputs": ["7\n", "8\n"]}},
    ]
    ds = load_dataset(DatasetConfig(name="c", path=_write(tmp_path, rows), reward="code"))
    tasks = [ds.prompt(i).code for i in range(3)]
    assert [t.tests if t else None for t in tasks] == [
        (InlineTest("1\n", "2\n"),),
        (InlineTest("3\n", "4\n"),),
        (InlineTest("5\n", "7\n"), InlineTest("6\n", "8\n")),
    ]
    task = tasks[2]
    assert task is not None and task.total_tests == 2 and task.kind == "stdio"
    sample = task.sample("s", "```python\nprint(7)\n```")
    assert sample is not None
    assert (sample.kind, sample.language, sample.code) == ("stdio", "python", "print(7)\n")
    assert sample.tests == task.tests and not sample.test_links
    assert task.sample("s", "no code here") is None
    assert ds.prompt(0).answer is None


def test_tests_by_link_from_a_manifest(tmp_path: Path) -> None:
    blob = "/repo/blobs/" + "ab" * 32
    manifest = {
        "format": "rlx-verifier-manifest/1",
        "repo": "/repo",
        "problems": [
            {
                "id": "p1",
                "tests": [{"input": blob, "answer": blob}] * 3,
                "checker": "/repo/blobs/" + "cd" * 32,
                "comparator": "tokens",
                "time_limit_s": 1.5,
                "memory_mb": 64,
            },
            {"id": "p2", "tests": [{"input": blob, "answer": blob}], "comparator": "float"},
        ],
    }
    mpath = tmp_path / "manifest.json"
    mpath.write_text(json.dumps(manifest))
    rows = [
        {"prompt": "one", "id": "p1"},
        {"prompt": "two", "id": "p2", "tl": 3},
    ]
    cfg = DatasetConfig(
        name="linked",
        path=_write(tmp_path, rows),
        reward="code",
        language="c++",
        tests_manifest=str(mpath),
        time_limit_field="tl",
        time_limit_s=0.0,
        memory_mb=128,
    )
    ds = load_dataset(cfg)
    one, two = ds.prompt(0).code, ds.prompt(1).code
    assert one is not None and two is not None
    assert one.links == (TestLink(blob, blob),) * 3 and not one.tests
    assert one.checker.endswith("cd" * 32) and one.language == "cpp"
    # the problem's limits win over the dataset's; a row's own over the problem's
    assert (one.time_limit_s, one.memory_mb) == (1.5, 64)
    assert (two.time_limit_s, two.memory_mb, two.comparator) == (3.0, 128, "float")
    sample = one.sample("s", "```cpp\nint main(){}\n```")
    assert sample is not None and sample.test_links == one.links and sample.checker == one.checker

    missing = _write(tmp_path, [{"prompt": "x", "id": "p9"}], "missing.jsonl")
    with pytest.raises(ConfigError) as e:
        load_dataset(
            DatasetConfig(name="m", path=missing, reward="code", tests_manifest=str(mpath))
        )
    assert e.value.field == "datasets.problem_field" and "'p9'" in str(e.value)

    bad = tmp_path / "bad.json"
    bad.write_text('{"tests": []}')
    with pytest.raises(ConfigError) as e:
        load_dataset(DatasetConfig(name="m", path=missing, reward="code", tests_manifest=str(bad)))
    assert e.value.field == "datasets.tests_manifest" and "rlx verifier upload" in str(e.value)


def test_assert_harness_language_per_row_and_partial_credit(tmp_path: Path) -> None:
    rows = [
        {"prompt": "f", "check": "assert f(1) == 2\n", "lang": "py"},
        {"prompt": "g", "check": "assert g() == 0\n", "lang": "python"},
    ]
    cfg = DatasetConfig(
        name="asserts",
        path=_write(tmp_path, rows),
        reward="code",
        harness_field="check",
        language_field="lang",
        program="whole",
    )
    task = load_dataset(cfg).prompt(0).code
    assert task is not None
    assert (task.kind, task.language, task.harness, task.total_tests) == (
        "assert",
        "python",
        "assert f(1) == 2\n",
        1,
    )
    sample = task.sample("s", "def f(x): return 2 * x")
    assert (
        sample is not None and sample.kind == "assert" and sample.code == "def f(x): return 2 * x"
    )

    rows[1]["lang"] = "cobol"
    cfg2 = DatasetConfig(
        name="a2",
        path=_write(tmp_path, rows, "a2.jsonl"),
        reward="code",
        harness_field="check",
        language_field="lang",
    )
    with pytest.raises(ConfigError) as e:
        load_dataset(cfg2)
    assert e.value.field == "datasets.language_field" and "a2.jsonl:2" in str(e.value)

    with pytest.raises(ConfigError) as e:
        DatasetConfig(
            name="x", path="x.jsonl", reward="code", harness_field="h", partial_credit=True
        )
    assert e.value.field == "partial_credit"


def test_bad_code_records_and_fields_are_named(tmp_path: Path) -> None:
    cases: list[tuple[Any, str]] = [
        ("not tests", "tests"),
        ([], "holds no tests"),
        ([{"input": "1"}], "needs 'input' and 'output'"),
        ([{"input": 1, "output": "2"}], "must be a string"),
        ({"inputs": ["1"], "outputs": []}, "the same length"),
    ]
    for k, (tests, words) in enumerate(cases):
        path = _write(tmp_path, [{"prompt": "p", "tests": tests}], f"bad{k}.jsonl")
        with pytest.raises(ConfigError) as e:
            load_dataset(
                DatasetConfig(name="b", path=path, reward="code"), field_path="datasets[1]"
            )
        assert e.value.field == "datasets[1].tests_field", tests
        assert words in str(e.value) and f"bad{k}.jsonl:1" in str(e.value)
    # code options on a math dataset, and an unknown language, are refused when read
    for field, value in (("harness_field", "h"), ("partial_credit", True), ("time_limit_s", 2.0)):
        with pytest.raises(ConfigError) as e:
            DatasetConfig(name="m", path="m.jsonl", **{field: value})
        assert e.value.field == field and 'reward = "code"' in str(e.value)
    with pytest.raises(ConfigError) as e:
        DatasetConfig(name="c", path="c.jsonl", reward="code", language="fortran")
    assert e.value.field == "language"
    with pytest.raises(ConfigError) as e:
        DatasetConfig(name="c", path="c.jsonl", reward="code", time_limit_s=float("nan"))
    assert e.value.field == "time_limit_s"
