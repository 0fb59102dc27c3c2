"""The one config every decoder family maps onto, and the built-in tiny configs.

Qwen2, Qwen3 and Llama 3 differ only in switches here (q/k/v biases, q/k RMSNorm, RoPE scaling,
tied embeddings, head_dim); `rlx_model.families` turns each family's HF `config.json` into this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlx_core.configs.checks import at_least
from rlx_core.errors import ConfigError

__all__ = ["BENCH_CONFIG", "TINY_CONFIGS", "ModelConfig", "RopeScaling", "tiny_config"]

Dtype = Literal["float32", "bfloat16"]
Remat = Literal["none", "nothing_saveable", "dots_saveable"]
Family = Literal["qwen2", "qwen3", "llama"]


@dataclass(frozen=True, kw_only=True)
class RopeScaling:
    """Llama 3 RoPE frequency scaling (`rope_type = "llama3"` in HF configs)."""

    factor: float = 8.0  # how much longer the target context is than the original, > 1
    low_freq_factor: float = 1.0  # wavelengths above original_max / this are divided by factor
    high_freq_factor: float = 4.0  # wavelengths below original_max / this are kept
    original_max_position_embeddings: int = 8192  # the pre-extension context length, tokens

    def __post_init__(self) -> None:
        if self.factor <= 0:
            raise ConfigError("must be > 0", field="factor", value=self.factor)
        if self.high_freq_factor <= self.low_freq_factor:
            raise ConfigError(
                "must be greater than low_freq_factor",
                field="high_freq_factor",
                value=self.high_freq_factor,
            )


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A decoder-only transformer: RMSNorm, RoPE, grouped-query attention, SwiGLU MLP."""

    family: Family = "qwen2"  # which HF architecture the weights follow
    vocab_size: int  # rows of the embedding, >= 1
    hidden_size: int  # model width D, >= 1
    intermediate_size: int  # SwiGLU width F, >= 1
    num_layers: int  # decoder blocks, >= 1
    num_heads: int  # query heads H, >= 1
    num_kv_heads: int  # key/value heads, divides num_heads
    head_dim: int  # per-head width (Qwen3 sets it apart from hidden_size / num_heads)
    rope_theta: float = 10000.0  # RoPE base, > 0
    rope_scaling: RopeScaling | None = None  # Llama 3 scaling, or None
    rms_norm_eps: float = 1e-6  # RMSNorm epsilon, > 0
    tie_word_embeddings: bool = False  # lm_head shares the embedding matrix
    qkv_bias: bool = False  # Qwen2: biases on the q, k, v projections
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k before RoPE
    max_position_embeddings: int = 4096  # longest sequence the positions are meant for
    bos_token_id: int | None = None  # from the checkpoint, if it has one
    eos_token_ids: tuple[int, ...] = ()  # tokens that end generation
    param_dtype: Dtype = "float32"  # dtype the weights are stored in on device
    compute_dtype: Dtype = "float32"  # dtype of matmuls; norms and softmax always run in f32
    remat: Remat = "none"  # per-layer rematerialisation policy for training

    def __post_init__(self) -> None:
        at_least(
            self, 1, "vocab_size", "hidden_size", "intermediate_size", "num_layers", "head_dim"
        )
        if self.num_heads < 1 or self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"num_heads ({self.num_heads}) must be a positive multiple of num_kv_heads",
                field="num_kv_heads",
                value=self.num_kv_heads,
            )
        if self.rope_theta <= 0:
            raise ConfigError("must be > 0", field="rope_theta", value=self.rope_theta)
        if self.rms_norm_eps <= 0:
            raise ConfigError("must be > 0", field="rms_norm_eps", value=self.rms_norm_eps)

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


def tiny_config(
    vocab_size: int = 259, *, hidden_size: int = 64, num_layers: int = 2, **overrides: object
) -> ModelConfig:
    """A small Qwen2-style config for tests and synthetic tasks (a vocabulary of 259 by default)."""
    base: dict[str, object] = {
        "family": "qwen2",
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": hidden_size * 4,
        "num_layers": num_layers,
        "num_heads": 4,
        "num_kv_heads": 2,
        "head_dim": hidden_size // 4,
        "max_position_embeddings": 512,
        "tie_word_embeddings": True,
        "qkv_bias": True,
    }
    base.update(overrides)
    return ModelConfig(**base)  # type: ignore[arg-type]


# The Qwen2 shape every benchmark under tools/bench measures (rlx-model issue): 4 layers,
# hidden 512, 8 heads, 2 KV heads, vocab 32000.
BENCH_CONFIG = ModelConfig(
    family="qwen2",
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=2048,
    num_layers=4,
    num_heads=8,
    num_kv_heads=2,
    head_dim=64,
    qkv_bias=True,
    max_position_embeddings=4096,
)

TINY_CONFIGS: dict[str, ModelConfig] = {
    "tiny": tiny_config(),  # 2 layers, d 64 (the demo base model's dimensions)
    "small": tiny_config(hidden_size=128, num_layers=4),
}
