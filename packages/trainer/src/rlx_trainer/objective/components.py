"""The five kinds of term of the unified objective (seeds/000, DESIGN §5):

    J(θ) = 1/B Σ_b Σ_i Σ_t sg[Agg_it · IS_it] · ( sg[Adv_it] · GradTerm1_it + GradTerm2_it )

Each term is a small frozen, keyword-only dataclass with one job; an `RLObjective` composes one of
each. Every component is called with a `Context` (the masked arrays of one batch) and returns a
float32 [B, G, T] array; padding positions are multiplied by the mask afterwards, so a component
need not zero them. The policy names are those of `ObjectiveBatch`: r_it = π_θ/π_old.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp

from rlx_core.errors import ConfigError, InvalidArgument
from rlx_trainer.objective import ppo
from rlx_trainer.objective.context import Context

__all__ = [
    "IS",
    "K2KL",
    "K3KL",
    "Adv",
    "Agg",
    "BatchNormAdvantage",
    "BehaviourIS",
    "ClippedIS",
    "EntropyBonus",
    "GAEAdvantage",
    "GradTerm1",
    "GradTerm2",
    "GroupAdvantage",
    "GroupAggregation",
    "IndividualAggregation",
    "LeaveOneOutAdvantage",
    "LogProbGrad",
    "MaskedISGrad",
    "MaxLengthAggregation",
    "SequenceAggregation",
    "SequenceIS",
    "SequenceLogProbGrad",
    "TokenIS",
    "TruncatedIS",
    "ValueLoss",
]

sg = jax.lax.stop_gradient


def _check_eps(owner: str, eps_low: float, eps_high: float) -> None:
    if not 0.0 <= eps_low <= 1.0:
        raise ConfigError(
            f"{owner}: must be in [0, 1] (the lower bound is 1 − eps_low), got {eps_low}",
            field="eps_low",
            value=eps_low,
            allowed="0 <= eps_low <= 1",
        )
    if not eps_high >= 0.0:
        raise ConfigError(
            f"{owner}: must be >= 0, got {eps_high}",
            field="eps_high",
            value=eps_high,
            allowed="eps_high >= 0",
        )


def _check_nonneg(owner: str, name: str, value: float) -> None:
    if not value >= 0.0:
        raise ConfigError(
            f"{owner}: must be >= 0, got {value}", field=name, value=value, allowed=">= 0"
        )


def _group_mean(x: jax.Array) -> jax.Array:
    return x.mean(axis=1, keepdims=True)


# --------------------------------------------------------------------------------------------
# Agg: the aggregation weight of each token


@dataclasses.dataclass(frozen=True, kw_only=True)
class Agg:
    """Aggregation weight Agg_it ≥ 0 of each response token, per prompt (the objective then
    averages the B prompts)."""

    def __call__(self, ctx: Context) -> jax.Array:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True, kw_only=True)
class IndividualAggregation(Agg):
    """Agg_it = 1/(G·|o_i|): each sample's tokens are averaged, then the G samples (GRPO)."""

    def __call__(self, ctx: Context) -> jax.Array:
        n = jnp.maximum(ctx.lengths, 1.0)[..., None]
        return jnp.broadcast_to(1.0 / (ctx.group_size * n), ctx.mask.shape)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupAggregation(Agg):
    """Agg_it = 1/Σ_i' |o_i'|: every token of the group weighs the same (DAPO, CISPO).

    scope "prompt" normalises by the group's own token count (seeds/000); scope "batch" by the
    mean group token count of the batch, B/Σ_b Σ_i |o_bi|, so that after the mean over B
    prompts every token of the whole batch weighs the same (DAPO's token-level mean).
    """

    scope: Literal["prompt", "batch"] = "prompt"  # "prompt" or "batch", see above

    def __post_init__(self) -> None:
        if self.scope not in ("prompt", "batch"):
            raise ConfigError(
                f"GroupAggregation.scope: must be 'prompt' or 'batch', got {self.scope!r}",
                field="scope",
                value=self.scope,
                allowed="'prompt', 'batch'",
            )

    def __call__(self, ctx: Context) -> jax.Array:
        if self.scope == "prompt":
            n = ctx.lengths.sum(axis=1, keepdims=True)[..., None]
        else:
            n = jnp.broadcast_to(ctx.lengths.sum() / ctx.num_prompts, (1, 1, 1))
        return jnp.broadcast_to(1.0 / jnp.maximum(n, 1.0), ctx.mask.shape)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MaxLengthAggregation(Agg):
    """Agg_it = 1/(G·L_max), L_max = `ObjectiveBatch.max_len`: length-unbiased (Dr.GRPO,
    token-REINFORCE)."""

    def __call__(self, ctx: Context) -> jax.Array:
        return jnp.full(ctx.mask.shape, 1.0 / (ctx.group_size * ctx.max_len), jnp.float32)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SequenceAggregation(Agg):
    """Agg_it = 1[t = |o_i|]/G: one weight per sample, on its last token (sequence-level
    REINFORCE, RLOO; pair it with `SequenceLogProbGrad`)."""

    def __call__(self, ctx: Context) -> jax.Array:
        return ctx.last / ctx.group_size


