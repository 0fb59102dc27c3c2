"""Configuration of the rlx inference worker: its engine, its model, its paramserver link.

The classes live in `rlx_core.configs.inference` (no JAX), so that the run config composes them.
"""

from rlx_core.configs.inference import (
    EngineConfig,
    InferenceConfig,
    ModelSource,
    ParamServerLink,
    UnitLimits,
)

__all__ = ["EngineConfig", "InferenceConfig", "ModelSource", "ParamServerLink", "UnitLimits"]
