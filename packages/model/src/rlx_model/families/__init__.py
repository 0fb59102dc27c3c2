"""The decoder families rlx loads, by name and by HF `architectures` value."""

from __future__ import annotations

from typing import Any

from rlx_core.errors import ConfigError
from rlx_model.config import ModelConfig
from rlx_model.families._common import Family, WeightSpec
from rlx_model.families.llama import LLAMA
from rlx_model.families.qwen2 import QWEN2
from rlx_model.families.qwen3 import QWEN3

__all__ = ["FAMILIES", "Family", "WeightSpec", "config_from_hf", "family_for_hf", "get_family"]

FAMILIES: dict[str, Family] = {f.name: f for f in (QWEN2, QWEN3, LLAMA)}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ConfigError(
            f"unknown model family {name!r}; known: {', '.join(FAMILIES)}",
            field="family",
            value=name,
        ) from None


def family_for_hf(hf: dict[str, Any]) -> Family:
    """The family for an HF config.json, by `architectures` (or `model_type` as a fallback)."""
    archs = hf.get("architectures") or []
    for family in FAMILIES.values():
        if any(a in family.architectures for a in archs):
            return family
    model_type = hf.get("model_type")
    if not archs and model_type in FAMILIES:
        return FAMILIES[model_type]
    known = ", ".join(a for f in FAMILIES.values() for a in f.architectures)
    raise ConfigError(
        f"unsupported architecture {archs or model_type!r}; supported: {known}",
        field="architectures",
        value=archs,
    )


def config_from_hf(hf: dict[str, Any], **overrides: Any) -> ModelConfig:
    """A ModelConfig from an HF config.json dict; `overrides` set dtypes, remat and the like."""
    from dataclasses import replace

    cfg = family_for_hf(hf).config_from_hf(hf)
    return replace(cfg, **overrides) if overrides else cfg
