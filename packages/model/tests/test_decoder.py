"""The decoder's own invariants: cache == no cache, chunked log-probs == full, padding changes
nothing, remat changes nothing, and the configs check themselves."""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlx_core.errors import ConfigError, InvalidArgument
from rlx_model import SamplingParams, generate, init_cache, init_params, logits, tiny_config
from rlx_model import forward as _forward
from rlx_model import token_logprobs as _token_logprobs
from rlx_model.config import ModelConfig, RopeScaling
from rlx_model.layers import rope_frequencies

CFG = tiny_config(vocab_size=97, hidden_size=32, num_layers=2)
PARAMS = init_params(CFG, seed=3)
RNG = np.random.default_rng(0)
# jitted once per shape: eager dispatch of every op would dominate the test time
forward = jax.jit(_forward, static_argnums=1)
token_logprobs = jax.jit(_token_logprobs, static_argnums=1, static_argnames="chunk_size")
TOKENS = jnp.asarray(RNG.integers(0, 97, (3, 20)), jnp.int32)


def full_logprobs(params, cfg, tokens, targets):
    h, _ = forward(params, cfg, tokens)
    logp = jax.nn.log_softmax(logits(params, cfg, h), axis=-1)
    return jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


@pytest.mark.parametrize("chunk", [1, 7, 20, 128])
def test_chunked_logprobs_equal_full_softmax(chunk: int) -> None:
    targets = jnp.roll(TOKENS, -1, axis=1)
    lp, ent = token_logprobs(PARAMS, CFG, TOKENS, targets, chunk_size=chunk)
    np.testing.assert_allclose(lp, full_logprobs(PARAMS, CFG, TOKENS, targets), atol=1e-5)
    assert lp.shape == ent.shape == TOKENS.shape
    assert bool(jnp.all(ent > 0)) and bool(jnp.all(ent <= np.log(97) + 1e-4))


def test_kv_cache_decode_equals_full_forward() -> None:
    full, _ = forward(PARAMS, CFG, TOKENS)
    cache = init_cache(CFG, 3, 32)
    h, cache = forward(PARAMS, CFG, TOKENS[:, :11], cache=cache)
    parts = [h]
    for t in range(11, 20):
        pos = jnp.full((3, 1), t, jnp.int32)
        h, cache = forward(PARAMS, CFG, TOKENS[:, t : t + 1], pos, cache=cache)
        parts.append(h)
    np.testing.assert_allclose(jnp.concatenate(parts, axis=1), full, atol=1e-5)


def test_right_padding_changes_nothing_for_real_tokens() -> None:
    short = TOKENS[:, :12]
    padded = jnp.concatenate([short, jnp.zeros((3, 8), jnp.int32)], axis=1)
    valid = jnp.arange(20)[None, :] < 12
    a, _ = forward(PARAMS, CFG, short)
    b, _ = forward(PARAMS, CFG, padded, valid=jnp.broadcast_to(valid, (3, 20)))
    np.testing.assert_allclose(a, b[:, :12], atol=1e-6)


def test_left_padding_with_valid_mask_and_shifted_positions() -> None:
    short = TOKENS[:1, :10]
    padded = jnp.concatenate([jnp.zeros((1, 5), jnp.int32), short], axis=1)
    positions = jnp.concatenate([jnp.zeros((1, 5), jnp.int32), jnp.arange(10)[None]], axis=1)
    valid = jnp.arange(15)[None, :] >= 5
    a, _ = forward(PARAMS, CFG, short)
    b, _ = forward(PARAMS, CFG, padded, positions, valid=valid)
    np.testing.assert_allclose(a, b[:, 5:], atol=1e-5)


def test_a_row_does_not_depend_on_its_batch_mates() -> None:
    a, _ = forward(PARAMS, CFG, TOKENS[:1])
    b, _ = forward(PARAMS, CFG, TOKENS)
    np.testing.assert_allclose(a[0], b[0], atol=1e-6)


