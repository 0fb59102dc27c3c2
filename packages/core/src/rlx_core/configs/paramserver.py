"""Configuration of the rlx paramserver service.

Here, in rlx_core (no JAX), so that the run config composes these classes; `rlx_paramserver.config`
re-exports them."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlx_core.configs.checks import at_least
from rlx_core.configs.server import ServerConfig

__all__ = ["ParamServerConfig"]


@dataclass(frozen=True, kw_only=True)
class ParamServerConfig:
    """Everything `rlx-paramserver` reads from its TOML file and flags."""

    server: ServerConfig = field(default_factory=ServerConfig)  # where and how it listens
    replica_id: int = 0  # this replica's index among the R replicas, >= 0 (shown in Versions)
    max_versions: int = 2  # committed versions kept in memory at most, >= 1
    chunk_kib: int = 8192  # target storage chunk size, KiB, >= 1 (8 MiB reads fastest: DESIGN §10)
    shared_memory: bool = True  # keep versions in /dev/shm files clients map (same-host fast path)
    max_push_wait_s: float = 3600.0  # cap on waiting for room when a push has no deadline, s >= 0
    # largest version one push may declare (all its tensors), MiB, >= 0; 0 = this host's
    # physical memory (a version is held in RAM, so nothing bigger could ever be stored)
    max_version_mib: int = 0

    def __post_init__(self) -> None:
        at_least(self, 0, "replica_id")
        at_least(self, 1, "max_versions", "chunk_kib")
        at_least(self, 0, "max_push_wait_s", "max_version_mib")
