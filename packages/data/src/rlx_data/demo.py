"""The built-in demo task: multi-digit addition with a verifiable answer and a held-out split.

A prompt is `"{a}+{b}="` (operands zero-padded to `digits`) and its answer the decimal sum. The
demo's base model (tools/demo/base_model) is an HF checkpoint like any other: the controller
renders each prompt as the user's turn with its ChatML template and encodes it with its own
tokenizer, which writes every digit as its own token; the model answers digit by digit, then
`<|im_end|>`. Responses are scored by the math answer rule (the verifier's `last_number`
extraction, then numeric equality), so `"57"`, `"057"` and `"57 "` are right and `"5 7"` is
not. Every pair (a, b) with 0 <= a, b < 10**digits belongs to exactly one split, chosen by a
keyed permutation of all pairs: the first `heldout` positions are held out.

    train, heldout = addition_splits(digits=2, heldout=500, seed=0)
    write_addition_jsonl(dir, digits=2, heldout=500)   # dir/train.jsonl, dir/heldout.jsonl
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from rlx_core.configs.run import RunConfig, loads_run_config
from rlx_core.rng import KeyedPermutation
from rlx_core.storage import join_uri
from rlx_core.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "DEMO_STEPS",
    "DEMO_TASK",
    "AdditionTask",
    "addition_answer_correct",
    "addition_splits",
    "base_model_dir",
    "demo_config",
    "demo_token_counts",
    "write_addition_jsonl",
]

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True, kw_only=True)
class AdditionTask:
    """The demo task's shape."""

    digits: int = 2  # operands are 0 .. 10**digits - 1, >= 1
    heldout: int = 500  # pairs held out of training, >= 1 and < (10**digits)**2
    seed: int = 0  # which pairs are held out, and the order of each split
    # zero-pad operands to `digits` characters ("07+35="), so every prompt has one shape and
    # digit positions line up; the gold answer stays the plain number ("42")
    padded: bool = True

    def __post_init__(self) -> None:
        if self.digits < 1:
            raise ValueError(f"digits must be >= 1, got {self.digits}")
        if not 1 <= self.heldout < self.num_pairs:
            raise ValueError(f"heldout must be within 1-{self.num_pairs - 1}, got {self.heldout}")

    @property
    def num_pairs(self) -> int:
        return (10**self.digits) ** 2

    @property
    def max_answer_chars(self) -> int:
        """Characters of the longest answer (digits + 1 for the carry)."""
        return self.digits + 1

    def pair(self, index: int) -> tuple[int, int]:
        """The pair numbered `index` in [0, num_pairs)."""
        base = 10**self.digits
        return index // base, index % base

    def record(self, a: int, b: int) -> dict[str, str]:
        """The JSONL record of a + b."""
        width = self.digits if self.padded else 0
        return {"prompt": f"{a:0{width}d}+{b:0{width}d}=", "answer": str(a + b)}

    def target(self, answer: str) -> str:
        """The completion the SFT base model is taught: zero-padded to digits + 1 characters
        when `padded` ("042"); the math answer rule reads it as the same number."""
        return f"{int(answer):0{self.max_answer_chars}d}" if self.padded else answer


def addition_splits(task: AdditionTask) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(train, heldout) records {"prompt", "answer"}, each in a fixed shuffled order."""
    perm = KeyedPermutation(task.num_pairs, task.seed, f"demo/addition/{task.digits}")
    order = [task.pair(perm(i)) for i in range(task.num_pairs)]
    heldout = [task.record(a, b) for a, b in order[: task.heldout]]
    train = [task.record(a, b) for a, b in order[task.heldout :]]
    return train, heldout


def write_addition_jsonl(directory: str | Path, task: AdditionTask) -> tuple[Path, Path]:
    """Write `train.jsonl` and `heldout.jsonl` into `directory`; return their paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    train, heldout = addition_splits(task)
    paths = (directory / "train.jsonl", directory / "heldout.jsonl")
    for path, records in zip(paths, (train, heldout), strict=True):
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
        tmp.replace(path)
    return paths


