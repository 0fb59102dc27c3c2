"""The unit runner: build a unit, generate it on an inference worker, decode, verify; written
once for training, evaluation and pre-filtering.

    runner = UnitRunner(session, tokenizer, max_new_tokens, log)
    unit = runner.gen_unit("eval.v0.gsm8k.greedy.0", 0, prompt_tokens, 1, Sampling(greedy=True),
                           seeds)
    judged = runner.run(worker, unit, prompts, key)   # .result, .texts, .verdicts, .verify_s

`TrainingUnits` runs the schedule's work units on it: a unit already in the rollout log is read
back (nothing logged is generated twice); else it is generated on its worker (round-robin over
the schedule), scored, and appended to the log, whose record is what counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlx_controller.inputs import RunInputs
from rlx_controller.progress import Stage, untimed
from rlx_controller.rollout_log import RolloutLog
from rlx_controller.schedule import WorkUnit
from rlx_controller.scoring import score_responses
from rlx_controller.session import Session
from rlx_core.clients import Sampling
from rlx_core.clients import WorkUnit as GenUnit
from rlx_core.clients.verifier import SampleResult
from rlx_core.configs.run import RunConfig
from rlx_core.rollout import RolloutUnit
from rlx_core.tokenizer import Tokenizer
from rlx_data import Prompt

__all__ = ["Judged", "TrainingUnits", "UnitRunner"]


@dataclass(frozen=True)
class Judged:
    """A generated unit, its responses decoded and judged: texts[i * G + g] answers prompt i."""

    result: Any  # the worker's GenerateResult
    texts: list[str]
    verdicts: list[SampleResult]
    verify_s: float  # seconds waited on the verifier


class UnitRunner:
    """Units through the session's inference workers and verifiers."""

    def __init__(
        self,
        session: Session,
        tokenizer: Tokenizer,
        max_new_tokens: int,
        log: Callable[[str], None],
    ) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.log = log

    @property
    def workers(self) -> int:
        return len(self.session.workers)

    def gen_unit(
        self,
        unit_id: str,
        version: int,
        prompt_tokens: Sequence[tuple[int, ...]],
        samples_per_prompt: int,
        sampling: Sampling,
        seeds: Sequence[int],
    ) -> GenUnit:
        """A unit of prompts (token ids), `samples_per_prompt` answers each, `seeds` one per
        answer in prompt order, with the run's max_new_tokens and stop tokens."""
        return GenUnit(
            unit_id=unit_id,
            version=version,
            prompts=tuple(prompt_tokens),
            samples_per_prompt=samples_per_prompt,
            sampling=sampling,
            seeds=tuple(seeds),
            max_new_tokens=self.max_new_tokens,
            stop_token_ids=self.tokenizer.stop_ids,
        )

    def generate(self, worker: int, unit: GenUnit) -> Any:
        return self.session.generate(worker, unit)

    def judge(self, unit_id: str, prompts: Sequence[Prompt], result: Any, key: int) -> Judged:
        """Each rollout's response text (special tokens, EOS among them, left out: decoded once,
        scored and logged as is) and its verdict (rlx_controller.scoring; a sample the verifier
        refuses is an ERROR verdict, logged), from verifier `key` mod the verifiers."""
        texts = [self.tokenizer.decode(r.token_ids) for r in result.rollouts]
        t0 = time.monotonic()
        verdicts = score_responses(
            unit_id, prompts, texts, lambda s: self.session.verify(s, key), self.log
        )
        return Judged(result, texts, verdicts, time.monotonic() - t0)

    def run(self, worker: int, unit: GenUnit, prompts: Sequence[Prompt], key: int) -> Judged:
        """`unit` generated on `worker`, then judged."""
        return self.judge(unit.unit_id, prompts, self.generate(worker, unit), key)


class TrainingUnits:
    """The schedule's work units: read back from the rollout log, or generated, scored and
    logged. `logged` (the unit ids with a record, listed once at each (re)start) is set by
    the loop."""

    def __init__(
        self,
        cfg: RunConfig,
        runner: UnitRunner,
        inputs: RunInputs,
        rollouts: RolloutLog,
        *,
        stage: Stage = untimed,
    ) -> None:
        self.cfg = cfg
        self.runner = runner
        self.datasets = inputs.datasets
        self.prompt_tokens = inputs.prompt_tokens
        self.rollouts = rollouts
        self.stage = stage
        self.logged: set[str] = set()
        s = cfg.sampling
        self.sampling = Sampling(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)

    def worker_of(self, unit: WorkUnit) -> int:
        """The inference worker a unit is generated on (round-robin over the schedule)."""
        return (unit.batch * self.cfg.batch.units_per_batch + unit.index) % self.runner.workers

    def gen_unit(self, unit: WorkUnit) -> GenUnit:
        return self.runner.gen_unit(
            unit.unit_id,
            unit.version,
            [self.prompt_tokens.ids(ref.dataset, ref.row) for ref in unit.prompts],
            unit.group_size,
            self.sampling,
            [x for seeds in unit.seeds for x in seeds],
        )

    def logged_record(self, unit: WorkUnit) -> RolloutUnit | None:
        if unit.unit_id not in self.logged:  # one listing at (re)start, not a read per unit
            return None
        return self.rollouts.get(unit.unit_id)

    def generate(self, unit: WorkUnit) -> Any:
        """The generation stage of a unit, on its worker."""
        with self.stage("gen stage"):
            return self.runner.generate(self.worker_of(unit), self.gen_unit(unit))

    def score_and_log(self, unit: WorkUnit, result: Any) -> RolloutUnit:
        """Verify a generated unit's rollouts and append them to the rollout log."""
        with self.stage("score+log stage"):
            prompts = [self.datasets[ref.dataset].prompt(ref.row) for ref in unit.prompts]
            judged = self.runner.judge(unit.unit_id, prompts, result, unit.index)
            record = RolloutUnit.of(
                unit.to_dict(),
                prompts=[ref.id for ref in unit.prompts],
                # the prompts' token ids as generated from: the batch is built from these,
                # never again from the text (the record's field is named prompt_ids)
                prompt_ids=[self.prompt_tokens.ids(ref.dataset, ref.row) for ref in unit.prompts],
                result=result,
                texts=judged.texts,
                verdicts=judged.verdicts,
                tests_total=[p.code.total_tests if p.code else 0 for p in prompts],
                verify_s=judged.verify_s,
            )
            return self.rollouts.append(record, known_absent=unit.unit_id not in self.logged)

    def run_unit(self, unit: WorkUnit) -> RolloutUnit:
        """A unit's scored rollouts: from the rollout log when logged, else generated, scored and
        appended (the logged record is what counts)."""
        logged = self.logged_record(unit)
        if logged is not None:
            return logged
        return self.score_and_log(unit, self.generate(unit))
