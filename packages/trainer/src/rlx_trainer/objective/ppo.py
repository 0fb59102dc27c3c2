"""Pure maths of PPO with a critic: GAE, whitening, the clipped value loss. Arrays in, arrays out.

All arrays are [..., T] over response positions with a 0/1 `mask`; masked-out positions are
skipped (they neither receive nor pass on value), so padding anywhere changes nothing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["gae", "masked_whiten", "value_loss"]


def gae(
    rewards: jax.Array, values: jax.Array, mask: jax.Array, *, gamma: float, lam: float
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation over the last axis, skipping masked positions.

    For the response tokens t_1 < t_2 < ... of a sample (mask = 1):
        δ_k = r_k + γ · V_{k+1} − V_k       (V after the last response token = 0)
        A_k = δ_k + γλ · A_{k+1}
        returns_k = A_k + V_k
    Masked positions get A = returns = 0. Returns (advantages, returns), both like `rewards`.
    """
    on = mask > 0
    r = jnp.where(on, rewards, 0.0)
    v = jnp.where(on, values, 0.0)

    def step(
        carry: tuple[jax.Array, jax.Array], x: tuple[jax.Array, jax.Array, jax.Array]
    ) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        next_v, next_a = carry
        r_t, v_t, on_t = x
        delta = r_t + gamma * next_v - v_t
        a_t = delta + gamma * lam * next_a
        # a masked position passes the carry through unchanged
        carry = (jnp.where(on_t, v_t, next_v), jnp.where(on_t, a_t, next_a))
        return carry, jnp.where(on_t, a_t, 0.0)

    to_time = lambda x: jnp.moveaxis(x, -1, 0)  # noqa: E731
    zeros = jnp.zeros(r.shape[:-1], r.dtype)
    _, adv = jax.lax.scan(step, (zeros, zeros), (to_time(r), to_time(v), to_time(on)), reverse=True)
    adv = jnp.moveaxis(adv, 0, -1)
    return adv, jnp.where(on, adv + v, 0.0)


def masked_whiten(x: jax.Array, mask: jax.Array, *, eps: float = 1e-6) -> jax.Array:
    """(x − mean) / (std + eps) with mean and (population) std over the positions where
    mask = 1; 0 elsewhere."""
    n = jnp.maximum(mask.sum(), 1.0)
    mean = (x * mask).sum() / n
    var = (((x - mean) * mask) ** 2).sum() / n
    return jnp.where(mask > 0, (x - mean) / (jnp.sqrt(var) + eps), 0.0)


def value_loss(
    values: jax.Array, old_values: jax.Array, returns: jax.Array, *, clip: float | None
) -> jax.Array:
    """Per-token ½ max((V − R̂)², (clip(V, V_old − c, V_old + c) − R̂)²), or ½ (V − R̂)² when
    `clip` is None. Gradient flows through `values` only."""
    sq = (values - returns) ** 2
    if clip is not None:
        clipped = old_values + jnp.clip(values - old_values, -clip, clip)
        sq = jnp.maximum(sq, (clipped - returns) ** 2)
    return 0.5 * sq
