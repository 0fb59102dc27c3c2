"""The sampler draws from the distribution it says it draws from, and truncates as documented."""

from __future__ import annotations

import jax
import numpy as np

from rlx_inference.sampling import CDF_CHUNK, _inverse_cdf, sample_columns, seed_keys

PROBS = np.array([0.4, 0.2, 0.15, 0.1, 0.06, 0.05, 0.03, 0.01])
N = 4000
LOGITS = np.tile(np.log(PROBS).astype(np.float32)[:, None], (1, N))  # [V, N]: one column a row
KEYS = seed_keys(np.arange(N, dtype=np.int64) * 7919)
POSITIONS = np.arange(N, dtype=np.int32) % 50
sample = jax.jit(sample_columns)


def draw(mode: int, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0):
    knobs = (np.int32(mode), np.float32(temperature), np.int32(top_k), np.float32(top_p))
    tokens, sampler, model = sample(LOGITS, KEYS, POSITIONS, *knobs)
    return np.asarray(tokens), np.asarray(sampler), np.asarray(model)


def test_inverse_cdf_draws_follow_the_tempered_distribution() -> None:
    for temperature in (1.0, 0.5):
        tokens, sampler, model = draw(1, temperature)
        p = PROBS ** (1 / temperature)
        p /= p.sum()
        freq = np.bincount(tokens, minlength=8) / N
        np.testing.assert_allclose(freq, p, atol=0.03)  # ~4 sigma at N = 4000
        np.testing.assert_allclose(sampler, np.log(p[tokens]), atol=1e-5)
        np.testing.assert_allclose(model, np.log(PROBS[tokens]), atol=1e-5)


def test_top_k_and_top_p_keep_the_documented_sets() -> None:
    tokens, sampler, _ = draw(2, top_k=3)
    assert set(tokens) == {0, 1, 2}
    np.testing.assert_allclose(sampler, np.log(PROBS[tokens] / PROBS[:3].sum()), atol=1e-5)
    # mass before token 1 is 0.4 < 0.6, before token 2 it is 0.6: the nucleus is {0, 1}
    tokens, sampler, _ = draw(2, top_p=0.6)
    assert set(tokens) == {0, 1}
    np.testing.assert_allclose(sampler, np.log(PROBS[tokens] / 0.6), atol=1e-5)
    # top-k first, then the nucleus of what is left: 0.4 / 0.75 >= 0.5 keeps token 0 only
    tokens, sampler, _ = draw(2, top_k=3, top_p=0.5)
    assert set(tokens) == {0} and np.all(sampler == 0.0)


def test_a_draw_depends_only_on_seed_and_position() -> None:
    tokens, _, _ = draw(1)
    # rows with the same (seed, position) agree, whatever else is in the batch
    again = sample(
        LOGITS[:, :5][:, ::-1],
        KEYS[:5][::-1],
        POSITIONS[:5][::-1],
        np.int32(1),
        np.float32(1.0),
        np.int32(0),
        np.float32(1.0),
    )[0]
    assert list(np.asarray(again)[::-1]) == list(tokens[:5])


def test_two_level_inverse_cdf_finds_the_token_across_chunks() -> None:
    """A vocabulary of several chunks, not a multiple of the chunk, with whole zero chunks and
    zeros between positive tokens: the target in the middle of each token's interval finds that
    token, the ends find the first and last positive ones, and no draw lands on a zero."""
    v = 3 * CDF_CHUNK + 77
    rng = np.random.default_rng(5)
    probs = rng.random(v) * (rng.random(v) < 0.5)
    probs[CDF_CHUNK : 2 * CDF_CHUNK] = 0.0  # a whole chunk of zeros
    probs[:3] = 0.0
    probs[-5:] = 0.0
    probs = (probs / probs.sum()).astype(np.float32)
    positive = np.flatnonzero(probs)
    cdf = np.cumsum(probs.astype(np.float64))
    total = cdf[-1]
    middles = (cdf[positive] - probs[positive] / 2) / total
    fractions = np.concatenate([middles, [1e-9, 1.0]]).astype(np.float32)
    columns = np.tile(probs[:, None], (1, len(fractions)))
    found = np.asarray(jax.jit(_inverse_cdf)(columns, fractions))
    assert list(found) == [*positive, positive[0], positive[-1]]
    draws = np.asarray(
        jax.jit(_inverse_cdf)(np.tile(probs[:, None], (1, 4000)), 1.0 - rng.random(4000))
    )
    assert np.all(probs[draws] > 0)
    freq = np.bincount(draws, minlength=v) / 4000
    assert np.abs(freq - probs).max() < 0.02


def test_greedy_takes_the_first_maximum_across_chunks() -> None:
    """Greedy is argmax (its first index among ties), also when the ties sit in different
    chunks and the vocabulary is not a multiple of the chunk (the last one padded)."""
    v, b = 2 * CDF_CHUNK + 5, 6
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((v, b)).astype(np.float32)
    top = logits.max() + 1.0
    logits[[7, CDF_CHUNK + 3], 0] = top  # a tie across chunks
    logits[[2 * CDF_CHUNK + 4, 2 * CDF_CHUNK + 1], 1] = top  # in the padded last chunk
    logits[CDF_CHUNK - 1, 2] = top  # a chunk's last entry
    knobs = (np.int32(0), np.float32(1.0), np.int32(0), np.float32(1.0))
    tokens, sampler, model = sample(logits, KEYS[:b], POSITIONS[:b], *knobs)
    assert list(np.asarray(tokens)) == list(np.argmax(logits, axis=0))
    z = logits - logits.max(axis=0)
    expected = z[np.argmax(logits, axis=0), np.arange(b)] - np.log(np.exp(z).sum(axis=0))
    np.testing.assert_allclose(np.asarray(model), expected, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(sampler), np.asarray(model))
