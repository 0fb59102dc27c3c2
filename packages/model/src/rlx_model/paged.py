"""The decoder over a paged KV cache: the entry points of the inference engine.

The cache is a pool of fixed-size blocks shared by all sequences:

    k, v [L, K, N, block_size, d]      per layer and KV head, N blocks of block_size positions

A sequence owns a list of blocks, its *block table* (a row of block ids, padded with 0): position
p of the sequence lives in block table[p // block_size] at offset p % block_size. Block 0 is the
*sink*: it belongs to no sequence, padding positions and idle rows write there, and nothing valid
is ever read from it. Which physical blocks a sequence holds never changes the numbers: keys are
gathered into position order before attention.

`paged_prefill` runs whole prompts (attention among their own tokens, exactly the no-cache
`forward`) and writes their keys and values into their blocks; `paged_decode` runs one new token
per row: it gathers the row's first `span` cached positions, attends to those before its
position and to its own new key, and writes the new key and value. The layers only read the
cache; every write is one scatter after the last layer, so a donated cache is updated in place
(scattering inside the layer loop made XLA copy the whole pool: 2.5x slower decode). Both
return final hidden states (after the last norm); `logits` turns them into the vocabulary
distribution.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlx_model.config import ModelConfig
from rlx_model.decoder import DTYPES, Params, block_tail, qkv_projection
from rlx_model.layers import _NEG, MATRICES, attention, out_major, rms_norm, rope_frequencies

__all__ = [
    "PagedKVCache",
    "init_paged_cache",
    "paged_decode",
    "paged_decode_steps",
    "paged_prefill",
    "split_layers",
]

SINK_BLOCK = 0  # written by padding and idle rows, never read as a real key


class PagedKVCache(NamedTuple):
    """Block pool: k, v [L, K, num_blocks, block_size, d] in the compute dtype.

    KV heads come before blocks so that a row's gathered blocks are already [K, B, span, d], the
    layout whose batched matmuls need no transpose (measured: 3-5x faster decode attention than
    gathering [B, span, K, d])."""

    k: jax.Array
    v: jax.Array

    @property
    def block_size(self) -> int:
        return int(self.k.shape[3])

    @property
    def num_blocks(self) -> int:
        return int(self.k.shape[2])


def init_paged_cache(cfg: ModelConfig, num_blocks: int, block_size: int) -> PagedKVCache:
    """An all-zero pool of `num_blocks` blocks (block 0 is the sink) of `block_size` positions."""
    shape = (cfg.num_layers, cfg.num_kv_heads, num_blocks, block_size, cfg.head_dim)
    dtype = DTYPES[cfg.compute_dtype]
    return PagedKVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))


def split_layers(params: Params) -> Params:
    """`params` with the stacked layer weights ([L, ...] arrays under "layers") split into a
    tuple of one dict per layer, each its own buffer (numpy leaves give views, to put on device
    once). The entry points here accept both forms; a caller that runs them many times (the
    inference engine) splits once at load: from the stacked form every call sliced each layer's
    weights out, which XLA does by copying them (at the bench config 58 MB a call, ~12% of the
    greedy decode calls' op time in a profile)."""
    layers = params["layers"]
    if isinstance(layers, (list, tuple)):
        return params
    n = jax.tree.leaves(layers)[0].shape[0]
    split = tuple(jax.tree.map(lambda a, i=i: a[i], layers) for i in range(n))
    return {**params, "layers": split}


def _layers(params: Params) -> list[Params]:
    """One dict of weights per layer, from either form (see `split_layers`)."""
    return list(split_layers(params)["layers"])


def _slot_of(
    tables: jax.Array, positions: jax.Array, valid: jax.Array, block_size: int
) -> tuple[jax.Array, jax.Array]:
    """(block id, offset) of each position; invalid or out-of-table positions go to the sink."""
    width = tables.shape[1]
    index = positions // block_size
    inside = valid & (index < width)
    block = jnp.take_along_axis(tables, jnp.clip(index, 0, width - 1), axis=1)
    return jnp.where(inside, block, SINK_BLOCK), jnp.where(inside, positions % block_size, 0)


def _write(
    cache: PagedKVCache, ks: jax.Array, vs: jax.Array, block: jax.Array, offset: jax.Array
) -> PagedKVCache:
    """Write every layer's new keys and values ks, vs [L, B, T, K, d] at (block, offset) [B, T]:
    one scatter per call, after the layers ran (the layers only read the cache)."""
    ks = ks.transpose(0, 3, 1, 2, 4).astype(cache.k.dtype)  # [L, K, B, T, d]
    vs = vs.transpose(0, 3, 1, 2, 4).astype(cache.v.dtype)
    ck = cache.k.at[:, :, block, offset].set(ks)
    cv = cache.v.at[:, :, block, offset].set(vs)
    return PagedKVCache(ck, cv)


class _Packing(NamedTuple):
    """Where the real positions of right-padded prompts [P, T] sit in a packed run of n tokens
    (the prompts back to back): `rows` [P, T] the packed index of each padded position (padding:
    any index; its results are masked or dropped), `src` [n] the padded index (row * T + time)
    of each packed token, `real` [n] whether it is one (the rest of the run is padding)."""

    rows: jax.Array
    src: jax.Array
    real: jax.Array


def _packing(lengths: jax.Array, t: int, n: int) -> _Packing:
    p = lengths.shape[0]
    starts = jnp.cumsum(lengths) - lengths  # [P]
    index = jnp.arange(n, dtype=jnp.int32)
    row = jnp.clip(jnp.searchsorted(starts, index, side="right") - 1, 0, p - 1)
    time = index - starts[row]
    real = time < lengths[row]
    src = jnp.where(real, row * t + time, 0)
    rows = jnp.clip(starts[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :], 0, n - 1)
    return _Packing(rows, src, real)


def paged_prefill(
    params: Params,
    cfg: ModelConfig,
    tokens: jax.Array,
    lengths: jax.Array,
    tables: jax.Array,
    cache: PagedKVCache,
    *,
    final_norm: bool = True,
    tail_rows: int = 0,
    packed: int = 0,
) -> tuple[jax.Array, PagedKVCache]:
    """Prompts from position 0: tokens [P, T] (right-padded), lengths [P], tables [P, W].

    Returns the final hidden state at each row's last prompt token [P, D] and the cache with the
    prompts' keys and values written into their blocks. A row of length 0 writes only the sink.
    `final_norm=False` returns the last layer's output there instead, before the final norm:
    for a caller that runs the norm on a fixed number of rows (XLA's code for a reduction, and
    so its rounding, can change with the number of rows).

    The last layer computes keys and values at every position (the cache needs them) and the
    rest of the block (attention, output projection, MLP) only at each row's last token, the
    one output: 1/L of the prompt's o-projection and MLP work is skipped (22% of a prefill's
    FLOPs at the bench's 4 layers). That tail runs on max(P, `tail_rows`) rows (zero rows
    added), so a caller that passes a fixed `tail_rows` gets a row's bits independent of how
    many rows it was prefilled with.

    `packed` = n >= sum(lengths) (static) runs the per-token work (projections, MLP: all but
    attention) on the prompts packed back to back into n tokens instead of the P x T padded
    grid, and only attention on the grid: the matmuls skip the padding (23% of the bench's
    prompt positions). A token's numbers are the same wherever it sits in the run (each is its
    own row of the matmuls; attention sees the grid as without packing).
    """
    p, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (p, t))
    valid = positions < lengths[:, None]
    block, offset = _slot_of(tables, positions, valid, cache.block_size)
    cdt = DTYPES[cfg.compute_dtype]
    inv_freq = rope_frequencies(cfg)
    if packed:
        pack = _packing(lengths, t, packed)

        def to_run(a: jax.Array) -> jax.Array:  # [P, T, ...] -> [1, n, ...]
            return a.reshape(p * t, *a.shape[2:])[pack.src][None]

        def to_grid(a: jax.Array) -> jax.Array:  # [1, n, ...] -> [P, T, ...]
            return a[0][pack.rows]

        run_pos = to_run(positions)
        block = jnp.where(pack.real, block.reshape(-1)[pack.src], SINK_BLOCK)[None]
        offset = jnp.where(pack.real, offset.reshape(-1)[pack.src], 0)[None]
        x = params["embed"].astype(cdt)[to_run(tokens)].astype(jnp.float32)
    else:
        run_pos = positions
        x = params["embed"].astype(cdt)[tokens].astype(jnp.float32)

        def to_run(a: jax.Array) -> jax.Array:
            return a

        to_grid = to_run

    *layers, final = _layers(params)
    ks, vs = [], []
    for layer in layers:  # unrolled: per-layer weights are used in place (no slices)
        _, q, k, v = qkv_projection(cfg, inv_freq, x, layer, run_pos)
        attn = attention(to_grid(q), to_grid(k), to_grid(v), positions, positions, valid)
        x = block_tail(cfg, x, layer, to_run(attn))
        ks.append(k)
        vs.append(v)
    _, q, k, v = qkv_projection(cfg, inv_freq, x, final, run_pos)
    ks.append(k)
    vs.append(v)
    last = jnp.clip(lengths - 1, 0, t - 1)[:, None]  # [P, 1]
    if packed:  # [1, n, ...] -> each row's last prompt token, [P, 1, ...]
        at_run = jnp.take_along_axis(pack.rows, last, axis=1)

        def at_last(a: jax.Array) -> jax.Array:
            return a[0][at_run]

    else:

        def at_last(a: jax.Array) -> jax.Array:
            return jnp.take_along_axis(a, last.reshape(p, 1, *([1] * (a.ndim - 2))), axis=1)

    attn = attention(at_last(q), to_grid(k), to_grid(v), last, positions, valid)
    x = at_last(x)  # [P, 1, D]
    rows = max(p, tail_rows)
    if rows > p:
        x = jnp.pad(x, ((0, rows - p), (0, 0), (0, 0)))
        attn = jnp.pad(attn, ((0, rows - p), (0, 0), (0, 0), (0, 0)))
    x = block_tail(cfg, x, final, attn)[:p, 0]
    if final_norm:
        x = rms_norm(x, params["final_norm"], cfg.rms_norm_eps)
    return x, _write(cache, jnp.stack(ks), jnp.stack(vs), block, offset)


