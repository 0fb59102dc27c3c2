"""The building blocks of the decoder, as pure functions of arrays.

Conventions: activations are [batch, time, ...]; weights are stored as `x @ kernel` kernels
([in, out], the transpose of torch.nn.Linear); norms, softmax and RoPE angles run in float32.
Matmuls take their inputs in the compute dtype and accumulate and return float32 (`dense`), so
with bf16 compute the residual stream stays float32 and values are rounded to bf16 only where
they enter a matmul: the trainer's prefill and the engine's decode then agree to ~1e-6 nats
(see the README's Precision).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from rlx_model.config import ModelConfig, RopeScaling

__all__ = [
    "MATRICES",
    "apply_rope",
    "attention",
    "dense",
    "out_major",
    "rms_norm",
    "rope_frequencies",
]

_NEG = -1e30  # additive mask value; finite so fully-masked rows stay NaN-free


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """y = w * x / sqrt(mean(x^2) + eps), computed in float32, returned in x's dtype.

    The sums of squares are a matrix-vector product with ones: XLA's CPU code for it gives a row
    the same bits whatever the number of rows and the row's place among them, where a reduction
    over the last axis did not (measured at d 64 and 128 from 32 rows up), so a prompt's numbers
    do not depend on what it is batched or packed with."""
    xf = x.astype(jnp.float32)
    d = x.shape[-1]
    squares = (xf * xf) @ jnp.ones((d,), jnp.float32)
    normed = xf * jax.lax.rsqrt(squares[..., None] / d + eps)
    return (weight.astype(jnp.float32) * normed).astype(x.dtype)


def rope_frequencies(cfg: ModelConfig) -> np.ndarray:
    """Inverse frequencies theta^(-2i/d) for i < d/2, with Llama 3 scaling when configured.

    Llama 3: wavelengths longer than original_max / low_freq_factor are divided by `factor`,
    shorter than original_max / high_freq_factor kept, and those between interpolated smoothly.
    """
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.float32) / np.float32(d)))
    inv = inv.astype(np.float32)
    s: RopeScaling | None = cfg.rope_scaling
    if s is None:
        return inv
    orig = s.original_max_position_embeddings
    low_wavelen = orig / s.low_freq_factor
    high_wavelen = orig / s.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / s.factor, inv)
    smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: np.ndarray) -> jax.Array:
    """Rotate x [B, T, heads, d] by its positions [B, T] (the half-split "rotate_half" layout)."""
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [B, T, d/2]
    cos = jnp.cos(jnp.concatenate([angles, angles], axis=-1))[:, :, None, :]
    sin = jnp.sin(jnp.concatenate([angles, angles], axis=-1))[:, :, None, :]
    xf = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
    return (xf * cos + rotated * sin).astype(x.dtype)


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_positions: jax.Array,
    k_positions: jax.Array,
    k_valid: jax.Array,
) -> jax.Array:
    """Causal grouped-query attention.

    q [B, T, H, d]; k, v [B, S, K, d] with H a multiple of K; query t sees key s iff
    k_positions[s] <= q_positions[t] and k_valid[s]. The keys may be the same tokens (prefill) or
    a cache (decode): the caller decides; this function only masks by position.
    Returns [B, T, H, d].
    """
    b, t, h, d = q.shape
    kv = k.shape[2]
    qg = q.reshape(b, t, kv, h // kv, d)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, k, preferred_element_type=jnp.float32)
    scores = scores * (1.0 / math.sqrt(d))
    allowed = (k_positions[:, None, :] <= q_positions[:, :, None]) & k_valid[:, None, :]
    scores = jnp.where(allowed[:, None, None, :, :], scores, _NEG)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v, preferred_element_type=jnp.float32)
    return out.reshape(b, t, h, d).astype(q.dtype)


# a layer's matrices: each a kernel `name` [in, out] or, in the inference engine's form,
# output-major `name_t` [out, in]
MATRICES = ("q", "k", "v", "o", "gate", "up", "down")


def out_major(layer: dict[str, jax.Array], name: str, dtype: jnp.dtype) -> jax.Array:
    """The layer's matrix `name` as [out, in]: `name_t` as held, else the kernel transposed (by
    XLA, inside the caller's program)."""
    transposed = layer.get(name + "_t")
    return (layer[name].T if transposed is None else transposed).astype(dtype)


def dense(x: jax.Array, layer: dict[str, jax.Array], name: str, dtype: jnp.dtype) -> jax.Array:
    """x [..., in] times the layer's weight `name`, held either as the kernel `name` [in, out]
    or output-major as `name_t` [out, in] (the inference engine's form, whose decode runs with
    the activations transposed: see `rlx_model.paged.paged_decode_steps`): both operands in
    `dtype`, the product accumulated and returned in float32.

    The kernel form multiplies x flattened to 2-D, [rows, in] @ [in, out]: the forward is the
    same matmul bit for bit, and the gradient's weight term is one 2-D matmul, where with
    x [B, T, in] XLA's CPU backward first made transposed copies of the activation gradients."""
    transposed = layer.get(name + "_t")
    x = x.astype(dtype)
    f32 = jnp.float32
    if transposed is not None:
        return jnp.einsum("...i,oi->...o", x, transposed.astype(dtype), preferred_element_type=f32)
    kernel = layer[name]
    rows = x.reshape(-1, x.shape[-1])
    out = jnp.matmul(rows, kernel.astype(dtype), preferred_element_type=f32)
    return out.reshape(*x.shape[:-1], kernel.shape[-1])
