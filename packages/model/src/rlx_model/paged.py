"""The decoder over a paged KV cache: the entry points of the inference engine.

The cache is a pool of fixed-size blocks shared by all sequences:

    k, v [L, N, block_size, K, d]      N blocks of block_size positions each

A sequence owns a list of blocks, its *block table* (a row of block ids, padded with 0): position
p of the sequence lives in block table[p // block_size] at offset p % block_size. Block 0 is the
*sink*: it belongs to no sequence, padding positions and idle rows write there, and nothing valid
is ever read from it. Which physical blocks a sequence holds never changes the numbers: keys are
gathered into position order before attention.

`paged_prefill` runs whole prompts (attention among their own tokens, exactly the no-cache
`forward`) and writes their keys and values into their blocks; `paged_decode` runs one new token
per row, writes its key and value, gathers the row's first `span` positions and attends to those
at or before its position. Both return final hidden states (after the last norm); `logits` turns
them into the vocabulary distribution.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rlx_model.config import ModelConfig
from rlx_model.decoder import _DTYPES, Params, block_tail, qkv_projection
from rlx_model.layers import attention, rms_norm, rope_frequencies

__all__ = ["PagedKVCache", "init_paged_cache", "paged_decode", "paged_prefill"]

SINK_BLOCK = 0  # written by padding and idle rows, never read as a real key


class PagedKVCache(NamedTuple):
    """Block pool: k, v [L, num_blocks, block_size, K, d] in the compute dtype."""

    k: jax.Array
    v: jax.Array

    @property
    def block_size(self) -> int:
        return int(self.k.shape[2])

    @property
    def num_blocks(self) -> int:
        return int(self.k.shape[1])


def init_paged_cache(cfg: ModelConfig, num_blocks: int, block_size: int) -> PagedKVCache:
    """An all-zero pool of `num_blocks` blocks (block 0 is the sink) of `block_size` positions."""
    shape = (cfg.num_layers, num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
    dtype = _DTYPES[cfg.compute_dtype]
    return PagedKVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))


def _slot_of(
    tables: jax.Array, positions: jax.Array, valid: jax.Array, block_size: int
) -> tuple[jax.Array, jax.Array]:
    """(block id, offset) of each position; invalid or out-of-table positions go to the sink."""
    width = tables.shape[1]
    index = positions // block_size
    inside = valid & (index < width)
    block = jnp.take_along_axis(tables, jnp.clip(index, 0, width - 1), axis=1)
    return jnp.where(inside, block, SINK_BLOCK), jnp.where(inside, positions % block_size, 0)


def paged_prefill(
    params: Params,
    cfg: ModelConfig,
    tokens: jax.Array,
    lengths: jax.Array,
    tables: jax.Array,
    cache: PagedKVCache,
) -> tuple[jax.Array, PagedKVCache]:
    """Prompts from position 0: tokens [P, T] (right-padded), lengths [P], tables [P, W].

    Returns the final hidden state at each row's last prompt token [P, D] and the cache with the
    prompts' keys and values written into their blocks. A row of length 0 writes only the sink.
    """
    p, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (p, t))
    valid = positions < lengths[:, None]
    block, offset = _slot_of(tables, positions, valid, cache.block_size)
    cdt = _DTYPES[cfg.compute_dtype]
    inv_freq = rope_frequencies(cfg)
    x = params["embed"].astype(cdt)[tokens]

    def step(
        carry: tuple[jax.Array, jax.Array, jax.Array], xs: tuple[Params, jax.Array]
    ) -> tuple[tuple[jax.Array, jax.Array, jax.Array], None]:
        x, ck, cv = carry
        layer, index = xs
        _, q, k, v = qkv_projection(cfg, inv_freq, x, layer, positions)
        ck = ck.at[index, block, offset].set(k.astype(ck.dtype))
        cv = cv.at[index, block, offset].set(v.astype(cv.dtype))
        attn = attention(q, k, v, positions, positions, valid)
        return (block_tail(cfg, x, layer, attn), ck, cv), None

    layers = (params["layers"], jnp.arange(cfg.num_layers))
    (x, ck, cv), _ = jax.lax.scan(step, (x, cache.k, cache.v), layers)
    last = jnp.clip(lengths - 1, 0, t - 1)
    x = jnp.take_along_axis(x, last[:, None, None], axis=1)[:, 0]
    return rms_norm(x, params["final_norm"], cfg.rms_norm_eps), PagedKVCache(ck, cv)


def paged_decode(
    params: Params,
    cfg: ModelConfig,
    tokens: jax.Array,
    positions: jax.Array,
    tables: jax.Array,
    cache: PagedKVCache,
    *,
    span_blocks: int,
) -> tuple[jax.Array, PagedKVCache]:
    """One token per row: tokens, positions [B], tables [B, W]. Returns hidden [B, D], cache.

    Each row attends to its positions 0..position, read from its first `span_blocks` blocks
    (static: the caller buckets it so that span_blocks * block_size > every position).
    """
    b = tokens.shape[0]
    bs = cache.block_size
    pos = positions[:, None]
    block, offset = _slot_of(tables, pos, jnp.ones_like(pos, bool), bs)
    span = span_blocks * bs
    gather = tables[:, :span_blocks]
    k_pos = jnp.broadcast_to(jnp.arange(span, dtype=jnp.int32), (b, span))
    k_valid = jnp.ones((b, span), bool)
    cdt = _DTYPES[cfg.compute_dtype]
    inv_freq = rope_frequencies(cfg)
    x = params["embed"].astype(cdt)[tokens[:, None]]

    def step(
        carry: tuple[jax.Array, jax.Array, jax.Array], xs: tuple[Params, jax.Array]
    ) -> tuple[tuple[jax.Array, jax.Array, jax.Array], None]:
        x, ck, cv = carry
        layer, index = xs
        _, q, k, v = qkv_projection(cfg, inv_freq, x, layer, pos)
        ck = ck.at[index, block, offset].set(k.astype(ck.dtype))
        cv = cv.at[index, block, offset].set(v.astype(cv.dtype))
        shape = (b, span, cfg.num_kv_heads, cfg.head_dim)
        keys = ck[index, gather].reshape(shape).astype(cdt)
        values = cv[index, gather].reshape(shape).astype(cdt)
        attn = attention(q, keys, values, pos, k_pos, k_valid)
        return (block_tail(cfg, x, layer, attn), ck, cv), None

    layers = (params["layers"], jnp.arange(cfg.num_layers))
    (x, ck, cv), _ = jax.lax.scan(step, (x, cache.k, cache.v), layers)
    return rms_norm(x[:, 0], params["final_norm"], cfg.rms_norm_eps), PagedKVCache(ck, cv)
