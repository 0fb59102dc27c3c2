"""A plain cached decoding loop: prefill the prompt, then one token per step.

This is the reference decoder for `rlx model generate` and tests. The inference engine (paged KV
cache, continuous batching) is built on the same `forward` and sampling rules.

Sampling draws every token with its own key, `fold_in(PRNGKey(seed), position)`, so a sample never
depends on anything but its seed, its tokens and the weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp

from rlx_core.errors import InvalidArgument
from rlx_model.config import ModelConfig
from rlx_model.decoder import KVCache, Params, forward, init_cache, logits

__all__ = ["SamplingParams", "generate", "sample_logits"]


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """How the next token is chosen."""

    greedy: bool = False  # argmax; the other fields are ignored
    temperature: float = 1.0  # > 0; logits are divided by it
    top_k: int = 0  # keep the k most likely tokens; 0 = all
    top_p: float = 1.0  # keep the smallest set with this much probability, (0, 1]
    seed: int = 0  # per-sample seed

    def __post_init__(self) -> None:
        if not self.greedy and self.temperature <= 0:
            raise InvalidArgument(f"temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InvalidArgument(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise InvalidArgument(f"top_k must be >= 0, got {self.top_k}")


@partial(jax.jit, static_argnames=("params",))
def sample_logits(
    row_logits: jax.Array, key: jax.Array, params: SamplingParams
) -> tuple[jax.Array, jax.Array]:
    """(token, its log-prob under the distribution actually sampled from) for logits [V]."""
    lf = row_logits.astype(jnp.float32)
    if params.greedy:
        token = jnp.argmax(lf)
        return token, jax.nn.log_softmax(lf)[token]
    lf = lf / params.temperature
    if params.top_k:
        kth = jax.lax.top_k(lf, params.top_k)[0][-1]
        lf = jnp.where(lf < kth, -jnp.inf, lf)
    if params.top_p < 1.0:
        order = jnp.argsort(-lf)
        probs = jax.nn.softmax(lf[order])
        # keep a token if the mass before it is < top_p (the most likely token always stays)
        keep_sorted = (jnp.cumsum(probs) - probs) < params.top_p
        keep = jnp.zeros_like(keep_sorted).at[order].set(keep_sorted)
        lf = jnp.where(keep, lf, -jnp.inf)
    logp = jax.nn.log_softmax(lf)
    token = jax.random.categorical(key, lf)
    return token, logp[token]


@partial(jax.jit, static_argnums=(1,))
def _prefill(
    params: Params, cfg: ModelConfig, tokens: jax.Array, cache: KVCache
) -> tuple[jax.Array, KVCache]:
    hidden, new_cache = forward(params, cfg, tokens, cache=cache)
    assert new_cache is not None
    return logits(params, cfg, hidden[:, -1]), new_cache


@partial(jax.jit, static_argnums=(1,))
def _decode(
    params: Params, cfg: ModelConfig, token: jax.Array, position: jax.Array, cache: KVCache
) -> tuple[jax.Array, KVCache]:
    hidden, new_cache = forward(params, cfg, token[None, None], position[None, None], cache=cache)
    assert new_cache is not None
    return logits(params, cfg, hidden[:, -1]), new_cache


def generate(
    params: Params,
    cfg: ModelConfig,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    sampling: SamplingParams | None = None,
    *,
    stop_ids: Sequence[int] = (),
) -> tuple[list[int], list[float]]:
    """New token ids (at most max_new_tokens, ending at a stop id if one is drawn) and their
    sampler log-probs."""
    sampling = sampling or SamplingParams(greedy=True)
    if not prompt_ids:
        raise InvalidArgument("the prompt is empty")
    if max_new_tokens < 1:
        raise InvalidArgument(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    bad = [i for i in prompt_ids if not 0 <= i < cfg.vocab_size]
    if bad:
        raise InvalidArgument(
            f"prompt ids {bad[:5]} are outside the vocabulary [0, {cfg.vocab_size})"
        )
    total = len(prompt_ids) + max_new_tokens
    cache = init_cache(cfg, 1, -(-total // 64) * 64)  # bucketed: fewer recompiles
    row_logits, cache = _prefill(params, cfg, jnp.asarray([prompt_ids], jnp.int32), cache)
    base = jax.random.PRNGKey(sampling.seed)
    out: list[int] = []
    logps: list[float] = []
    position = len(prompt_ids)
    stops = set(stop_ids)
    while True:
        token, logp = sample_logits(row_logits[0], jax.random.fold_in(base, position), sampling)
        out.append(int(token))
        logps.append(float(logp))
        if out[-1] in stops or len(out) == max_new_tokens:
            return out, logps
        row_logits, cache = _decode(
            params, cfg, jnp.asarray(token, jnp.int32), jnp.asarray(position, jnp.int32), cache
        )
        position += 1
