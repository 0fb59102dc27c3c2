"""Configuration of the rlx inference service."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlx_core.serving import ServerConfig

__all__ = ["InferenceConfig"]


@dataclass(frozen=True, kw_only=True)
class InferenceConfig:
    """Everything `rlx-inference` reads from its TOML file and flags."""

    server: ServerConfig = field(default_factory=ServerConfig)  # where and how it listens
