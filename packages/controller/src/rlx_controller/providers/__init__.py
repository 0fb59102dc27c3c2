"""Where the services of a run are started: `local` (processes on this machine) today."""

from rlx_controller.providers.local import (
    KINDS,
    LocalProvider,
    ServiceHandle,
    ServiceSpec,
    read_services,
)

__all__ = ["KINDS", "LocalProvider", "ServiceHandle", "ServiceSpec", "read_services"]
