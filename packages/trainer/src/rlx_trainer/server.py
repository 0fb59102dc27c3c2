"""`rlx-trainer`: start the trainer gRPC server.

With `--num-processes N` (or RLX_NUM_PROCESSES; `--coordinator`, `--process-id` likewise) N
processes, one per host, form one JAX mesh (`rlx_trainer.distributed`): process 0 serves gRPC and
the others run every call it serves with it; they print no address and return when it stops.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Callable, Sequence

from rlx_core.clients.trainer import TrainBatch
from rlx_core.errors import RlxError
from rlx_core.serving import run_service, service_main
from rlx_trainer.config import TrainerConfig
from rlx_trainer.distributed import (
    ENV_COORDINATOR,
    ENV_NUM_PROCESSES,
    ENV_PROCESS_ID,
    DistributedConfig,
    Lockstep,
    initialize,
)
from rlx_trainer.service import TrainerService
from rlx_trainer.servicer import registrations

__all__ = ["main", "serve"]

log = logging.getLogger(__name__)


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
    dist = distributed or DistributedConfig()
    initialize(dist)  # before anything touches a device
    lockstep = Lockstep((TrainBatch,), prefix="rlx/trainer") if dist.multi_process else None
    service = TrainerService(config, lockstep=lockstep)
    try:
        if lockstep is not None and not lockstep.leader:
            log.info(
                "process %d of %d: running the calls process 0 serves",
                lockstep.process,
                lockstep.count,
            )
            lockstep.follow(service)
            return 0
        try:
            return run_service(
                service.lifecycle, config.server, registrations(service), on_ready=on_ready
            )
        finally:
            if lockstep is not None:
                lockstep.stop()
    finally:
        service.close()


def _distributed_flags() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlx-trainer",
        add_help=False,
        allow_abbrev=False,
        description="Several processes forming one JAX mesh (one per host; process 0 serves):",
    )
    parser.add_argument(
        "--coordinator",
        help=f"host:port of process 0's JAX coordination service, or 'auto' on Cloud TPU "
        f"(default ${ENV_COORDINATOR})",
    )
    parser.add_argument(
        "--num-processes",
        type=int,
        help=f"processes forming the mesh (default ${ENV_NUM_PROCESSES}, else 1)",
    )
    parser.add_argument(
        "--process-id", type=int, help=f"this process, 0-based (default ${ENV_PROCESS_ID}, else 0)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console script entry point."""
    parser = _distributed_flags()
    args, rest = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if "-h" in rest or "--help" in rest:
        print(parser.format_help())
    try:
        dist = DistributedConfig.from_env(
            coordinator=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
        )
    except RlxError as e:
        print(f"rlx-trainer: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return service_main("trainer", TrainerConfig, functools.partial(serve, distributed=dist), rest)


if __name__ == "__main__":
    sys.exit(main())
