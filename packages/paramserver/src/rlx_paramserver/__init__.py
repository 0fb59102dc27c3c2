"""Versioned weights in host memory on TensorStore, served over gRPC: the trainer pushes, inference
workers pull.
"""

from rlx_paramserver._version import __version__
from rlx_paramserver.config import ParamServerConfig
from rlx_paramserver.server import serve
from rlx_paramserver.service import ParamServerService

__all__ = ["ParamServerConfig", "ParamServerService", "__version__", "serve"]
