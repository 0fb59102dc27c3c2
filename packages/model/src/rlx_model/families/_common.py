"""What the three families share: HF config fields, HF tensor names, and sharding specs.

Each family folder declares its own differences on top of these (Qwen2 biases, Qwen3 q/k norms,
Llama 3 RoPE scaling) in a `Family` record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlx_core.errors import ConfigError
from rlx_model.config import ModelConfig, RopeScaling

__all__ = ["BASE_SPECS", "BASE_WEIGHTS", "Family", "WeightSpec", "common_fields"]

# One logical axis name per dimension: "fsdp" shards parameters (ZeRO-3 style), "tensor" splits
# heads / the MLP width / the vocabulary (Megatron style), None replicates. The leading None of
# stacked layer weights is the layer axis, which scan walks over.
Spec = tuple[str | None, ...]

BASE_SPECS: dict[str, Spec] = {
    "embed": ("tensor", "fsdp"),
    "final_norm": (None,),
    "lm_head": ("fsdp", "tensor"),
    "layers/attn_norm": (None, None),
    "layers/mlp_norm": (None, None),
    "layers/q": (None, "fsdp", "tensor"),
    "layers/k": (None, "fsdp", "tensor"),
    "layers/v": (None, "fsdp", "tensor"),
    "layers/o": (None, "tensor", "fsdp"),
    "layers/gate": (None, "fsdp", "tensor"),
    "layers/up": (None, "fsdp", "tensor"),
    "layers/down": (None, "tensor", "fsdp"),
}


@dataclass(frozen=True)
class WeightSpec:
    """Where one rlx parameter lives in an HF checkpoint.

    `hf_name` has `{i}` for the layer index when `stacked`; `transpose` turns torch's [out, in]
    Linear weight into rlx's [in, out] kernel.
    """

    hf_name: str
    transpose: bool = False
    stacked: bool = True


BASE_WEIGHTS: dict[str, WeightSpec] = {
    "embed": WeightSpec("model.embed_tokens.weight", stacked=False),
    "final_norm": WeightSpec("model.norm.weight", stacked=False),
    "lm_head": WeightSpec("lm_head.weight", transpose=True, stacked=False),
    "layers/attn_norm": WeightSpec("model.layers.{i}.input_layernorm.weight"),
    "layers/mlp_norm": WeightSpec("model.layers.{i}.post_attention_layernorm.weight"),
    "layers/q": WeightSpec("model.layers.{i}.self_attn.q_proj.weight", transpose=True),
    "layers/k": WeightSpec("model.layers.{i}.self_attn.k_proj.weight", transpose=True),
    "layers/v": WeightSpec("model.layers.{i}.self_attn.v_proj.weight", transpose=True),
    "layers/o": WeightSpec("model.layers.{i}.self_attn.o_proj.weight", transpose=True),
    "layers/gate": WeightSpec("model.layers.{i}.mlp.gate_proj.weight", transpose=True),
    "layers/up": WeightSpec("model.layers.{i}.mlp.up_proj.weight", transpose=True),
    "layers/down": WeightSpec("model.layers.{i}.mlp.down_proj.weight", transpose=True),
}


def _rope(hf: dict[str, Any]) -> tuple[float, RopeScaling | None]:
    # transformers >= 5 nests RoPE settings in `rope_parameters`; older configs keep
    # `rope_theta` and `rope_scaling` at the top level.
    params = dict(hf.get("rope_parameters") or {})
    scaling = dict(hf.get("rope_scaling") or {}) or params
    theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in (None, "default"):
        return theta, None
    if kind != "llama3":
        raise ConfigError(
            f"RoPE scaling type {kind!r} is not supported (supported: default, llama3)",
            field="rope_scaling.rope_type",
            value=kind,
        )
    return theta, RopeScaling(
        factor=float(scaling["factor"]),
        low_freq_factor=float(scaling["low_freq_factor"]),
        high_freq_factor=float(scaling["high_freq_factor"]),
        original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
    )


def _required(hf: dict[str, Any], key: str) -> Any:
    if key not in hf:
        raise ConfigError("missing from config.json", field=key)
    return hf[key]


def common_fields(hf: dict[str, Any]) -> dict[str, Any]:
    """ModelConfig fields every family reads the same way from an HF config.json."""
    if hf.get("use_sliding_window"):
        raise ConfigError(
            "sliding-window attention is not supported", field="use_sliding_window", value=True
        )
    heads = int(_required(hf, "num_attention_heads"))
    hidden = int(_required(hf, "hidden_size"))
    theta, scaling = _rope(hf)
    eos = hf.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
    return {
        "vocab_size": int(_required(hf, "vocab_size")),
        "hidden_size": hidden,
        "intermediate_size": int(_required(hf, "intermediate_size")),
        "num_layers": int(_required(hf, "num_hidden_layers")),
        "num_heads": heads,
        "num_kv_heads": int(hf.get("num_key_value_heads") or heads),
        "head_dim": int(hf.get("head_dim") or hidden // heads),
        "rope_theta": theta,
        "rope_scaling": scaling,
        "rms_norm_eps": float(hf.get("rms_norm_eps", 1e-6)),
        "tie_word_embeddings": bool(hf.get("tie_word_embeddings", False)),
        "max_position_embeddings": int(hf.get("max_position_embeddings", 4096)),
        "bos_token_id": hf.get("bos_token_id"),
        "eos_token_ids": eos_ids,
    }


@dataclass(frozen=True)
class Family:
    """One decoder family: how to read its HF config, name its tensors, and shard them.

    The forward code is shared (`rlx_model.decoder`); families differ only in these tables and
    in the ModelConfig switches their `config_from_hf` sets.
    """

    name: str
    architectures: tuple[str, ...]  # HF `architectures` values this family loads
    config_from_hf: Callable[[dict[str, Any]], ModelConfig]
    weights: dict[str, WeightSpec]  # for params present in a given config (see weights_for)
    specs: dict[str, Spec]

    def weights_for(self, cfg: ModelConfig) -> dict[str, WeightSpec]:
        from rlx_model.decoder import param_shapes

        return {path: self.weights[path] for path in param_shapes(cfg)}

    def specs_for(self, cfg: ModelConfig) -> dict[str, Spec]:
        from rlx_model.decoder import param_shapes

        return {path: self.specs[path] for path in param_shapes(cfg)}
