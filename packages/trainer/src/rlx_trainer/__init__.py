"""The trainer: the modular RL objective, log-prob recomputation, the optimizer step, Orbax
checkpoints.
"""

from rlx_trainer._version import __version__
from rlx_trainer.config import TrainerConfig
from rlx_trainer.server import serve
from rlx_trainer.service import TrainerService

__all__ = ["TrainerConfig", "TrainerService", "__version__", "serve"]
