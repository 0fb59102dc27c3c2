"""Configuration of the rlx trainer service."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlx_core.serving import ServerConfig

__all__ = ["TrainerConfig"]


@dataclass(frozen=True, kw_only=True)
class TrainerConfig:
    """Everything `rlx-trainer` reads from its TOML file and flags."""

    server: ServerConfig = field(default_factory=ServerConfig)  # where and how it listens
