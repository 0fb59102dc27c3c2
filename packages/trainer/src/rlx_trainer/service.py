"""The trainer service's logic, as plain Python (no grpc here).

RL updates, log-prob recomputation, checkpoints, pushing versions. The methods arrive with the
issue that builds this service; until then the service runs its lifecycle and answers health
checks.
"""

from __future__ import annotations

from rlx_core.lifecycle import Lifecycle
from rlx_trainer._version import __version__
from rlx_trainer.config import TrainerConfig

__all__ = ["TrainerService"]


class TrainerService:
    """Owns the trainer's state and its lifecycle."""

    def __init__(self, config: TrainerConfig) -> None:
        self.config = config
        self.lifecycle = Lifecycle("trainer", __version__)
