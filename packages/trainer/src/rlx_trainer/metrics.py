"""Per-step metrics, computed on the host from what the compiled step returns: the numerical
mismatch (sampler vs trainer on the same version) and its thresholds, the policy lag (the
generating version vs the params the step starts from), and the reduction of per-microbatch
objective metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlx_core.errors import FailedPrecondition
from rlx_trainer.config import MetricsConfig

__all__ = ["check_thresholds", "mismatch", "policy_lag", "summarize"]

# reduced with max / min over microbatches; everything else is averaged
_MAX = {"ratio_max", "is_weight_max"}
_MIN = {"ratio_min"}
# summed over the first epoch's microbatches (they cover the batch once)
_SUM = {"response_tokens"}


def mismatch(
    sampler_logp: np.ndarray, trainer_logp: np.ndarray, mask: np.ndarray
) -> dict[str, float]:
    """mean, max and p95 of |log π_sampler − log π_trainer| over the tokens where mask > 0."""
    on = mask > 0
    diff = np.abs(sampler_logp[on].astype(np.float64) - trainer_logp[on].astype(np.float64))
    if diff.size == 0:
        return {"mismatch_mean": 0.0, "mismatch_max": 0.0, "mismatch_p95": 0.0}
    return {
        "mismatch_mean": float(diff.mean()),
        "mismatch_max": float(diff.max()),
        "mismatch_p95": float(np.percentile(diff, 95)),
    }


def policy_lag(gen_logp: np.ndarray, cur_logp: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """How far the params a step starts from (π_cur) have moved from the version that generated
    its rollouts (π_gen), over the tokens where mask > 0, the tokens sampled from π_gen:
    `lag_kl_k3`, the k3 estimate of KL(π_gen || π_cur) (mean of r − 1 − log r with
    r = π_cur/π_gen), and `lag_ratio_min` / `lag_ratio_max`, the range of r."""
    on = mask > 0
    log_r = cur_logp[on].astype(np.float64) - gen_logp[on].astype(np.float64)
    if log_r.size == 0:
        return {"lag_kl_k3": 0.0, "lag_ratio_min": 1.0, "lag_ratio_max": 1.0}
    r = np.exp(log_r)
    return {
        "lag_kl_k3": float(np.mean(r - 1.0 - log_r)),
        "lag_ratio_min": float(r.min()),
        "lag_ratio_max": float(r.max()),
    }


def check_thresholds(stats: Mapping[str, float], cfg: MetricsConfig) -> list[str]:
    """Warnings for the warn_* thresholds crossed; FailedPrecondition for a stop_* one."""
    warnings = []
    for stat in ("mean", "max"):
        value = stats[f"mismatch_{stat}"]
        stop = getattr(cfg, f"stop_mismatch_{stat}")
        if stop is not None and value > stop:
            raise FailedPrecondition(
                f"mismatch_{stat} {value:.4g} > metrics.stop_mismatch_{stat} {stop:g}: "
                "the sampler's log-probs disagree with the trainer's; step not applied"
            )
        warn = getattr(cfg, f"warn_mismatch_{stat}")
        if warn is not None and value > warn:
            warnings.append(f"mismatch_{stat} {value:.4g} > metrics.warn_mismatch_{stat} {warn:g}")
    return warnings


def summarize(
    per_micro: Sequence[Mapping[str, Any]],
    grad_norms: Sequence[float],
    *,
    kind: str,
    grad_accum: int,
    per_epoch: int,
) -> dict[str, float]:
    """One value per metric for the step, from the metrics of every microbatch in update order.

    `loss`: RL microbatch losses are means over their prompts, so an update's loss is their
    mean; SFT microbatch losses are already divided by the minibatch's token count, so an
    update's loss is their sum. The step's loss is the mean over updates.
    `ratio_max_abs_dev` is taken over the first update only (its `grad_accum` microbatches),
    where π_θ is still π_old's params when the batch is on-policy; sums (`response_tokens`) over
    the first epoch (`per_epoch` microbatches), which covers the batch once.
    """
    out: dict[str, float] = {}
    names = sorted(per_micro[0]) if per_micro else []
    updates = len(per_micro) // grad_accum
    first_epoch = per_micro[:per_epoch]
    for name in names:
        values = np.array([float(m[name]) for m in per_micro], dtype=np.float64)
        if name == "loss":
            by_update = values.reshape(updates, grad_accum)
            per_update = by_update.sum(1) if kind == "sft" else by_update.mean(1)
            out[name] = float(per_update.mean())
        elif name == "ratio_max_abs_dev":
            out[name] = float(values[:grad_accum].max())
        elif name in _MAX:
            out[name] = float(values.max())
        elif name in _MIN:
            out[name] = float(values.min())
        elif name in _SUM:
            out[name] = float(sum(float(m[name]) for m in first_epoch))
        else:
            out[name] = float(values.mean())
    if "clip_frac_low" in out:
        out["clip_frac"] = out["clip_frac_low"] + out.get("clip_frac_high", 0.0)
    out["grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
    return out
