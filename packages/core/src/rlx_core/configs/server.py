"""The `[server]` section every rlx service config has: where and how its process listens."""

from __future__ import annotations

from dataclasses import dataclass

from rlx_core.configs.checks import at_least
from rlx_core.errors import ConfigError

__all__ = ["ServerConfig"]


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """How a service process listens."""

    host: str = "127.0.0.1"  # address to bind; "0.0.0.0" serves other hosts (mind the token)
    port: int = 0  # TCP port, 0-65535; 0 picks a free one (printed on stdout's first line)
    token_file: str | None = None  # bearer token file; unset: RLX_TOKEN, RLX_TOKEN_FILE, default
    max_workers: int = 16  # RPC handler threads, >= 1
    max_message_mib: int = 64  # largest message sent or received, MiB, >= 4
    grace_s: float = 5.0  # seconds in-flight calls may finish on shutdown, >= 0
    metrics_port: int = 0  # Prometheus /metrics HTTP port on `host`, 1-65535; 0 = no metrics

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("must be 0-65535", field="port", value=self.port)
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError("must be 0-65535", field="metrics_port", value=self.metrics_port)
        if self.metrics_port and self.metrics_port == self.port:
            raise ConfigError(
                "must differ from port", field="metrics_port", value=self.metrics_port
            )
        at_least(self, 1, "max_workers")
        at_least(self, 4, "max_message_mib")
        at_least(self, 0, "grace_s")
