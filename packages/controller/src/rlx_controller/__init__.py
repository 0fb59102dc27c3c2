"""The only active component: prompt mixture, deterministic schedule, staleness policy, snapshots
and exact resume.
"""

from rlx_controller._version import __version__
from rlx_controller.config import ControllerConfig
from rlx_controller.server import serve
from rlx_controller.service import ControllerService

__all__ = ["ControllerConfig", "ControllerService", "__version__", "serve"]
