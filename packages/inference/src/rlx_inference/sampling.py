"""Choosing the next token of every row, inside the compiled step, with per-sample randomness.

Every token is drawn with its own key: the sample's 64-bit seed as a threefry key, with the
token's position folded in (`fold_in(key(seed), position)`), so a sample's randomness depends on
nothing but its seed and position: not on its batch mates, its slot, or when it ran.

Three modes, chosen per work unit (a traced index: one compiled program serves all three):

- `greedy`: argmax. Both returned log-probs are the plain model's (a point mass has no useful
  log-prob, and this keeps greedy rollouts scoreable).
- `sample`: softmax(logits / temperature).
- `truncate`: as `sample`, then keep the top_k most likely tokens (0: all) and, of those, the
  smallest set whose probability reaches top_p; tokens tied with the last one kept stay too.

Returned per row: the token, its log-prob under the distribution actually sampled from (the
tempered, truncated one: what truncated importance sampling needs) and under the plain model
(temperature 1, no truncation).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rlx_core.clients.inference import Sampling

__all__ = ["MODES", "knobs_of", "sample_rows", "seed_keys"]

MODES = ("greedy", "sample", "truncate")


def knobs_of(sampling: Sampling) -> tuple[np.generic, ...]:
    """(mode index, temperature, top_k, top_p) as the scalars the compiled step takes."""
    if sampling.greedy:
        mode = 0
    elif sampling.top_k > 0 or sampling.top_p < 1.0:
        mode = 2
    else:
        mode = 1
    return (
        np.int32(mode),
        np.float32(1.0 if sampling.greedy else sampling.temperature),
        np.int32(sampling.top_k),
        np.float32(sampling.top_p),
    )


def seed_keys(seeds: np.ndarray) -> np.ndarray:
    """Raw threefry keys uint32 [N, 2] (high word, low word) of 64-bit integer seeds."""
    s = np.asarray(seeds, dtype=np.int64).view(np.uint64)
    return np.stack([(s >> np.uint64(32)), s & np.uint64(0xFFFFFFFF)], axis=-1).astype(np.uint32)


def _truncate(lf: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """Mask (as -inf) the tokens outside top-k, then outside the top-p nucleus, of lf [V]."""
    v = lf.shape[-1]
    ranked = -jnp.sort(-lf)  # descending
    idx = jnp.arange(v)
    k = jnp.where(top_k > 0, jnp.minimum(top_k, v), v)
    in_k = idx < k
    probs = jax.nn.softmax(jnp.where(in_k, ranked, -jnp.inf))
    # keep a token if the mass before it is < top_p (the most likely token always stays)
    keep = in_k & ((jnp.cumsum(probs) - probs) < top_p)
    cutoff = ranked[jnp.maximum(jnp.sum(keep) - 1, 0)]
    return jnp.where(lf >= cutoff, lf, -jnp.inf)


def sample_rows(
    row_logits: jax.Array,
    keys: jax.Array,
    positions: jax.Array,
    mode: jax.Array,
    temperature: jax.Array,
    top_k: jax.Array,
    top_p: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(tokens [B], sampler log-probs [B], model log-probs [B]) for float32 logits [B, V].

    keys uint32 [B, 2]; positions [B] is the position each new token will occupy; mode is the
    index of the mode in MODES (traced: one compiled program serves every mode, and only the
    chosen branch runs).
    """
    lf = row_logits.astype(jnp.float32)
    model_logp = jax.nn.log_softmax(lf, axis=-1)

    def greedy() -> tuple[jax.Array, jax.Array]:
        tokens = jnp.argmax(model_logp, axis=-1).astype(jnp.int32)
        return tokens, jnp.take_along_axis(model_logp, tokens[:, None], axis=-1)[:, 0]

    def draw(truncate: bool) -> tuple[jax.Array, jax.Array]:
        def one(row: jax.Array, key: jax.Array, position: jax.Array) -> tuple[jax.Array, ...]:
            row = row / temperature
            if truncate:
                row = _truncate(row, top_k, top_p)
            token = jax.random.categorical(jax.random.fold_in(key, position), row)
            return token.astype(jnp.int32), jax.nn.log_softmax(row)[token]

        tokens, logp = jax.vmap(one)(lf, keys, positions)
        return tokens, logp

    tokens, sampler = jax.lax.switch(mode, [greedy, lambda: draw(False), lambda: draw(True)])
    model = jnp.take_along_axis(model_logp, tokens[:, None], axis=-1)[:, 0]
    return tokens, sampler, model
