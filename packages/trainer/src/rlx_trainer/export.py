"""Trained weights as an HF checkpoint directory (`config.json` + `model.safetensors`), the
weights part of `rlx export`: from a trainer checkpoint, or from the '/'-path tensors the trainer
pushes to the paramserver.

The tensors keep the dtype the trainer holds params in (`model.param_dtype`: float32 or
bfloat16), and config.json says it (`torch_dtype`). Names and layout are the model family's HF
weight table (`rlx_model.save_checkpoint`), so transformers, vLLM and `rlx_model.load_checkpoint`
read the directory.

    step, cfg = export_checkpoint("runs/r1/checkpoints", "out/", step=None)   # newest step
    cfg = export_tensors(client.pull(4)[1], base_cfg, "out/")                  # a pulled version
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

import jax
import ml_dtypes
import numpy as np

from rlx_core.errors import FailedPrecondition, InvalidArgument
from rlx_model import ModelConfig, param_shapes, save_checkpoint
from rlx_model.config import Dtype
from rlx_model.decoder import unflatten
from rlx_trainer.checkpoint import CheckpointStore
from rlx_trainer.trainer import _NP_DTYPES, model_config_from_dict

__all__ = ["export_checkpoint", "export_tensors"]

_DTYPE_NAMES: dict[np.dtype, Dtype] = {
    np.dtype(np.float32): "float32",
    np.dtype(ml_dtypes.bfloat16): "bfloat16",
}


def export_checkpoint(
    uri: str, directory: str | os.PathLike[str], *, step: int | None = None, staging_dir: str = ""
) -> tuple[int, ModelConfig]:
    """Write the params of trainer checkpoint `step` (None = newest) under `uri` as an HF
    checkpoint into `directory`; (the step, the model config with the checkpoint's param dtype).
    Only the params are read, not the optimizer state. `staging_dir`: where an s3:// checkpoint
    is downloaded to first (default: a new temporary directory). NotFound naming the committed
    steps when `step` is not one."""
    store = CheckpointStore(uri, staging_dir=staging_dir, read_only=True)
    try:
        step, meta = store.meta(step)
        cfg = model_config_from_dict(meta["model"])
        dtype = _NP_DTYPES[cfg.param_dtype]
        abstract = unflatten(
            {p: jax.ShapeDtypeStruct(s, dtype) for p, s in param_shapes(cfg).items()}
        )
        params = store.restore_params(step, abstract)
    finally:
        store.close()
    save_checkpoint(Path(directory), cfg, params)
    return step, cfg


def export_tensors(
    tensors: Mapping[str, np.ndarray], cfg: ModelConfig, directory: str | os.PathLike[str]
) -> ModelConfig:
    """Write params given as '/'-path tensors (what the trainer pushes to the paramserver) of a
    model of architecture `cfg` as an HF checkpoint into `directory`; returns `cfg` with the
    tensors' dtype as its param dtype. FailedPrecondition naming the first tensor that is
    missing, extra, or of another shape than `cfg` implies."""
    shapes = param_shapes(cfg)
    missing = sorted(set(shapes) - set(tensors))
    extra = sorted(set(tensors) - set(shapes))
    if missing or extra:
        raise FailedPrecondition(
            f"the tensors are not those of the run's model ({cfg.family} L{cfg.num_layers} "
            f"d{cfg.hidden_size}): missing {missing[:3] or 'none'}, "
            f"unexpected {extra[:3] or 'none'}"
        )
    for path, shape in shapes.items():
        if tuple(tensors[path].shape) != tuple(shape):
            raise FailedPrecondition(
                f"tensor {path!r} has shape {tuple(tensors[path].shape)}, but the run's model "
                f"implies {tuple(shape)}"
            )
    dtypes = {np.dtype(t.dtype) for t in tensors.values()}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _DTYPE_NAMES:
        raise InvalidArgument(
            f"the tensors must share one dtype of {sorted(_DTYPE_NAMES.values())}, got "
            f"{sorted(str(d) for d in dtypes)}"
        )
    cfg = dataclasses.replace(cfg, param_dtype=_DTYPE_NAMES[dtypes.pop()])
    save_checkpoint(Path(directory), cfg, unflatten(dict(tensors)))
    return cfg
