"""`rlx-controller`, and the controller service of the run a process drives.

`serve_run(run, work_dir, ...)` serves the Controller service (and Lifecycle) in the process of
`rlx up` / `rlx resume`, on a loopback port. Once the run is this process's (its `controller.pid`
names it, written after the lease is taken, so a refused second controller never takes the file
over), it writes `controller.json` in the work directory: `{"address", "pid", "start_time",
"token_file"}`, with a fresh token in `controller-PID.token` (mode 0600). `close()` ends the metrics
streams, stops the server and removes both files. `read_controller(work_dir)` reads the file back
for `rlx status`, `rlx down` and `rlx snapshot take`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlx_controller.config import ControllerConfig
from rlx_controller.rundir import CONTROLLER_PID
from rlx_controller.service import ControllerService, RunControl
from rlx_controller.servicer import registrations
from rlx_core.lifecycle import State
from rlx_core.processes import start_time
from rlx_core.rpc.auth import create_token_file
from rlx_core.rpc.server import build_server
from rlx_core.serving import LifecycleServicer, ServerConfig, run_service, service_main

__all__ = [
    "CONTROLLER_SERVICE",
    "CONTROLLER_TOKEN",
    "RunServer",
    "main",
    "read_controller",
    "serve",
    "serve_run",
]

CONTROLLER_SERVICE = "controller.json"  # in the work directory: where the controller listens
CONTROLLER_TOKEN = "controller-{pid}.token"  # in the work directory: its token, fresh per process
_POLL_S = 0.2  # how often serve_run looks whether the run is this process's yet


def serve(config: ControllerConfig, *, on_ready: Callable[[str], None] | None = None) -> int:
    """Run the server until SIGTERM, SIGINT or a Shutdown call; return the exit code. It drives
    no run: it answers health checks, and the run RPCs are FailedPrecondition."""
    service = ControllerService(config)
    return run_service(service.lifecycle, config.server, registrations(service), on_ready=on_ready)


def main(argv: Sequence[str] | None = None) -> int:
    """Console script entry point."""
    return service_main("controller", ControllerConfig, serve, argv)


class RunServer:
    """The controller service of one run, served in this process (made by `serve_run`)."""

    def __init__(self, run: RunControl, work_dir: Path, *, run_dir: str, run_id: str) -> None:
        self.work_dir = Path(work_dir)
        # one per process: a second controller refused by the lease never touches the first's
        self.token_file = self.work_dir / CONTROLLER_TOKEN.format(pid=os.getpid())
        self.service = ControllerService(ControllerConfig(), run, run_id=run_id, run_dir=run_dir)
        self._done = threading.Event()
        self._written = False
        self._server: Any = None
        self.address = ""
        self._watch: threading.Thread | None = None

    def start(self) -> None:
        """Listen (loopback, a free port) and wait in the background for the run to be ours."""
        with contextlib.suppress(FileNotFoundError):  # a file of an earlier process's pid
            self.token_file.unlink()
        token = create_token_file(self.token_file)
        config = ServerConfig()
        self._server, self.address = build_server(
            [LifecycleServicer(self.service.lifecycle).register, *registrations(self.service)],
            token=token,
            host=config.host,
            port=0,
            max_workers=config.max_workers,
        )
        self._server.start()
        self.service.lifecycle.set(State.READY)
        self._watch = threading.Thread(target=self._publish, name="rlx-controller-publish")
        self._watch.daemon = True
        self._watch.start()

    def _ours(self) -> bool:
        try:
            return int((self.work_dir / CONTROLLER_PID).read_text().strip()) == os.getpid()
        except (OSError, ValueError):
            return False

    def _publish(self) -> None:
        while not self._done.wait(_POLL_S):
            if self._ours():
                record = {
                    "address": self.address,
                    "pid": os.getpid(),
                    "start_time": start_time(os.getpid()),
                    "token_file": str(self.token_file),
                }
                tmp = self.work_dir / f".{CONTROLLER_SERVICE}.{os.getpid()}"
                tmp.write_text(json.dumps(record, sort_keys=True) + "\n")
                os.replace(tmp, self.work_dir / CONTROLLER_SERVICE)
                self._written = True
                return

    def close(self) -> None:
        """End the metrics streams, stop serving, remove controller.json and the token."""
        self._done.set()
        if self._watch is not None:
            self._watch.join()
        self.service.close()
        if self._server is not None:
            self._server.stop(2.0).wait()
        record = read_controller(self.work_dir) if self._written else None
        if record is not None and record["pid"] == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                (self.work_dir / CONTROLLER_SERVICE).unlink()
        with contextlib.suppress(FileNotFoundError):
            self.token_file.unlink()


def serve_run(
    run: RunControl, work_dir: str | os.PathLike[str], *, run_dir: str, run_id: str = ""
) -> RunServer:
    """Serve `run` in this process (see the module docstring); `close()` the result at the end."""
    server = RunServer(run, Path(work_dir), run_dir=run_dir, run_id=run_id)
    server.start()
    return server


def read_controller(work_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The controller.json of a work directory while the process it names (pid and start time)
    runs; None when there is none, its process is gone (a SIGKILLed controller leaves the file),
    or it is not one this module wrote (a torn or foreign file): the run directory is used."""
    try:
        data = json.loads((Path(work_dir) / CONTROLLER_SERVICE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if not isinstance(data.get("address"), str) or not isinstance(data.get("token_file"), str):
        return None
    pid = data.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    if start_time(pid) != data.get("start_time"):
        return None
    return data


if __name__ == "__main__":
    sys.exit(main())
