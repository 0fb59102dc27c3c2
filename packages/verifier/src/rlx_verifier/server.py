"""`rlx-verifier`: start the verifier gRPC server."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from rlx_core.serving import run_service, service_main
from rlx_verifier.config import VerifierConfig
from rlx_verifier.service import VerifierService
from rlx_verifier.servicer import registrations

__all__ = ["main", "serve"]


def serve(config: VerifierConfig, *, on_ready: Callable[[str], None] | None = None) -> int:
    """Run the server until SIGTERM, SIGINT or a Shutdown call; return the exit code."""
    service = VerifierService(config)
    if service.verifier is not None:  # their imports run while the server starts
        service.verifier.warm_math()
    try:
        return run_service(
            service.lifecycle, config.server, registrations(service), on_ready=on_ready
        )
    finally:
        service.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Console script entry point."""
    return service_main("verifier", VerifierConfig, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
