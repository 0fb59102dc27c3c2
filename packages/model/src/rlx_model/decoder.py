"""The decoder forward passes, one code for the trainer and the inference engine.

Params are a plain pytree (nested dicts of arrays) with the decoder blocks stacked on a leading
layer axis, so the layers run under `jax.lax.scan` (one compiled block, fast compiles):

    embed [V, D]               final_norm [D]            lm_head [D, V] (absent when tied)
    layers/attn_norm [L, D]    layers/q [L, D, H*d]      layers/k, layers/v [L, D, K*d]
    layers/o [L, H*d, D]       layers/mlp_norm [L, D]    layers/gate, layers/up [L, D, F]
    layers/down [L, F, D]      Qwen2: layers/q_bias [L, H*d], k_bias, v_bias [L, K*d]
                               Qwen3: layers/q_norm, layers/k_norm [L, d]

Three entry points: `forward` (hidden states, optionally reading and writing a KV cache),
`logits`, and `token_logprobs` (per-token log-probs and entropy, chunked over time so the
[B, T, V] float32 logits never exist at once).
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rlx_model.config import ModelConfig
from rlx_model.layers import apply_rope, attention, dense, rms_norm, rope_frequencies

__all__ = [
    "DTYPES",
    "KVCache",
    "Params",
    "forward",
    "init_cache",
    "init_params",
    "logits",
    "param_shapes",
    "token_logprobs",
]

Params = dict[str, Any]

# a ModelConfig's param_dtype / compute_dtype name -> its JAX dtype
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


class KVCache(NamedTuple):
    """A dense per-slot KV cache: k, v [L, B, S, K, d]; slot s of row b holds position s.

    The paged cache of the inference engine keeps the same contract for `forward`: new keys are
    written at their positions, and attention reads every slot <= the query position.
    """

    k: jax.Array
    v: jax.Array


def param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """'/'-joined parameter path -> shape, for this config."""
    L, D, F, V = cfg.num_layers, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    shapes = {
        "embed": (V, D),
        "final_norm": (D,),
        "layers/attn_norm": (L, D),
        "layers/q": (L, D, cfg.q_size),
        "layers/k": (L, D, cfg.kv_size),
        "layers/v": (L, D, cfg.kv_size),
        "layers/o": (L, cfg.q_size, D),
        "layers/mlp_norm": (L, D),
        "layers/gate": (L, D, F),
        "layers/up": (L, D, F),
        "layers/down": (L, F, D),
    }
    if not cfg.tie_word_embeddings:
        shapes["lm_head"] = (D, V)
    if cfg.qkv_bias:
        shapes |= {
            "layers/q_bias": (L, cfg.q_size),
            "layers/k_bias": (L, cfg.kv_size),
            "layers/v_bias": (L, cfg.kv_size),
        }
    if cfg.qk_norm:
        shapes |= {"layers/q_norm": (L, cfg.head_dim), "layers/k_norm": (L, cfg.head_dim)}
    return shapes


def unflatten(flat: dict[str, Any]) -> Params:
    """{'layers/q': x} -> {'layers': {'q': x}}."""
    tree: Params = {}
    for path, value in flat.items():
        node = tree
        *parents, leaf = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree


def init_params(cfg: ModelConfig, seed: int = 0) -> Params:
    """Random weights (normal, std 0.02; norms 1; biases 0) for training from scratch."""
    rng = np.random.default_rng(seed)
    dtype = DTYPES[cfg.param_dtype]
    flat = {}
    for path, shape in param_shapes(cfg).items():
        leaf = path.rsplit("/", 1)[-1]
        if leaf.endswith("norm"):
            value = np.ones(shape, np.float32)
        elif leaf.endswith("bias"):
            value = np.zeros(shape, np.float32)
        else:
            value = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        flat[path] = jnp.asarray(value, dtype=dtype)
    return unflatten(flat)


def init_cache(cfg: ModelConfig, batch: int, max_len: int) -> KVCache:
    """An empty dense cache for `batch` rows of up to `max_len` positions."""
    shape = (cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim)
    dtype = DTYPES[cfg.compute_dtype]
    return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))


def _remat(fn: Any, policy: str) -> Any:
    if policy == "none":
        return fn
    policies = {
        "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
        "dots_saveable": jax.checkpoint_policies.dots_saveable,
    }
    return jax.checkpoint(fn, policy=policies[policy])


def qkv_projection(
    cfg: ModelConfig, inv_freq: np.ndarray, x: jax.Array, layer: Params, positions: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The first half of a block: h = norm(x), then q [B, T, H, d] and k, v [B, T, K, d] with
    biases, q/k norms and RoPE applied. Returns (h, q, k, v); shared by the dense and paged
    caches."""
    cdt = DTYPES[cfg.compute_dtype]
    b, t, _ = x.shape
    h = rms_norm(x, layer["attn_norm"], cfg.rms_norm_eps)
    q = dense(h, layer, "q", cdt)
    k = dense(h, layer, "k", cdt)
    v = dense(h, layer, "v", cdt)
    if cfg.qkv_bias:
        q = q + layer["q_bias"].astype(jnp.float32)
        k = k + layer["k_bias"].astype(jnp.float32)
        v = v + layer["v_bias"].astype(jnp.float32)
    q = q.reshape(b, t, cfg.num_heads, cfg.head_dim)
    k = k.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
    v = v.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
    if cfg.qk_norm:
        q = rms_norm(q, layer["q_norm"], cfg.rms_norm_eps)
        k = rms_norm(k, layer["k_norm"], cfg.rms_norm_eps)
    q = apply_rope(q, positions, inv_freq).astype(cdt)
    k = apply_rope(k, positions, inv_freq).astype(cdt)
    return h, q, k, v.astype(cdt)


