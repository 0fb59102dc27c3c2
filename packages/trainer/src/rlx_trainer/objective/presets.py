"""Named objectives: `preset(name, **overrides)` builds the `RLObjective` of a published algorithm
from the components (DESIGN §5; the table with every preset's components is in the package
README).

Overrides common to every preset (None = the preset's default):
- `eps_low`, `eps_high`: the bounds of the preset's clip (the PPO mask for grpo, dapo, dr_grpo,
  reinforce_pp, ppo, decoupled_ppo and gspo, the IS clip for cispo). A preset without a clip
  (reinforce, token_reinforce, rloo) rejects a value.
- `beta`: the KL coefficient, 0 = no KL term. A preset without a KL term gets K3KL(beta).
- `tis_cap`: C of truncated IS (seeds/004): every token is multiplied by
  sg[min(π_old/π_sampler, C)]. Absent = off. For decoupled_ppo it truncates the behaviour
  weight π_prox/π_behav, which is that same ratio, instead of multiplying by it twice.

Some presets take more (listed in `preset_overrides(name)`): `dual_clip` (the PPO-mask presets),
`gamma`, `lam`, `whiten`, `vf_coef`, `vf_clip` (ppo).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from difflib import get_close_matches
from typing import Any

from rlx_core.errors import ConfigError
from rlx_trainer.objective.components import (
    IS,
    K2KL,
    K3KL,
    BatchNormAdvantage,
    BehaviourIS,
    ClippedIS,
    GAEAdvantage,
    GradTerm2,
    GroupAdvantage,
    GroupAggregation,
    IndividualAggregation,
    LeaveOneOutAdvantage,
    LogProbGrad,
    MaskedISGrad,
    MaxLengthAggregation,
    SequenceAggregation,
    SequenceIS,
    SequenceLogProbGrad,
    TokenIS,
    TruncatedIS,
    ValueLoss,
)
from rlx_trainer.objective.objective import RLObjective

__all__ = ["PRESETS", "preset", "preset_overrides"]

COMMON = ("eps_low", "eps_high", "beta", "tis_cap")


def _kl(beta: float, kind: type[K3KL] | type[K2KL] = K3KL) -> tuple[GradTerm2, ...]:
    return () if beta == 0 else (kind(beta=beta),)


def _tis(tis_cap: float | None) -> tuple[IS, ...]:
    return () if tis_cap is None else (TruncatedIS(cap=tis_cap),)


def grpo(
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.04,
    tis_cap: float | None = None,
    dual_clip: float | None = None,
) -> RLObjective:
    """GRPO (DeepSeekMath eq. 3): 1/G Σ_i 1/|o_i| Σ_t [min(r·Â, clip(r)·Â) − β K3], Â the
    group-normalised reward."""
    return RLObjective(
        agg=IndividualAggregation(),
        IS=_tis(tis_cap),
        adv=GroupAdvantage(normalise_std=True),
        grad_1=MaskedISGrad(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip),
        grad_2=_kl(beta),
    )


def dapo(
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    beta: float = 0.0,
    tis_cap: float | None = None,
    dual_clip: float | None = None,
) -> RLObjective:
    """DAPO (Yu et al. 2025): GRPO with clip-higher (eps_high 0.28), the group's token-level
    mean 1/Σ|o_i|, no KL and dynamic sampling (done by the controller)."""
    return RLObjective(
        agg=GroupAggregation(),
        IS=_tis(tis_cap),
        adv=GroupAdvantage(normalise_std=True),
        grad_1=MaskedISGrad(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip),
        grad_2=_kl(beta),
        dynamic_sampling=True,
    )


def dr_grpo(
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.0,
    tis_cap: float | None = None,
    dual_clip: float | None = None,
) -> RLObjective:
    """Dr.GRPO (Liu et al. 2025): GRPO with Agg 1/(G·L_max), Â = R − mean (no std), no KL."""
    return RLObjective(
        agg=MaxLengthAggregation(),
        IS=_tis(tis_cap),
        adv=GroupAdvantage(normalise_std=False),
        grad_1=MaskedISGrad(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip),
        grad_2=_kl(beta),
    )


def reinforce(*, beta: float = 0.0, tis_cap: float | None = None) -> RLObjective:
    """Sequence-level REINFORCE (seeds/000 appendix): 1/G Σ_i sg[r_i] (R_i − mean R)
    log π_θ(o_i), r_i = Π_t r_it."""
    return RLObjective(
        agg=SequenceAggregation(),
        IS=(SequenceIS(geometric=False), *_tis(tis_cap)),
        adv=GroupAdvantage(normalise_std=False),
        grad_1=SequenceLogProbGrad(),
        grad_2=_kl(beta),
    )


def token_reinforce(*, beta: float = 0.0, tis_cap: float | None = None) -> RLObjective:
    """Token-level REINFORCE (seeds/000 appendix): 1/(G·L_max) Σ_i Σ_t sg[r_it] (R_i − mean R)
    log π_θ(o_it)."""
    return RLObjective(
        agg=MaxLengthAggregation(),
        IS=(TokenIS(), *_tis(tis_cap)),
        adv=GroupAdvantage(normalise_std=False),
        grad_1=LogProbGrad(),
        grad_2=_kl(beta),
    )


def rloo(*, beta: float = 0.0, tis_cap: float | None = None, scaled: bool = False) -> RLObjective:
    """RLOO (Ahmadian et al. 2024): 1/G Σ_i sg[r_i] (R_i − 1/(G−1) Σ_{j≠i} R_j) log π_θ(o_i);
    `scaled` multiplies the advantage by (G−1)/G as in the seeds/000 appendix."""
    return RLObjective(
        agg=SequenceAggregation(),
        IS=(SequenceIS(geometric=False), *_tis(tis_cap)),
        adv=LeaveOneOutAdvantage(scaled=scaled),
        grad_1=SequenceLogProbGrad(),
        grad_2=_kl(beta),
    )


def reinforce_pp(
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.01,
    tis_cap: float | None = None,
    dual_clip: float | None = None,
    group_baseline: bool = False,
) -> RLObjective:
    """REINFORCE++ (Hu 2025): the PPO clip with the reward whitened over the whole batch
    (eqs. 11-12) and a K2 KL term (seeds/000)."""
    return RLObjective(
        agg=IndividualAggregation(),
        IS=_tis(tis_cap),
        adv=BatchNormAdvantage(group_baseline=group_baseline),
        grad_1=MaskedISGrad(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip),
        grad_2=_kl(beta, K2KL),
    )


def cispo(
    *,
    eps_low: float = 1.0,
    eps_high: float = 0.28,
    beta: float = 0.0,
    tis_cap: float | None = None,
) -> RLObjective:
    """CISPO (MiniMax-M1 eq. 4): 1/Σ|o_i| Σ_i Σ_t sg[clip(r_it, 1−ε_low, 1+ε_high)] Â_i
    log π_θ(o_it), Â group-normalised; eps_low 1.0 = no lower bound, as MiniMax-M1."""
    return RLObjective(
        agg=GroupAggregation(),
        IS=(ClippedIS(eps_low=eps_low, eps_high=eps_high), *_tis(tis_cap)),
        adv=GroupAdvantage(normalise_std=True),
        grad_1=LogProbGrad(),
        grad_2=_kl(beta),
    )


def gspo(
    *,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
    beta: float = 0.0,
    tis_cap: float | None = None,
) -> RLObjective:
    """GSPO (Zheng et al. 2025): 1/G Σ_i min(s_i Â_i, clip(s_i, 1−ε_low, 1+ε_high) Â_i),
    s_i = (π_θ(o_i)/π_old(o_i))^(1/|o_i|), written per token as GSPO-token."""
    return RLObjective(
        agg=IndividualAggregation(),
        IS=_tis(tis_cap),
        adv=GroupAdvantage(normalise_std=True),
        grad_1=MaskedISGrad(eps_low=eps_low, eps_high=eps_high, sequence=True),
        grad_2=_kl(beta),
    )


def ppo(
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.0,
    tis_cap: float | None = None,
    dual_clip: float | None = None,
    gamma: float = 1.0,
    lam: float = 0.95,
    whiten: bool = False,
    vf_coef: float = 0.5,
    vf_clip: float | None = 0.2,
) -> RLObjective:
    """PPO with a critic: 1/G Σ_i 1/|o_i| Σ_t min(r·A, clip(r)·A), A by GAE(γ, λ) from
    `ObjectiveBatch.values`, plus vf_coef · the clipped value loss when the call passes the value
    head's predictions (`obj(logp, batch, values=v)`)."""
    return RLObjective(
        agg=IndividualAggregation(),
        IS=_tis(tis_cap),
        adv=GAEAdvantage(gamma=gamma, lam=lam, whiten=whiten),
        grad_1=MaskedISGrad(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip),
        grad_2=_kl(beta),
        value=ValueLoss(coef=vf_coef, clip=vf_clip),
    )


