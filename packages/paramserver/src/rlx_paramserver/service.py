"""The paramserver service's logic, as plain Python (no grpc here).

Versioned weights in host memory (TensorStore): push, pull, confirm, garbage-collect. The methods
arrive with the issue that builds this service; until then the service runs its lifecycle and
answers health checks.
"""

from __future__ import annotations

from rlx_core.lifecycle import Lifecycle
from rlx_paramserver._version import __version__
from rlx_paramserver.config import ParamServerConfig

__all__ = ["ParamServerService"]


class ParamServerService:
    """Owns the paramserver's state and its lifecycle."""

    def __init__(self, config: ParamServerConfig) -> None:
        self.config = config
        self.lifecycle = Lifecycle("paramserver", __version__)
