"""The built-in code example: short Python programs judged in the sandbox on hidden tests.

A problem is an integer expression of two or three variables with constants, such as
`a*7+b*2` or `a*3-b*8*c*5`. Its prompt states the expression, the input format (every input
line holds the variables' values) and one worked example; the model answers with a fenced
```python block that reads stdin and prints one value per line:

    ```python
    for l in open(0):
        a,b=map(int,l.split())
        print(a*7+b*2)
    ```

The program is judged on one hidden test: an input of `cases` lines whose values differ from the
example's, compared token by token. Expressions are numbered: for each variable count, constants
`2..9` for every variable and operators `+ - *` between terms. Every expression belongs to exactly
one split, chosen by a keyed permutation of all of them: the first `heldout` positions are held
out, so held-out problems are combinations of constants and operators never trained on.

What the hidden test rules out (tests/test_code_demo.py checks each through the real verifier):
printing the example's output prints one line where `cases` are expected (WA); exiting early
(`sys.exit(0)`, `os._exit(0)`) prints nothing (WA); reading only the first line prints one value
(WA). Always-equal objects (`__eq__` returning True) only fool assert-style tests: stdin/stdout
tests compare the printed text, so no object reaches the comparison.

    train, heldout = code_splits(CODE_TASK)
    write_code_jsonl(dir, CODE_TASK)       # dir/train.jsonl, dir/heldout.jsonl
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlx_core.configs.run import RunConfig, loads_run_config
from rlx_core.rng import KeyedPermutation
from rlx_core.storage import join_uri
from rlx_core.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "CODE_GROUP",
    "CODE_LR",
    "CODE_PROMPTS",
    "CODE_SLACK_TOKENS",
    "CODE_STEPS",
    "CODE_TASK",
    "CODE_WARMUP",
    "ArithCodeTask",
    "ArithProblem",
    "code_demo_config",
    "code_model_dir",
    "code_splits",
    "code_token_counts",
    "write_code_jsonl",
]

VARIABLES = ("a", "b", "c")
CONSTANTS = tuple(range(2, 10))
OPERATORS = ("+", "-", "*")


@dataclass(frozen=True, kw_only=True)
class ArithProblem:
    """One expression: `constants[i]` multiplies variable i; `operators[i]` joins terms i, i+1."""

    constants: tuple[int, ...]
    operators: tuple[str, ...]
    example: tuple[int, ...]  # the example input line shown in the prompt
    hidden: tuple[tuple[int, ...], ...]  # the hidden test's input lines

    @property
    def names(self) -> tuple[str, ...]:
        return VARIABLES[: len(self.constants)]

    @property
    def expression(self) -> str:
        terms = [f"{v}*{k}" for v, k in zip(self.names, self.constants, strict=True)]
        return terms[0] + "".join(op + t for op, t in zip(self.operators, terms[1:], strict=True))

    def value(self, values: tuple[int, ...]) -> int:
        """The expression at `values`, by Python's own rules (what a right program prints)."""
        terms = [k * x for k, x in zip(self.constants, values, strict=True)]
        total, product, sign = 0, terms[0], 1
        for op, term in zip(self.operators, terms[1:], strict=True):
            if op == "*":
                product *= term
            else:
                total += sign * product
                product, sign = term, 1 if op == "+" else -1
        return total + sign * product

    def prompt(self) -> str:
        line = " ".join(map(str, self.example))
        return (
            f"Each input line has integers {' '.join(self.names)}.\n"
            f"Example input:\n{line}\nExample output:\n{self.value(self.example)}\n"
            f"For each line print {self.expression}"
        )

    def program(self) -> str:
        """The reference solution, as the SFT base model is taught to write it."""
        return (
            "for l in open(0):\n"
            f"    {','.join(self.names)}=map(int,l.split())\n"
            f"    print({self.expression})\n"
        )

    def first_line_program(self) -> str:
        """A solution of the example only: it reads the first input line and prints one value
        (WA on the hidden test). Part of the SFT base model's training data, as code written
        against the visible example is part of any scraped corpus."""
        return f"{','.join(self.names)}=map(int,input().split())\nprint({self.expression})\n"

    def response(self, *, first_line: bool = False) -> str:
        """The reference response, the program in a fenced python block (`first_line`: the
        example-only program instead)."""
        program = self.first_line_program() if first_line else self.program()
        return f"```python\n{program}```"

    def tests(self) -> list[dict[str, str]]:
        """The hidden stdin/stdout tests, the record's `tests` field."""
        stdin = "".join(" ".join(map(str, row)) + "\n" for row in self.hidden)
        stdout = "".join(f"{self.value(row)}\n" for row in self.hidden)
        return [{"input": stdin, "output": stdout}]

    def record(self) -> dict[str, Any]:
        """The JSONL record: the prompt and its hidden tests."""
        return {"prompt": self.prompt(), "tests": self.tests()}


