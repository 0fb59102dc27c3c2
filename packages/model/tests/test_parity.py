"""Numerical parity with HF transformers, through goldens made by tools/make_goldens.

Tolerances (STYLE.md): whole models in float32 within 1e-4; greedy tokens identical.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlx_model import forward, generate, load_checkpoint, load_tokenizer, logits, token_logprobs

DATA = Path(__file__).parent / "testdata"
FAMILIES = ["qwen2", "qwen3", "llama"]


@pytest.fixture(scope="module", params=FAMILIES)
def model(request: pytest.FixtureRequest):
    cfg, params = load_checkpoint(DATA / request.param)
    goldens = dict(np.load(DATA / request.param / "goldens.npz"))
    return request.param, cfg, params, goldens


def test_family_switches_come_from_config_json(model) -> None:
    family, cfg, _, _ = model
    assert cfg.family == family
    assert cfg.qkv_bias == (family == "qwen2")
    assert cfg.qk_norm == (family == "qwen3")
    assert cfg.tie_word_embeddings == (family == "qwen3")
    assert (cfg.rope_scaling is not None) == (family == "llama")
    if family == "qwen3":
        assert cfg.head_dim == 32 != cfg.hidden_size // cfg.num_heads


def test_logits_match_hf_within_1e4(model) -> None:
    _, cfg, params, g = model
    fn = jax.jit(lambda p, t: logits(p, cfg, forward(p, cfg, t)[0]))
    got = np.asarray(fn(params, jnp.asarray(g["input_ids"])))
    np.testing.assert_allclose(got, g["logits"], atol=1e-4, rtol=0)


def test_logprobs_match_hf_within_1e4(model) -> None:
    _, cfg, params, g = model
    ids = jnp.asarray(g["input_ids"])
    lp, _ = jax.jit(token_logprobs, static_argnums=1)(params, cfg, ids, jnp.roll(ids, -1, 1))
    np.testing.assert_allclose(np.asarray(lp)[:, :-1], g["logprobs"], atol=1e-4, rtol=0)


def test_long_sequence_positions_match_hf(model) -> None:
    """100 positions: RoPE (and Llama 3 scaling) far from the start."""
    _, cfg, params, g = model
    ids = jnp.asarray(g["long_input_ids"])
    hidden, _ = jax.jit(forward, static_argnums=1)(params, cfg, ids)
    full = np.asarray(logits(params, cfg, hidden))
    np.testing.assert_allclose(full[:, -16:], g["long_logits_tail"], atol=1e-4, rtol=0)
    np.testing.assert_array_equal(full.argmax(-1), g["long_argmax"])
    lp, _ = jax.jit(token_logprobs, static_argnums=1)(params, cfg, ids, jnp.roll(ids, -1, 1))
    np.testing.assert_allclose(np.asarray(lp)[:, :-1], g["long_logprobs"], atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("prompt", "expected"), [("prompt_ids", "greedy_ids"), ("prompt2_ids", "greedy_prompt2_ids")]
)
def test_greedy_generate_matches_hf_tokens(model, prompt: str, expected: str) -> None:
    _, cfg, params, g = model
    out, _ = generate(params, cfg, g[prompt][0].tolist(), 24)
    assert out == g[expected][0].tolist()


def test_sharded_index_checkpoint_loads_the_same_weights() -> None:
    _, single = load_checkpoint(DATA / "qwen2")
    _, sharded = load_checkpoint(DATA / "qwen2_sharded")
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(sharded), strict=True):
        np.testing.assert_array_equal(a, b)


def test_bfloat16_load_casts_params_and_stays_close() -> None:
    cfg, params = load_checkpoint(DATA / "qwen2", param_dtype="bfloat16", compute_dtype="bfloat16")
    assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.bfloat16)}
    g = np.load(DATA / "qwen2" / "goldens.npz")
    got = jax.jit(lambda p, t: logits(p, cfg, forward(p, cfg, t)[0]))(params, g["input_ids"])
    # bf16 keeps ~3 significant digits; the goldens are f32, so only closeness is checked
    assert float(np.abs(np.asarray(got) - g["logits"]).max()) < 0.5


def test_tokenizer_and_chat_template_match_hf() -> None:
    expected = json.loads((DATA / "qwen2" / "tokenizer_goldens.json").read_text())
    tok = load_tokenizer(DATA / "qwen2")
    assert tok is not None
    assert tok.vocab_size == expected["vocab_size_with_added"]
    assert tok.stop_ids == (expected["eos_token_id"],)
    assert tok.encode(expected["text"], add_special_tokens=False) == expected["text_ids"]
    assert tok.decode(expected["text_ids"]) == expected["text"]
    chat = tok.render(expected["messages"], add_generation_prompt=True)
    assert chat == expected["chat_text"]
    assert tok.encode(chat, add_special_tokens=False) == expected["chat_ids"]
    assert tok.prompt_ids(expected["messages"]) == expected["chat_ids"]
