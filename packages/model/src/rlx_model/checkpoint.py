"""Hugging Face checkpoint directories <-> (ModelConfig, params).

A directory holds `config.json` and either `model.safetensors` or a sharded
`model.safetensors.index.json`. Loading maps HF tensor names to rlx's stacked layout through the
family's weight table, checks every shape, and casts to the configured parameter dtype.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import ml_dtypes
import numpy as np

from rlx_core.errors import ConfigError, InvalidArgument, NotFound
from rlx_model.config import ModelConfig
from rlx_model.decoder import Params, param_shapes, unflatten
from rlx_model.families import config_from_hf, get_family
from rlx_model.safetensors_io import SafetensorsFile, write_safetensors

__all__ = ["load_checkpoint", "load_config", "save_checkpoint", "to_hf_config"]

log = logging.getLogger(__name__)

_NP_DTYPES = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise NotFound(f"{path} does not exist")
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise InvalidArgument(f"{path} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise InvalidArgument(f"{path} does not hold a JSON object")
    return data


def load_config(checkpoint_dir: str | Path, **overrides: Any) -> ModelConfig:
    """The ModelConfig of a checkpoint directory (its config.json), with `overrides` applied."""
    directory = Path(checkpoint_dir)
    if not directory.is_dir():
        raise NotFound(f"checkpoint directory {directory} does not exist")
    return config_from_hf(_read_json(directory / "config.json"), **overrides)


def _open_weights(directory: Path) -> tuple[dict[str, SafetensorsFile], dict[str, str]]:
    """The open safetensors files and tensor name -> file name."""
    single = directory / "model.safetensors"
    index = directory / "model.safetensors.index.json"
    if single.is_file():
        f = SafetensorsFile(single)
        return {single.name: f}, dict.fromkeys(f.names(), single.name)
    if index.is_file():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise InvalidArgument(f"{index} has no weight_map")
        files = {}
        for name in sorted(set(weight_map.values())):
            if not (directory / name).is_file():
                raise NotFound(f"{directory / name} (listed in {index.name}) does not exist")
            files[name] = SafetensorsFile(directory / name)
        return files, dict(weight_map)
    present = ", ".join(sorted(p.name for p in directory.iterdir())) or "nothing"
    raise NotFound(
        f"{directory} has neither model.safetensors nor model.safetensors.index.json "
        f"(it holds: {present})"
    )


def load_checkpoint(
    checkpoint_dir: str | Path,
    *,
    param_dtype: str | None = None,
    compute_dtype: str | None = None,
    **overrides: Any,
) -> tuple[ModelConfig, Params]:
    """Load an HF checkpoint directory into (config, params on the default device)."""
    if param_dtype is not None:
        overrides["param_dtype"] = param_dtype
    if compute_dtype is not None:
        overrides["compute_dtype"] = compute_dtype
    directory = Path(checkpoint_dir)
    cfg = load_config(directory, **overrides)
    files, where = _open_weights(directory)
    family = get_family(cfg.family)
    target = _NP_DTYPES[cfg.param_dtype]
    shapes = param_shapes(cfg)
    flat: dict[str, Any] = {}
    used: set[str] = set()
    for path, spec in family.weights_for(cfg).items():
        names = (
            [spec.hf_name.format(i=i) for i in range(cfg.num_layers)]
            if spec.stacked
            else [spec.hf_name]
        )
        expected = shapes[path][1:] if spec.stacked else shapes[path]
        pieces = []
        for name in names:
            if name not in where:
                raise NotFound(f"{directory}: tensor {name!r} (for {path}) is missing")
            tensor = files[where[name]].get(name)
            if spec.transpose:
                tensor = tensor.T
            if tensor.shape != expected:
                raise InvalidArgument(
                    f"{directory}: tensor {name!r} has shape {files[where[name]].shape(name)}, "
                    f"but config.json implies {expected[::-1] if spec.transpose else expected}"
                )
            pieces.append(tensor.astype(target))
            used.add(name)
        value = np.stack(pieces) if spec.stacked else pieces[0]
        flat[path] = jnp.asarray(value)
    unused = sorted(set(where) - used - {"lm_head.weight"})
    if unused:
        log.warning("%s: %d tensors not used, e.g. %s", directory, len(unused), unused[:3])
    # the memory maps close when the last view of them is garbage-collected
    return cfg, unflatten(flat)


def to_hf_config(cfg: ModelConfig) -> dict[str, Any]:
    """The HF config.json for a ModelConfig (so transformers can load what rlx saves)."""
    arch = get_family(cfg.family).architectures[0]
    hf: dict[str, Any] = {
        "architectures": [arch],
        "model_type": cfg.family,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.rms_norm_eps,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "max_position_embeddings": cfg.max_position_embeddings,
        "torch_dtype": cfg.param_dtype,
    }
    if cfg.rope_scaling is not None:
        s = cfg.rope_scaling
        hf["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position_embeddings,
        }
    if cfg.family == "qwen2" and not cfg.qkv_bias:
        raise ConfigError("qwen2 checkpoints always have q/k/v biases", field="qkv_bias")
    if cfg.bos_token_id is not None:
        hf["bos_token_id"] = cfg.bos_token_id
    if cfg.eos_token_ids:
        ids = list(cfg.eos_token_ids)
        hf["eos_token_id"] = ids[0] if len(ids) == 1 else ids
    return hf


def save_checkpoint(checkpoint_dir: str | Path, cfg: ModelConfig, params: Params) -> None:
    """Write config.json and model.safetensors in HF layout (loadable by transformers)."""
    directory = Path(checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    family = get_family(cfg.family)
    tensors: dict[str, np.ndarray] = {}
    for path, spec in family.weights_for(cfg).items():
        node: Any = params
        for part in path.split("/"):
            node = node[part]
        value = np.asarray(node)
        layers = range(cfg.num_layers) if spec.stacked else [None]
        for i in layers:
            piece = value[i] if i is not None else value
            tensors[spec.hf_name.format(i=i)] = np.ascontiguousarray(
                piece.T if spec.transpose else piece
            )
    write_safetensors(directory / "model.safetensors", tensors, {"format": "pt"})
    (directory / "config.json").write_text(json.dumps(to_hf_config(cfg), indent=2) + "\n")
