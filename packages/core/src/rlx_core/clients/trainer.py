"""The client of the trainer, and the plain types the controller builds batches with (no JAX).

A `TrainBatch` holds numpy arrays laid out per token, aligned with the tokens: entry t of every
[B, G, S] array refers to token t (predicted from tokens < t). B prompts, G samples per prompt,
S positions (prompt + response, padded to a fixed bucket so the compiled step is reused).

    from rlx_core.clients import TrainBatch, TrainerClient
    t = TrainerClient("127.0.0.1:PORT", token=TOKEN)
    t.init(builtin="tiny", seed=0)
    result = t.train_step(TrainBatch.rl(tokens, loss_mask, sampler_logp, rewards, version=0))
    result.step, result.version, result.metrics["loss"]

TrainStep is not retried automatically (an update must not run twice); pass `expected_step` and
a retry after a lost reply returns the step's recorded result instead of training again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

import grpc
import numpy as np

from rlx_core.clients._base import ServiceClient
from rlx_core.errors import InvalidArgument
from rlx_core.proto.trainer.v1 import trainer_pb2 as pb
from rlx_core.proto.trainer.v1 import trainer_pb2_grpc as pb_grpc
from rlx_core.rpc.client import DEFAULT_TIMEOUT_S, call
from rlx_core.rpc.status import from_rpc_error
from rlx_core.rpc.tensors import TensorAssembler, tensors_to_chunks

__all__ = [
    "METRICS",
    "InitResult",
    "StepResult",
    "TrainBatch",
    "TrainerClient",
    "TrainerStatus",
    "batch_from_requests",
    "batch_requests",
]

Kind = Literal["rl", "sft"]

# The per-step metrics the trainer reports (TrainStep's `metrics`), with what each one means.
# The objective adds its own parts (`objective`, `pg_objective`, `reg_objective`, `adv_mean`, ...).
METRICS: dict[str, str] = {
    "loss": "the objective's loss (RL: -J; SFT: token-mean cross-entropy), mean over updates",
    "mismatch_mean": "the numerical mismatch: mean |log π_sampler - log π_trainer| over response "
    "tokens, π_trainer the trainer's prefill of the version that generated the batch (the same "
    "weights the sampler had; absent when that version is not held: step_start without it)",
    "mismatch_max": "max of the same",
    "mismatch_p95": "95th percentile of the same",
    "lag_kl_k3": "the policy lag: KL(π_gen || π_cur) k3 estimate, mean of r - 1 - log r with "
    "r = π_cur/π_gen over response tokens (π_gen the generating version, π_cur the params the "
    "step starts from; the first minibatch's tokens); 0 on-policy",
    "lag_ratio_min": "smallest π_cur/π_gen over the same tokens",
    "lag_ratio_max": "largest π_cur/π_gen over the same tokens",
    "ratio_mean": "IS ratio r = π_θ/π_old over response tokens, mean over updates",
    "ratio_max": "largest r seen in the step",
    "ratio_min": "smallest r seen in the step",
    "ratio_max_abs_dev": "max |r - 1| in the step's first update (0.0 exactly in aligned mode)",
    "clip_frac": "fraction of response tokens the objective's clip cut (low + high)",
    "entropy": "mean entropy of π_θ over response tokens (nats), first update",
    "kl_k1": "KL estimate k1 = mean(log π_θ - log π_ref) (reference model, else π_old)",
    "kl_k3": "KL estimate k3 = mean(ρ - log ρ - 1), ρ = π_ref/π_θ",
    "grad_norm": "global gradient norm before clipping, mean over updates",
    "lr": "learning rate of the last update",
    "tokens_per_s": "non-padding tokens processed per second of step time",
    "step_time_s": "wall-clock seconds of the whole step (recomputation, updates, push)",
    "recompute_s": "seconds spent recomputing π_old (and π_ref)",
    "response_tokens": "response tokens in the batch",
    "updates": "optimizer updates applied (minibatches × epochs)",
}


def _as(name: str, value: object, dtype: type, ndim: int) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != ndim:
        raise InvalidArgument(
            f"{name}: expected {ndim} dimensions, got shape {array.shape}", field=name
        )
    if np.dtype(dtype).kind in "iu" and array.dtype.kind not in "iu":
        raise InvalidArgument(f"{name}: expected integer ids, got {array.dtype}", field=name)
    return np.ascontiguousarray(array, dtype=dtype)


@dataclass(frozen=True, kw_only=True)
class TrainBatch:
    """One global training batch.

    RL batches carry the sampler's log-probs and one reward per sample; SFT batches only tokens
    and the mask of the tokens to learn. The trainer checks every field against its model and
    answers INVALID_ARGUMENT naming the field that does not fit.
    """

    kind: Kind = "rl"
    tokens: np.ndarray  # int32 [B, G, S]: prompt + response ids, padded
    loss_mask: np.ndarray  # float32 [B, G, S]: 1.0 where token t is trained (response), else 0
    valid: np.ndarray | None = None  # bool [B, G, S]: real tokens; None = all; positions count them
    sampler_logp: np.ndarray | None = None  # float32 [B, G, S]: the sampler's log p(token t) (rl)
    rewards: np.ndarray | None = None  # float32 [B, G]: one scalar per sample (rl)
    version: int = 0  # the weight version the rollouts were generated with (rl)
    max_len: int = 0  # L_max for max-length aggregation (tokens); 0 = S

    @classmethod
    def rl(
        cls,
        tokens: object,
        loss_mask: object,
        sampler_logp: object,
        rewards: object,
        *,
        version: int,
        valid: object | None = None,
        max_len: int = 0,
    ) -> TrainBatch:
        return cls(
            kind="rl",
            tokens=_as("tokens", tokens, np.int32, 3),
            loss_mask=_as("loss_mask", loss_mask, np.float32, 3),
            valid=None if valid is None else _as("valid", valid, np.bool_, 3),
            sampler_logp=_as("sampler_logp", sampler_logp, np.float32, 3),
            rewards=_as("rewards", rewards, np.float32, 2),
            version=int(version),
            max_len=int(max_len),
        )

    @classmethod
    def sft(cls, tokens: object, loss_mask: object, *, valid: object | None = None) -> TrainBatch:
        return cls(
            kind="sft",
            tokens=_as("tokens", tokens, np.int32, 3),
            loss_mask=_as("loss_mask", loss_mask, np.float32, 3),
            valid=None if valid is None else _as("valid", valid, np.bool_, 3),
        )

    def tensors(self) -> dict[str, np.ndarray]:
        """The arrays that are set, by field name."""
        out = {"tokens": self.tokens, "loss_mask": self.loss_mask}
        for name in ("valid", "sampler_logp", "rewards"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True)
class StepResult:
    """What one TrainStep returns: the step reached, the version pushed, the metrics."""

    step: int
    version: int
    metrics: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class InitResult:
    step: int
    version: int
    num_params: int
    model: str


@dataclass(frozen=True)
class TrainerStatus:
    initialized: bool
    step: int
    model: str
    num_params: int
    kept_versions: tuple[int, ...]
    checkpoint_steps: tuple[int, ...]
    last_metrics: dict[str, float]
    mesh_shape: tuple[int, ...]
    checkpoint_uri: str


_TENSOR_FIELDS = ("tokens", "loss_mask", "valid", "sampler_logp", "rewards")


def batch_requests(
    batch: TrainBatch, *, expected_step: int | None = None
) -> Iterator[pb.TrainStepRequest]:
    """The TrainStep request stream for a batch: its header, then each tensor's chunks."""
    header = pb.TrainStepHeader(kind=batch.kind, version=batch.version, max_len=batch.max_len)
    if expected_step is not None:
        header.expected_step = expected_step
    yield pb.TrainStepRequest(header=header)
    for chunk in tensors_to_chunks(batch.tensors()):
        yield pb.TrainStepRequest(chunk=chunk)


