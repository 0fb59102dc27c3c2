"""The services of a run, as the loop sees them: a small protocol a launcher implements.

The loop never starts processes or talks to a cloud API itself. A launcher (the rlx-launch package:
local processes on this machine, or GCP TPU / Compute nodes) hands it an object with this shape:

    services = open_services(cfg, paths, log=..., on_preempted=..., cancel=...)
    services.start(on_wait)         # every service up and answering
    clients = services.connect()    # fresh clients of every service
    services.addresses()            # name -> host:port, for liveness pings and the live view
    services.dead()                 # names of services whose process has exited
    services.restart_dead(log)      # restart those; their names
    services.restart_hung(name, log)  # restart one that stopped answering
    services.stop()

A simulation (tools/bench/e2e/sim.py) implements the same protocol with in-process clients.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rlx_controller.rundir import RunPaths
    from rlx_core.configs.run import RunConfig

__all__ = ["Clients", "OpenServices", "ServiceSet"]


@dataclass(frozen=True)
class Clients:
    """Clients of one run's services (rlx_core.clients, or anything with their methods).
    `paramservers[0]` answers manifests; each replica is cleared before an in-process resume."""

    trainer: Any
    workers: Sequence[Any]
    verifiers: Sequence[Any]
    paramservers: Sequence[Any]

    def close(self) -> None:
        for c in [self.trainer, *self.paramservers, *self.workers, *self.verifiers]:
            c.close()


class ServiceSet(Protocol):
    """The services of one run (see the module docstring)."""

    token_file: Path | None  # the run's token (None: services without one, e.g. in-process)

    def start(self, on_wait: Callable[[str, float], None] | None = None) -> None: ...

    def connect(self) -> Clients: ...

    def addresses(self) -> dict[str, str]: ...

    def dead(self) -> list[str]: ...

    def restart_dead(self, log: Callable[[str], None]) -> list[str]: ...

    def restart_hung(self, name: str, log: Callable[[str], None]) -> None: ...

    def stop(self) -> None: ...


class OpenServices(Protocol):
    """A launcher: the service set of a run, not started yet (rlx-launch's `open_services`)."""

    def __call__(
        self,
        cfg: RunConfig,
        paths: RunPaths,
        *,
        log: Callable[[str], None],
        on_preempted: Callable[[str], None],
        cancel: threading.Event,
    ) -> ServiceSet: ...
