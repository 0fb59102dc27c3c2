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

__all__ = ["RolloutGroup", "RolloutSample", "RolloutUnit"]

_F32 = np.dtype("<f4")


@dataclass(frozen=True, kw_only=True, slots=True)
class RolloutSample:
    """One response to a prompt, with its verdict."""

    tokens: tuple[int, ...]  # the response's ids (a drawn stop token included)
    logp_f32: bytes  # the sampler's log-prob of each token, float32 little-endian (4 per token)
    finish: str  # "stop" (a stop token or sequence) or "length" (max_new_tokens reached)
    text: str  # the response decoded, special tokens left out: what the verifier scored
    status: str  # the verifier's verdict: AC, WA, PE, TLE, MLE, RE, CE, INFRA, ERROR
    reward: float | None  # None: not judged (INFRA, ERROR), left out of training

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
    def of(cls, rollout: Rollout, *, text: str, verdict: SampleResult) -> RolloutSample:
        """A generated rollout, its decoded text and the verifier's verdict on that text."""
        return cls(
            tokens=tuple(rollout.token_ids),
            logp_f32=np.asarray(rollout.sampler_logprobs, _F32).tobytes(),
            finish=rollout.finish_reason,
            text=text,
            status=verdict.status,
            reward=None if verdict.excluded or verdict.score is None else float(verdict.score),
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
    ) -> RolloutUnit:
        """The record of a generated unit: `result.rollouts[p * G + g]` is sample g of
        prompts[p] (ids prompt_ids[p]), decoded as texts[p * G + g] and judged as
        verdicts[p * G + g]."""
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
        samples = [
            RolloutSample.of(r, text=t, verdict=v)
            for r, t, v in zip(result.rollouts, texts, verdicts, strict=True)
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
        )
        for group in self.groups:
            g = msg.groups.add(prompt=group.prompt, prompt_ids=group.prompt_ids)
            for s in group.samples:
                g.samples.add(
                    token_ids=s.tokens,
                    sampler_logp=s.logp_f32,
                    finish_reason=s.finish,
                    text=s.text,
                    status=s.status,
                    reward=s.reward,
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
            )
        except (DecodeError, ValueError, InvalidArgument, Corrupt) as e:
            # json's JSONDecodeError and a UTF-8 error are ValueErrors
            raise Corrupt(f"not a rollout record: {e}") from None
