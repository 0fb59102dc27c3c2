"""The client of an inference worker, and the plain types it speaks: work units in, rollouts out.

The types are dataclasses with no JAX, so the controller builds work units and reads rollouts
without importing the engine:

    unit = WorkUnit(unit_id="b7", version=7, prompts=((1, 2, 3),), samples_per_prompt=4,
                    sampling=Sampling(temperature=1.0, top_p=0.95), seeds=(11, 12, 13, 14),
                    max_new_tokens=256, stop_token_ids=(2,))
    result = InferenceClient(address, token=...).generate(unit)
    result.rollouts[p * G + g].token_ids
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import grpc

from rlx_core.clients._base import ServiceClient
from rlx_core.errors import InvalidArgument
from rlx_core.proto.inference.v1 import inference_pb2 as pb
from rlx_core.proto.inference.v1 import inference_pb2_grpc as pb_grpc
from rlx_core.rpc.client import call

__all__ = [
    "FINISH_REASONS",
    "GenerateResult",
    "InferenceClient",
    "InferenceStatus",
    "LoadResult",
    "Rollout",
    "Sampling",
    "WorkUnit",
    "seeds_for",
]

FINISH_REASONS = ("stop", "length")  # a stop token or sequence was drawn; max_new_tokens reached


@dataclass(frozen=True, kw_only=True)
class Sampling:
    """How each next token is chosen (the same for every sample of a unit)."""

    greedy: bool = False  # argmax; the other fields are ignored
    temperature: float = 1.0  # logits are divided by it, finite and > 0 (>= 0 when greedy)
    top_k: int = 0  # keep the k most likely tokens, >= 0; 0 keeps all
    top_p: float = 1.0  # keep the smallest set with this much probability, (0, 1]


@dataclass(frozen=True, kw_only=True)
class WorkUnit:
    """What the controller asks one worker to generate. Samples are prompt-major: sample
    s = p * G + g is the g-th sample of prompt p, drawn with seeds[s]."""

    unit_id: str  # the controller's name for it (echoed back)
    version: int  # the weight version it must be generated with, >= 0
    prompts: tuple[tuple[int, ...], ...]  # token ids, each non-empty
    samples_per_prompt: int = 1  # G >= 1
    sampling: Sampling = field(default_factory=Sampling)
    seeds: tuple[int, ...] = ()  # one per sample (len(prompts) * G), any 64-bit integers
    max_new_tokens: int = 128  # per sample, >= 1
    stop_token_ids: tuple[int, ...] = ()  # a sample ends when it draws one (kept in its tokens)
    stop_sequences: tuple[tuple[int, ...], ...] = ()  # ... or when its tokens end with one

    @property
    def num_samples(self) -> int:
        return len(self.prompts) * self.samples_per_prompt

    def check(self, *, vocab_size: int, max_context: int) -> None:
        """Raise InvalidArgument naming the first bad field: no prompts, an empty prompt, ids
        outside [0, vocab_size), G < 1, the wrong number of seeds, sampling out of range, or a
        prompt plus max_new_tokens longer than `max_context` positions."""
        if self.version < 0:
            raise _bad("version", "must be >= 0", self.version)
        if not self.prompts:
            raise _bad("prompts", "the work unit has no prompts", ())
        if self.samples_per_prompt < 1:
            raise _bad("samples_per_prompt", "must be >= 1", self.samples_per_prompt)
        if self.max_new_tokens < 1:
            raise _bad("max_new_tokens", "must be >= 1", self.max_new_tokens)
        for i, prompt in enumerate(self.prompts):
            if not prompt:
                raise _bad(f"prompts[{i}]", "is empty", prompt)
            _check_ids(f"prompts[{i}]", prompt, vocab_size)
            if len(prompt) + self.max_new_tokens > max_context:
                raise _bad(
                    "max_new_tokens",
                    f"prompts[{i}] has {len(prompt)} tokens; with max_new_tokens "
                    f"{self.max_new_tokens} that is {len(prompt) + self.max_new_tokens} positions, "
                    f"over this worker's context of {max_context}",
                    self.max_new_tokens,
                )
        if len(self.seeds) != self.num_samples:
            raise _bad(
                "seeds",
                f"needs one seed per sample ({len(self.prompts)} prompts x "
                f"{self.samples_per_prompt} = {self.num_samples}), got {len(self.seeds)}",
                len(self.seeds),
            )
        _check_sampling(self.sampling)
        _check_ids("stop_token_ids", self.stop_token_ids, vocab_size)
        for i, seq in enumerate(self.stop_sequences):
            if not seq:
                raise _bad(f"stop_sequences[{i}]", "is empty", seq)
            _check_ids(f"stop_sequences[{i}]", seq, vocab_size)


def _bad(name: str, message: str, value: object) -> InvalidArgument:
    return InvalidArgument(f"{name}: {message}", field=name, value=value)


def _check_ids(name: str, ids: tuple[int, ...], vocab_size: int) -> None:
    outside = [t for t in ids if not 0 <= t < vocab_size]
    if outside:
        raise _bad(
            name, f"ids {outside[:5]} are outside the vocabulary [0, {vocab_size})", outside[:5]
        )


def _check_sampling(s: Sampling) -> None:
    t = s.temperature
    if not math.isfinite(t) or t < 0 or (t == 0 and not s.greedy):
        raise _bad("sampling.temperature", "must be finite and > 0 (>= 0 when greedy)", t)
    if not 0 < s.top_p <= 1:
        raise _bad("sampling.top_p", "must be in (0, 1]", s.top_p)
    if s.top_k < 0:
        raise _bad("sampling.top_k", "must be >= 0", s.top_k)


@dataclass(frozen=True, kw_only=True)
class Rollout:
    """One generated sample."""

    prompt_index: int
    sample_index: int  # g in 0..G-1
    token_ids: tuple[int, ...]  # generated tokens (a drawn stop token is included)
    sampler_logprobs: tuple[float, ...]  # log-prob under the distribution sampled from
    model_logprobs: tuple[float, ...]  # log-prob under the plain model (temperature 1)
    finish_reason: str  # one of FINISH_REASONS
    versions: tuple[int, ...]  # weight version that produced each token


@dataclass(frozen=True, kw_only=True)
class GenerateResult:
    unit_id: str
    version: int  # the version loaded when the unit finished
    rollouts: tuple[Rollout, ...]  # prompt-major: rollouts[p * G + g]
    generated_tokens: int
    elapsed_s: float
    recomputed: int = 0  # interruptible mode: sequences re-prefilled after a forced reload


@dataclass(frozen=True, kw_only=True)
class LoadResult:
    version: int
    previous: int | None
    pull_s: float
    nbytes: int


@dataclass(frozen=True, kw_only=True)
class InferenceStatus:
    loaded_version: int | None
    queue_depth: int  # samples waiting for a slot in the running unit
    active: int  # samples in slots
    free_blocks: int
    total_blocks: int
    tokens_per_s: float  # over the last finished unit
    units_done: int
    tokens_done: int
    discarded_partial: int  # partial rollouts dropped by forced reloads
    interruptible: bool
    slots: int
    block_size: int


# --- proto <-> dataclass -----------------------------------------------------------------


def unit_to_proto(unit: WorkUnit) -> pb.WorkUnit:
    s = unit.sampling
    return pb.WorkUnit(
        unit_id=unit.unit_id,
        version=unit.version,
        prompts=[pb.Prompt(ids=list(p)) for p in unit.prompts],
        samples_per_prompt=unit.samples_per_prompt,
        sampling=pb.Sampling(
            greedy=s.greedy, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p
        ),
        seeds=list(unit.seeds),
        max_new_tokens=unit.max_new_tokens,
        stop_token_ids=list(unit.stop_token_ids),
        stop_sequences=[pb.Prompt(ids=list(q)) for q in unit.stop_sequences],
    )


def unit_from_proto(msg: pb.WorkUnit) -> WorkUnit:
    s = msg.sampling
    return WorkUnit(
        unit_id=msg.unit_id,
        version=msg.version,
        prompts=tuple(tuple(p.ids) for p in msg.prompts),
        samples_per_prompt=msg.samples_per_prompt,
        sampling=Sampling(greedy=s.greedy, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p),
        seeds=tuple(msg.seeds),
        max_new_tokens=msg.max_new_tokens,
        stop_token_ids=tuple(msg.stop_token_ids),
        stop_sequences=tuple(tuple(q.ids) for q in msg.stop_sequences),
    )


def result_to_proto(result: GenerateResult) -> pb.GenerateReply:
    return pb.GenerateReply(
        unit_id=result.unit_id,
        version=result.version,
        rollouts=[
            pb.Rollout(
                prompt_index=r.prompt_index,
                sample_index=r.sample_index,
                token_ids=list(r.token_ids),
                sampler_logprobs=list(r.sampler_logprobs),
                model_logprobs=list(r.model_logprobs),
                finish_reason=r.finish_reason,
                versions=list(r.versions),
            )
            for r in result.rollouts
        ],
        generated_tokens=result.generated_tokens,
        elapsed_s=result.elapsed_s,
        recomputed=result.recomputed,
    )


def result_from_proto(msg: pb.GenerateReply) -> GenerateResult:
    return GenerateResult(
        unit_id=msg.unit_id,
        version=msg.version,
        rollouts=tuple(
            Rollout(
                prompt_index=r.prompt_index,
                sample_index=r.sample_index,
                token_ids=tuple(r.token_ids),
                sampler_logprobs=tuple(r.sampler_logprobs),
                model_logprobs=tuple(r.model_logprobs),
                finish_reason=r.finish_reason,
                versions=tuple(r.versions),
            )
            for r in msg.rollouts
        ),
        generated_tokens=msg.generated_tokens,
        elapsed_s=msg.elapsed_s,
        recomputed=msg.recomputed,
    )


def status_to_proto(s: InferenceStatus) -> pb.StatusReply:
    return pb.StatusReply(
        loaded_version=-1 if s.loaded_version is None else s.loaded_version,
        queue_depth=s.queue_depth,
        active=s.active,
        free_blocks=s.free_blocks,
        total_blocks=s.total_blocks,
        tokens_per_s=s.tokens_per_s,
        units_done=s.units_done,
        tokens_done=s.tokens_done,
        discarded_partial=s.discarded_partial,
        interruptible=s.interruptible,
        slots=s.slots,
        block_size=s.block_size,
    )


def status_from_proto(m: pb.StatusReply) -> InferenceStatus:
    return InferenceStatus(
        loaded_version=None if m.loaded_version < 0 else m.loaded_version,
        queue_depth=m.queue_depth,
        active=m.active,
        free_blocks=m.free_blocks,
        total_blocks=m.total_blocks,
        tokens_per_s=m.tokens_per_s,
        units_done=m.units_done,
        tokens_done=m.tokens_done,
        discarded_partial=m.discarded_partial,
        interruptible=m.interruptible,
        slots=m.slots,
        block_size=m.block_size,
    )


class InferenceClient(ServiceClient):
    """Typed access to one inference worker."""

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        token_file: str | None = None,
        channel: grpc.Channel | None = None,
        timeout: float = 3600.0,
    ) -> None:
        """`timeout` bounds Generate and LoadVersion (a long unit on a slow host takes minutes)."""
        super().__init__(
            address, token=token, token_file=token_file, channel=channel, timeout=timeout
        )
        self._stub = pb_grpc.InferenceStub(self._channel)

    def generate(self, unit: WorkUnit, *, timeout: float | None = None) -> GenerateResult:
        """All rollouts of `unit`. Raises FailedPrecondition if the worker has another version
        loaded, InvalidArgument (naming the field) for a malformed unit."""
        reply = call(
            self._stub.Generate,
            pb.GenerateRequest(unit=unit_to_proto(unit)),
            timeout=timeout or self._timeout,
            target=self.address,
        )
        return result_from_proto(reply)

    def load_version(
        self, version: int, *, force: bool = False, timeout: float | None = None
    ) -> LoadResult:
        """Pull `version` from the worker's paramserver replica and swap it in (between units;
        with `force`, also in the middle of one)."""
        reply = call(
            self._stub.LoadVersion,
            pb.LoadVersionRequest(version=version, force=force),
            timeout=timeout or self._timeout,
            idempotent=True,  # loading the loaded version again is a no-op
            target=self.address,
        )
        return LoadResult(
            version=reply.version,
            previous=None if reply.previous < 0 else reply.previous,
            pull_s=reply.pull_s,
            nbytes=reply.nbytes,
        )

    def status(self, *, timeout: float = 30.0) -> InferenceStatus:
        reply = call(
            self._stub.Status,
            pb.StatusRequest(),
            timeout=timeout,
            idempotent=True,
            target=self.address,
        )
        return status_from_proto(reply)


def seeds_for(base: int, count: int) -> tuple[int, ...]:
    """`count` distinct per-sample seeds derived from one base seed (base * 2^20 + i), for callers
    that have no seed schedule of their own (the CLI, benchmarks)."""
    return tuple(base * (1 << 20) + i for i in range(count))