def addition_answer_correct(response: str, answer: str) -> bool:
    """The math answer rule for integer answers: the last number in `response` equals `answer`.

    This is what the verifier's math judge decides for these prompts (its `last_number`
    extraction, then math-verify's equality, which for plain integers is integer equality); the
    demo's single-process floor uses it directly to stay free of services.
    """
    found = _NUMBER.findall(response)
    if not found:
        return False
    text = found[-1].replace(",", "")
    try:
        return int(text) == int(answer) if "." not in text else float(text) == int(answer)
    except ValueError:
        return False


# The demo's settings, measured with `rlx up` and tools/bench/e2e/floor.py (see
# packages/data/README.md).
DEMO_TASK = AdditionTask(digits=2, heldout=500, seed=0, padded=True)
DEMO_STEPS = 600  # training batches (the cosine decay spans them)
DEMO_LR = 5e-4
DEMO_WARMUP = 25  # optimizer steps of linear warmup


def demo_token_counts(tokenizer: Tokenizer, task: AdditionTask) -> tuple[int, int]:
    """(prompt ids, response ids) of the task's longest prompt and answer with `tokenizer`: the
    chat-rendered prompt of the largest operands, and the largest sum's ids plus one stop id."""
    top = 10**task.digits - 1
    prompt = len(tokenizer.prompt_ids(task.record(top, top)["prompt"]))
    answer = tokenizer.encode(task.target(str(2 * top)), add_special_tokens=False)
    return prompt, len(answer) + 1


def base_model_dir() -> Path:
    """The demo's committed SFT base model (tools/demo/base_model in the source tree;
    RLX_DEMO_BASE_MODEL overrides it)."""
    env = os.environ.get("RLX_DEMO_BASE_MODEL")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[4] / "tools" / "demo" / "base_model"


def demo_config(run_dir: str, data_dir: str | Path, base_model: str | Path) -> RunConfig:
    """The built-in demo's run config (`rlx up` without a config): the addition task's JSONL
    files in `data_dir` (written by `write_addition_jsonl(data_dir, DEMO_TASK)`), the SFT base
    model directory `base_model` (tools/demo/base_model), GRPO without KL, B 32, G 8,
    (j, k) = (1, 1) in lockstep (lag 0). `data_dir` may be a URI (s3://, gs://) holding those files.
    max_prompt_tokens and max_new_tokens are what the base model's tokenizer makes of the
    task: a rendered prompt's ids, and the longest answer's digits then `<|im_end|>`."""
    prompt_tokens, new_tokens = demo_token_counts(load_tokenizer(os.fspath(base_model)), DEMO_TASK)
    train = join_uri(os.fspath(data_dir), "train.jsonl")
    heldout = join_uri(os.fspath(data_dir), "heldout.jsonl")
    text = f"""
run_dir = {json.dumps(run_dir)}
seed = 0
steps = {DEMO_STEPS}

[model]
path = {json.dumps(str(base_model))}

[[datasets]]
name = "addition"
path = {json.dumps(train)}
math_extractor = "last_number"

[trainer.objective]
preset = "grpo"
beta = 0.0

[trainer.optimizer]
lr = {DEMO_LR}
schedule = "cosine"
warmup_steps = {DEMO_WARMUP}
decay_steps = {DEMO_STEPS}
final_lr_ratio = 0.1
clip_norm = 1.0

[staleness]
reload = 1
accept = 1
# on-policy lockstep: batch b is generated with version b. With lag 1 (the default for (1, 1))
# batch b comes from version b - 1, generation overlapping training, and π_old is that version
# (recomputed by the trainer): tools/bench/offpolicy measured 0.886 after 200 steps against
# 0.726 at lag 0 (with π_old the step's start params, before: 0.226)
lag = 0

[batch]
prompts = 32
group_size = 8
max_prompt_tokens = {prompt_tokens}
max_new_tokens = {new_tokens}

[sampling]
temperature = 1.0

[snapshots]
checkpoint_every = 50

[eval]
every = 50

[[eval.datasets]]
name = "addition-heldout"
path = {json.dumps(heldout)}
math_extractor = "last_number"
"""
    return loads_run_config(text)
