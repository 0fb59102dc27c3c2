"""The modular RL objective (DESIGN §5): components composed into an `RLObjective`, and presets.

    from rlx_trainer.objective import preset, ObjectiveBatch
    obj = preset("grpo", eps_low=0.2, eps_high=0.2, beta=0.04)
    loss, metrics = obj(logp, ObjectiveBatch(old_logp=..., sampler_logp=..., ref_logp=...,
                                              mask=..., rewards=..., max_len=L))

or, from components as in the seeds/000 listing:

    obj = RLObjective(agg=IndividualAggregation(), IS=None,
                      adv=GroupAdvantage(normalise_std=True),
                      grad_1=MaskedISGrad(eps_low=0.2, eps_high=0.2), grad_2=K3KL(beta=0.04))
"""

from rlx_trainer.objective import ppo
from rlx_trainer.objective.components import (
    IS,
    K2KL,
    K3KL,
    Adv,
    Agg,
    BatchNormAdvantage,
    BehaviourIS,
    ClippedIS,
    EntropyBonus,
    GAEAdvantage,
    GradTerm1,
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
from rlx_trainer.objective.context import Context, ObjectiveBatch
from rlx_trainer.objective.objective import RLObjective
from rlx_trainer.objective.presets import PRESETS, preset, preset_overrides

__all__ = [
    "IS",
    "K2KL",
    "K3KL",
    "PRESETS",
    "Adv",
    "Agg",
    "BatchNormAdvantage",
    "BehaviourIS",
    "ClippedIS",
    "Context",
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
    "ObjectiveBatch",
    "RLObjective",
    "SequenceAggregation",
    "SequenceIS",
    "SequenceLogProbGrad",
    "TokenIS",
    "TruncatedIS",
    "ValueLoss",
    "ppo",
    "preset",
    "preset_overrides",
]