def decoupled_ppo(
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.0,
    tis_cap: float | None = None,
    dual_clip: float | None = None,
) -> RLObjective:
    """Decoupled PPO (AReaL, seeds/003, after Hilton et al. 2022):
    1/G Σ_i 1/|o_i| Σ_t sg[π_prox/π_behav] · min(u·Â, clip(u, 1−ε, 1+ε)·Â), u = π_θ/π_prox.
    Mapping: π_behav = `sampler_logp` (the policy that generated the tokens, IS weight),
    π_prox = `old_logp` (the params before this update, recomputed by the trainer; the clip).
    Â group-normalised (AReaL trains without a critic)."""
    return RLObjective(
        agg=IndividualAggregation(),
        IS=BehaviourIS(cap=tis_cap),
        adv=GroupAdvantage(normalise_std=True),
        grad_1=MaskedISGrad(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip),
        grad_2=_kl(beta),
    )


PRESETS: dict[str, Callable[..., RLObjective]] = {
    "grpo": grpo,
    "dapo": dapo,
    "dr_grpo": dr_grpo,
    "reinforce": reinforce,
    "token_reinforce": token_reinforce,
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
    "cispo": cispo,
    "gspo": gspo,
    "ppo": ppo,
    "decoupled_ppo": decoupled_ppo,
}


