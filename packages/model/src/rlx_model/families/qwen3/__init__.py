"""Qwen3: RMSNorm over head_dim on q and k before RoPE, no projection biases, explicit head_dim."""

from __future__ import annotations

from typing import Any

from rlx_model.config import ModelConfig
from rlx_model.families._common import BASE_SPECS, BASE_WEIGHTS, Family, WeightSpec, common_fields

__all__ = ["QWEN3"]


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    return ModelConfig(family="qwen3", qk_norm=True, **common_fields(hf))


QWEN3 = Family(
    name="qwen3",
    architectures=("Qwen3ForCausalLM",),
    config_from_hf=config_from_hf,
    weights=BASE_WEIGHTS
    | {
        f"layers/{p}_norm": WeightSpec(f"model.layers.{{i}}.self_attn.{p}_norm.weight")
        for p in "qk"
    },
    specs=BASE_SPECS | {f"layers/{p}_norm": (None, None) for p in "qk"},
)
