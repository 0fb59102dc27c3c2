"""Each service's config for a run: the run config's sections, composed into the service's own
config class (rlx_core.configs), plus what the run decides itself (the paramserver addresses,
the checkpoint directory, the worker and replica numbers). Every service config is written with
the one TOML writer, `rlx_core.config.to_toml`, and read back by the service with its own loader.

    trainer_config(cfg, paramservers=[...], token_file=..., checkpoint_uri=...) -> TrainerConfig
    inference_config(cfg, i, paramservers=[...], token_file=...)              -> InferenceConfig
    paramserver_config(cfg, i)                                               -> ParamServerConfig
    verifier_config(cfg)                                                      -> VerifierConfig

Where the run config leaves a choice to the run, it is made here, once: the trainer's model
options take [model]'s dtypes, its mesh is [provision]'s on TPU, and the inference engine is
sized from [batch] (see `engine_config`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rlx_core.configs.inference import EngineConfig, InferenceConfig, ModelSource
from rlx_core.configs.inference import ParamServerLink as InferenceLink
from rlx_core.configs.paramserver import ParamServerConfig
from rlx_core.configs.run import RunConfig
from rlx_core.configs.trainer import (
    CheckpointConfig,
    MeshConfig,
    ModelOptions,
    TrainerConfig,
)
from rlx_core.configs.trainer import ParamServerLink as TrainerLink
from rlx_core.configs.verifier import VerifierConfig

__all__ = [
    "engine_config",
    "engine_context",
    "inference_config",
    "paramserver_config",
    "trainer_checkpoint_keep",
    "trainer_config",
    "verifier_config",
]

MAX_RUN_SLOTS = 256  # the run-sized engine decodes at most this many sequences together
RUN_CACHE_MIB = 64  # the run-sized engine's KV pool, MiB


def engine_context(cfg: RunConfig, block: int = EngineConfig().block_size) -> int:
    """max_context of the run-sized engine: prompt + new tokens, rounded up to whole KV blocks."""
    need = cfg.batch.max_prompt_tokens + cfg.batch.max_new_tokens
    return -(-need // block) * block


def engine_config(cfg: RunConfig, *, tensor_parallel: int | None = None) -> EngineConfig:
    """The workers' engine: `[inference.engine]` as written, else sized for the run's units
    (one unit's samples decode together, one decode span of the whole context), with
    `tensor_parallel` (a TPU slice's split) when given."""
    if cfg.inference.engine is not None:
        return cfg.inference.engine
    context = engine_context(cfg)
    engine = EngineConfig(
        slots=min(MAX_RUN_SLOTS, cfg.batch.unit_prompts * cfg.batch.group_size),
        cache_mib=RUN_CACHE_MIB,
        max_context=context,
        span_bucket=context,
    )
    if tensor_parallel is not None:
        engine = replace(engine, tensor_parallel=tensor_parallel)
    return engine


def trainer_checkpoint_keep(cfg: RunConfig) -> int:
    """Checkpoints the trainer keeps: `snapshots.checkpoint_keep` plus those that can be newer
    than the one a snapshot names. A snapshot at step S names the newest checkpoint at or below
    v(S) >= S - (lag + j - 1) (rlx_controller.driver), so up to ceil((lag + j - 1) /
    checkpoint_every) newer ones must not push it out."""
    gap = cfg.staleness.effective_lag + cfg.staleness.reload - 1
    return cfg.snapshots.checkpoint_keep + -(-gap // cfg.snapshots.checkpoint_every)


def trainer_model(cfg: RunConfig) -> ModelOptions:
    """`[trainer.model]`, else ModelOptions' defaults in the dtypes of `[model]`."""
    if cfg.trainer.model is not None:
        return cfg.trainer.model
    return ModelOptions(param_dtype=cfg.model.param_dtype, compute_dtype=cfg.model.compute_dtype)


def trainer_mesh(cfg: RunConfig) -> MeshConfig:
    """`[trainer.mesh]`, else `provision.trainer_mesh` on TPU, else one device."""
    if cfg.trainer.mesh is not None:
        return cfg.trainer.mesh
    if cfg.services.provider == "gcp-tpu" and cfg.provision is not None:
        data, fsdp, tensor = cfg.provision.trainer_mesh
        return MeshConfig(data=data, fsdp=fsdp, tensor=tensor)
    return MeshConfig()


def trainer_config(
    cfg: RunConfig,
    *,
    paramservers: Sequence[str],
    token_file: str | None,
    checkpoint_uri: str,
    staging_dir: str = "",
) -> TrainerConfig:
    """The trainer's config: `[trainer]`'s sections, the replicas it pushes to (with their token
    file; None = the process's own), and its checkpoint directory (`staging_dir`: where Orbax
    writes s3:// checkpoints first; "" = a temporary directory)."""
    t = cfg.trainer
    return TrainerConfig(
        model=trainer_model(cfg),
        mesh=trainer_mesh(cfg),
        optimizer=t.optimizer,
        objective=t.objective,
        update=t.update,
        metrics=t.metrics,
        checkpoint=CheckpointConfig(
            uri=checkpoint_uri, keep=trainer_checkpoint_keep(cfg), staging_dir=staging_dir
        ),
        paramserver=TrainerLink(addresses=tuple(paramservers), token_file=token_file),
        # π_old: the versions batches still to be trained may come from (the schedule's
        # largest staleness back, multiples of j), held by the trainer and in its checkpoints
        keep_versions=cfg.staleness.max_staleness,
        keep_every=cfg.staleness.reload,
    )


def inference_config(
    cfg: RunConfig,
    index: int,
    *,
    paramservers: Sequence[str],
    token_file: str | None,
    tensor_parallel: int | None = None,
) -> InferenceConfig:
    """Inference worker `index`'s config: the checkpoint's architecture in [model]'s dtypes,
    `[inference]`'s engine (see `engine_config`) and limits, and the replicas it pulls from."""
    return InferenceConfig(
        model=ModelSource(
            checkpoint=cfg.model.path,
            dtype=cfg.model.param_dtype,
            compute_dtype=cfg.model.compute_dtype,
        ),
        engine=engine_config(cfg, tensor_parallel=tensor_parallel),
        limits=cfg.inference.limits,
        paramserver=InferenceLink(addresses=tuple(paramservers), token_file=token_file),
        worker_index=index,
    )


def paramserver_config(cfg: RunConfig, index: int) -> ParamServerConfig:
    """Paramserver replica `index`'s config: `[paramserver]`, numbered."""
    return replace(cfg.paramserver, replica_id=index)


def verifier_config(cfg: RunConfig) -> VerifierConfig:
    """A verifier's config: `[verifier]` (every verifier of a run has the same)."""
    return cfg.verifier
