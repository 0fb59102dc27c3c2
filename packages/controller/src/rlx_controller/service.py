"""The controller service's logic, as plain Python (no grpc here).

The deterministic schedule, snapshots and resume of one run. The methods arrive with the issue that
builds this service; until then the service runs its lifecycle and answers health checks.
"""

from __future__ import annotations

from rlx_controller._version import __version__
from rlx_controller.config import ControllerConfig
from rlx_core.lifecycle import Lifecycle

__all__ = ["ControllerService"]


class ControllerService:
    """Owns the controller's state and its lifecycle."""

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.lifecycle = Lifecycle("controller", __version__)
