"""The model shapes the accelerator bench measures, and what their work costs: parameters, the
bytes a decode step must read, the FLOPs of a train step. Pure arithmetic on a ModelConfig."""

from __future__ import annotations

import math
from dataclasses import replace

import jax
import jax.numpy as jnp

from rlx_model import BENCH_CONFIG, ModelConfig, Params, param_shapes, tiny_config

# Qwen2.5-0.5B's shape (random weights): tied embeddings, q/k/v biases, RoPE base 1e6.
QWEN25_05B = ModelConfig(
    family="qwen2",
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_layers=24,
    num_heads=14,
    num_kv_heads=2,
    head_dim=64,
    rope_theta=1_000_000.0,
    tie_word_embeddings=True,
    qkv_bias=True,
    max_position_embeddings=32768,
)

# Qwen2.5-1.5B's shape (random weights).
QWEN25_15B = replace(
    QWEN25_05B,
    hidden_size=1536,
    intermediate_size=8960,
    num_layers=28,
    num_heads=12,
    head_dim=128,
)


def bf16(cfg: ModelConfig) -> ModelConfig:
    """The config with bf16 weights and matmuls (norms and softmax stay f32 in rlx_model)."""
    return replace(cfg, param_dtype="bfloat16", compute_dtype="bfloat16")


def shapes(small: bool) -> list[tuple[str, ModelConfig]]:
    """(label, bf16 config) of each model shape, the most important first."""
    if small:
        return [
            ("tiny", bf16(tiny_config(1024, hidden_size=64, num_layers=2))),
            ("bench", bf16(BENCH_CONFIG)),
        ]
    return [("0.5B", bf16(QWEN25_05B)), ("1.5B", bf16(QWEN25_15B))]


def describe(cfg: ModelConfig) -> str:
    return (
        f"{cfg.num_layers} layers, d {cfg.hidden_size}, {cfg.num_heads} heads / "
        f"{cfg.num_kv_heads} KV, MLP {cfg.intermediate_size}, vocab {cfg.vocab_size}, "
        f"{param_count(cfg) / 1e6:.1f}M params"
    )


def si(value: float, unit: str) -> str:
    """1.23e9, "B" -> "1.23 GB"."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def param_count(cfg: ModelConfig) -> int:
    """Every parameter once (a tied embedding is one matrix: the lookup and the head)."""
    return sum(math.prod(shape) for shape in param_shapes(cfg).values())


def _itemsize(dtype: str) -> int:
    return 2 if dtype == "bfloat16" else 4


def kv_bytes_per_position(cfg: ModelConfig) -> int:
    """Keys and values of one position of one sequence, all layers, in the compute dtype."""
    return 2 * cfg.num_layers * cfg.kv_size * _itemsize(cfg.compute_dtype)


def decode_bytes(cfg: ModelConfig, batch: int, context: float) -> float:
    """Bytes one decode step of `batch` sequences must read from memory: every weight once (the
    tied embedding as the output head; the lookup's few rows are not counted) and the cached
    keys and values of each sequence's `context` positions. Activations stay on chip."""
    weights = param_count(cfg) * _itemsize(cfg.param_dtype)
    return weights + batch * context * kv_bytes_per_position(cfg)


def train_flops(cfg: ModelConfig, rows: int, seq: int) -> float:
    """Model FLOPs of one training step (forward + backward, no remat) over rows x seq tokens:
    6 N per token for the N parameters' matmuls (the tied embedding counted once, as the head),
    plus causal attention: the forward's QK^T and PV cost 2 q_size t each at position t, so
    2 q_size T(T+1) per layer and sequence, times 3 for the backward."""
    tokens = rows * seq
    attention = 6.0 * cfg.num_layers * rows * cfg.q_size * seq * (seq + 1)
    return 6.0 * param_count(cfg) * tokens + attention


def random_params(cfg: ModelConfig, seed: int) -> Params:
    """Random weights made on the device (normal, std 0.02; norms 1; biases 0, as
    rlx_model.init_params, which draws them on the host: minutes for 1.5B parameters)."""
    key = jax.random.key(seed)
    dtype = jnp.bfloat16 if cfg.param_dtype == "bfloat16" else jnp.float32
    tree: Params = {}
    for i, (path, shape) in enumerate(sorted(param_shapes(cfg).items())):
        leaf = path.rsplit("/", 1)[-1]
        if leaf.endswith("norm"):
            value = jnp.ones(shape, dtype)
        elif leaf.endswith("bias"):
            value = jnp.zeros(shape, dtype)
        else:
            value = 0.02 * jax.random.normal(jax.random.fold_in(key, i), shape, dtype)
        node = tree
        *parents, name = path.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[name] = value
    return tree
