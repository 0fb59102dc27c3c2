"""`rlx-controller`: start the controller gRPC server."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from rlx_controller.config import ControllerConfig
from rlx_controller.service import ControllerService
from rlx_controller.servicer import registrations
from rlx_core.serving import run_service, service_main

__all__ = ["main", "serve"]


def serve(config: ControllerConfig, *, on_ready: Callable[[str], None] | None = None) -> int:
    """Run the server until SIGTERM, SIGINT or a Shutdown call; return the exit code."""
    service = ControllerService(config)
    return run_service(service.lifecycle, config.server, registrations(service), on_ready=on_ready)


def main(argv: Sequence[str] | None = None) -> int:
    """Console script entry point."""
    return service_main("controller", ControllerConfig, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
