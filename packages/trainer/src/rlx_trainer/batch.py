"""Checking a TrainBatch against the model and the update layout before anything runs, and
splitting it into microbatches.

Every refusal is an InvalidArgument that names the field (`tokens`, `loss_mask`, `version`, ...),
raised before any state changes, so a bad batch never half-applies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlx_core.clients.trainer import TrainBatch
from rlx_core.errors import InvalidArgument
from rlx_model import ModelConfig
from rlx_trainer.config import UpdateConfig

__all__ = ["HostMicrobatch", "check_batch", "split_batch"]


def _bad(field: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"{field}: {message}", field=field)


def _same_shape(name: str, value: np.ndarray | None, shape: tuple[int, ...]) -> None:
    if value is not None and value.shape != shape:
        raise _bad(name, f"shape {value.shape} does not match tokens' {shape}")


def check_batch(
    batch: TrainBatch,
    cfg: ModelConfig,
    update: UpdateConfig,
    *,
    step: int,
    rows_divisor: int,
) -> None:
    """Raise InvalidArgument naming the first field that does not fit.

    `step` is the trainer's current step (a batch cannot come from a future version);
    `rows_divisor` the number of batch shards (data × fsdp): each microbatch's rows must split
    evenly over them.
    """
    tokens = batch.tokens
    if tokens.ndim != 3 or tokens.size == 0:
        raise _bad("tokens", f"expected a non-empty [B, G, S] array, got shape {tokens.shape}")
    B, G, S = tokens.shape
    if S < 2:
        raise _bad("tokens", f"sequences of {S} token(s) have nothing to predict")
    if cfg.max_position_embeddings < S:
        raise _bad(
            "tokens",
            f"length {S} exceeds the model's context of {cfg.max_position_embeddings} positions",
        )
    bad = (tokens < 0) | (tokens >= cfg.vocab_size)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise _bad(
            "tokens",
            f"id {int(tokens[where])} at {list(where)} is outside the vocabulary "
            f"(0..{cfg.vocab_size - 1})",
        )
    shape = (B, G, S)
    _same_shape("loss_mask", batch.loss_mask, shape)
    _same_shape("valid", batch.valid, shape)
    mask = batch.loss_mask
    if not np.isin(mask, (0.0, 1.0)).all():
        raise _bad("loss_mask", "values must be 0 or 1")
    if mask[..., 0].any():
        raise _bad("loss_mask", "position 0 has no preceding token and cannot be trained")
    if batch.valid is not None and (mask > batch.valid).any():
        raise _bad("loss_mask", "marks tokens that `valid` says are padding")
    if not mask.any():
        raise _bad("loss_mask", "selects no token at all")

    if batch.kind == "rl":
        _check_rl(batch, step)
    _check_layout(B, G, update, rows_divisor)


def _check_rl(batch: TrainBatch, step: int) -> None:
    B, G, _ = shape = batch.tokens.shape
    _same_shape("sampler_logp", batch.sampler_logp, shape)
    if batch.rewards is None or batch.rewards.shape != (B, G):
        got = None if batch.rewards is None else batch.rewards.shape
        raise _bad("rewards", f"expected shape {(B, G)} (B prompts, G samples), got {got}")
    if not np.isfinite(batch.rewards).all():
        raise _bad("rewards", "must be finite")
    sampler = batch.sampler_logp
    if sampler is None:
        raise _bad("sampler_logp", "an rl batch needs the sampler's log-probs")
    on = batch.loss_mask > 0
    if not np.isfinite(sampler[on]).all() or (sampler[on] > 1e-4).any():
        raise _bad("sampler_logp", "must be finite log-probabilities (<= 0) on loss tokens")
    if not 0 <= batch.version <= step:
        raise _bad("version", f"{batch.version} is not a version this trainer has made (0..{step})")
    if batch.max_len < 0:
        raise _bad("max_len", f"must be >= 0, got {batch.max_len}")


def _check_layout(prompts: int, group: int, update: UpdateConfig, rows_divisor: int) -> None:
    B, G = prompts, group
    parts = update.minibatches * update.grad_accum
    if B % parts:
        raise _bad(
            "tokens",
            f"a batch of {B} prompts does not split into {update.minibatches} minibatch(es) × "
            f"{update.grad_accum} microbatch(es) (update.minibatches × update.grad_accum)",
        )
    rows = B // parts * G
    if rows % rows_divisor:
        raise _bad(
            "tokens",
            f"a microbatch of {rows} rows does not split over {rows_divisor} batch shards "
            "(mesh data × fsdp)",
        )


@dataclass(frozen=True)
class HostMicrobatch:
    """One microbatch as numpy arrays, rows = b·G samples: tokens, positions, valid, loss_mask,
    and for rl sampler_logp [rows, S] and rewards [rows]."""

    arrays: dict[str, np.ndarray]


def split_batch(batch: TrainBatch, parts: int) -> list[HostMicrobatch]:
    """The batch as `parts` microbatches of whole prompts (groups stay together), in order."""
    B, G, S = batch.tokens.shape
    valid = np.ones((B, G, S), bool) if batch.valid is None else batch.valid
    # positions count real tokens, so left padding (prompts in a bucket) keeps RoPE right
    positions = np.maximum(np.cumsum(valid, axis=-1, dtype=np.int32) - 1, 0)
    flat = {
        "tokens": batch.tokens.reshape(B * G, S),
        "positions": positions.reshape(B * G, S),
        "valid": valid.reshape(B * G, S),
        "loss_mask": batch.loss_mask.reshape(B * G, S),
    }
    if batch.kind == "rl":
        assert batch.sampler_logp is not None and batch.rewards is not None
        flat["sampler_logp"] = batch.sampler_logp.reshape(B * G, S)
        flat["rewards"] = batch.rewards.reshape(B * G)
    rows = B * G // parts
    return [
        HostMicrobatch(
            {k: np.ascontiguousarray(v[i * rows : (i + 1) * rows]) for k, v in flat.items()}
        )
        for i in range(parts)
    ]
