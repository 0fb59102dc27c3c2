"""Qwen2 (and Qwen2.5): biases on the q, k and v projections."""

from __future__ import annotations

from typing import Any

from rlx_model.config import ModelConfig
from rlx_model.families._common import BASE_SPECS, BASE_WEIGHTS, Family, WeightSpec, common_fields

__all__ = ["QWEN2"]


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    return ModelConfig(family="qwen2", qkv_bias=True, **common_fields(hf))


QWEN2 = Family(
    name="qwen2",
    architectures=("Qwen2ForCausalLM",),
    config_from_hf=config_from_hf,
    weights=BASE_WEIGHTS
    | {
        f"layers/{p}_bias": WeightSpec(f"model.layers.{{i}}.self_attn.{p}_proj.bias") for p in "qkv"
    },
    specs=BASE_SPECS | {f"layers/{p}_bias": (None, "tensor") for p in "qkv"},
)