@pytest.mark.parametrize("policy", ["nothing_saveable", "dots_saveable"])
def test_remat_policy_changes_neither_values_nor_gradients(policy: str) -> None:
    targets = jnp.roll(TOKENS, -1, axis=1)
    cfg_remat = replace(CFG, remat=policy)

    def loss(params, cfg):
        return -token_logprobs(params, cfg, TOKENS, targets)[0].mean()

    v0, g0 = jax.jit(jax.value_and_grad(loss), static_argnums=1)(PARAMS, CFG)
    v1, g1 = jax.jit(jax.value_and_grad(loss), static_argnums=1)(PARAMS, cfg_remat)
    np.testing.assert_allclose(v0, v1, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_bfloat16_params_and_compute_run_close_to_f32() -> None:
    cfg16 = replace(CFG, param_dtype="bfloat16", compute_dtype="bfloat16")
    p16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), PARAMS)
    targets = jnp.roll(TOKENS, -1, axis=1)
    lp16, _ = token_logprobs(p16, cfg16, TOKENS, targets)
    lp32, _ = token_logprobs(PARAMS, CFG, TOKENS, targets)
    assert lp16.dtype == jnp.float32
    np.testing.assert_allclose(lp16, lp32, atol=0.05)


def test_llama3_rope_scaling_matches_the_published_rule() -> None:
    cfg = replace(
        CFG,
        head_dim=64,
        rope_theta=500000.0,
        rope_scaling=RopeScaling(
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        ),
    )
    base = 1.0 / (500000.0 ** (np.arange(0, 64, 2) / 64))
    got = rope_frequencies(cfg)
    wavelen = 2 * np.pi / base
    high = wavelen < 8192 / 4  # kept
    low = wavelen > 8192 / 1  # divided by the factor
    np.testing.assert_allclose(got[high], base[high], rtol=1e-6)
    np.testing.assert_allclose(got[low], base[low] / 8, rtol=1e-6)
    mid = ~high & ~low
    assert mid.any() and np.all(got[mid] < base[mid]) and np.all(got[mid] > base[mid] / 8)


def test_greedy_generate_equals_argmax_of_full_forward() -> None:
    prompt = [5, 9, 2, 7]
    out, logps = generate(PARAMS, CFG, prompt, 10)
    # teacher forcing: each generated token is the argmax after everything before it
    h, _ = forward(PARAMS, CFG, jnp.asarray([prompt + out]))
    argmax = np.asarray(jnp.argmax(logits(PARAMS, CFG, h[0]), axis=-1))
    assert out == argmax[len(prompt) - 1 : -1].tolist()
    assert all(lp <= 0 for lp in logps)


def test_sampling_is_a_function_of_the_seed() -> None:
    a = generate(PARAMS, CFG, [1, 2], 12, SamplingParams(temperature=1.5, seed=7))
    b = generate(PARAMS, CFG, [1, 2], 12, SamplingParams(temperature=1.5, seed=7))
    c = generate(PARAMS, CFG, [1, 2], 12, SamplingParams(temperature=1.5, seed=8))
    assert a == b and a[0] != c[0]


def test_top_k_one_is_greedy() -> None:
    greedy, _ = generate(PARAMS, CFG, [3, 1, 4], 8)
    topk, _ = generate(PARAMS, CFG, [3, 1, 4], 8, SamplingParams(top_k=1, seed=123))
    assert greedy == topk


def test_stop_ids_end_generation() -> None:
    first, _ = generate(PARAMS, CFG, [3, 1, 4], 1)
    out, _ = generate(PARAMS, CFG, [3, 1, 4], 10, stop_ids=first)
    assert out == first


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"num_kv_heads": 3}, "num_kv_heads"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"rms_norm_eps": 0.0}, "rms_norm_eps"),
    ],
)
def test_config_checks_name_the_field(changes: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        replace(CFG, **changes)
    assert info.value.field == field


def test_bad_generate_inputs_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="outside the vocabulary"):
        generate(PARAMS, CFG, [1, 500], 3)
    with pytest.raises(InvalidArgument, match="temperature"):
        SamplingParams(temperature=0.0)
    assert isinstance(CFG, ModelConfig)