def _decode_attention(
    q: jax.Array,
    k_new: jax.Array,
    v_new: jax.Array,
    keys: jax.Array,
    values: jax.Array,
    valid: jax.Array,
) -> jax.Array:
    """Attention of one query per row over its cached keys plus its own new key.

    q [B, 1, H, d]; k_new, v_new [B, 1, K, d]; keys, values [K, B, S, d] (gathered); valid [B, S].
    The softmax runs over the S cached scores and the self score together, in float32.
    Returns [B, 1, H, d].
    """
    b, _, h, d = q.shape
    kv = keys.shape[0]
    scale = 1.0 / math.sqrt(d)
    qg = q.reshape(b, kv, h // kv, d).transpose(1, 0, 2, 3)  # [K, B, G, d]
    kn = k_new.reshape(b, kv, d).transpose(1, 0, 2)  # [K, B, d]
    vn = v_new.reshape(b, kv, d).transpose(1, 0, 2)
    f32 = jnp.float32
    cached = jnp.einsum("kbgd,kbsd->kbgs", qg, keys, preferred_element_type=f32) * scale
    cached = jnp.where(valid[None, :, None, :], cached, _NEG)
    own = jnp.einsum("kbgd,kbd->kbg", qg, kn, preferred_element_type=f32) * scale
    top = jnp.maximum(cached.max(axis=-1), own)
    e_cached = jnp.exp(cached - top[..., None])
    e_own = jnp.exp(own - top)
    denom = e_cached.sum(axis=-1) + e_own
    p_cached = (e_cached / denom[..., None]).astype(values.dtype)
    out = jnp.einsum("kbgs,kbsd->kbgd", p_cached, values, preferred_element_type=f32)
    out = out + (e_own / denom)[..., None] * vn[:, :, None, :].astype(f32)
    return out.transpose(1, 0, 2, 3).reshape(b, 1, h, d).astype(q.dtype)


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

    Each row attends to its cached positions 0..position-1, read from its first `span_blocks`
    blocks (static: the caller buckets it so that span_blocks * block_size >= every position),
    and to its own new key; the new keys and values are written after the last layer.
    """
    b = tokens.shape[0]
    bs = cache.block_size
    pos = positions[:, None]
    block, offset = _slot_of(tables, pos, jnp.ones_like(pos, bool), bs)
    span = span_blocks * bs
    gather = tables[:, :span_blocks]
    valid = jnp.arange(span, dtype=jnp.int32)[None, :] < pos
    cdt = DTYPES[cfg.compute_dtype]
    inv_freq = rope_frequencies(cfg)
    x = params["embed"].astype(cdt)[tokens[:, None]].astype(jnp.float32)
    shape = (cfg.num_kv_heads, b, span, cfg.head_dim)

    def step(
        x: jax.Array, xs: tuple[Params, jax.Array, jax.Array]
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        layer, ck, cv = xs  # ck, cv [K, N, bs, d]
        _, q, k, v = qkv_projection(cfg, inv_freq, x, layer, pos)
        keys = ck[:, gather].reshape(shape).astype(cdt)
        values = cv[:, gather].reshape(shape).astype(cdt)
        attn = _decode_attention(q, k, v, keys, values, valid)
        return block_tail(cfg, x, layer, attn), (k, v)

    layers = params["layers"]
    if isinstance(layers, (list, tuple)):  # (a test-sized path: the engine decodes with steps)
        layers = jax.tree.map(lambda *a: jnp.stack(a), *layers)
    x, (ks, vs) = jax.lax.scan(step, x, (layers, cache.k, cache.v))
    hidden = rms_norm(x[:, 0], params["final_norm"], cfg.rms_norm_eps)
    return hidden, _write(cache, ks, vs, block, offset)


def _steps_attention(
    qg: jax.Array,
    keys: jax.Array,
    values: jax.Array,
    valid: jax.Array,
    local_k: jax.Array,
    local_v: jax.Array,
    local_valid: jax.Array,
) -> jax.Array:
    """One query per row over its cached keys (gathered once per call) and the keys of this
    call's steps so far, own key included.

    qg [K, B, G, d] (query head k * G + g); keys [K, B, d, S] (positions minor); values
    [K, B, S, d]; valid [B, S]; local_k, local_v [K, B, T, d]; local_valid [T] (steps <= the
    current one). Softmax over both parts together, in float32. Returns [K, B, G, d].

    The cached scores are a broadcast multiply summed over d with the positions minor, which XLA
    fuses into one loop vectorised along the positions: 2x faster alone than the batched matmul
    of [G, d] by [d, S] per (KV head, row), too small for a matmul kernel (a decode step at a
    384-position span: 53 -> 49 ms, median of 8 interleaved calls). The values keep the matmul:
    the same fused form for them measured no faster.
    """
    d = qg.shape[-1]
    scale = 1.0 / math.sqrt(d)
    f32 = jnp.float32
    cached = (qg.astype(f32)[..., None] * keys.astype(f32)[:, :, None]).sum(3) * scale
    cached = jnp.where(valid[None, :, None, :], cached, _NEG)
    local = jnp.einsum("kbgd,kbtd->kbgt", qg, local_k, preferred_element_type=f32) * scale
    local = jnp.where(local_valid[None, None, None, :], local, _NEG)
    top = jnp.maximum(cached.max(axis=-1), local.max(axis=-1))[..., None]
    e_cached = jnp.exp(cached - top)
    e_local = jnp.exp(local - top)
    denom = (e_cached.sum(axis=-1) + e_local.sum(axis=-1))[..., None]
    out = jnp.einsum(
        "kbgs,kbsd->kbgd",
        (e_cached / denom).astype(values.dtype),
        values,
        preferred_element_type=f32,
    )
    out = out + jnp.einsum(
        "kbgt,kbtd->kbgd",
        (e_local / denom).astype(local_v.dtype),
        local_v,
        preferred_element_type=f32,
    )
    return out.astype(qg.dtype)


def _column_norm(x: jax.Array, weight: jax.Array, eps: float, axis: int) -> jax.Array:
    """`rms_norm` over `axis` of activations held feature-major (features on `axis`, rows
    minor); the weight runs along `axis`."""
    xf = x.astype(jnp.float32)
    normed = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=axis, keepdims=True) + eps)
    shape = [1] * x.ndim
    shape[axis] = -1
    return (weight.astype(jnp.float32).reshape(shape) * normed).astype(x.dtype)


def _column_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """`apply_rope` on x [heads, d, B] with cos, sin [d, B] (each row's own position)."""
    xf = x.astype(jnp.float32)
    half = x.shape[1] // 2
    rotated = jnp.concatenate([-xf[:, half:], xf[:, :half]], axis=1)
    return (xf * cos + rotated * sin).astype(x.dtype)


def _column_qkv(
    cfg: ModelConfig,
    layer: Params,
    w: dict[str, jax.Array],
    xt: jax.Array,
    cos: jax.Array,
    sin: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`qkv_projection` feature-major: xt [D, B] (float32) -> q [H, d, B], k, v [K, d, B] in
    the compute dtype (the weights `w` output-major in it, the layer's biases and norms as they
    are; the matmuls accumulate in float32 like `dense`)."""
    cdt = w["q"].dtype
    f32 = jnp.float32
    b, d, eps = xt.shape[1], cfg.head_dim, cfg.rms_norm_eps
    hn = _column_norm(xt, layer["attn_norm"], eps, 0).astype(cdt)
    q, k, v = (jnp.matmul(w[n], hn, preferred_element_type=f32) for n in ("q", "k", "v"))
    if cfg.qkv_bias:
        q = q + layer["q_bias"].astype(f32)[:, None]
        k = k + layer["k_bias"].astype(f32)[:, None]
        v = v + layer["v_bias"].astype(f32)[:, None]
    q = q.reshape(cfg.num_heads, d, b)
    k, v = k.reshape(cfg.num_kv_heads, d, b), v.reshape(cfg.num_kv_heads, d, b)
    if cfg.qk_norm:
        q = _column_norm(q, layer["q_norm"], eps, 1)
        k = _column_norm(k, layer["k_norm"], eps, 1)
    return (
        _column_rope(q, cos, sin).astype(cdt),
        _column_rope(k, cos, sin).astype(cdt),
        v.astype(cdt),
    )


def _gather_blocks(pool: jax.Array, tables: jax.Array) -> jax.Array:
    """The blocks `tables` [B, n] names of one layer's pool [K, N, bs, d], as [K, B, n * bs, d].

    One take of whole blocks (bs * d contiguous values) from the pool seen as [K * N, bs * d],
    KV head h's ids offset by h * N: XLA's CPU code for it copies rows, where indexing the 4-d
    pool with the table ran an element-wise loop (about 3x slower for the values of a decode
    call at the bench config), and a take per head then a stack copied everything twice."""
    kv, n, bs, d = pool.shape
    b, width = tables.shape
    ids = tables.reshape(1, -1) + (jnp.arange(kv, dtype=tables.dtype) * n)[:, None]
    rows = jnp.take(pool.reshape(kv * n, bs * d), ids.reshape(-1), axis=0, mode="clip")
    return rows.reshape(kv, b, width * bs, d)


def paged_decode_steps(
    params: Params,
    cfg: ModelConfig,
    tokens: jax.Array,
    positions: jax.Array,
    tables: jax.Array,
    cache: PagedKVCache,
    choose: Callable[[jax.Array, jax.Array], tuple[jax.Array, Any]],
    *,
    span_blocks: int,
    steps: int,
) -> tuple[Any, PagedKVCache]:
    """`steps` decode steps in one program: tokens, positions [B] are the first step's.

    Step j feeds each row's token at position + j, and `choose(hidden [B, D], position + j)`
    returns the next tokens [B] (fed to step j + 1) and any per-step outputs, stacked over the
    steps and returned with the cache. The cached positions 0..position-1 are gathered from
    the first `span_blocks` blocks once per call (not once per step: the gather, not the
    arithmetic, dominated decode attention), the keys transposed to [K, B, d, S]; the keys and
    values of the call's own steps live in a small [K, B, steps, d] buffer per layer, and all of
    them are written to the cache in one scatter at the end. The layers are unrolled (static
    per-layer weights and keys: slicing a stacked array inside the step loop copied it every
    step; pass `split_layers(params)` so that not even one copy per call is made). A row whose
    position + j leaves its table writes only the sink.

    The activations are feature-major inside a step (h^T [D, B], every projection W^T @ h^T):
    at a decode batch XLA's CPU matmul streams a weight faster as the left operand [out, in]
    than as the right one (the 4 layers and head alone: 15.2 -> 13.0 ms a step at the bench
    config, measured), and only the attention's small [heads, d, B] query and output are
    transposed. Weights held output-major (`name_t`, the inference engine's form) are used as
    they are; kernels [in, out] are transposed by XLA once per call.
    """
    b = tokens.shape[0]
    bs = cache.block_size
    nl, nk, d = cfg.num_layers, cfg.num_kv_heads, cfg.head_dim
    span = span_blocks * bs
    gather = tables[:, :span_blocks]
    valid = jnp.arange(span, dtype=jnp.int32)[None, :] < positions[:, None]
    cdt = DTYPES[cfg.compute_dtype]
    inv_freq = rope_frequencies(cfg)
    embed = params["embed"].astype(cdt)
    layers = _layers(params)
    keys = [_gather_blocks(cache.k[i], gather).astype(cdt).swapaxes(2, 3) for i in range(nl)]
    values = [_gather_blocks(cache.v[i], gather).astype(cdt) for i in range(nl)]
    local0 = jnp.zeros((nl, nk, b, steps, d), cdt)

    h, g = cfg.num_heads, cfg.num_heads // nk
    eps = cfg.rms_norm_eps
    weights = [{name: out_major(layer, name, cdt) for name in MATRICES} for layer in layers]
    mm = partial(jnp.matmul, preferred_element_type=jnp.float32)  # bf16 in, f32 out (dense)

    def step(
        carry: tuple[jax.Array, jax.Array, jax.Array], j: jax.Array
    ) -> tuple[tuple[jax.Array, jax.Array, jax.Array], Any]:
        tok, lk, lv = carry
        pos = positions + j
        angles = jnp.asarray(inv_freq)[:, None] * pos.astype(jnp.float32)[None, :]  # [d/2, B]
        angles = jnp.concatenate([angles, angles], axis=0)
        cos, sin = jnp.cos(angles)[None], jnp.sin(angles)[None]
        xt = embed[tok].T.astype(jnp.float32)  # [D, B]: feature-major from here to the head
        local_valid = jnp.arange(steps) <= j
        for i in range(nl):
            layer, w = layers[i], weights[i]
            q, k, v = _column_qkv(cfg, layer, w, xt, cos, sin)
            lk = lk.at[i, :, :, j].set(k.transpose(0, 2, 1))
            lv = lv.at[i, :, :, j].set(v.transpose(0, 2, 1))
            qg = q.reshape(nk, g, d, b).transpose(0, 3, 1, 2)  # [K, B, G, d]
            attn = _steps_attention(qg, keys[i], values[i], valid, lk[i], lv[i], local_valid)
            xt = xt + mm(w["o"], attn.transpose(0, 2, 3, 1).reshape(h * d, b))
            hn = _column_norm(xt, layer["mlp_norm"], eps, 0).astype(cdt)
            xt = xt + mm(w["down"], (jax.nn.silu(mm(w["gate"], hn)) * mm(w["up"], hn)).astype(cdt))
        hidden = _column_norm(xt, params["final_norm"], eps, 0)
        new, out = choose(hidden.T, pos)
        return (new, lk, lv), out

    (_, lk, lv), outs = jax.lax.scan(
        step, (tokens, local0, local0), jnp.arange(steps, dtype=jnp.int32)
    )
    pos = positions[:, None] + jnp.arange(steps, dtype=jnp.int32)[None, :]  # [B, steps]
    block, offset = _slot_of(tables, pos, jnp.ones_like(pos, bool), bs)
    ks = lk.transpose(0, 2, 3, 1, 4)  # [L, B, steps, K, d]
    vs = lv.transpose(0, 2, 3, 1, 4)
    return outs, _write(cache, ks, vs, block, offset)
