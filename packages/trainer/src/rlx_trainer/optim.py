"""The optimizer from config: global-norm clipping, then AdamW on a warmup + cosine schedule."""

from __future__ import annotations

from typing import Any

import jax
import optax

from rlx_trainer.config import OptimizerConfig

__all__ = ["make_optimizer", "make_schedule"]


def make_schedule(c: OptimizerConfig) -> optax.Schedule:
    """Learning rate per optimizer update: linear 0 → lr over `warmup_steps`, then cosine down
    to lr·final_lr_ratio over `decay_steps` (or flat at lr)."""
    if c.schedule == "constant":
        if c.warmup_steps == 0:
            return optax.constant_schedule(c.lr)
        return optax.warmup_constant_schedule(0.0, c.lr, c.warmup_steps)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0 if c.warmup_steps else c.lr,
        peak_value=c.lr,
        warmup_steps=c.warmup_steps,
        decay_steps=c.warmup_steps + c.decay_steps,
        end_value=c.lr * c.final_lr_ratio,
    )


def _decay_mask(params: Any) -> Any:
    """Weight decay on matrices only: not on norms, biases (nor anything 1-D per layer)."""

    def decays(path: tuple[Any, ...], _leaf: Any) -> bool:
        name = str(getattr(path[-1], "key", path[-1]))
        return not (name.endswith("norm") or name.endswith("bias"))

    return jax.tree_util.tree_map_with_path(decays, params)


def make_optimizer(c: OptimizerConfig) -> optax.GradientTransformation:
    adamw = optax.adamw(
        make_schedule(c),
        b1=c.b1,
        b2=c.b2,
        eps=c.eps,
        weight_decay=c.weight_decay,
        mask=_decay_mask,
    )
    if c.clip_norm == 0:
        return adamw
    return optax.chain(optax.clip_by_global_norm(c.clip_norm), adamw)
