"""`RLObjective`: one Agg, IS weights, one Adv, one GradTerm1 and GradTerm2 regularisers composed
into the unified objective of seeds/000 (DESIGN §5):

    J(θ) = 1/B Σ_b Σ_i Σ_t mask_bit · sg[Agg_bit · IS_bit] · ( sg[Adv_bit] · GradTerm1_bit
                                                              + GradTerm2_bit )
    loss = −J  (+ the value loss when the objective has a critic and values are passed)

IS is the product of the given IS components (1 when none); GradTerm2 the sum of the given
regularisers (0 when none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from rlx_core.errors import ConfigError, InvalidArgument
from rlx_trainer.objective.components import IS as ISWeight  # noqa: N811 (field name IS)
from rlx_trainer.objective.components import (
    Adv,
    Agg,
    GAEAdvantage,
    GradTerm1,
    GradTerm2,
    ValueLoss,
)
from rlx_trainer.objective.context import Context, ObjectiveBatch

__all__ = ["RLObjective"]

sg = jax.lax.stop_gradient


def _as_tuple(value: object, kind: type, field: str) -> tuple:
    items = () if value is None else (tuple(value) if isinstance(value, Sequence) else (value,))
    for item in items:
        if not isinstance(item, kind):
            raise ConfigError(
                f"RLObjective.{field}: expected {kind.__name__} components, got {item!r}",
                field=field,
                value=item,
                allowed=f"{kind.__name__}, a sequence of them, or None",
            )
    return items


@dataclasses.dataclass(frozen=True, kw_only=True)
class RLObjective:
    """The unified RL objective; `loss, metrics = obj(logp, batch)`.

    Call it with `logp` = log π_θ(o_it), float32 [B, G, T] (the only differentiable input) and an
    `ObjectiveBatch`. The whole call is jittable: it depends on the batch's shapes and `max_len`
    only. `metrics` is a dict of float32 scalars:

    - `loss`, `objective` (J), `pg_objective` and `reg_objective` (J's Adv·GradTerm1 and
      GradTerm2 parts), `value_loss` when a value loss is computed;
    - `ratio_mean`, `ratio_max`: r = π_θ/π_old over response tokens;
    - `is_weight_mean`, `is_weight_max`: the IS factor (1 when there is none);
    - `clip_frac_low`, `clip_frac_high`: fraction of response tokens the clip of GradTerm1 (the
      PPO mask) or, when it has none, of the IS weights, clipped below / above;
    - `kl_k1`, `kl_k3`: estimates of KL(π_θ ‖ π_ref) (when ref_logp is given): mean of
      log π_θ − log π_ref and of ρ − log ρ − 1, ρ = π_ref/π_θ;
    - `entropy_proxy`: −mean log π_θ over response tokens (an estimate of the entropy);
    - `adv_mean`, `adv_abs_mean` over response tokens; `response_tokens`.
    """

    agg: Agg  # aggregation weight Agg
    IS: ISWeight | Sequence[ISWeight] | None = None  # importance weights, multiplied; None = 1
    adv: Adv  # advantage estimator
    grad_1: GradTerm1  # main gradient term, multiplied by sg[Adv]
    grad_2: GradTerm2 | Sequence[GradTerm2] | None = None  # regularisers, summed; None = 0
    value: ValueLoss | None = None  # critic loss on the value head's outputs (PPO); None = off
    # DAPO's dynamic sampling: the controller drops groups whose rewards are all equal and
    # samples more; informational for the caller, the objective itself does not read it
    dynamic_sampling: bool = False

    def __post_init__(self) -> None:
        for field, kind in (("agg", Agg), ("adv", Adv), ("grad_1", GradTerm1)):
            if not isinstance(getattr(self, field), kind):
                raise ConfigError(
                    f"RLObjective.{field}: expected a {kind.__name__}, got "
                    f"{getattr(self, field)!r}",
                    field=field,
                    value=getattr(self, field),
                    allowed=kind.__name__,
                )
        object.__setattr__(self, "IS", _as_tuple(self.IS, ISWeight, "IS"))
        object.__setattr__(self, "grad_2", _as_tuple(self.grad_2, GradTerm2, "grad_2"))
        if self.value is not None and not isinstance(self.value, ValueLoss):
            raise ConfigError(
                f"RLObjective.value: expected a ValueLoss or None, got {self.value!r}",
                field="value",
                value=self.value,
                allowed="ValueLoss, None",
            )

    @property
    def is_weights(self) -> tuple[ISWeight, ...]:
        assert isinstance(self.IS, tuple)
        return self.IS

    @property
    def regularisers(self) -> tuple[GradTerm2, ...]:
        assert isinstance(self.grad_2, tuple)
        return self.grad_2

    def __call__(
        self, logp: jax.Array, batch: ObjectiveBatch, *, values: jax.Array | None = None
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """loss = −J (+ value loss) and the metrics. `values`: the value head's differentiable
        predictions V(s_t), float32 [B, G, T], for objectives with a `value` loss; without it
        the value loss is skipped (and `ObjectiveBatch.values` still feeds GAE)."""
        ctx = Context.build(logp, batch)
        mask = ctx.mask
        B = ctx.num_prompts

        adv = sg(self.adv(ctx))
        agg = self.agg(ctx)
        is_w = jnp.ones_like(mask)
        for w in self.is_weights:
            is_w = is_w * w(ctx)
        weight = sg(agg * is_w) * mask
        g1 = self.grad_1(ctx, adv)
        g2 = jnp.zeros_like(mask)
        for reg in self.regularisers:
            g2 = g2 + reg(ctx)

        pg = (weight * adv * g1).sum() / B
        reg_obj = (weight * g2).sum() / B
        objective = pg + reg_obj
        loss = -objective

        metrics: dict[str, jax.Array] = {
            "objective": objective,
            "pg_objective": pg,
            "reg_objective": reg_obj,
        }
        if values is not None and self.value is None:
            raise InvalidArgument(
                "values: this objective has no value loss (only critic presets such as ppo "
                "take the value head's predictions)",
                field="values",
            )
        if self.value is not None and values is not None:
            if tuple(values.shape) != tuple(logp.shape):
                raise InvalidArgument(
                    f"values: shape {tuple(values.shape)} does not match logp's "
                    f"{tuple(logp.shape)}",
                    field="values",
                )
            vl = self._value_loss(values, ctx, agg)
            loss = loss + self.value.coef * vl
            metrics["value_loss"] = vl
        metrics["loss"] = loss
        metrics.update(self._metrics(ctx, adv, is_w))
        return loss, metrics

    def _value_loss(self, values: jax.Array, ctx: Context, agg: jax.Array) -> jax.Array:
        assert self.value is not None
        if ctx.batch.returns is not None:
            returns = jnp.where(ctx.mask > 0, ctx.batch.returns.astype(jnp.float32), 0.0)
        elif isinstance(self.adv, GAEAdvantage):
            returns = self.adv.advantages_and_returns(ctx)[1]
        else:
            raise ConfigError(
                "returns: the value loss needs ObjectiveBatch.returns, or a GAEAdvantage to "
                "compute them",
                field="returns",
            )
        per_token = self.value.per_token(values, ctx, sg(returns))
        return (sg(agg) * ctx.mask * per_token).sum() / ctx.num_prompts

    def _metrics(self, ctx: Context, adv: jax.Array, is_w: jax.Array) -> dict[str, jax.Array]:
        ratio = jnp.exp(sg(ctx.log_ratio))
        clip = self.grad_1.clipped(ctx, adv)
        if clip is None:
            for w in self.is_weights:
                clip = w.clipped(ctx)
                if clip is not None:
                    break
        if clip is None:
            low = high = jnp.zeros((), jnp.float32)
        else:
            low = ctx.token_mean(clip[0].astype(jnp.float32))
            high = ctx.token_mean(clip[1].astype(jnp.float32))
        logp = sg(ctx.logp)
        out = {
            "ratio_mean": ctx.token_mean(ratio),
            "ratio_max": ctx.token_max(ratio),
            "is_weight_mean": ctx.token_mean(is_w),
            "is_weight_max": ctx.token_max(is_w),
            "clip_frac_low": low,
            "clip_frac_high": high,
            "entropy_proxy": -ctx.token_mean(logp),
            "adv_mean": ctx.token_mean(adv),
            "adv_abs_mean": ctx.token_mean(jnp.abs(adv)),
            "response_tokens": ctx.mask.sum(),
        }
        if ctx.ref_logp is not None:
            log_rho = ctx.ref_logp - logp
            out["kl_k1"] = ctx.token_mean(-log_rho)
            out["kl_k3"] = ctx.token_mean(jnp.exp(log_rho) - log_rho - 1.0)
        return out