@dataclass(frozen=True, kw_only=True)
class ArithCodeTask:
    """The code example's shape."""

    heldout: int = 200  # expressions held out of training, >= 1 and < num_problems
    seed: int = 0  # which expressions are held out, the order of each split, the test values
    cases: int = 4  # lines of the hidden test input, >= 2 (one line is what the example shows)
    low: int = 2  # input values are low .. high (>= 2: 0 and 1 would hide wrong constants)
    high: int = 30

    def __post_init__(self) -> None:
        if not 1 <= self.heldout < self.num_problems:
            raise ValueError(
                f"heldout must be within 1-{self.num_problems - 1}, got {self.heldout}"
            )
        if self.cases < 2:
            raise ValueError(f"cases must be >= 2, got {self.cases}")
        if not 2 <= self.low < self.high:
            raise ValueError(f"need 2 <= low < high, got low {self.low}, high {self.high}")

    @staticmethod
    def _count(variables: int) -> int:
        return len(CONSTANTS) ** variables * len(OPERATORS) ** (variables - 1)

    @property
    def num_problems(self) -> int:
        return self._count(2) + self._count(3)

    def problem(self, index: int) -> ArithProblem:
        """The problem numbered `index` in [0, num_problems); its values depend on the seed."""
        if not 0 <= index < self.num_problems:
            raise ValueError(f"index must be within 0-{self.num_problems - 1}, got {index}")
        variables, rest = (2, index) if index < self._count(2) else (3, index - self._count(2))
        constants = []
        for _ in range(variables):
            rest, k = divmod(rest, len(CONSTANTS))
            constants.append(CONSTANTS[k])
        operators = []
        for _ in range(variables - 1):
            rest, o = divmod(rest, len(OPERATORS))
            operators.append(OPERATORS[o])
        rng = random.Random(f"code-demo/{self.seed}/{index}")
        rows: list[tuple[int, ...]] = []
        while len(rows) < self.cases + 1:  # distinct lines: the example, then the hidden ones
            row = tuple(rng.randint(self.low, self.high) for _ in range(variables))
            if row not in rows:
                rows.append(row)
        return ArithProblem(
            constants=tuple(constants),
            operators=tuple(operators),
            example=rows[0],
            hidden=tuple(rows[1:]),
        )


def code_splits(task: ArithCodeTask) -> tuple[list[ArithProblem], list[ArithProblem]]:
    """(train, heldout) problems, each in a fixed shuffled order."""
    perm = KeyedPermutation(task.num_problems, task.seed, "demo/code")
    order = [task.problem(perm(i)) for i in range(task.num_problems)]
    return order[task.heldout :], order[: task.heldout]


def write_code_jsonl(directory: str | Path, task: ArithCodeTask) -> tuple[Path, Path]:
    """Write `train.jsonl` and `heldout.jsonl` into `directory`; return their paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    train, heldout = code_splits(task)
    paths = (directory / "train.jsonl", directory / "heldout.jsonl")
    for path, problems in zip(paths, (train, heldout), strict=True):
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(p.record()) + "\n" for p in problems))
        tmp.replace(path)
    return paths


def code_model_dir() -> Path:
    """The code example's committed SFT base model (tools/demo/code_model in the source tree)."""
    env = os.environ.get("RLX_CODE_BASE_MODEL")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[4] / "tools" / "demo" / "code_model"


# The example's settings, measured with tools/bench/e2e/code_floor.py and `rlx up --example code`
# (tools/demo/README.md).
CODE_TASK = ArithCodeTask(heldout=200, seed=0, cases=4)
CODE_STEPS = 200  # training batches (the cosine decay spans them)
CODE_LR = 1e-3
CODE_WARMUP = 10  # optimizer steps of linear warmup
CODE_PROMPTS = 16  # B
CODE_GROUP = 8  # G
CODE_SLACK_TOKENS = 4  # response ids allowed past the longest reference response and its stop


def code_token_counts(tokenizer: Tokenizer, task: ArithCodeTask) -> tuple[int, int]:
    """(prompt ids, response ids): the longest chat-rendered prompt of the task, and the longest
    reference response's ids plus one stop id plus CODE_SLACK_TOKENS."""
    problems = [task.problem(i) for i in range(task.num_problems)]
    prompt = max(len(tokenizer.prompt_ids(p.prompt())) for p in problems)
    response = max(len(tokenizer.encode(p.response(), add_special_tokens=False)) for p in problems)
    return prompt, response + 1 + CODE_SLACK_TOKENS


def code_demo_config(run_dir: str, data_dir: str | Path, base_model: str | Path) -> RunConfig:
    """The code example's run config (`rlx up --example code`): the task's JSONL files in
    `data_dir` (written by `write_code_jsonl(data_dir, CODE_TASK)`, may be a URI), the SFT base
    model directory `base_model` (tools/demo/code_model), GRPO without KL, B 16, G 8, lockstep.
    Programs are the last ```python block of a response, run on the record's hidden tests."""
    prompt_tokens, new_tokens = code_token_counts(load_tokenizer(os.fspath(base_model)), CODE_TASK)
    train = join_uri(os.fspath(data_dir), "train.jsonl")
    heldout = join_uri(os.fspath(data_dir), "heldout.jsonl")
    code = """reward = "code"
prompt_field = "prompt"
tests_field = "tests"
language = "python"
program = "last_block"
comparator = "tokens"
time_limit_s = 2.0
memory_mb = 256"""
    text = f"""
run_dir = {json.dumps(run_dir)}
seed = 0
steps = {CODE_STEPS}

[model]
path = {json.dumps(str(base_model))}

[[datasets]]
name = "arith-code"
path = {json.dumps(train)}
{code}

[trainer.objective]
preset = "grpo"
beta = 0.0

[trainer.optimizer]
lr = {CODE_LR}
schedule = "cosine"
warmup_steps = {CODE_WARMUP}
decay_steps = {CODE_STEPS}
final_lr_ratio = 0.1
clip_norm = 1.0

[staleness]
reload = 1
accept = 1
lag = 0

[batch]
prompts = {CODE_PROMPTS}
group_size = {CODE_GROUP}
max_prompt_tokens = {prompt_tokens}
max_new_tokens = {new_tokens}

[sampling]
temperature = 1.0

[snapshots]
checkpoint_every = 50

[eval]
every = 25

[[eval.datasets]]
name = "arith-code-heldout"
path = {json.dumps(heldout)}
{code}
"""
    return loads_run_config(text)
