"""The local provider: every service a child process on 127.0.0.1 (`rlx up --provider local`).

Each service runs as `python -m rlx_NAME --port P` with the run's token file; its first
stdout line is its address (the `rlx_core.serving` contract), everything else goes to
`<run>/logs/<name>.log`. Children get their own session, so a Ctrl-C in the terminal reaches only
the controller, which snapshots first and then stops them. A restarted service gets its old port
back when it is free, so clients holding the address reconnect without being told.

The state of the services (name, pid and the process's start time, address, log, restarts) is
kept in `<run>/services.json` for `rlx status` and `rlx down` from another terminal. Each service
runs with `RLX_RUN_DIR` (the run's work directory) in its environment: a recorded service is that
process only while its pid, start time and run all agree (`service_process`,
rlx_core.processes); a pid the system has since given to another process is never
signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from rlx_core.clients import LifecycleClient
from rlx_core.errors import Corrupt, DeadlineExceeded, InvalidArgument, RlxError, Unavailable
from rlx_core.lifecycle import StatusInfo
from rlx_core.processes import Process, belongs_to_run, identify, run_env, start_time

__all__ = [
    "KINDS",
    "LocalProvider",
    "ServiceHandle",
    "ServiceSpec",
    "process_cmdline",
    "read_services",
    "runs_service",
    "service_command",
    "service_process",
    "write_services",
]

# Service kinds and the package each one runs as (`python -m PACKAGE`, its `__main__`).
KINDS: dict[str, str] = {
    "paramserver": "rlx_paramserver",
    "inference": "rlx_inference",
    "trainer": "rlx_trainer",
    "verifier": "rlx_verifier",
}

STATE_FILE = "services.json"


@dataclass(frozen=True, kw_only=True)
class ServiceSpec:
    """One service process to run."""

    name: str  # unique in the run: "paramserver-0", "inference-1", "trainer", ...
    kind: str  # one of KINDS
    args: tuple[str, ...] = ()  # extra command-line flags for the service
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment variables

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidArgument(
                f"service {self.name!r}: unknown kind {self.kind!r}; one of {sorted(KINDS)}",
                field="kind",
            )
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise InvalidArgument(f"bad service name {self.name!r}", field="name")


@dataclass(kw_only=True)
class ServiceHandle:
    """A running (or dead) service process."""

    name: str
    kind: str
    address: str
    pid: int
    log: str
    port: int
    restarts: int = 0
    started_at: float = 0.0
    # the process's start time, clock ticks after boot (rlx_core.processes); None in
    # records written before start times were
    pid_start: int | None = None


class _Child:
    def __init__(self, spec: ServiceSpec, proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        self.spec = spec
        self.proc = proc
        self.log = log
        self.pump: threading.Thread | None = None


class LocalProvider:
    """Starts, watches, restarts and stops the services of one run as local processes."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        token_file: str | os.PathLike[str],
        *,
        python: str = sys.executable,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.token_file = str(token_file)
        self.python = python
        self.extra_env = dict(extra_env or {})
        self.log_dir = self.run_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._children: dict[str, _Child] = {}
        self.handles: dict[str, ServiceHandle] = {}
        self._lock = threading.Lock()

    # --- starting ---------------------------------------------------------------------------
    def start(
        self,
        spec: ServiceSpec,
        *,
        timeout_s: float = 300.0,
        on_wait: Callable[[str, float], None] | None = None,
        port: int = 0,
    ) -> ServiceHandle:
        """Start one service and wait until it answers READY; return its handle.

        `on_wait(name, elapsed_s)` is called while waiting (progress). A process that exits
        before printing its address raises Unavailable quoting the end of its log.
        """
        with self._lock:
            if spec.name in self._children and self._children[spec.name].proc.poll() is None:
                raise InvalidArgument(f"service {spec.name!r} is already running", field="name")
        log_path = self.log_dir / f"{spec.name}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the child
        log.write(f"\n=== start {time.strftime('%Y-%m-%d %H:%M:%S')} ===\n".encode())
        log.flush()
        env = {
            **os.environ,
            **self.extra_env,
            **spec.env,
            "PYTHONUNBUFFERED": "1",
            **run_env(self.run_dir),  # marks it as this run's (`service_process`)
        }
        cmd = service_command(self.python, spec.kind, port, self.token_file, spec.args)
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        started = start_time(proc.pid)  # our child: its pid is not reused before we wait
        child = _Child(spec, proc, log)
        with self._lock:
            self._children[spec.name] = child
        try:
            address = self._read_address(child, timeout_s, on_wait)
            self._wait_ready(spec.name, address, timeout_s, on_wait)
        except BaseException:
            self._kill(child)
            raise
        previous = self.handles.get(spec.name)
        handle = ServiceHandle(
            name=spec.name,
            kind=spec.kind,
            address=address,
            pid=proc.pid,
            log=str(log_path),
            port=int(address.rsplit(":", 1)[1]),
            restarts=previous.restarts + 1 if previous else 0,
            started_at=time.time(),
            pid_start=started,
        )
        with self._lock:
            self.handles[spec.name] = handle
        self._save()
        return handle

    def start_all(
        self,
        specs: Sequence[ServiceSpec],
        *,
        timeout_s: float = 300.0,
        on_wait: Callable[[str, float], None] | None = None,
    ) -> dict[str, ServiceHandle]:
        """Start several services concurrently (their start-ups overlap); all or none."""
        results: dict[str, ServiceHandle] = {}
        errors: list[BaseException] = []

        def run(spec: ServiceSpec) -> None:
            try:
                results[spec.name] = self.start(spec, timeout_s=timeout_s, on_wait=on_wait)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in specs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop_all()
            raise errors[0]
        return results

    def _read_address(
        self, child: _Child, timeout_s: float, on_wait: Callable[[str, float], None] | None
    ) -> str:
        name = child.spec.name
        line: list[bytes] = []

        def read_first() -> None:
            assert child.proc.stdout is not None
            line.append(child.proc.stdout.readline())

        reader = threading.Thread(target=read_first, daemon=True)
        reader.start()
        start = time.monotonic()
        while reader.is_alive():
            reader.join(0.5)
            elapsed = time.monotonic() - start
            if child.proc.poll() is not None and reader.is_alive():
                reader.join(1.0)
            if elapsed > timeout_s:
                raise DeadlineExceeded(
                    f"service {name!r} printed no address within {timeout_s:.0f} s; "
                    f"see {child.log.name}"
                )
            if on_wait is not None and reader.is_alive():
                on_wait(name, elapsed)
        address = line[0].decode(errors="replace").strip() if line else ""
        if not address or ":" not in address:
            child.proc.wait(timeout=10)
            raise Unavailable(
                f"service {name!r} exited with code {child.proc.returncode} before listening: "
                f"{_tail(child.log.name)}"
            )
        child.pump = threading.Thread(target=_pump, args=(child,), daemon=True)
        child.pump.start()
        return address

    def _wait_ready(
        self,
        name: str,
        address: str,
        timeout_s: float,
        on_wait: Callable[[str, float], None] | None,
    ) -> StatusInfo:
        with LifecycleClient(address, token_file=self.token_file) as client:
            return client.wait_ready(
                timeout_s,
                on_wait=None if on_wait is None else (lambda _s, t: on_wait(name, t)),
            )

    # --- watching and restarting ----------------------------------------------------------
    def alive(self, name: str) -> bool:
        """True while the process of service `name` runs."""
        child = self._children.get(name)
        return child is not None and child.proc.poll() is None

    def dead(self) -> list[str]:
        """The services whose process has exited."""
        return [name for name in self._children if not self.alive(name)]

    def restart(
        self,
        name: str,
        *,
        timeout_s: float = 300.0,
        on_wait: Callable[[str, float], None] | None = None,
    ) -> ServiceHandle:
        """Stop `name` if it still runs, and start it again, on its old port when free."""
        child = self._children.get(name)
        if child is None:
            raise InvalidArgument(f"no service named {name!r}", field="name")
        self._kill(child)
        old = self.handles.get(name)
        port = old.port if old else 0
        try:
            return self.start(child.spec, timeout_s=timeout_s, on_wait=on_wait, port=port)
        except RlxError:
            if port == 0:
                raise
            # the old port was taken meanwhile: any port will do, callers read the new address
            return self.start(child.spec, timeout_s=timeout_s, on_wait=on_wait, port=0)

    # --- stopping ----------------------------------------------------------------------------
    def stop(self, name: str, *, grace_s: float = 10.0) -> None:
        """SIGTERM (the service drains and exits), then SIGKILL after `grace_s`."""
        child = self._children.get(name)
        if child is None:
            return
        if child.proc.poll() is None:
            try:
                child.proc.send_signal(signal.SIGTERM)
                child.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._kill(child)

    def stop_all(self, *, grace_s: float = 10.0) -> None:
        """Stop every service (all drain in parallel), then forget them."""
        for child in list(self._children.values()):
            if child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in list(self._children.values()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            self._kill(child)
        self._save()

    def _kill(self, child: _Child) -> None:
        if child.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.proc.pid, signal.SIGKILL)
            child.proc.wait()
        if child.pump is not None:
            child.pump.join(5)
        if not child.log.closed:
            child.log.close()

    def _save(self) -> None:
        write_services(self.run_dir, self.handles, self.alive)