def block_tail(cfg: ModelConfig, x: jax.Array, layer: Params, attn: jax.Array) -> jax.Array:
    """The second half of a block: x + o(attn), then + mlp(norm(.)); attn is [B, T, H, d]."""
    cdt = DTYPES[cfg.compute_dtype]
    b, t, _ = x.shape
    x = x + dense(attn.reshape(b, t, cfg.q_size), layer, "o", cdt)
    h = rms_norm(x, layer["mlp_norm"], cfg.rms_norm_eps)
    mlp = jax.nn.silu(dense(h, layer, "gate", cdt)) * dense(h, layer, "up", cdt)
    return x + dense(mlp, layer, "down", cdt)


def _block(
    cfg: ModelConfig,
    inv_freq: np.ndarray,
    x: jax.Array,
    layer: Params,
    positions: jax.Array,
    valid: jax.Array,
    cache_kv: tuple[jax.Array, jax.Array] | None,
) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
    """One decoder block: x + attn(norm(x)), then + mlp(norm(.)). Returns the new cache slots."""
    cdt = DTYPES[cfg.compute_dtype]
    b = x.shape[0]
    _, q, k, v = qkv_projection(cfg, inv_freq, x, layer, positions)
    if cache_kv is None:
        keys, values, k_pos, k_valid, new_cache = k, v, positions, valid, None
    else:
        ck, cv = cache_kv
        rows = jnp.arange(b)[:, None]
        ck = ck.at[rows, positions].set(k.astype(ck.dtype))
        cv = cv.at[rows, positions].set(v.astype(cv.dtype))
        slots = ck.shape[1]
        keys, values, new_cache = ck, cv, (ck, cv)
        k_pos = jnp.broadcast_to(jnp.arange(slots, dtype=positions.dtype), (b, slots))
        k_valid = jnp.ones((b, slots), dtype=bool)
    attn = attention(q, keys.astype(cdt), values.astype(cdt), positions, k_pos, k_valid)
    return block_tail(cfg, x, layer, attn), new_cache


