"""Where a process stands among several forming one JAX mesh: its config, the provider's
environment variables and the server flags that set it (no JAX here; the JAX side, joining the
processes and running every call on each, is `rlx_model.distributed`).

A provider starts one process per host with `RLX_COORDINATOR` (host:port of process 0),
`RLX_NUM_PROCESSES` and `RLX_PROCESS_ID`; on Cloud TPU `RLX_COORDINATOR=auto` lets JAX find the
slice's hosts itself. `rlx-trainer` and `rlx-inference` take the same values as flags
(`--coordinator`, `--num-processes`, `--process-id`), which win over the variables.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlx_core.configs.checks import at_least
from rlx_core.errors import ConfigError, RlxError

__all__ = [
    "AUTO",
    "ENV_COORDINATOR",
    "ENV_NUM_PROCESSES",
    "ENV_PROCESS_ID",
    "DistributedConfig",
    "distributed_main",
]

ENV_COORDINATOR = "RLX_COORDINATOR"
ENV_NUM_PROCESSES = "RLX_NUM_PROCESSES"
ENV_PROCESS_ID = "RLX_PROCESS_ID"
AUTO = "auto"  # coordinator value: JAX detects coordinator, process count and id (Cloud TPU)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistributedConfig:
    """Which process of how many this is, and where process 0 coordinates them."""

    coordinator: str = ""  # host:port of process 0's coordination service; "auto" = JAX detects
    # it (Cloud TPU); "" = a single process, no jax.distributed
    num_processes: int = 1  # processes forming the mesh, >= 1; > 1 needs a coordinator
    process_id: int = 0  # this process, 0 <= process_id < num_processes; 0 serves gRPC

    def __post_init__(self) -> None:
        at_least(self, 1, "num_processes")
        if not 0 <= self.process_id < self.num_processes:
            raise ConfigError(
                f"must be within 0..{self.num_processes - 1} (num_processes {self.num_processes})",
                field="process_id",
                value=self.process_id,
            )
        if self.coordinator == AUTO:
            if self.num_processes != 1 or self.process_id != 0:
                raise ConfigError(
                    '"auto" lets JAX detect the process count and id: leave num_processes and '
                    "process_id unset",
                    field="coordinator",
                    value=self.coordinator,
                )
            return
        if self.num_processes > 1 or self.coordinator:
            _check_address(self.coordinator, self.num_processes)

    @property
    def multi_process(self) -> bool:
        """Whether `initialize` starts jax.distributed at all: with a coordinator, also for one
        process (its collectives then are those of several, gloo on CPU: the same numbers)."""
        return bool(self.coordinator)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        coordinator: str | None = None,
        num_processes: int | None = None,
        process_id: int | None = None,
    ) -> DistributedConfig:
        """From RLX_COORDINATOR, RLX_NUM_PROCESSES and RLX_PROCESS_ID (what a provider sets on
        each host; unset = the default); a keyword given (a flag) wins over its variable."""
        env = os.environ if environ is None else environ
        return cls(
            coordinator=env.get(ENV_COORDINATOR, "").strip()
            if coordinator is None
            else coordinator,
            num_processes=(
                _env_int(env, ENV_NUM_PROCESSES, 1) if num_processes is None else num_processes
            ),
            process_id=_env_int(env, ENV_PROCESS_ID, 0) if process_id is None else process_id,
        )


def _check_address(address: str, num_processes: int) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"must be host:port (port 1-65535) of process 0 when num_processes is "
            f"{num_processes}, or {AUTO!r} on Cloud TPU",
            field="coordinator",
            value=address,
        )


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ConfigError("must be an integer", field=name, value=text) from None


def _flags(name: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"rlx-{name}",
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


def distributed_main(
    name: str,
    config_cls: type[Any],
    serve: Callable[..., int],
    argv: Sequence[str] | None = None,
    **kwargs: Any,
) -> int:
    """`rlx_core.serving.service_main` for a service whose processes may form one mesh: the
    flags above (else the environment) become a DistributedConfig, passed as
    `serve(config, on_ready=..., distributed=...)`; a bad value exits 2 naming it."""
    from rlx_core.serving import service_main

    parser = _flags(name)
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
        print(f"rlx-{name}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2

    def serve_here(config: Any, **options: Any) -> int:
        return serve(config, distributed=dist, **options)

    return service_main(name, config_cls, serve_here, rest, **kwargs)
