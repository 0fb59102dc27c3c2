"""Choosing the next token of every sequence, inside the compiled step, with per-sample randomness.

Every token is drawn with its own key: the sample's 64-bit seed as a threefry key, with the
token's position folded in (`fold_in(key(seed), position)`), so a sample's randomness depends on
nothing but its seed and position: not on its batch mates, its slot, or when it ran. The key
draws one uniform number and the token is read off the inverse CDF (one random number per token
instead of Gumbel noise over the vocabulary: 4x cheaper at V = 32000 on this CPU).

Three modes, chosen per work unit (a traced index: one compiled program serves all three):

- `greedy`: argmax. Both returned log-probs are the plain model's (a point mass has no useful
  log-prob, and this keeps greedy rollouts scoreable).
- `sample`: softmax(logits / temperature).
- `truncate`: as `sample`, then keep the top_k most likely tokens (0: all) and, of those, the
  smallest set whose probability reaches top_p; tokens tied with the last one kept stay too.
  Thresholds are found by bisection, not by sorting the vocabulary (a sort of 32 x 32000 took
  230 ms here, the bisection a few ms).

The logits come vocabulary-major, [V, B]: one column per sequence. The engine computes them as
W [V, D] @ h^T, which XLA's CPU matmul runs faster than h [B, D] @ W^T [D, V] when B is small
(the large dimension then is the one the kernel tiles best: 7.2 vs 8.7 ms at 32 x 512 x 32000
here), and every reduction below runs down the columns, vectorised along the batch.

Returned per column: the token, its log-prob under the distribution actually sampled from (the
tempered, truncated one: what truncated importance sampling needs) and under the plain model
(temperature 1, no truncation).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from rlx_core.clients.inference import Sampling

__all__ = ["MODES", "knobs_of", "sample_columns", "seed_keys"]

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


def _largest_threshold(probs: jax.Array, enough: Callable[[jax.Array], jax.Array]) -> jax.Array:
    """Per column of probs [V, B] (>= 0), the largest float t with enough(t) true, where enough
    is monotone (true at 0, false at +inf). Bisection on the float's bit pattern (ordered like
    the values for t >= 0): exact in 32 rounds of O(V), where a sort of V costs ~30x more here."""
    b = probs.shape[1]
    lo = jnp.zeros(b, jnp.int32)  # bits of 0.0
    hi = jnp.full(b, 0x7F800000, jnp.int32)  # bits of +inf

    def body(_: int, bounds: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        lo, hi = bounds
        mid = lo + (hi - lo) // 2
        ok = enough(jax.lax.bitcast_convert_type(mid, jnp.float32))
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

    lo, _ = jax.lax.fori_loop(0, 32, body, (lo, hi))
    return jax.lax.bitcast_convert_type(lo, jnp.float32)


def _truncate(lf: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """Mask (as -inf) the tokens outside the top_k (0: none), then outside the top-p nucleus of
    what remains, of tempered logits lf [V, B]. Ties with the last kept token are kept."""
    probs = jax.nn.softmax(lf, axis=0)
    none = jnp.zeros(probs.shape[1], jnp.float32)  # a threshold that keeps every token
    # each search runs only when its knob truncates (a unit's knobs are scalars): top_p alone
    # or top_k alone costs one bisection, not two
    kth = jax.lax.cond(
        top_k > 0,
        lambda: _largest_threshold(probs, lambda t: jnp.sum(probs >= t, axis=0) >= top_k),
        lambda: none,
    )
    kept = jnp.where(probs >= kth, probs, 0.0)
    kept = kept / kept.sum(axis=0)
    # the smallest set of most likely tokens holding >= top_p of the mass (top_p >= 1: all)
    nucleus = jax.lax.cond(
        top_p < 1.0,
        lambda: _largest_threshold(
            kept, lambda t: jnp.sum(jnp.where(kept >= t, kept, 0.0), axis=0) >= top_p
        ),
        lambda: none,
    )
    keep = (kept >= nucleus) & (kept > 0)
    return jnp.where(keep, lf, -jnp.inf)


CDF_CHUNK = 128  # vocabulary entries per chunk of the two-level inverse CDF and argmax


def _chunked(columns: jax.Array, fill: float) -> jax.Array:
    """[V, B] as [ceil(V / CDF_CHUNK), CDF_CHUNK, B], the last chunk padded with `fill` (no copy
    when V is a multiple of the chunk, as the common vocabularies are)."""
    v, b = columns.shape
    pad = -v % CDF_CHUNK
    if pad:
        columns = jnp.pad(columns, ((0, pad), (0, 0)), constant_values=fill)
    return columns.reshape(-1, CDF_CHUNK, b)


def _inverse_cdf(probs: jax.Array, fraction: jax.Array) -> jax.Array:
    """Per column of probs [V, B] (>= 0, positive total), the first token whose running sum
    reaches fraction [B] (in (0, 1]) of the column's total (`_find` on `_running`)."""
    chunks = _chunked(probs, 0.0)
    return _find(chunks, _running(chunks), fraction)


def _running(chunks: jax.Array) -> jax.Array:
    """The running sum of the chunk sums of chunks [n, CDF_CHUNK, B]: [n, B]; its last row is
    each column's total, the one every log-prob here is normalised by."""
    return jnp.cumsum(chunks.sum(axis=1), axis=0)


