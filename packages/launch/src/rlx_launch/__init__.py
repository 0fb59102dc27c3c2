"""The services of a run: local processes, or GCP TPU / Compute nodes (no JAX).

`open_services(cfg, paths, log=..., on_preempted=..., cancel=...)` picks the launcher of
`cfg.services.provider` and hands back the run's `ServiceSet` (rlx_controller.service_set), not
started yet.

`__all__` is the package's face: the CLI and tools import these names from here, never from the
modules behind it: the local supervisor's `read_services` / `runs_service` / `service_process`,
provisioning's `make_plan` / `startup_script`, and `GcpApi` with its `state_lines` progress.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from rlx_controller import RunPaths, ServiceSet
from rlx_core.configs.run import RunConfig
from rlx_core.rpc.auth import create_token_file
from rlx_launch._version import __version__
from rlx_launch.gcp import GcpApi
from rlx_launch.gcp.base import state_lines
from rlx_launch.local import read_services, runs_service, service_process
from rlx_launch.provision import make_plan, startup_script
from rlx_launch.services import RunServices, clean_up_previous

__all__ = [
    "GcpApi",
    "__version__",
    "make_plan",
    "open_services",
    "read_services",
    "runs_service",
    "service_process",
    "startup_script",
    "state_lines",
]


def open_services(
    cfg: RunConfig,
    paths: RunPaths,
    *,
    log: Callable[[str], None],
    on_preempted: Callable[[str], None],
    cancel: threading.Event,
) -> ServiceSet:
    """The service set of a run, not started yet. gcp-tpu: the run's nodes (`cancel` set, e.g. by
    Ctrl-C while provisioning, stops the wait; a node gone calls `on_preempted`); local: processes
    on this machine with the token `<work>/token` (made on the first start), once what a previous
    controller of this run left behind is cleared."""
    if cfg.services.provider == "gcp-tpu":
        from rlx_launch.tpu_services import TpuRunServices, tpu_token_file

        return TpuRunServices(
            cfg,
            paths,
            tpu_token_file(cfg),
            log=log,
            on_preempted=on_preempted,
            cancel=cancel,
        )
    token = paths.work / "token"
    create_token_file(token)
    clean_up_previous(paths, log)
    return RunServices(cfg, paths, token)