# --------------------------------------------------------------------------------------------
# IS: importance weights, never differentiated


@dataclasses.dataclass(frozen=True, kw_only=True)
class IS:
    """Importance weight IS_it; the objective stops its gradient (seeds/000: IS carries none)."""

    def __call__(self, ctx: Context) -> jax.Array:
        raise NotImplementedError

    def clipped(self, ctx: Context) -> tuple[jax.Array, jax.Array] | None:
        """(low, high) 0/1 arrays of tokens whose weight was clipped, or None."""
        return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenIS(IS):
    """IS_it = r_it = π_θ(o_it)/π_old(o_it) (token-REINFORCE)."""

    def __call__(self, ctx: Context) -> jax.Array:
        return jnp.exp(sg(ctx.log_ratio))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClippedIS(IS):
    """IS_it = clip(r_it, 1 − eps_low, 1 + eps_high) (CISPO, MiniMax-M1 eq. 4): the weight is
    bounded but every token keeps its gradient through log π_θ."""

    eps_low: float = 1.0  # the weight is at least 1 − eps_low; in [0, 1]; 1 = no lower bound
    eps_high: float = 0.28  # the weight is at most 1 + eps_high; >= 0

    def __post_init__(self) -> None:
        _check_eps("ClippedIS", self.eps_low, self.eps_high)

    def __call__(self, ctx: Context) -> jax.Array:
        r = jnp.exp(sg(ctx.log_ratio))
        return jnp.clip(r, 1.0 - self.eps_low, 1.0 + self.eps_high)

    def clipped(self, ctx: Context) -> tuple[jax.Array, jax.Array]:
        r = jnp.exp(sg(ctx.log_ratio))
        return r < 1.0 - self.eps_low, r > 1.0 + self.eps_high


def _behaviour_weight(ctx: Context, cap: float | None) -> jax.Array:
    w = jnp.exp(ctx.old_logp - ctx.sampler_logp)
    return w if cap is None else jnp.minimum(w, cap)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TruncatedIS(IS):
    """IS_it = min(π_old(o_it)/π_sampler(o_it), C) (TIS, seeds/004): corrects the mismatch
    between the inference engine that sampled and the trainer's own π_old."""

    cap: float = 2.0  # C > 0, the truncation of the ratio

    def __post_init__(self) -> None:
        if not self.cap > 0.0:
            raise ConfigError(
                f"TruncatedIS.cap: must be > 0, got {self.cap}",
                field="tis_cap",
                value=self.cap,
                allowed="> 0",
            )

    def __call__(self, ctx: Context) -> jax.Array:
        return _behaviour_weight(ctx, self.cap)

    def clipped(self, ctx: Context) -> tuple[jax.Array, jax.Array]:
        w = jnp.exp(ctx.old_logp - ctx.sampler_logp)
        return jnp.zeros_like(w, bool), w > self.cap


