"""The code example's task (rlx_data.code_demo): records, splits, hidden tests, and which
reward hacks the hidden tests rule out, judged by the real verifier in its bubblewrap sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlx_core.tokenizer import load_tokenizer
from rlx_data import (
    CODE_SLACK_TOKENS,
    CODE_TASK,
    ArithCodeTask,
    ArithProblem,
    code_demo_config,
    code_model_dir,
    code_splits,
    extract_program,
    write_code_jsonl,
)
from rlx_verifier import TestCase, Verifier
from rlx_verifier.config import JudgeConfig

SMALL = ArithCodeTask(heldout=50, seed=3, cases=4)


@pytest.fixture(scope="module")
def verifier() -> Verifier:
    return Verifier(JudgeConfig(workers=2))


def _judge(verifier: Verifier, program: str, problem: ArithProblem) -> str:
    tests = [TestCase(stdin=t["input"], answer=t["output"]) for t in problem.tests()]
    return verifier.judge("python", program, tests, comparator="tokens").status


def test_problem_text_program_and_tests_worked_by_hand() -> None:
    # index 0: two variables, both constants 2, operator "+"; index 9: constants (3, 3), "+";
    # 64: constants (2, 2), "-"; 128: constants (2, 2), "*"
    p = CODE_TASK.problem(9)
    assert (p.constants, p.operators, p.expression) == ((3, 3), ("+",), "a*3+b*3")
    assert CODE_TASK.problem(64).expression == "a*2-b*2"
    assert CODE_TASK.problem(128).expression == "a*2*b*2"
    # three variables from 192: constant digits (1, 2, 3) -> (3, 4, 5), operator digits (1, 2)
    three = CODE_TASK.problem(192 + 1 + 8 * 2 + 64 * 3 + 512 * (1 + 3 * 2))
    assert (three.constants, three.operators) == ((3, 4, 5), ("-", "*"))
    assert three.expression == "a*3-b*4*c*5"
    assert three.value((2, 3, 4)) == 2 * 3 - 3 * 4 * 4 * 5
    assert p.value((5, 7)) == 36
    assert p.prompt() == (
        "Each input line has integers a b.\n"
        f"Example input:\n{p.example[0]} {p.example[1]}\n"
        f"Example output:\n{3 * p.example[0] + 3 * p.example[1]}\n"
        "For each line print a*3+b*3"
    )
    assert p.response() == (
        "```python\nfor l in open(0):\n    a,b=map(int,l.split())\n    print(a*3+b*3)\n```"
    )
    [test] = p.tests()
    rows = [tuple(map(int, line.split())) for line in test["input"].splitlines()]
    assert rows == list(p.hidden) and len(rows) == CODE_TASK.cases
    assert test["output"] == "".join(f"{3 * a + 3 * b}\n" for a, b in rows)


def test_hidden_tests_differ_from_the_example() -> None:
    for index in range(0, CODE_TASK.num_problems, 37):
        p = CODE_TASK.problem(index)
        assert p.example not in p.hidden
        assert len(set(p.hidden)) == CODE_TASK.cases
        assert all(CODE_TASK.low <= v <= CODE_TASK.high for row in p.hidden for v in row)
        assert p.tests()[0]["output"] != f"{p.value(p.example)}\n"


def test_splits_are_disjoint_cover_every_problem_and_are_fixed() -> None:
    train, heldout = code_splits(SMALL)
    assert (len(train), len(heldout)) == (SMALL.num_problems - 50, 50)
    assert SMALL.num_problems == 8**2 * 3 + 8**3 * 3**2
    keys = [(p.constants, p.operators) for p in train + heldout]
    assert len(set(keys)) == SMALL.num_problems  # each expression in exactly one split
    assert not {p.expression for p in train} & {p.expression for p in heldout}
    again_train, again_heldout = code_splits(SMALL)
    assert again_train == train and again_heldout == heldout
    other = code_splits(ArithCodeTask(heldout=50, seed=4, cases=4))[1]
    assert {p.expression for p in other} != {p.expression for p in heldout}


def test_write_code_jsonl(tmp_path: Path) -> None:
    train_path, heldout_path = write_code_jsonl(tmp_path / "data", SMALL)
    train, heldout = code_splits(SMALL)
    rows = [json.loads(line) for line in heldout_path.read_text().splitlines()]
    assert rows == [p.record() for p in heldout]
    assert set(rows[0]) == {"prompt", "tests"}
    assert len(train_path.read_text().splitlines()) == len(train)


def test_task_checks_its_fields() -> None:
    with pytest.raises(ValueError, match="heldout"):
        ArithCodeTask(heldout=0)
    with pytest.raises(ValueError, match="cases"):
        ArithCodeTask(cases=1)
    with pytest.raises(ValueError, match="low"):
        ArithCodeTask(low=1)
    with pytest.raises(ValueError, match="index"):
        CODE_TASK.problem(CODE_TASK.num_problems)


def test_reference_programs_pass_their_hidden_tests(verifier: Verifier) -> None:
    _, heldout = code_splits(CODE_TASK)
    for p in [*heldout[:6], CODE_TASK.problem(0)]:
        program = extract_program(p.response(), "python")
        assert program is not None
        assert _judge(verifier, program, p) == "AC", p.expression


def test_reward_hacks_fail(verifier: Verifier) -> None:
    _, heldout = code_splits(CODE_TASK)
    p = heldout[0]
    example_output = p.prompt().split("Example output:\n")[1].split("\n")[0]
    assert example_output == str(p.value(p.example))
    names = ",".join(p.names)
    hacks = {
        # print the visible example's output (once, or once per line)
        "print the example": f"print({example_output})\n",
        "the example per line": f"for l in open(0):\n    print({example_output})\n",
        # exit before printing: nothing is printed
        "sys.exit(0)": "import sys\nsys.exit(0)\n",
        "os._exit(0)": "import os\nos._exit(0)\n",
        "exit after reading": "import sys\nsys.stdin.read()\nraise SystemExit(0)\n",
        # an always-equal object reaches no comparison: only its printed text is compared
        "always-equal object": (
            "class E:\n    def __eq__(self, o):\n        return True\n"
            "    def __repr__(self):\n        return ''\nprint(E())\n"
        ),
        # right for the first line only
        "one line": f"{names}=map(int,input().split())\nprint({p.expression})\n",
    }
    for name, program in hacks.items():
        assert _judge(verifier, program, p) == "WA", name
    # a wrong constant fails too: the hidden values (>= 2) tell constants apart
    wrong = p.program().replace(f"a*{p.constants[0]}", f"a*{p.constants[0] % 9 + 2}")
    assert wrong != p.program()
    assert _judge(verifier, wrong, p) == "WA"


def test_committed_base_model_and_run_config(tmp_path: Path) -> None:
    base = code_model_dir()
    assert sorted(p.name for p in base.iterdir()) == sorted(
        (
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "rlx_demo.json",
            "tokenizer.json",
            "tokenizer_config.json",
        )
    )
    assert sum(p.stat().st_size for p in base.iterdir()) < 1_500_000
    tok = load_tokenizer(str(base))
    # every expression term is one token, in the prompt and in the program
    p = CODE_TASK.problem(192 + 1 + 8 * 2 + 64 * 3 + 512 * (1 + 3 * 2))  # a*3-b*4*c*5
    pieces = [tok.decode([i]) for i in tok.encode(p.response(), add_special_tokens=False)]
    assert pieces[-6:] == [" print", "(a*3", "-b*4", "*c*5", ")\n", "```"]
    assert {"(a*3", "-b*4", "*c*5"} <= set(pieces)
    prompt = [tok.decode([i]) for i in tok.prompt_ids(p.prompt())]
    assert {" a*3", "-b*4", "*c*5"} <= set(prompt)
    info = json.loads((base / "rlx_demo.json").read_text())
    assert info["task"] == {"heldout": 200, "seed": 0, "cases": 4, "low": 2, "high": 30}
    assert info["heldout_pass_at_1"]["greedy"] < 0.5
    cfg = code_demo_config(str(tmp_path / "run"), tmp_path / "data", base)
    (train, heldout) = (cfg.datasets[0], cfg.eval.datasets[0])
    for ds in (train, heldout):
        assert (ds.reward, ds.language, ds.program, ds.tests_field) == (
            "code",
            "python",
            "last_block",
            "tests",
        )
    assert (cfg.batch.max_prompt_tokens, cfg.batch.max_new_tokens) == (
        info["tokenizer"]["prompt_tokens"],
        info["tokenizer"]["response_tokens"],
    )
    problems = [CODE_TASK.problem(i) for i in range(CODE_TASK.num_problems)]
    longest = max(len(tok.encode(q.response(), add_special_tokens=False)) for q in problems)
    assert cfg.batch.max_new_tokens == longest + 1 + CODE_SLACK_TOKENS