def batch_from_requests(
    requests: Iterable[pb.TrainStepRequest],
) -> tuple[TrainBatch, int | None]:
    """The batch (and expected step) a TrainStep stream carries; InvalidArgument if malformed."""
    it = iter(requests)
    first = next(it, None)
    if first is None or first.WhichOneof("item") != "header":
        raise InvalidArgument("a TrainStep stream starts with a TrainStepHeader")
    header = first.header
    if header.kind not in ("rl", "sft"):
        raise InvalidArgument(f"kind: {header.kind!r} is not a batch kind (rl, sft)", field="kind")
    assembler = TensorAssembler()
    arrays: dict[str, np.ndarray] = {}
    for request in it:
        if request.WhichOneof("item") != "chunk":
            raise InvalidArgument("only tensor chunks may follow the TrainStepHeader")
        done = assembler.feed(request.chunk)
        if done is not None:
            name, array = done
            if name not in _TENSOR_FIELDS:
                raise InvalidArgument(
                    f"{name}: not a batch field (fields: {', '.join(_TENSOR_FIELDS)})", field=name
                )
            if name in arrays:
                raise InvalidArgument(f"{name}: sent twice", field=name)
            arrays[name] = array
    assembler.finish()
    for name in ("tokens", "loss_mask"):
        if name not in arrays:
            raise InvalidArgument(f"{name}: missing from the batch", field=name)
    expected = header.expected_step if header.HasField("expected_step") else None
    if header.kind == "sft":
        batch = TrainBatch.sft(arrays["tokens"], arrays["loss_mask"], valid=arrays.get("valid"))
        return batch, expected
    for name in ("sampler_logp", "rewards"):
        if name not in arrays:
            raise InvalidArgument(f"{name}: an rl batch needs it", field=name)
    batch = TrainBatch.rl(
        arrays["tokens"],
        arrays["loss_mask"],
        arrays["sampler_logp"],
        arrays["rewards"],
        version=header.version,
        valid=arrays.get("valid"),
        max_len=header.max_len,
    )
    return batch, expected