@dataclasses.dataclass(frozen=True, kw_only=True)
class BehaviourIS(IS):
    """IS_it = π_prox(o_it)/π_behav(o_it) = π_old/π_sampler, truncated at `cap` when set
    (decoupled PPO, seeds/003 after Hilton et al.: the proximal policy π_prox is `old_logp`,
    the behaviour policy π_behav is `sampler_logp`)."""

    cap: float | None = None  # None = untruncated; else C > 0 as in TruncatedIS

    def __post_init__(self) -> None:
        if self.cap is not None and not self.cap > 0.0:
            raise ConfigError(
                f"BehaviourIS.cap: must be > 0 or None, got {self.cap}",
                field="tis_cap",
                value=self.cap,
                allowed="> 0 or None",
            )

    def __call__(self, ctx: Context) -> jax.Array:
        return _behaviour_weight(ctx, self.cap)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SequenceIS(IS):
    """IS_it = s_i, the same for every token of sample i. geometric: s_i = (Π_t r_it)^(1/|o_i|)
    = exp(mean_t log r_it) (GSPO's sequence ratio); otherwise s_i = r_i = Π_t r_it, the
    sequence ratio of sequence-level REINFORCE (seeds/000; it overflows far off-policy)."""

    geometric: bool = True  # True: geometric mean of token ratios; False: their product

    def __call__(self, ctx: Context) -> jax.Array:
        s = sg(ctx.log_ratio).sum(-1)
        if self.geometric:
            s = s / jnp.maximum(ctx.lengths, 1.0)
        return jnp.broadcast_to(jnp.exp(s)[..., None], ctx.mask.shape)


# --------------------------------------------------------------------------------------------
# Adv: advantage estimators (the objective stops their gradient)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Adv:
    """Advantage Adv_it of each token; computed from rewards (and values), never differentiated."""

    def __call__(self, ctx: Context) -> jax.Array:
        raise NotImplementedError


