"""Configuration of the rlx verifier service."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlx_core.serving import ServerConfig

__all__ = ["VerifierConfig"]


@dataclass(frozen=True, kw_only=True)
class VerifierConfig:
    """Everything `rlx-verifier` reads from its TOML file and flags."""

    server: ServerConfig = field(default_factory=ServerConfig)  # where and how it listens
