"""Configuration of the rlx trainer service: model precision, mesh, optimizer, objective, how a
batch is split into updates, mismatch thresholds, checkpoints and the paramserver replicas.

The classes live in `rlx_core.configs.trainer` (no JAX), so that the run config composes them.
"""

from rlx_core.configs.trainer import (
    CheckpointConfig,
    MeshConfig,
    MetricsConfig,
    ModelOptions,
    ObjectiveConfig,
    OptimizerConfig,
    ParamServerLink,
    TrainerConfig,
    UpdateConfig,
)

__all__ = [
    "CheckpointConfig",
    "MeshConfig",
    "MetricsConfig",
    "ModelOptions",
    "ObjectiveConfig",
    "OptimizerConfig",
    "ParamServerLink",
    "TrainerConfig",
    "UpdateConfig",
]
