"""The inputs of one objective evaluation: `ObjectiveBatch` (what the caller sends) and `Context`
(the masked, derived arrays every component reads).

Shapes: B prompts, G samples per prompt, T response positions. Every per-token array is float32
[B, G, T]; `mask` is 1.0 on response tokens and 0.0 on padding. Values at padding positions are
never read: each derived array replaces them by a neutral value *before* any exp or log, so garbage
(even inf) in padding changes neither the loss nor its gradient.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from rlx_core.errors import InvalidArgument

__all__ = ["Context", "ObjectiveBatch"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ObjectiveBatch:
    """One training batch as the objective sees it. A JAX pytree: `max_len` is static.

    Policies: π_θ is the policy being optimised (its log-probs `logp` are the differentiable
    argument of `RLObjective.__call__`), π_old the policy whose ratio the PPO clip bounds (the
    trainer's recomputed log-probs of the weights the rollout was generated with; for decoupled
    PPO the *proximal* policy, the params before this update), π_sampler the inference engine's
    behaviour policy, π_ref the frozen reference model of the KL term.
    """

    # log π_old(o_it): float32 [B, G, T], recomputed by the trainer (DESIGN §6), no gradient
    old_logp: jax.Array
    # log π_sampler(o_it): float32 [B, G, T], as returned by the inference worker
    sampler_logp: jax.Array
    # 1.0 on response tokens, 0.0 on padding: float32 [B, G, T]
    mask: jax.Array
    # one scalar reward per sample: float32 [B, G]
    rewards: jax.Array
    # log π_ref(o_it): float32 [B, G, T]; required when the objective has a KL term (beta > 0)
    ref_logp: jax.Array | None = None
    # V_old(s_t), the value head's predictions when the rollout was scored: float32 [B, G, T];
    # required by GAE (the ppo preset) and used to clip the value loss
    values: jax.Array | None = None
    # value targets: float32 [B, G, T]; absent = GAE advantages + values (the usual PPO target)
    returns: jax.Array | None = None
    # L_max, the maximum generation length in tokens (MaxLengthAggregation); None = T
    max_len: int | None = None


jax.tree_util.register_dataclass(
    ObjectiveBatch,
    data_fields=["old_logp", "sampler_logp", "mask", "rewards", "ref_logp", "values", "returns"],
    meta_fields=["max_len"],
)


def _check_shape(name: str, value: Any, shape: tuple[int, ...]) -> None:
    got = getattr(value, "shape", None)
    if got is None:
        raise InvalidArgument(f"{name}: expected an array of shape {shape}, got {type(value)}")
    if tuple(got) != shape:
        raise InvalidArgument(
            f"{name}: shape {tuple(got)} does not match {shape} (B prompts, G samples"
            + (", T positions)" if len(shape) == 3 else ")"),
            field=name,
        )


@dataclasses.dataclass(frozen=True)
class Context:
    """Derived arrays shared by the components. Build with `Context.build(logp, batch)`.

    All per-token arrays are [B, G, T] and zero (log-ratios) at padding positions.
    """

    logp: jax.Array  # log π_θ, 0 at padding, differentiable
    old_logp: jax.Array  # log π_old, 0 at padding
    sampler_logp: jax.Array  # log π_sampler, 0 at padding
    ref_logp: jax.Array | None  # log π_ref, 0 at padding
    mask: jax.Array  # 1 on response tokens
    log_ratio: jax.Array  # log r_it = log π_θ − log π_old, differentiable, 0 at padding
    lengths: jax.Array  # |o_i| as float32 [B, G]
    last: jax.Array  # 1 at the last response token of each sample: [B, G, T]
    max_len: int  # L_max
    batch: ObjectiveBatch

    @staticmethod
    def build(logp: jax.Array, batch: ObjectiveBatch) -> Context:
        """Check the shapes (statically, so it costs nothing under jit) and derive the arrays."""
        if getattr(logp, "ndim", None) != 3:
            raise InvalidArgument(
                f"logp: expected float32 [B, G, T], got shape {getattr(logp, 'shape', None)}",
                field="logp",
            )
        shape = tuple(logp.shape)
        for name in ("old_logp", "sampler_logp", "mask"):
            _check_shape(name, getattr(batch, name), shape)
        for name in ("ref_logp", "values", "returns"):
            if getattr(batch, name) is not None:
                _check_shape(name, getattr(batch, name), shape)
        _check_shape("rewards", batch.rewards, shape[:2])
        max_len = shape[2] if batch.max_len is None else int(batch.max_len)
        if max_len < 1:
            raise InvalidArgument(f"max_len: must be >= 1, got {batch.max_len}", field="max_len")

        mask = batch.mask.astype(jnp.float32)
        on = mask > 0

        def clean(x: jax.Array) -> jax.Array:
            return jnp.where(on, x.astype(jnp.float32), 0.0)

        logp_c = clean(logp)
        old = clean(batch.old_logp)
        # positions after t: a token is the last one when no response token follows it
        after = jnp.cumsum(mask[..., ::-1], axis=-1)[..., ::-1] - mask
        return Context(
            logp=logp_c,
            old_logp=old,
            sampler_logp=clean(batch.sampler_logp),
            ref_logp=None if batch.ref_logp is None else clean(batch.ref_logp),
            mask=mask,
            log_ratio=logp_c - old,
            lengths=mask.sum(-1),
            last=mask * (after <= 0),
            max_len=max_len,
            batch=batch,
        )

    @property
    def group_size(self) -> int:
        return int(self.mask.shape[1])

    @property
    def num_prompts(self) -> int:
        return int(self.mask.shape[0])

    def ratio(self) -> jax.Array:
        """r_it = π_θ/π_old, differentiable; 1 at padding."""
        return jnp.exp(self.log_ratio)

    def token_mean(self, x: jax.Array) -> jax.Array:
        """Mean of x over every response token of the batch (0 when there are none)."""
        return (x * self.mask).sum() / jnp.maximum(self.mask.sum(), 1.0)

    def token_max(self, x: jax.Array) -> jax.Array:
        """Max of x over response tokens (−inf-safe: 0 when there are none)."""
        m = jnp.where(self.mask > 0, x, -jnp.inf).max()
        return jnp.where(jnp.isfinite(m), m, 0.0)