def _per_token(a: jax.Array, ctx: Context) -> jax.Array:
    return jnp.broadcast_to(a[..., None], ctx.mask.shape)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupAdvantage(Adv):
    """Adv_i = (R_i − mean_g R) / (std_g R + eps) with `normalise_std` (GRPO, DeepSeekMath), or
    R_i − mean_g R without it (Dr.GRPO, REINFORCE). mean/std over the G samples of a prompt;
    std with `ddof` (1 = the unbiased sample std, as torch.std)."""

    normalise_std: bool = True  # divide by the group's reward std
    ddof: int = 1  # delta degrees of freedom of the std: 0 or 1
    eps: float = 1e-6  # added to the std; a group of equal rewards gets advantage 0

    def __post_init__(self) -> None:
        if self.ddof not in (0, 1):
            raise ConfigError(
                f"GroupAdvantage.ddof: must be 0 or 1, got {self.ddof}",
                field="ddof",
                value=self.ddof,
                allowed="0, 1",
            )
        _check_nonneg("GroupAdvantage.eps", "eps", self.eps)

    def __call__(self, ctx: Context) -> jax.Array:
        R = ctx.batch.rewards.astype(jnp.float32)
        a = R - _group_mean(R)
        if self.normalise_std:
            G = R.shape[1]
            dof = max(G - self.ddof, 1)
            std = jnp.sqrt((a * a).sum(axis=1, keepdims=True) / dof)
            a = a / (std + self.eps)
        return _per_token(a, ctx)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LeaveOneOutAdvantage(Adv):
    """Adv_i = R_i − 1/(G−1) Σ_{j≠i} R_j (RLOO, Kool et al. / Ahmadian et al.); with `scaled`,
    (G−1)/G times that, as the appendix of seeds/000 writes it (which equals R_i − mean R)."""

    scaled: bool = False  # multiply by (G−1)/G

    def __call__(self, ctx: Context) -> jax.Array:
        R = ctx.batch.rewards.astype(jnp.float32)
        G = R.shape[1]
        if G < 2:
            raise InvalidArgument(
                f"rewards: leave-one-out needs G >= 2 samples per prompt, got G = {G}",
                field="rewards",
            )
        others = (R.sum(axis=1, keepdims=True) - R) / (G - 1)
        a = R - others
        if self.scaled:
            a = a * (G - 1) / G
        return _per_token(a, ctx)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchNormAdvantage(Adv):
    """REINFORCE++ (Hu 2025, eqs. 11-12): A_it = R_i (optionally minus the group mean first,
    `group_baseline`), then whitened over every response token of the batch:
    A ← (A − mean_batch A) / (std_batch A + eps)."""

    group_baseline: bool = False  # subtract the group mean reward first (REINFORCE++-baseline)
    eps: float = 1e-6  # added to the batch std

    def __post_init__(self) -> None:
        _check_nonneg("BatchNormAdvantage.eps", "eps", self.eps)

    def __call__(self, ctx: Context) -> jax.Array:
        R = ctx.batch.rewards.astype(jnp.float32)
        if self.group_baseline:
            R = R - _group_mean(R)
        return ppo.masked_whiten(_per_token(R, ctx), ctx.mask, eps=self.eps)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GAEAdvantage(Adv):
    """GAE (Schulman et al. 2016) with a value head: the outcome reward R_i is given on the last
    response token, δ_t = r_t + γ V_{t+1} − V_t, A_t = Σ_k (γλ)^k δ_{t+k} over response tokens,
    V past the end = 0. V = `ObjectiveBatch.values`. `whiten` normalises A over the batch."""

    gamma: float = 1.0  # discount per token, in [0, 1]
    lam: float = 0.95  # GAE λ, in [0, 1]
    whiten: bool = False  # whiten the advantages over all response tokens of the batch

    def __post_init__(self) -> None:
        for name in ("gamma", "lam"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ConfigError(
                    f"GAEAdvantage.{name}: must be in [0, 1], got {v}",
                    field=name,
                    value=v,
                    allowed="[0, 1]",
                )

    def advantages_and_returns(self, ctx: Context) -> tuple[jax.Array, jax.Array]:
        if ctx.batch.values is None:
            raise InvalidArgument(
                "values: GAE needs the value head's predictions ObjectiveBatch.values [B, G, T]",
                field="values",
            )
        values = jnp.where(ctx.mask > 0, ctx.batch.values.astype(jnp.float32), 0.0)
        token_rewards = ctx.last * ctx.batch.rewards.astype(jnp.float32)[..., None]
        adv, ret = ppo.gae(token_rewards, values, ctx.mask, gamma=self.gamma, lam=self.lam)
        if self.whiten:
            adv = ppo.masked_whiten(adv, ctx.mask)
        return adv, ret

    def __call__(self, ctx: Context) -> jax.Array:
        return self.advantages_and_returns(ctx)[0]


# --------------------------------------------------------------------------------------------
# GradTerm1: the main source of gradient, multiplied by the advantage


@dataclasses.dataclass(frozen=True, kw_only=True)
class GradTerm1:
    """GradTerm1_it, the term multiplied by sg[Adv_it]; carries the policy gradient."""

    def __call__(self, ctx: Context, adv: jax.Array) -> jax.Array:
        raise NotImplementedError

    def clipped(self, ctx: Context, adv: jax.Array) -> tuple[jax.Array, jax.Array] | None:
        """(low, high) 0/1 arrays of tokens the clip masked out, or None."""
        return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MaskedISGrad(GradTerm1):
    """GradTerm1_it = M_it · r_it + (1 − M_it) · sg[c_it], with the PPO clip mask of seeds/000

        M_it = 0 if A_it > 0 and r_it > 1 + eps_high,
               0 if A_it < 0 and r_it < 1 − eps_low,
               0 if A_it < 0 and r_it > dual_clip  (dual-clip PPO, Ye et al. 2020),
               1 otherwise,

    and c_it the clipped ratio (1 + eps_high, 1 − eps_low or dual_clip). The gradient is
    M_it · ∇r_it, exactly the seeds/000 term; the stop-gradient part only makes the value equal
    PPO's min(r·A, clip(r, 1 − eps_low, 1 + eps_high)·A) (and max(·, dual_clip·A) for A < 0).

    With `sequence` (GSPO, Zheng et al. 2025) r_it is replaced by the GSPO-token ratio
    s_it = sg[s_i] · π_θ(o_it)/sg[π_θ(o_it)], s_i = exp(mean_t log r_it), and M by the clip of s_i.
    """

    eps_low: float = 0.2  # lower clip 1 − eps_low; in [0, 1]
    eps_high: float = 0.2  # upper clip 1 + eps_high; >= 0
    dual_clip: float | None = None  # c > 1 of dual-clip PPO for A < 0; None = off
    sequence: bool = False  # GSPO: clip the length-normalised sequence ratio

    def __post_init__(self) -> None:
        _check_eps("MaskedISGrad", self.eps_low, self.eps_high)
        if self.dual_clip is not None and not self.dual_clip > 1.0:
            raise ConfigError(
                f"MaskedISGrad.dual_clip: must be > 1 or None, got {self.dual_clip}",
                field="dual_clip",
                value=self.dual_clip,
                allowed="> 1 or None",
            )

    def _ratio(self, ctx: Context) -> jax.Array:
        if not self.sequence:
            return ctx.ratio()
        log_s = sg(ctx.log_ratio).sum(-1) / jnp.maximum(ctx.lengths, 1.0)
        return jnp.exp(log_s)[..., None] * jnp.exp(ctx.logp - sg(ctx.logp))

    def _masks(self, r: jax.Array, adv: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array | None]:
        r = sg(r)
        high = (adv > 0) & (r > 1.0 + self.eps_high)
        low = (adv < 0) & (r < 1.0 - self.eps_low)
        dual = None
        if self.dual_clip is not None:
            dual = (adv < 0) & (r > self.dual_clip)
        return low, high, dual

    def __call__(self, ctx: Context, adv: jax.Array) -> jax.Array:
        r = self._ratio(ctx)
        low, high, dual = self._masks(r, adv)
        out = jnp.where(high, 1.0 + self.eps_high, jnp.where(low, 1.0 - self.eps_low, r))
        if dual is not None and self.dual_clip is not None:
            out = jnp.where(dual, self.dual_clip, out)
        return out

    def clipped(self, ctx: Context, adv: jax.Array) -> tuple[jax.Array, jax.Array]:
        low, high, dual = self._masks(self._ratio(ctx), adv)
        return low, high if dual is None else (high | dual)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogProbGrad(GradTerm1):
    """GradTerm1_it = log π_θ(o_it) (REINFORCE-family: token-REINFORCE, CISPO)."""

    def __call__(self, ctx: Context, adv: jax.Array) -> jax.Array:
        return ctx.logp


@dataclasses.dataclass(frozen=True, kw_only=True)
class SequenceLogProbGrad(GradTerm1):
    """GradTerm1_it = 1[t = |o_i|] · Σ_t' log π_θ(o_it') = log π_θ(o_i) on the last token
    (sequence-level REINFORCE, RLOO; pair it with `SequenceAggregation`)."""

    def __call__(self, ctx: Context, adv: jax.Array) -> jax.Array:
        return ctx.last * ctx.logp.sum(-1, keepdims=True)


# --------------------------------------------------------------------------------------------
# GradTerm2: regularisers, not multiplied by the advantage


@dataclasses.dataclass(frozen=True, kw_only=True)
class GradTerm2:
    """GradTerm2_it, a regulariser added to sg[Adv]·GradTerm1 (weighted by Agg·IS)."""

    def __call__(self, ctx: Context) -> jax.Array:
        raise NotImplementedError


def _ref_log_ratio(ctx: Context, owner: str) -> jax.Array:
    """log ρ_it = log π_ref(o_it) − log π_θ(o_it)."""
    if ctx.ref_logp is None:
        raise InvalidArgument(
            f"ref_logp: {owner} needs the reference model's log-probs ObjectiveBatch.ref_logp "
            "(or beta=0 for no KL term)",
            field="ref_logp",
        )
    return ctx.ref_logp - ctx.logp


@dataclasses.dataclass(frozen=True, kw_only=True)
class K3KL(GradTerm2):
    """GradTerm2_it = −beta · (ρ − log ρ − 1), ρ = π_ref(o_it)/π_θ(o_it): the K3 estimator of
    KL(π_θ ‖ π_ref) (DeepSeekMath eq. 4), ≥ 0 and 0 iff π_θ = π_ref on the token."""

    beta: float = 0.04  # KL coefficient, >= 0

    def __post_init__(self) -> None:
        _check_nonneg("K3KL.beta", "beta", self.beta)

    def __call__(self, ctx: Context) -> jax.Array:
        log_rho = _ref_log_ratio(ctx, "K3KL")
        return -self.beta * (jnp.exp(log_rho) - log_rho - 1.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class K2KL(GradTerm2):
    """GradTerm2_it = −beta · ½ (log π_θ(o_it) − log π_ref(o_it))²: the K2 estimator of
    KL(π_θ ‖ π_ref) (REINFORCE++)."""

    beta: float = 0.01  # KL coefficient, >= 0

    def __post_init__(self) -> None:
        _check_nonneg("K2KL.beta", "beta", self.beta)

    def __call__(self, ctx: Context) -> jax.Array:
        log_rho = _ref_log_ratio(ctx, "K2KL")
        return -self.beta * 0.5 * log_rho * log_rho


@dataclasses.dataclass(frozen=True, kw_only=True)
class EntropyBonus(GradTerm2):
    """GradTerm2_it = −coef · sg[log π_θ(o_it)] · log π_θ(o_it): a score-function surrogate
    whose gradient is coef · ∇H(π_θ) in expectation over tokens sampled from π_θ
    (∇H = −E[log π · ∇log π]). Its value is not the entropy; the metric `entropy_proxy` is."""

    coef: float = 1e-3  # entropy bonus coefficient, >= 0

    def __post_init__(self) -> None:
        _check_nonneg("EntropyBonus.coef", "coef", self.coef)

    def __call__(self, ctx: Context) -> jax.Array:
        return -self.coef * sg(ctx.logp) * ctx.logp


# --------------------------------------------------------------------------------------------
# value head (PPO with a critic): not a term of J, a separate loss on the value head's outputs


@dataclasses.dataclass(frozen=True, kw_only=True)
class ValueLoss:
    """L_V = coef · Σ_it Agg_it · ½ max((V_it − R̂_it)², (clip(V_it, V_old ± clip) − R̂_it)²),
    averaged over the B prompts; V the value head's differentiable predictions, V_old =
    `ObjectiveBatch.values`, R̂ = `ObjectiveBatch.returns` or GAE advantages + V_old."""

    coef: float = 0.5  # weight of the value loss in the total loss, >= 0
    clip: float | None = 0.2  # clip range of V around V_old; None = unclipped

    def __post_init__(self) -> None:
        _check_nonneg("ValueLoss.coef", "vf_coef", self.coef)
        if self.clip is not None:
            _check_nonneg("ValueLoss.clip", "vf_clip", self.clip)

    def per_token(self, values: jax.Array, ctx: Context, returns: jax.Array) -> jax.Array:
        if ctx.batch.values is None:
            raise InvalidArgument(
                "values: the value loss needs ObjectiveBatch.values (V_old) [B, G, T]",
                field="values",
            )
        old = jnp.where(ctx.mask > 0, ctx.batch.values.astype(jnp.float32), 0.0)
        v = jnp.where(ctx.mask > 0, values.astype(jnp.float32), 0.0)
        return ppo.value_loss(v, old, returns, clip=self.clip)
