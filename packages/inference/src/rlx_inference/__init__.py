"""The inference worker: a JAX generation engine (paged KV cache, continuous batching, sampler log-
probs) serving work units.

`EngineConfig` lives in `rlx_inference.config` (the package exports one `*Config`: the service's).
"""

from rlx_inference._version import __version__
from rlx_inference.config import InferenceConfig, ModelSource, ParamServerLink, UnitLimits
from rlx_inference.engine import Engine, enable_compile_cache, params_from_flat
from rlx_inference.server import serve
from rlx_inference.service import InferenceService, load_model

__all__ = [
    "Engine",
    "InferenceConfig",
    "InferenceService",
    "ModelSource",
    "ParamServerLink",
    "UnitLimits",
    "__version__",
    "enable_compile_cache",
    "load_model",
    "params_from_flat",
    "serve",
]
