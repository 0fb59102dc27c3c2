"""Llama 3: the plain layout, with Llama 3 RoPE frequency scaling when the config asks for it."""

from __future__ import annotations

from typing import Any

from rlx_core.errors import ConfigError
from rlx_model.config import ModelConfig
from rlx_model.families._common import BASE_SPECS, BASE_WEIGHTS, Family, common_fields

__all__ = ["LLAMA"]


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    if hf.get("attention_bias") or hf.get("mlp_bias"):
        raise ConfigError(
            "Llama checkpoints with projection biases are not supported",
            field="attention_bias",
            value=True,
        )
    return ModelConfig(family="llama", **common_fields(hf))


LLAMA = Family(
    name="llama",
    architectures=("LlamaForCausalLM",),
    config_from_hf=config_from_hf,
    weights=dict(BASE_WEIGHTS),
    specs=dict(BASE_SPECS),
)