def preset_overrides(name: str) -> dict[str, Any]:
    """The override names `preset(name, ...)` accepts, with the preset's defaults."""
    builder = _builder(name)
    return {p.name: p.default for p in inspect.signature(builder).parameters.values()}


def _hint(word: str, choices: list[str]) -> str:
    close = get_close_matches(word.lower(), choices, n=1, cutoff=0.6)
    close += [c for c in choices if word and c.startswith(word.lower()) and c not in close]
    return f"; did you mean {' or '.join(repr(c) for c in close[:3])}?" if close else ""


def _builder(name: str) -> Callable[..., RLObjective]:
    if not isinstance(name, str) or name not in PRESETS:
        known = sorted(PRESETS)
        raise ConfigError(
            f"unknown objective preset {name!r}{_hint(str(name), known)} "
            f"(known: {', '.join(known)})",
            field="preset",
            value=name,
            allowed=", ".join(known),
        )
    return PRESETS[name]


def preset(name: str, **overrides: Any) -> RLObjective:
    """The `RLObjective` of the named algorithm with `overrides` applied (see the module doc).

    >>> obj = preset("grpo", eps_low=0.2, eps_high=0.2, beta=0.04)

    Raises ConfigError naming an unknown preset or override (with a did-you-mean hint), an
    override the preset has no use for, or a value out of range.
    """
    builder = _builder(name)
    params = inspect.signature(builder).parameters
    kwargs: dict[str, Any] = {}
    for key, value in overrides.items():
        if key not in params:
            if key in COMMON:
                if value is None:
                    continue  # "the preset's default" for a term the preset does not have
                raise ConfigError(
                    f"{key}: preset {name!r} has no clip for {key} to bound (it applies to "
                    f"presets with a clip: {', '.join(_with(key))})",
                    field=key,
                    value=value,
                    allowed="None",
                )
            raise ConfigError(
                f"unknown override {key!r} for objective preset {name!r}"
                f"{_hint(key, list(params))} (allowed: {', '.join(params)})",
                field=key,
                value=value,
                allowed=", ".join(params),
            )
        if value is None:
            continue  # None = the preset's default
        default = params[key].default
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok:
            raise ConfigError(
                f"{key}: expected {'a bool' if isinstance(default, bool) else 'a number'}, "
                f"got {value!r}",
                field=key,
                value=value,
                allowed="bool" if isinstance(default, bool) else "a number",
            )
        kwargs[key] = value
    return builder(**kwargs)


def _with(key: str) -> list[str]:
    return [n for n, b in PRESETS.items() if key in inspect.signature(b).parameters]
