"""The inference worker: a JAX generation engine (paged KV cache, continuous batching, sampler log-
probs) serving work units.
"""

from rlx_inference._version import __version__
from rlx_inference.config import InferenceConfig
from rlx_inference.server import serve
from rlx_inference.service import InferenceService

__all__ = ["InferenceConfig", "InferenceService", "__version__", "serve"]
