"""`rlx-trainer`: start the trainer gRPC server.

With `--num-processes N` (or RLX_NUM_PROCESSES; `--coordinator`, `--process-id` likewise) N
processes, one per host, form one JAX mesh (`rlx_model.distributed`): process 0 serves gRPC and
the others run every call it serves with it; they print no address and return when it stops.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from rlx_core.clients.trainer import TrainBatch
from rlx_core.distributed import DistributedConfig, distributed_main
from rlx_core.serving import run_service
from rlx_model.distributed import lead_or_follow
from rlx_trainer.config import TrainerConfig
from rlx_trainer.service import TrainerService
from rlx_trainer.servicer import registrations

__all__ = ["main", "serve"]


def serve(
    config: TrainerConfig,
    *,
    on_ready: Callable[[str], None] | None = None,
    distributed: DistributedConfig | None = None,
) -> int:
    """Run the server until SIGTERM, SIGINT or a Shutdown call; return the exit code.

    `distributed`: this process's place among several forming one mesh (None: the only one).
    Process 0 serves; any other runs the calls process 0 hands it until process 0 stops.
    """
    return lead_or_follow(
        distributed,
        lambda lockstep: TrainerService(config, lockstep=lockstep),
        lambda service: run_service(
            service.lifecycle, config.server, registrations(service), on_ready=on_ready
        ),
        name="trainer",
        types=(TrainBatch,),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Console script entry point."""
    return distributed_main("trainer", TrainerConfig, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
