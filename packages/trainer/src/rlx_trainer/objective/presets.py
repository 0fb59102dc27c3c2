"""Named objectives: `preset(name, **overrides)` builds the `RLObjective` of a published algorithm
from the components (DESIGN §5; the table with every preset's components is in the package
README).

Which overrides each preset takes, and their defaults, is the JAX-free table
`rlx_core.configs.objective.PRESET_DEFAULTS` (the run config validates against it); the builders
here take exactly those names, with no defaults of their own. Overrides common to every preset
(None = the preset's default):
- `eps_low`, `eps_high`: the bounds of the preset's clip (the PPO mask for grpo, dapo, dr_grpo,
  reinforce_pp, ppo, decoupled_ppo and gspo, the IS clip for cispo). A preset without a clip
  (reinforce, token_reinforce, rloo) rejects a value.
- `beta`: the KL coefficient, 0 = no KL term. A preset without a KL term gets K3KL(beta).
- `tis_cap`: C of truncated IS (seeds/004): every token is multiplied by
  sg[min(π_old/π_sampler, C)]. Absent = off. For decoupled_ppo it truncates the behaviour
  weight π_prox/π_behav, which is that same ratio, instead of multiplying by it twice.

Some presets take more (listed in `preset_overrides(name)`): `dual_clip` (the PPO-mask presets),
`scaled` (rloo), `group_baseline` (reinforce_pp), `gamma`, `lam`, `whiten`, `vf_coef`, `vf_clip`
(ppo).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from rlx_core.configs.checks import suggest
from rlx_core.configs.objective import COMMON_OVERRIDES, PRESET_DEFAULTS, presets_taking
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

# name -> builder, filled by @_preset (in PRESET_DEFAULTS's order below)
_BUILDERS: dict[str, Callable[..., RLObjective]] = {}


def _preset(builder: Callable[..., RLObjective]) -> Callable[..., RLObjective]:
    """Register `builder` as the preset of its name; its keyword parameters must be the
    overrides PRESET_DEFAULTS lists for it (TypeError at import otherwise)."""
    name = builder.__name__
    params = list(inspect.signature(builder).parameters)
    if name not in PRESET_DEFAULTS or params != list(PRESET_DEFAULTS[name]):
        want = list(PRESET_DEFAULTS.get(name, {}))
        raise TypeError(f"preset builder {name}{tuple(params)} != PRESET_DEFAULTS[{name!r}] {want}")
    _BUILDERS[name] = builder
    return builder


def _kl(beta: float, kind: type[K3KL] | type[K2KL] = K3KL) -> tuple[GradTerm2, ...]:
    return () if beta == 0 else (kind(beta=beta),)


def _tis(tis_cap: float | None) -> tuple[IS, ...]:
    return () if tis_cap is None else (TruncatedIS(cap=tis_cap),)


@_preset
def grpo(
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    tis_cap: float | None,
    dual_clip: float | None,
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


@_preset
def dapo(
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    tis_cap: float | None,
    dual_clip: float | None,
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


@_preset
def dr_grpo(
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    tis_cap: float | None,
    dual_clip: float | None,
) -> RLObjective:
    """Dr.GRPO (Liu et al. 2025): GRPO with Agg 1/(G·L_max), Â = R − mean (no std), no KL."""
    return RLObjective(
        agg=MaxLengthAggregation(),
        IS=_tis(tis_cap),
        adv=GroupAdvantage(normalise_std=False),
        grad_1=MaskedISGrad(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip),
        grad_2=_kl(beta),
    )


@_preset
def reinforce(*, beta: float, tis_cap: float | None) -> RLObjective:
    """Sequence-level REINFORCE (seeds/000 appendix): 1/G Σ_i sg[r_i] (R_i − mean R)
    log π_θ(o_i), r_i = Π_t r_it."""
    return RLObjective(
        agg=SequenceAggregation(),
        IS=(SequenceIS(geometric=False), *_tis(tis_cap)),
        adv=GroupAdvantage(normalise_std=False),
        grad_1=SequenceLogProbGrad(),
        grad_2=_kl(beta),
    )


@_preset
def token_reinforce(*, beta: float, tis_cap: float | None) -> RLObjective:
    """Token-level REINFORCE (seeds/000 appendix): 1/(G·L_max) Σ_i Σ_t sg[r_it] (R_i − mean R)
    log π_θ(o_it)."""
    return RLObjective(
        agg=MaxLengthAggregation(),
        IS=(TokenIS(), *_tis(tis_cap)),
        adv=GroupAdvantage(normalise_std=False),
        grad_1=LogProbGrad(),
        grad_2=_kl(beta),
    )


@_preset
def rloo(*, beta: float, tis_cap: float | None, scaled: bool) -> RLObjective:
    """RLOO (Ahmadian et al. 2024): 1/G Σ_i sg[r_i] (R_i − 1/(G−1) Σ_{j≠i} R_j) log π_θ(o_i);
    `scaled` multiplies the advantage by (G−1)/G as in the seeds/000 appendix."""
    return RLObjective(
        agg=SequenceAggregation(),
        IS=(SequenceIS(geometric=False), *_tis(tis_cap)),
        adv=LeaveOneOutAdvantage(scaled=scaled),
        grad_1=SequenceLogProbGrad(),
        grad_2=_kl(beta),
    )


@_preset
def reinforce_pp(
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    tis_cap: float | None,
    dual_clip: float | None,
    group_baseline: bool,
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


@_preset
def cispo(
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    tis_cap: float | None,
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


@_preset
def gspo(
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    tis_cap: float | None,
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


@_preset
def ppo(
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    tis_cap: float | None,
    dual_clip: float | None,
    gamma: float,
    lam: float,
    whiten: bool,
    vf_coef: float,
    vf_clip: float | None,
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


@_preset
def decoupled_ppo(
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    tis_cap: float | None,
    dual_clip: float | None,
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


_missing = set(PRESET_DEFAULTS) - set(_BUILDERS)
if _missing:
    raise TypeError(f"presets without a builder: {sorted(_missing)}")
# name -> builder, in DESIGN §5's order
PRESETS: dict[str, Callable[..., RLObjective]] = {name: _BUILDERS[name] for name in PRESET_DEFAULTS}


def preset_overrides(name: str) -> dict[str, Any]:
    """The override names `preset(name, ...)` accepts, with the preset's defaults."""
    _builder(name)
    return dict(PRESET_DEFAULTS[name])


