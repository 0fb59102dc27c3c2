"""JAX helpers for the code example (rlx_data.code_demo): fixed-shape encoding with the
checkpoint's own tokenizer, batched sampling (addition_lm's `sample`), and judging responses in
the verifier's sandbox without services. Used by tools/demo/code_sft.py (the base model) and
tools/bench/e2e/code_floor.py (the single-process GRPO floor).

A prompt is what the controller feeds the model: the record's prompt as the user's turn,
rendered with the checkpoint's chat template. A completion is the reference response (a fenced
python block) then the tokenizer's `eos_token`. Prompts are left-padded to P ids, responses
right-padded to R (`code_token_counts`, as the example's run config counts them).

    codec = CodeCodec(load_tokenizer(base_dir), CODE_TASK)
    judge = Judge()
    rewards, verdicts = judge.score(texts, problems)
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from addition_lm import sample

from rlx_core.tokenizer import Tokenizer
from rlx_data import (
    ArithCodeTask,
    ArithProblem,
    code_token_counts,
    extract_program,
)
from rlx_model import ModelConfig
from rlx_verifier import TestCase, Verifier
from rlx_verifier.config import JudgeConfig

NO_CODE = "NO_CODE"  # no closed ```python block: never run, reward 0 (as the controller)


class CodeCodec:
    """A checkpoint's tokenizer at the task's fixed shapes: P prompt ids, R response ids."""

    def __init__(self, tok: Tokenizer, task: ArithCodeTask) -> None:
        self.tok = tok
        self.task = task
        eos = tok.token_id(tok.eos_token) if tok.eos_token else None
        if eos is None or eos not in tok.stop_ids:
            raise ValueError(f"{tok.source}: eos_token {tok.eos_token!r} must end generation")
        self.eos = eos
        self.stop_ids = tok.stop_ids
        self.pad = tok.pad_id
        self._prompt_ids: dict[str, list[int]] = {}
        self.P, self.R = code_token_counts(tok, task)

    def prompt_ids(self, prompt: str) -> list[int]:
        ids = self._prompt_ids.get(prompt)
        if ids is None:
            ids = self._prompt_ids[prompt] = self.tok.prompt_ids(prompt)
        return ids

    def encode_prompts(self, prompts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Left-padded prompt ids [N, P] and their validity mask."""
        ids = np.full((len(prompts), self.P), self.pad, np.int32)
        valid = np.zeros((len(prompts), self.P), bool)
        for i, text in enumerate(prompts):
            row = self.prompt_ids(text)
            if len(row) > self.P:
                raise ValueError(f"prompt {text!r} has {len(row)} ids, more than P = {self.P}")
            ids[i, self.P - len(row) :] = row
            valid[i, self.P - len(row) :] = True
        return ids, valid

    def encode_answers(self, completions: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Right-padded completion ids + eos [N, R] and the mask of real tokens."""
        ids = np.full((len(completions), self.R), self.pad, np.int32)
        mask = np.zeros((len(completions), self.R), np.float32)
        for i, text in enumerate(completions):
            row = [*self.tok.encode(text, add_special_tokens=False), self.eos]
            if len(row) > self.R:
                raise ValueError(f"completion {text!r} has {len(row)} ids, more than R = {self.R}")
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1.0
        return ids, mask

    def decode_responses(self, response: np.ndarray, mask: np.ndarray) -> list[str]:
        return [
            self.tok.decode([int(t) for t, keep in zip(row, m, strict=True) if keep])
            for row, m in zip(response, mask, strict=True)
        ]


class Judge:
    """The verifier's local backend (bubblewrap sandbox, verdict cache), run like the code
    datasets of a run config: the last ```python block, token comparator, 2 s, 256 MB."""

    def __init__(self, workers: int = 0) -> None:
        self.verifier = Verifier(JudgeConfig(workers=workers))
        self._threads = ThreadPoolExecutor(self.verifier.workers)

    def verdict(self, response: str, problem: ArithProblem) -> str:
        program = extract_program(response, "python")
        if program is None:
            return NO_CODE
        tests = [TestCase(stdin=t["input"], answer=t["output"]) for t in problem.tests()]
        return self.verifier.judge(
            "python", program, tests, comparator="tokens", time_limit_s=2.0, memory_mb=256
        ).status

    def verdicts(self, responses: Sequence[str], problems: Sequence[ArithProblem]) -> list[str]:
        pairs = list(zip(responses, problems, strict=True))
        return list(self._threads.map(lambda rp: self.verdict(*rp), pairs))

    def score(
        self, responses: Sequence[str], problems: Sequence[ArithProblem]
    ) -> tuple[np.ndarray, Counter[str]]:
        """(reward per response: 1.0 for AC else 0.0, the count of each verdict)."""
        verdicts = self.verdicts(responses, problems)
        rewards = np.asarray([float(v == "AC") for v in verdicts], np.float32)
        return rewards, Counter(verdicts)


def pass_at_1(
    params: Any,
    cfg: ModelConfig,
    codec: CodeCodec,
    judge: Judge,
    problems: Sequence[ArithProblem],
    *,
    greedy: bool = True,
    key: jax.Array | None = None,
    batch: int = 200,
) -> tuple[float, Counter[str]]:
    """(pass@1 on `problems`, verdict counts): one response each, greedy or sampled at
    temperature 1 (the last batch is padded to keep one shape)."""
    key = jax.random.PRNGKey(0) if key is None else key
    passed = 0.0
    counts: Counter[str] = Counter()
    for start in range(0, len(problems), batch):
        chunk = list(problems[start : start + batch])
        real = len(chunk)
        chunk += [chunk[-1]] * (batch - real)
        ids, valid = codec.encode_prompts([p.prompt() for p in chunk])
        resp, _, mask = sample(
            params,
            cfg,
            jnp.asarray(ids),
            jnp.asarray(valid),
            jax.random.fold_in(key, start),
            R=codec.R,
            stop_ids=codec.stop_ids,
            pad=codec.pad,
            greedy=greedy,
        )
        texts = codec.decode_responses(np.asarray(resp), np.asarray(mask))
        rewards, c = judge.score(texts[:real], chunk[:real])
        passed += float(rewards.sum())
        counts += c
    return passed / len(problems), counts