def step_result_to_proto(result: StepResult) -> pb.TrainStepReply:
    return pb.TrainStepReply(
        step=result.step,
        version=result.version,
        metrics=result.metrics,
        warnings=list(result.warnings),
    )


def _metrics(values: Mapping[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in sorted(values.items())}


class TrainerClient(ServiceClient):
    """Typed access to the trainer service."""

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        token_file: str | None = None,
        channel: grpc.Channel | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        step_timeout: float = 3600.0,
    ) -> None:
        """`timeout` bounds the quick calls (Status); `step_timeout` Init, TrainStep, checkpoints
        (they compile, train, push and write whole models)."""
        super().__init__(
            address, token=token, token_file=token_file, channel=channel, timeout=timeout
        )
        self._stub = pb_grpc.TrainerStub(self._channel)
        self._step_timeout = step_timeout

    def init(
        self,
        *,
        checkpoint: str | None = None,
        step: int | None = None,
        hf_dir: str | None = None,
        builtin: str | None = None,
        seed: int = 0,
    ) -> InitResult:
        """Load exactly one source: a trainer checkpoint root (`checkpoint`, "" = the configured
        one; `step` None = newest), an HF directory, or a built-in config name."""
        given = [s for s in (checkpoint, hf_dir, builtin) if s is not None]
        if len(given) != 1:
            raise InvalidArgument("init needs exactly one of checkpoint, hf_dir, builtin")
        request = pb.InitRequest(seed=seed)
        if checkpoint is not None:
            request.checkpoint.uri = checkpoint
            if step is not None:
                request.checkpoint.step = step
        elif hf_dir is not None:
            request.hf_dir = hf_dir
        else:
            request.builtin = str(builtin)
        reply = call(self._stub.Init, request, timeout=self._step_timeout, target=self.address)
        return InitResult(reply.step, reply.version, reply.num_params, reply.model)

    def train_step(
        self,
        batch: TrainBatch,
        *,
        expected_step: int | None = None,
        timeout: float | None = None,
    ) -> StepResult:
        """Train on one batch; returns once the new version is on every paramserver replica."""
        try:
            reply = self._stub.TrainStep(
                batch_requests(batch, expected_step=expected_step),
                timeout=timeout or self._step_timeout,
            )
        except grpc.RpcError as e:
            raise from_rpc_error(e, target=self.address) from None
        return StepResult(reply.step, reply.version, _metrics(reply.metrics), tuple(reply.warnings))

    def save_checkpoint(self) -> tuple[int, str]:
        """Write a checkpoint of the current step; returns (step, URI of the checkpoint root)."""
        reply = call(
            self._stub.SaveCheckpoint,
            pb.SaveCheckpointRequest(),
            timeout=self._step_timeout,
            idempotent=True,
            target=self.address,
        )
        return reply.step, reply.uri

    def restore(self, step: int | None = None) -> tuple[int, int]:
        """Go back to a checkpointed step (None = newest); returns (step, version pushed)."""
        request = pb.RestoreRequest()
        if step is not None:
            request.step = step
        reply = call(
            self._stub.Restore,
            request,
            timeout=self._step_timeout,
            idempotent=True,
            target=self.address,
        )
        return reply.step, reply.version

    def status(self) -> TrainerStatus:
        reply = call(
            self._stub.Status,
            pb.StatusRequest(),
            timeout=self._timeout,
            idempotent=True,
            target=self.address,
        )
        return TrainerStatus(
            initialized=reply.initialized,
            step=reply.step,
            model=reply.model,
            num_params=reply.num_params,
            kept_versions=tuple(reply.kept_versions),
            checkpoint_steps=tuple(reply.checkpoint_steps),
            last_metrics=_metrics(reply.last_metrics),
            mesh_shape=tuple(reply.mesh_shape),
            checkpoint_uri=reply.checkpoint_uri,
        )