def _hint(word: str, choices: list[str]) -> str:
    hint = suggest(word, choices)
    return f"; {hint}" if hint else ""


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
    defaults = PRESET_DEFAULTS[name]
    kwargs: dict[str, Any] = dict(defaults)
    for key, value in overrides.items():
        if key not in defaults:
            if key in COMMON_OVERRIDES:
                if value is None:
                    continue  # "the preset's default" for a term the preset does not have
                raise ConfigError(
                    f"{key}: preset {name!r} has no clip for {key} to bound (it applies to "
                    f"presets with a clip: {', '.join(presets_taking(key))})",
                    field=key,
                    value=value,
                    allowed="None",
                )
            raise ConfigError(
                f"unknown override {key!r} for objective preset {name!r}"
                f"{_hint(key, list(defaults))} (allowed: {', '.join(defaults)})",
                field=key,
                value=value,
                allowed=", ".join(defaults),
            )
        if value is None:
            continue  # None = the preset's default
        is_bool = isinstance(defaults[key], bool)
        if is_bool:
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok:
            raise ConfigError(
                f"{key}: expected {'a bool' if is_bool else 'a number'}, got {value!r}",
                field=key,
                value=value,
                allowed="bool" if is_bool else "a number",
            )
        kwargs[key] = value
    return builder(**kwargs)
