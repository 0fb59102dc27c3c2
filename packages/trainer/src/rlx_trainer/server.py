"""`rlx-trainer`: start the trainer gRPC server."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from rlx_core.serving import run_service, service_main
from rlx_trainer.config import TrainerConfig
from rlx_trainer.service import TrainerService
from rlx_trainer.servicer import registrations

__all__ = ["main", "serve"]


def serve(config: TrainerConfig, *, on_ready: Callable[[str], None] | None = None) -> int:
    """Run the server until SIGTERM, SIGINT or a Shutdown call; return the exit code."""
    service = TrainerService(config)
    try:
        return run_service(
            service.lifecycle, config.server, registrations(service), on_ready=on_ready
        )
    finally:
        service.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Console script entry point."""
    return service_main("trainer", TrainerConfig, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
