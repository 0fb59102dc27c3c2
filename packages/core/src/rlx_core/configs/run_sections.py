"""The run config's `[trainer]` and `[inference]` tables: the services' own config sections
(rlx_core.configs), composed, never copied. What the run decides itself (where a service listens,
the paramserver addresses, the checkpoint directory, worker and replica numbers) is not here:
`rlx_launch.service_configs` fills it in when it writes each service's config.

    [trainer.objective]   rlx_trainer's ObjectiveConfig: preset, and each override as a field
    [trainer.optimizer]   OptimizerConfig (AdamW: lr, schedule, b1, b2, eps, ...)
    [trainer.update]      UpdateConfig (minibatches, epochs, old_policy, reference, ...)
    [trainer.model]       ModelOptions (remat, logprob_chunk, dtypes)
    [trainer.mesh]        MeshConfig (data, fsdp, tensor)
    [trainer.metrics]     MetricsConfig (mismatch thresholds)
    [inference.engine]    rlx_inference's EngineConfig (slots, cache_mib, max_context, ...)
    [inference.limits]    UnitLimits (the largest work unit a worker takes)

`[verifier]` and `[paramserver]` are the VerifierConfig and ParamServerConfig themselves (see
RunConfig).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlx_core.config import config_field
from rlx_core.configs.inference import EngineConfig, UnitLimits
from rlx_core.configs.trainer import (
    MeshConfig,
    MetricsConfig,
    ModelOptions,
    ObjectiveConfig,
    OptimizerConfig,
    TrainerConfig,
    UpdateConfig,
)

__all__ = ["InferenceSection", "TrainerSection"]


@dataclass(frozen=True, kw_only=True)
class TrainerSection:
    """The trainer's settings in a run: rlx_trainer's config sections (rlx_core.configs.trainer),
    checked together as the trainer checks them (a KL term needs a reference model)."""

    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)  # preset and overrides
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)  # AdamW and its schedule
    update: UpdateConfig = config_field(
        default_factory=UpdateConfig,
        merge=True,
        doc="how a batch becomes updates; old_policy auto = generation (π_old is the version "
        "that generated the batch, recomputed by the trainer: the ratio and the clip act on "
        "staleness) except for decoupled_ppo (step_start: its proximal policy)",
    )
    # remat, logprob_chunk and the trainer's dtypes; unset: ModelOptions' defaults with the
    # dtypes of [model]; set: its param_dtype and compute_dtype must be those of [model]
    model: ModelOptions | None = None
    # the trainer's device mesh; unset: (1, 1, 1), or provision.trainer_mesh with gcp-tpu
    mesh: MeshConfig | None = None
    metrics: MetricsConfig = field(default_factory=MetricsConfig)  # mismatch warn/stop thresholds

    def __post_init__(self) -> None:
        # what the trainer's own config checks across its sections, at load (not at start)
        TrainerConfig(
            model=self.model or ModelOptions(),
            mesh=self.mesh or MeshConfig(),
            optimizer=self.optimizer,
            objective=self.objective,
            update=self.update,
            metrics=self.metrics,
        )


@dataclass(frozen=True, kw_only=True)
class InferenceSection:
    """The inference workers' settings in a run: rlx_inference's engine and unit limits."""

    # the generation engine; unset: the run sizes it from [batch] (slots = prompts per unit × G,
    # at most 256; max_context = prompt + new tokens in whole blocks, one decode span;
    # cache_mib 64); set: exactly as written (unset fields at the engine's own defaults), and
    # max_context must hold batch.max_prompt_tokens + batch.max_new_tokens
    engine: EngineConfig | None = None
    limits: UnitLimits = field(default_factory=UnitLimits)  # the largest unit a worker takes
