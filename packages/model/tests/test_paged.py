"""The paged KV cache gives the numbers of the full forward: prefill then one-token decode steps
(one per call, or several per call), with blocks scattered over the pool in any order, padding
rows and idle rows (f32, 1e-5)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlx_model import forward, load_checkpoint, logits
from rlx_model.paged import init_paged_cache, paged_decode_steps, split_layers
from rlx_model.paged import paged_decode as _paged_decode
from rlx_model.paged import paged_prefill as _paged_prefill

DATA = Path(__file__).parent / "testdata"
BS = 4  # block size: small, so sequences span many blocks
NB, W = 40, 8  # pool blocks, table width: one shape for every test (one compile per family)
paged_prefill = jax.jit(_paged_prefill, static_argnums=1)
paged_decode = jax.jit(_paged_decode, static_argnums=1, static_argnames="span_blocks")


@pytest.fixture(scope="module", params=["qwen2", "qwen3", "llama"])
def model(request: pytest.FixtureRequest):
    return load_checkpoint(DATA / request.param)


def _tables(rng: np.random.Generator, rows: int, width: int, num_blocks: int) -> np.ndarray:
    """Each row gets `width` distinct blocks from 1..num_blocks-1, shuffled (never the sink)."""
    ids = rng.permutation(np.arange(1, num_blocks))[: rows * width]
    return ids.reshape(rows, width).astype(np.int32)


def test_prefill_and_decode_logits_equal_full_forward(model) -> None:
    cfg, params = model
    rng = np.random.default_rng(0)
    rows, total = 3, 22
    tokens = rng.integers(0, cfg.vocab_size, (rows, total)).astype(np.int32)
    lengths = np.array([5, 9, 1], np.int32)  # prompts of different lengths
    full = np.asarray(jax.jit(lambda p, t: logits(p, cfg, forward(p, cfg, t)[0]))(params, tokens))

    tables = _tables(rng, rows, W, NB)
    cache = init_paged_cache(cfg, NB, BS)
    prompt = np.where(np.arange(12)[None] < lengths[:, None], tokens[:, :12], 0)
    hidden, cache = paged_prefill(params, cfg, prompt, lengths, tables, cache)
    got = np.asarray(logits(params, cfg, hidden))
    want = full[np.arange(rows), lengths - 1]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)

    positions = lengths.copy()
    while positions.max() < total:
        step_pos = np.minimum(positions, total - 1)
        tok = tokens[np.arange(rows), step_pos]
        hidden, cache = paged_decode(params, cfg, tok, step_pos, tables, cache, span_blocks=6)
        got = np.asarray(logits(params, cfg, hidden))
        live = positions < total
        np.testing.assert_allclose(got[live], full[np.arange(rows), step_pos][live], atol=1e-5)
        positions += 1


def test_packed_prefill_matches_the_grid_and_a_prompt_bits_do_not_depend_on_its_place(
    model,
) -> None:
    """Prompts packed back to back (`packed`: the per-token work skips the padding) give the
    grid's hidden states and cache (1e-5; the grid's RoPE angles are compile-time constants), and
    a prompt's bits are the same wherever it sits in the run and however long the run is, with
    zero-length rows around it; nothing is written outside the prompts' blocks."""
    cfg, params = model
    rng = np.random.default_rng(3)
    rows, t = 4, 12
    target = rng.integers(0, cfg.vocab_size, t).astype(np.int32)
    packed = jax.jit(_paged_prefill, static_argnums=1, static_argnames="packed")
    seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for before, n in ((0, 64), (5, 64), (11, 128), (3, 192), (0, 192)):
        tokens = np.zeros((rows, t), np.int32)
        lengths = np.array([before, 0, t, 3], np.int32)  # the target is row 2
        tokens[0, :before] = rng.integers(0, cfg.vocab_size, before)
        tokens[2] = target
        tokens[3, :3] = rng.integers(0, cfg.vocab_size, 3)
        tables = np.zeros((rows, W), np.int32)
        tables[:, :3] = _tables(rng, rows, 3, NB)  # t / BS blocks a row
        used = sorted({int(b) for r in range(rows) for b in tables[r, : -(-lengths[r] // BS)]})
        grid_x, grid = paged_prefill(
            params, cfg, tokens, lengths, tables, init_paged_cache(cfg, NB, BS)
        )
        x, cache = packed(
            params, cfg, tokens, lengths, tables, init_paged_cache(cfg, NB, BS), packed=n
        )
        real = lengths > 0
        np.testing.assert_allclose(np.asarray(x)[real], np.asarray(grid_x)[real], atol=1e-5)
        for pool, want in ((cache.k, grid.k), (cache.v, grid.v)):
            got = np.asarray(pool)
            np.testing.assert_allclose(got[:, :, used], np.asarray(want)[:, :, used], atol=1e-5)
            assert not got[:, :, [b for b in range(1, NB) if b not in used]].any()
        own = tables[2, :3]
        seen.append(
            (np.asarray(x)[2], np.asarray(cache.k)[:, :, own], np.asarray(cache.v)[:, :, own])
        )
    for x, k, v in seen[1:]:
        np.testing.assert_array_equal(x, seen[0][0])
        np.testing.assert_array_equal(k, seen[0][1])
        np.testing.assert_array_equal(v, seen[0][2])


def test_idle_rows_and_padding_write_only_the_sink(model) -> None:
    """A row with length 0 (prefill) or an all-sink table (decode) leaves every real block
    untouched, and a live row's numbers do not depend on what the idle row holds."""
    cfg, params = model
    rng = np.random.default_rng(1)
    cache = init_paged_cache(cfg, NB, BS)
    tables = np.zeros((3, W), np.int32)
    tables[0, :2] = [3, 7]
    tokens = rng.integers(0, cfg.vocab_size, (3, 12)).astype(np.int32)
    lengths = np.array([6, 0, 0], np.int32)
    _, cache = paged_prefill(params, cfg, tokens, lengths, tables, cache)
    k = np.asarray(cache.k)  # [L, K, N, bs, d]
    untouched = [b for b in range(1, NB) if b not in (3, 7)]
    assert not k[:, :, untouched].any()
    assert k[:, :, 3].any() and k[:, :, 7, :2].any() and not k[:, :, 7, 2:].any()

    other = np.array([5, int(rng.integers(0, cfg.vocab_size)), 1], np.int32)
    pos = np.array([6, 0, 0], np.int32)
    h1, c1 = paged_decode(params, cfg, other, pos, tables, cache, span_blocks=6)
    other[1] = (other[1] + 1) % cfg.vocab_size
    h2, _ = paged_decode(params, cfg, other, pos, tables, cache, span_blocks=6)
    np.testing.assert_array_equal(np.asarray(h1[0]), np.asarray(h2[0]))
    assert not np.asarray(c1.k)[:, :, untouched].any()
    assert np.asarray(c1.k)[:, :, 7, 2].any()  # position 6 -> block 7, offset 2


def test_decode_ignores_garbage_beyond_the_position(model) -> None:
    """Stale keys in a reused block (from a finished sequence) are never attended to."""
    cfg, params = model
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, cfg.vocab_size, (3, 12)).astype(np.int32)
    tables = _tables(rng, 3, W, NB)
    lengths = np.array([6, 3, 11], np.int32)
    clean = init_paged_cache(cfg, NB, BS)
    dirty = clean._replace(k=clean.k + 3.0, v=clean.v - 2.0)
    outs = []
    for start in (clean, dirty):
        _, cache = paged_prefill(params, cfg, tokens, lengths, tables, start)
        h, _ = paged_decode(params, cfg, tokens[:, 0], lengths, tables, cache, span_blocks=6)
        outs.append(np.asarray(h))
    np.testing.assert_array_equal(outs[0], outs[1])


def _forced_steps(cfg, params, tokens, steps: int, span_blocks: int):
    """paged_decode_steps fed the given tokens (teacher forcing): per-step logits and the cache."""

    @jax.jit
    def run(params, first, positions, tables, cache, later):
        def choose(hidden, pos):
            # the next token is the sequence's own token at pos + 1 (clipped), not a sample
            nxt = later[jnp.arange(later.shape[0]), jnp.minimum(pos + 1, later.shape[1] - 1)]
            return nxt, logits(params, cfg, hidden)

        return paged_decode_steps(
            params,
            cfg,
            first,
            positions,
            tables,
            cache,
            choose,
            span_blocks=span_blocks,
            steps=steps,
        )

    return run


def test_several_steps_per_call_equal_full_forward_and_the_cache_holds_them(model) -> None:
    """Two calls of 5 steps after a prefill: every step's logits are the full forward's, the
    keys the steps wrote serve the next call, and stale keys in the blocks are never read."""
    cfg, params = model
    rng = np.random.default_rng(3)
    rows, total = 3, 22
    tokens = rng.integers(0, cfg.vocab_size, (rows, total)).astype(np.int32)
    lengths = np.array([5, 9, 1], np.int32)
    full = np.asarray(jax.jit(lambda p, t: logits(p, cfg, forward(p, cfg, t)[0]))(params, tokens))
    tables = _tables(rng, rows, W, NB)
    prompt = np.where(np.arange(12)[None] < lengths[:, None], tokens[:, :12], 0)
    run = _forced_steps(cfg, params, tokens, steps=5, span_blocks=6)
    outs = []
    clean = init_paged_cache(cfg, NB, BS)
    for start in (clean, clean._replace(k=clean.k + 3.0, v=clean.v - 2.0)):  # then stale keys
        _, cache = paged_prefill(params, cfg, prompt, lengths, tables, start)
        got = []
        for call in range(2):
            pos = lengths + 5 * call
            first = tokens[np.arange(rows), pos]
            step_logits, cache = run(params, first, pos, tables, cache, tokens)
            got.append(np.asarray(step_logits))  # [steps, rows, V]
            for j in range(5):
                want = full[np.arange(rows), pos + j]
                np.testing.assert_allclose(got[-1][j], want, atol=1e-5, rtol=0)
        outs.append(np.concatenate(got))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_split_layers_give_the_same_bits(model) -> None:
    """The engine's form of the weights (one buffer per layer, `split_layers`) computes exactly
    what the stacked form does, in prefill and in several decode steps per call."""
    cfg, params = model
    split = split_layers(params)
    assert isinstance(split["layers"], tuple) and len(split["layers"]) == cfg.num_layers
    assert split_layers(split) is split
    rng = np.random.default_rng(4)
    rows, total = 3, 16
    tokens = rng.integers(0, cfg.vocab_size, (rows, total)).astype(np.int32)
    lengths = np.array([5, 9, 1], np.int32)
    tables = _tables(rng, rows, W, NB)
    prompt = np.where(np.arange(12)[None] < lengths[:, None], tokens[:, :12], 0)
    run = _forced_steps(cfg, params, tokens, steps=4, span_blocks=6)
    outs = []
    for p in (params, split):
        hidden, cache = paged_prefill(
            p, cfg, prompt, lengths, tables, init_paged_cache(cfg, NB, BS)
        )
        steps, cache = run(p, tokens[np.arange(rows), lengths], lengths, tables, cache, tokens)
        outs.append(
            (np.asarray(hidden), np.asarray(steps), np.asarray(cache.k), np.asarray(cache.v))
        )
    for a, b in zip(*outs, strict=True):
        np.testing.assert_array_equal(a, b)
