"""Services and child processes for tests, on 127.0.0.1.

- `free_port()`: a port nothing listens on;
- `serve_in_thread(lifecycle, server_config, register)`: a service in this process (a daemon
  `ServiceThread`, no signal handlers), returning its address once it listens, and the thread
  (its `code` is run_service's exit code once it has stopped);
- `ServiceProcess(argv)`: a service's console script as a child process, its address read from
  the first line it prints, waited for until its Lifecycle reports READY;
- `ChildProcesses(directory)`: Python child processes whose output goes to files there, waited
  for (or killed) together, their output shown when one fails.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from rlx_core.clients import LifecycleClient
from rlx_core.lifecycle import Lifecycle
from rlx_core.serving import Register, ServerConfig, run_service
from rlx_testing.auth import TOKEN

__all__ = [
    "ChildProcesses",
    "ServiceProcess",
    "ServiceThread",
    "console_script",
    "free_port",
    "serve_in_thread",
]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServiceThread(threading.Thread):
    """`run_service` in a daemon thread without signal handlers; `code` is the exit code it
    returned, None while it serves."""

    def __init__(
        self,
        lifecycle: Lifecycle,
        config: ServerConfig,
        register: Sequence[Register],
        on_ready: Callable[[str], None],
    ) -> None:
        super().__init__(daemon=True, name=f"serve-{lifecycle.service}")
        self.code: int | None = None
        self._args = (lifecycle, config, register, on_ready)

    def run(self) -> None:
        lifecycle, config, register, on_ready = self._args
        self.code = run_service(
            lifecycle, config, register, on_ready=on_ready, install_signals=False
        )


def serve_in_thread(
    lifecycle: Lifecycle,
    config: ServerConfig,
    register: Sequence[Register] = (),
    *,
    timeout_s: float = 30.0,
) -> tuple[str, ServiceThread]:
    """A `ServiceThread` started; (address, thread) once the server listens. Stop it with a
    Shutdown call or `lifecycle.request_shutdown`."""
    ready = threading.Event()
    found: list[str] = []

    def on_ready(address: str) -> None:
        found.append(address)
        ready.set()

    thread = ServiceThread(lifecycle, config, register, on_ready)
    thread.start()
    assert ready.wait(timeout_s), f"{lifecycle.service} did not start within {timeout_s:g} s"
    return found[0], thread


class ChildProcesses:
    """`python ARGS` children of a test, by name, each writing stdout to DIRECTORY/NAME.out and
    stderr to NAME.err. A context manager: leaving it kills those still running. `wait_s` bounds
    how long `address` and `wait` wait."""

    def __init__(self, directory: Path, *, wait_s: float = 240.0) -> None:
        self.directory = directory
        self.wait_s = wait_s
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def __enter__(self) -> ChildProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def start(self, name: str, args: Sequence[str], env: dict[str, str]) -> None:
        with (
            (self.directory / f"{name}.out").open("wb") as out,
            (self.directory / f"{name}.err").open("wb") as err,
        ):  # the child keeps its own handles
            self.procs[name] = subprocess.Popen(
                [sys.executable, *args], stdout=out, stderr=err, env=env
            )

    def stderr(self, name: str) -> str:
        return (self.directory / f"{name}.err").read_text(errors="replace")

    def output(self) -> str:
        """The end of every child's stdout and stderr, with its exit code."""
        return "\n".join(
            f"--- {name} (exit {proc.poll()}):\n"
            + (self.directory / f"{name}.out").read_text(errors="replace")[-2000:]
            + self.stderr(name)[-6000:]
            for name, proc in self.procs.items()
        )

    def address(self, name: str) -> str:
        """The first line the child prints (a server's address)."""
        deadline = time.monotonic() + self.wait_s
        path = self.directory / f"{name}.out"
        while time.monotonic() < deadline and self.procs[name].poll() is None:
            first, newline, _ = path.read_text(errors="replace").partition("\n")
            if newline:
                return first.strip()
            time.sleep(0.2)
        self.kill()
        pytest.fail(f"no address from {name}\n{self.output()}")

    def wait(self) -> None:
        """Every child exits 0 within `wait_s`; else all are killed and the test fails with
        their output."""
        deadline = time.monotonic() + self.wait_s
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(1.0, deadline - time.monotonic()))
        failed = [name for name, proc in self.procs.items() if proc.poll() != 0]
        if failed:
            self.kill()
            pytest.fail(f"{', '.join(failed)} failed or timed out\n{self.output()}")

    def kill(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)


def console_script(name: str) -> str:
    """The path of the console script `name` (rlx-paramserver) of this interpreter's environment."""
    return str(Path(sys.executable).parent / name)


class ServiceProcess:
    """A service as a child process: `argv` (a console script and its flags, `--port 0`), its
    stderr kept in a temporary file. The first line it prints is its address; with a `token`,
    the constructor then waits up to `ready_s` for its Lifecycle to report READY. A context
    manager: leaving it stops the service (SIGTERM, then SIGKILL after 30 s)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        token: str | None = TOKEN,
        ready_s: float = 60.0,
    ) -> None:
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        self._final_err = ""
        self.proc = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=self._err, text=True, env=env
        )
        assert self.proc.stdout is not None
        self.address = self.proc.stdout.readline().strip()
        if not self.address:
            code = self.stop()
            pytest.fail(f"no address from {' '.join(argv)} (exit {code})\n{self.stderr()}")
        if token is not None:
            try:
                LifecycleClient(self.address, token=token).wait_ready(timeout=ready_s)
            except BaseException:
                self.stop()
                raise

    def __enter__(self) -> ServiceProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stderr(self) -> str:
        """Everything the service has written to stderr so far."""
        if self._err.closed:
            return self._final_err
        self._err.seek(0)
        return self._err.read().decode(errors="replace")

    def finish(self, timeout: float = 30.0) -> tuple[int, str]:
        """Wait for the service to exit by itself: (exit code, its stderr)."""
        self.proc.wait(timeout)
        return self.stop(), self.stderr()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM unless it has exited, wait up to `timeout` (then SIGKILL); its exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        if not self._err.closed:  # it has exited: keep what it wrote, release the files
            self._final_err = self.stderr()
            self._err.close()
            assert self.proc.stdout is not None
            self.proc.stdout.close()
        return self.proc.returncode
