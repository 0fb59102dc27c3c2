"""`rlx-inference`: start the inference gRPC server.

    rlx-inference --paramserver 127.0.0.1:7001[,ADDR...] [--worker-index I] [--checkpoint DIR]
                  [--set engine.slots=64 --set engine.cache_mib=1024 ...]

Prints the bound address on stdout's first line. The model architecture comes from `--checkpoint`
(an HF directory; weights there, if any, are version 0) or `model.builtin`; versions come from
the paramserver replica i mod R.

With `--num-processes N` (or RLX_NUM_PROCESSES; `--coordinator`, `--process-id` likewise) N
processes, one per host, form one JAX mesh for the engine (`engine.tensor_parallel`): process 0
serves gRPC and the others run every Generate and LoadVersion it serves with it; they print no
address and return when it stops.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence

from rlx_core.clients.inference import Sampling, WorkUnit
from rlx_core.distributed import DistributedConfig, distributed_main
from rlx_core.serving import run_service
from rlx_inference.config import InferenceConfig
from rlx_inference.service import InferenceService
from rlx_inference.servicer import registrations
from rlx_model.distributed import lead_or_follow

__all__ = ["main", "serve"]


def serve(
    config: InferenceConfig,
    *,
    on_ready: Callable[[str], None] | None = None,
    distributed: DistributedConfig | None = None,
) -> int:
    """Serve until SIGTERM, SIGINT or a Shutdown call; the exit code. With `distributed` (this
    process's place among several forming the engine's mesh) only process 0 serves; the others
    run each call it hands them until it stops."""
    return lead_or_follow(
        distributed,
        lambda lockstep: InferenceService(config, lockstep=lockstep),
        lambda service: run_service(
            service.lifecycle, config.server, registrations(service), on_ready=on_ready
        ),
        name="inference",
        types=(WorkUnit, Sampling),
    )


def _shorthands(argv: Sequence[str]) -> list[str]:
    """--paramserver A,B / --worker-index I / --checkpoint DIR as `--set` overrides."""
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg, value = args[i], None
        name = arg.split("=", 1)[0]
        if name in ("--paramserver", "--worker-index", "--checkpoint"):
            if "=" in arg:
                value = arg.split("=", 1)[1]
            elif i + 1 < len(args):
                i += 1
                value = args[i]
            else:
                value = ""
            if name == "--paramserver":
                addresses = [a.strip() for a in value.split(",") if a.strip()]
                out += ["--set", f"paramserver.addresses={json.dumps(addresses)}"]
            elif name == "--worker-index":
                out += ["--set", f"worker_index={value}"]
            else:
                out += ["--set", f"model.checkpoint={value}"]
        else:
            out.append(arg)
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Console script entry point."""
    args = _shorthands(sys.argv[1:] if argv is None else argv)
    return distributed_main("inference", InferenceConfig, serve, args)


if __name__ == "__main__":
    sys.exit(main())