def _find(chunks: jax.Array, running: jax.Array, fraction: jax.Array) -> jax.Array:
    """Inverse CDF in two levels, no cumulative sum over the vocabulary (XLA's CPU cumsum of
    32 x 32000 took 8 ms, most of a sampled decode step): the chunk holding the target is found
    from the running sum of CDF_CHUNK-token chunk sums, then the token inside that one chunk.
    Never a token of probability 0: the target is at most the last running sum, so the chosen
    chunk's running sum rises past it and its sum is positive; inside it, the token whose
    running sum first reaches the target is one that raised it, and should rounding leave the
    target just above the chunk's own running sum, the chunk's last positive token is taken."""
    target = fraction * running[-1]
    chunk = jnp.sum(running < target, axis=0)  # <= n - 1: target <= running[-1]
    before = jnp.where(chunk > 0, jnp.take_along_axis(running, chunk[None] - 1, 0)[0], 0.0)
    inside = jnp.take_along_axis(chunks, chunk[None, None], axis=0)[0]  # [CDF_CHUNK, B]
    offset = jnp.sum(before + jnp.cumsum(inside, axis=0) < target, axis=0)
    last = CDF_CHUNK - 1 - jnp.argmax(jnp.flip(inside > 0, axis=0), axis=0)
    return chunk * CDF_CHUNK + jnp.minimum(offset, last)


def _draw(lf: jax.Array, keys: jax.Array, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Inverse-CDF sampling from softmax(lf) [V, B]: one uniform u per column, drawn with
    fold_in(key, position); the token whose CDF interval holds (1 - u) * total. Returns the
    tokens and their log-probs under softmax(lf). The CDF is read off exp(lf - max), never
    normalised: the target scales by the total, and the log-prob subtracts its log."""
    top = lf.max(axis=0)
    chunks = _chunked(jnp.exp(lf - top), 0.0)
    running = _running(chunks)
    u = jax.vmap(lambda k, p: jax.random.uniform(jax.random.fold_in(k, p), ()))(keys, positions)
    tokens = _find(chunks, running, 1.0 - u).astype(jnp.int32)  # 1 - u in (0, 1]
    return tokens, _logprob(lf, top, running[-1], tokens)


def _logprob(lf: jax.Array, top: jax.Array, total: jax.Array, tokens: jax.Array) -> jax.Array:
    """log softmax(lf)[tokens[b], b] per column b, without the [V, B] log-softmax: the token's
    logit minus the column's max, minus the log of total (the column's sum of exp(lf - max))."""
    picked = jnp.take_along_axis(lf, tokens[None], axis=0)[0]
    return (picked - top) - jnp.log(total)


def sample_columns(
    logits: jax.Array,
    keys: jax.Array,
    positions: jax.Array,
    mode: jax.Array,
    temperature: jax.Array,
    top_k: jax.Array,
    top_p: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(tokens [B], sampler log-probs [B], model log-probs [B]) for logits [V, B] (one column
    per sequence; float32).

    keys uint32 [B, 2]; positions [B] is the position each new token will occupy; mode is the
    index of the mode in MODES (traced: one compiled program serves every mode, and only the
    chosen branch runs). Every pass over [V, B] counts (a decode step's head is ~7 ms here, a
    pass ~0.3): the plain model's log-prob is computed once, and not at all when sampling at
    temperature 1 (the sampled distribution is then the model's, with the same bits).
    """
    lf = logits.astype(jnp.float32)
    chunks = _chunked(lf, -jnp.inf)
    chunk_max = chunks.max(axis=1)  # [n, B]
    top = chunk_max.max(axis=0)

    def model(tokens: jax.Array) -> jax.Array:
        return _logprob(lf, top, _running(_chunked(jnp.exp(lf - top), 0.0))[-1], tokens)

    def greedy() -> tuple[jax.Array, jax.Array, jax.Array]:
        # the first index of the maximum (argmax's rule): the first chunk holding it, then the
        # first index inside that one chunk; XLA's CPU argmax, a variadic reduce, is not
        # vectorised (2.3 ms a step at 32 x 32000; this ~0.2 ms)
        chunk = _first(chunk_max == top)
        inside = jnp.take_along_axis(chunks, chunk[None, None], axis=0)[0]  # [CDF_CHUNK, B]
        tokens = chunk * CDF_CHUNK + _first(inside == top)
        logprob = model(tokens)
        return tokens, logprob, logprob

    def sample() -> tuple[jax.Array, jax.Array, jax.Array]:
        tokens, sampler = _draw(lf / temperature, keys, positions)
        plain = jax.lax.cond(temperature == 1.0, lambda: sampler, lambda: model(tokens))
        return tokens, sampler, plain

    def truncated() -> tuple[jax.Array, jax.Array, jax.Array]:
        tokens, sampler = _draw(_truncate(lf / temperature, top_k, top_p), keys, positions)
        return tokens, sampler, model(tokens)

    return jax.lax.switch(mode, [greedy, sample, truncated])


def _first(mask: jax.Array) -> jax.Array:
    """Per column of mask [N, B], the first row that is true (N if none), as a plain min
    reduction."""
    iota = jax.lax.broadcasted_iota(jnp.int32, mask.shape, 0)
    return jnp.min(jnp.where(mask, iota, mask.shape[0]), axis=0)
