"""Configuration of the rlx paramserver service.

The class lives in `rlx_core.configs.paramserver`, so that the run config composes it.
"""

from rlx_core.configs.paramserver import ParamServerConfig

__all__ = ["ParamServerConfig"]
