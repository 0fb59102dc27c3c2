"""A scored work unit as one typed record, from the inference worker's reply to the trainer's
batch, and its binary encoding (the rollout log's payload). No JAX: the controller, the CLI and
the tools read it.

    record = RolloutUnit.of(work_unit.to_dict(), prompts=["gsm8k/12", ...], prompt_ids=[...],
                            result=generate_result, texts=texts, verdicts=verdicts)
    data = record.to_bytes()                  # protobuf rlx.rollout.v1.Unit
    assert RolloutUnit.from_bytes(data) == record
    record.groups[p].samples[g].logp          # float32 [n], bit for bit what the sampler sent

A unit holds one group per prompt, in the unit's prompt order; a group holds the prompt's G
samples. A sample's reward is None when the verifier could not judge it (INFRA, ERROR): such a
sample is left out of training, never scored 0. The sampler's log-probs stay float32 bytes from
the worker to the batch: they are never widened, formatted or parsed on the way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from rlx_core.clients.inference import GenerateResult, Rollout
from rlx_core.clients.verifier import SampleResult
from rlx_core.errors import Corrupt, InvalidArgument
from rlx_core.proto.rollout.v1 import rollout_pb2 as pb

__all__ = ["Judgement", "RolloutGroup", "RolloutSample", "RolloutUnit"]

_F32 = np.dtype("<f4")
COMPILE_OUTPUT_CHARS = 2000  # of a compiler's output, kept in the log


@dataclass(frozen=True, kw_only=True, slots=True)
class Judgement:
    """How the verifier came to a sample's verdict (code samples; mostly empty for math)."""

    message: str = ""  # why: the failing test's comparator/checker message, NO_CODE's reason
    compile_output: str = ""  # the compiler's output, its first COMPILE_OUTPUT_CHARS characters
    tests_passed: int = 0  # tests the program passed
    tests_total: int = 0  # tests the prompt has (an assert-style harness is 1; math 0)
    first_failed: int | None = None  # 0-based index of the first test it failed
    compile_s: float = 0.0  # the verifier's wall seconds compiling it (0: a cached verdict)
    run_s: float = 0.0  # ... running it on the tests
    check_s: float = 0.0  # ... comparing its outputs or running the checker

    @classmethod
    def of(cls, verdict: SampleResult, tests_total: int = 0) -> Judgement:
        """The details of `verdict` on a prompt with `tests_total` tests."""
        passed = sum(1 for t in verdict.tests if t.status == "AC")
        failed = next((i for i, t in enumerate(verdict.tests) if t.status != "AC"), None)
        return cls(
            message=verdict.message or verdict.error,
            compile_output=verdict.compile_output[:COMPILE_OUTPUT_CHARS],
            tests_passed=passed,
            tests_total=tests_total,
            first_failed=failed,
            compile_s=verdict.compile_s,
            run_s=verdict.run_s,
            check_s=verdict.check_s,
        )

    @property
    def judge_s(self) -> float:
        """The verifier's wall seconds on the sample."""
        return self.compile_s + self.run_s + self.check_s