def forward(
    params: Params,
    cfg: ModelConfig,
    tokens: jax.Array,
    positions: jax.Array | None = None,
    *,
    valid: jax.Array | None = None,
    cache: KVCache | None = None,
) -> tuple[jax.Array, KVCache | None]:
    """Final hidden states [B, T, D] (after the last norm) and the updated cache.

    tokens, positions: [B, T] int; positions default to 0..T-1. valid [B, T] marks real tokens
    (keys that are not valid are never attended to); padding may sit anywhere. With a cache, the
    new keys and values are written at `positions` and queries attend to every cache slot at a
    position <= their own: prefill writes a prompt, decode steps write one token each.
    """
    b, t = tokens.shape
    if positions is None:
        positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    if valid is None:
        valid = jnp.ones((b, t), dtype=bool)
    cdt = DTYPES[cfg.compute_dtype]
    x = params["embed"].astype(cdt)[tokens].astype(jnp.float32)
    inv_freq = rope_frequencies(cfg)
    block = _remat(partial(_block, cfg, inv_freq), cfg.remat)

    if cache is None:

        def step(x: jax.Array, layer: Params) -> tuple[jax.Array, None]:
            x, _ = block(x, layer, positions, valid, None)
            return x, None

        x, _ = jax.lax.scan(step, x, params["layers"])
        new_cache = None
    else:

        def step_cached(
            x: jax.Array, xs: tuple[Params, jax.Array, jax.Array]
        ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
            layer, ck, cv = xs
            x, kv = block(x, layer, positions, valid, (ck, cv))
            assert kv is not None
            return x, kv

        x, (ks, vs) = jax.lax.scan(step_cached, x, (params["layers"], cache.k, cache.v))
        new_cache = KVCache(ks, vs)
    return rms_norm(x, params["final_norm"], cfg.rms_norm_eps), new_cache


def _head(params: Params, cfg: ModelConfig) -> jax.Array:
    cdt = DTYPES[cfg.compute_dtype]
    if cfg.tie_word_embeddings:
        return params["embed"].astype(cdt).T
    return params["lm_head"].astype(cdt)


def logits(params: Params, cfg: ModelConfig, hidden: jax.Array) -> jax.Array:
    """float32 logits [..., V] for hidden states [..., D]."""
    cdt = DTYPES[cfg.compute_dtype]
    return jnp.matmul(hidden.astype(cdt), _head(params, cfg), preferred_element_type=jnp.float32)


def token_logprobs(
    params: Params,
    cfg: ModelConfig,
    tokens: jax.Array,
    targets: jax.Array,
    positions: jax.Array | None = None,
    *,
    valid: jax.Array | None = None,
    chunk_size: int = 128,
) -> tuple[jax.Array, jax.Array]:
    """log p(targets[b, t] | tokens[b, :t+1]) and the entropy of that distribution, both [B, T].

    Usually targets = tokens shifted left by one. The vocabulary projection and log-softmax run
    over `chunk_size` positions at a time, so at most [B, chunk_size, V] float32 logits exist.
    """
    hidden, _ = forward(params, cfg, tokens, positions, valid=valid)
    b, t, d = hidden.shape
    c = min(chunk_size, t)
    n = -(-t // c)
    pad = n * c - t
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    tgt = jnp.pad(targets, ((0, 0), (0, pad)))
    hidden_chunks = hidden.reshape(b, n, c, d).swapaxes(0, 1)
    tgt_chunks = tgt.reshape(b, n, c).swapaxes(0, 1)

    def one(args: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        h, y = args
        logp = jax.nn.log_softmax(logits(params, cfg, h), axis=-1)
        picked = jnp.take_along_axis(logp, y[..., None], axis=-1)[..., 0]
        entropy = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
        return picked, entropy

    picked, entropy = jax.lax.map(one, (hidden_chunks, tgt_chunks))
    picked = picked.swapaxes(0, 1).reshape(b, n * c)[:, :t]
    entropy = entropy.swapaxes(0, 1).reshape(b, n * c)[:, :t]
    return picked, entropy