def service_command(
    python: str,
    kind: str,
    port: int,
    token_file: str,
    args: Sequence[str] = (),
    *,
    host: str | None = None,
) -> list[str]:
    """The command line of one service process (`python -m rlx_KIND ...`)."""
    where = ["--host", host] if host is not None else []
    return [
        python,
        "-m",
        KINDS[kind],
        *where,
        "--port",
        str(port),
        "--token-file",
        token_file,
        *args,
    ]


def write_services(
    run_dir: str | os.PathLike[str],
    handles: Mapping[str, ServiceHandle],
    alive: Callable[[str], bool],
) -> None:
    """Record `handles` in `run_dir/services.json` (atomically), for `read_services`."""
    state = {name: {**asdict(h), "alive": alive(name)} for name, h in sorted(handles.items())}
    tmp = Path(run_dir) / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, Path(run_dir) / STATE_FILE)


def process_cmdline(pid: int) -> bytes:
    """The command line of process `pid`, arguments joined by spaces (b"" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def service_process(handle: ServiceHandle, run_dir: str | os.PathLike[str]) -> Process | None:
    """The process of the recorded service `handle` of the run in `run_dir`, while it is still
    that process: its pid's start time is the recorded one, it is one of this run's
    (rlx_core.processes.belongs_to_run) and an argument of its command line is
    `rlx_<kind>` (as `service_command` writes it). None means gone: a recorded pid may since
    belong to another program, or to a service of another run, and is never signalled."""
    module = KINDS.get(handle.kind, "").encode()

    def ours(pid: int) -> bool:
        return belongs_to_run(pid, run_dir) and module in process_cmdline(pid).split(b" ")

    return identify(handle.pid, handle.pid_start, ours)


def runs_service(handle: ServiceHandle, run_dir: str | os.PathLike[str]) -> bool:
    """Whether the recorded service `handle` of the run in `run_dir` still runs
    (`service_process`)."""
    return service_process(handle, run_dir) is not None


def read_services(run_dir: str | os.PathLike[str]) -> dict[str, ServiceHandle]:
    """The services a local run recorded (for `rlx status` / `rlx down` from another terminal);
    Corrupt naming the file and the entry when it is not what a run writes."""
    path = Path(run_dir) / STATE_FILE
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_bytes())
        if not isinstance(raw, dict):
            raise TypeError(f"expected an object of services, got {type(raw).__name__}")
        handles = {
            name: ServiceHandle(**{k: v for k, v in entry.items() if k != "alive"})
            for name, entry in raw.items()
        }
    except (ValueError, TypeError, AttributeError, RecursionError) as e:  # torn, or foreign
        raise Corrupt(f"{path}: not a services file of rlx ({type(e).__name__}: {e})") from None
    for name, h in handles.items():
        for key, value, ok in (
            ("pid", h.pid, _is_int(h.pid) and h.pid >= 0),
            ("pid_start", h.pid_start, h.pid_start is None or _is_int(h.pid_start)),
            ("kind", h.kind, isinstance(h.kind, str)),
            ("address", h.address, isinstance(h.address, str)),
            ("log", h.log, isinstance(h.log, str)),
            ("restarts", h.restarts, _is_int(h.restarts)),
        ):
            if not ok:
                raise Corrupt(f"{path}: service {name!r}: bad {key} {value!r}")
    return handles


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _pump(child: _Child) -> None:
    """Copy the rest of a child's stdout into its log until it closes."""
    assert child.proc.stdout is not None
    stdout = child.proc.stdout
    for chunk in iter(lambda: stdout.read1(65536), b""):  # type: ignore[attr-defined]
        if child.log.closed:
            return
        child.log.write(chunk)
        child.log.flush()


def _tail(path: str, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:]) or "(empty log)"