@dataclass(frozen=True, kw_only=True, slots=True)
class RolloutSample:
    """One response to a prompt, with its verdict."""

    tokens: tuple[int, ...]  # the response's ids (a drawn stop token included)
    logp_f32: bytes  # the sampler's log-prob of each token, float32 little-endian (4 per token)
    finish: str  # "stop" (a stop token or sequence) or "length" (max_new_tokens reached)
    text: str  # the response decoded, special tokens left out: what the verifier scored
    status: str  # the verifier's verdict: AC, WA, PE, TLE, MLE, RE, CE, INFRA, ERROR
    reward: float | None  # None: not judged (INFRA, ERROR), left out of training
    judgement: Judgement = Judgement()  # the verdict's details

    def __post_init__(self) -> None:
        if len(self.logp_f32) != 4 * len(self.tokens):
            raise InvalidArgument(
                f"a sample has {len(self.logp_f32)} bytes of float32 log-probs for "
                f"{len(self.tokens)} tokens (4 per token)",
                field="logp_f32",
            )

    @property
    def logp(self) -> np.ndarray:
        """The sampler's log-probs, float32 [len(tokens)] (a read-only view of `logp_f32`)."""
        return np.frombuffer(self.logp_f32, _F32)

    @classmethod
    def of(
        cls, rollout: Rollout, *, text: str, verdict: SampleResult, tests_total: int = 0
    ) -> RolloutSample:
        """A generated rollout, its decoded text and the verifier's verdict on that text (its
        prompt has `tests_total` tests)."""
        return cls(
            tokens=tuple(rollout.token_ids),
            logp_f32=np.asarray(rollout.sampler_logprobs, _F32).tobytes(),
            finish=rollout.finish_reason,
            text=text,
            status=verdict.status,
            reward=None if verdict.excluded or verdict.score is None else float(verdict.score),
            judgement=Judgement.of(verdict, tests_total),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class RolloutGroup:
    """A prompt's G samples, all generated with one weight version."""

    prompt: str  # the prompt's id, "<dataset>/<row>"
    prompt_ids: tuple[int, ...]  # the ids generated from; () in records that predate them
    version: int  # the weight version the samples were generated with
    samples: tuple[RolloutSample, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class RolloutUnit:
    """A scored work unit: its groups in the unit's prompt order."""

    # the controller's work unit as rlx_controller.schedule.WorkUnit.to_dict() gives it (the
    # schedule owns that schema; the record keeps it as given and reads only its unit_id)
    unit: dict[str, Any]
    version: int  # the weight version the worker had loaded (every group's `version`)
    generated_tokens: int  # tokens the worker generated for the unit
    groups: tuple[RolloutGroup, ...]
    verify_s: float = 0.0  # wall seconds the controller waited on the verifier for the unit

    def __post_init__(self) -> None:
        other = [g.version for g in self.groups if g.version != self.version]
        if other:
            raise InvalidArgument(
                f"a unit of version {self.version} holds groups of version {other[0]}",
                field="groups",
            )

    @property
    def unit_id(self) -> str:
        return str(self.unit["unit_id"])

    @classmethod
    def of(
        cls,
        unit: dict[str, Any],
        *,
        prompts: Sequence[str],
        prompt_ids: Sequence[Sequence[int]],
        result: GenerateResult,
        texts: Sequence[str],
        verdicts: Sequence[SampleResult],
        tests_total: Sequence[int] = (),
        verify_s: float = 0.0,
    ) -> RolloutUnit:
        """The record of a generated unit: `result.rollouts[p * G + g]` is sample g of
        prompts[p] (ids prompt_ids[p], `tests_total[p]` tests; () = none), decoded as
        texts[p * G + g] and judged as verdicts[p * G + g]; the verifier took `verify_s`."""
        n = len(result.rollouts)
        if not prompts or n % len(prompts) or len(prompt_ids) != len(prompts):
            raise InvalidArgument(
                f"{n} rollouts do not divide into {len(prompts)} prompts "
                f"({len(prompt_ids)} with ids)",
                field="rollouts",
            )
        if len(texts) != n or len(verdicts) != n:
            raise InvalidArgument(
                f"{n} rollouts, {len(texts)} texts, {len(verdicts)} verdicts", field="verdicts"
            )
        G = n // len(prompts)
        totals = list(tests_total) or [0] * len(prompts)
        if len(totals) != len(prompts):
            raise InvalidArgument(
                f"{len(totals)} test counts for {len(prompts)} prompts", field="tests_total"
            )
        samples = [
            RolloutSample.of(r, text=t, verdict=v, tests_total=totals[k // G])
            for k, (r, t, v) in enumerate(zip(result.rollouts, texts, verdicts, strict=True))
        ]
        groups = tuple(
            RolloutGroup(
                prompt=prompts[p],
                prompt_ids=tuple(prompt_ids[p]),
                version=result.version,
                samples=tuple(samples[p * G : (p + 1) * G]),
            )
            for p in range(len(prompts))
        )
        return cls(
            unit=unit,
            version=result.version,
            generated_tokens=result.generated_tokens,
            groups=groups,
            verify_s=verify_s,
        )

    # --- encoding ---------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The record as a serialized `rlx.rollout.v1.Unit` (deterministic for equal records)."""
        try:
            unit_json = json.dumps(
                self.unit,
                sort_keys=True,
                separators=(",", ":"),
                allow_nan=False,
                ensure_ascii=False,
            )
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"the work unit is not JSON-serialisable: {e}") from None
        msg = pb.Unit(
            unit_json=unit_json,
            version=self.version,
            generated_tokens=self.generated_tokens,
            verify_s=self.verify_s,
        )
        for group in self.groups:
            g = msg.groups.add(prompt=group.prompt, prompt_ids=group.prompt_ids)
            for s in group.samples:
                j = s.judgement
                g.samples.add(
                    token_ids=s.tokens,
                    sampler_logp=s.logp_f32,
                    finish_reason=s.finish,
                    text=s.text,
                    status=s.status,
                    reward=s.reward,
                    judgement=pb.Judgement(
                        message=j.message,
                        compile_output=j.compile_output,
                        tests_passed=j.tests_passed,
                        tests_total=j.tests_total,
                        first_failed=j.first_failed,
                        compile_s=j.compile_s,
                        run_s=j.run_s,
                        check_s=j.check_s,
                    ),
                )
        try:
            return msg.SerializeToString(deterministic=True)
        except ValueError as e:  # a token id or count outside its field's range
            raise InvalidArgument(f"the rollout record does not encode: {e}") from None

    @classmethod
    def from_bytes(cls, data: bytes) -> RolloutUnit:
        """The record `to_bytes` wrote; Corrupt when `data` is not one."""
        try:
            msg = pb.Unit.FromString(data)
            unit = json.loads(msg.unit_json)
            if not isinstance(unit, dict) or not isinstance(unit.get("unit_id"), str):
                raise Corrupt("its work unit is not an object with a unit_id")
            version = msg.version
            groups = tuple(
                RolloutGroup(
                    prompt=g.prompt,
                    prompt_ids=tuple(g.prompt_ids),
                    version=version,
                    samples=tuple(
                        RolloutSample(
                            tokens=tuple(s.token_ids),
                            logp_f32=s.sampler_logp,
                            finish=s.finish_reason,
                            text=s.text,
                            status=s.status,
                            reward=s.reward if s.HasField("reward") else None,
                            judgement=_judgement(s.judgement),
                        )
                        for s in g.samples
                    ),
                )
                for g in msg.groups
            )
            return cls(
                unit=unit,
                version=version,
                generated_tokens=msg.generated_tokens,
                groups=groups,
                verify_s=msg.verify_s,
            )
        except (DecodeError, ValueError, InvalidArgument, Corrupt) as e:
            # json's JSONDecodeError and a UTF-8 error are ValueErrors
            raise Corrupt(f"not a rollout record: {e}") from None


def _judgement(m: pb.Judgement) -> Judgement:
    return Judgement(
        message=m.message,
        compile_output=m.compile_output,
        tests_passed=m.tests_passed,
        tests_total=m.tests_total,
        first_failed=m.first_failed if m.HasField("first_failed") else None,
        compile_s=m.compile_s,
        run_s=m.run_s,
        check_s=m.check_s,
    )
