"""Configuration of the rlx paramserver service."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlx_core.serving import ServerConfig

__all__ = ["ParamServerConfig"]


@dataclass(frozen=True, kw_only=True)
class ParamServerConfig:
    """Everything `rlx-paramserver` reads from its TOML file and flags."""

    server: ServerConfig = field(default_factory=ServerConfig)  # where and how it listens
