"""The inference service's logic, as plain Python (no grpc here).

Generation of rollouts for work units with a given weight version. The methods arrive with the
issue that builds this service; until then the service runs its lifecycle and answers health
checks.
"""

from __future__ import annotations

from rlx_core.lifecycle import Lifecycle
from rlx_inference._version import __version__
from rlx_inference.config import InferenceConfig

__all__ = ["InferenceService"]


class InferenceService:
    """Owns the inference's state and its lifecycle."""

    def __init__(self, config: InferenceConfig) -> None:
        self.config = config
        self.lifecycle = Lifecycle("inference", __version__)
