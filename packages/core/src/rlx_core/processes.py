"""Recorded processes, recognised again by pid, start time and run.

A pid alone does not name a process: pids wrap (at 32768 on many machines) and are reused, so the
pid a finished run recorded may since belong to another program, or to a service of another run.
rlx records each process it starts with its start time (`/proc/PID/stat` field 22, clock ticks
after boot), marks it with its run, and treats a recorded process as still there only when the
pid, the start time and the run all agree:

    proc = identify(pid, start, in_run=lambda p: belongs_to_run(p, work_dir))
    if proc is not None:              # that very process, still running
        proc.signal_group(signal.SIGTERM)

A mismatch of any of them means the recorded process is gone: it is never signalled. A service
is marked through its environment (`RLX_RUN_DIR`, the run's work directory, set by the local
provider); one started before that variable existed passes the run check when an argument of its
command line is a path inside the run's work directory (its `--token-file` and `--config` are).
The controller is marked by the run's lease (rlx_controller.lease), which it writes with its
pid and start time once it holds the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RUN_ENV", "Process", "belongs_to_run", "identify", "run_env", "start_time"]

RUN_ENV = "RLX_RUN_DIR"  # in a service's environment: the work directory of its run


def start_time(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks after boot (`/proc/PID/stat` field 22,
    counted after the last ')': the command name before it may hold spaces and parentheses);
    None when there is no such process or it has exited (a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rfind(b")") + 1 :].split()
    try:
        return int(fields[19]) if fields[0] not in (b"Z", b"X") else None
    except (IndexError, ValueError):
        return None


def run_env(run_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The environment variable that marks a process as one of the run in `run_dir`."""
    return {RUN_ENV: os.path.realpath(run_dir)}


def _read_list(pid: int, what: str) -> list[bytes] | None:
    try:
        return Path(f"/proc/{pid}/{what}").read_bytes().split(b"\0")
    except OSError:  # gone, or another user's (its environment is not ours to read)
        return None


def belongs_to_run(pid: int, run_dir: str | os.PathLike[str]) -> bool:
    """Whether process `pid` is one of the run in `run_dir`: its environment names the run
    (`RUN_ENV`), or an argument of its command line is a path inside `run_dir`."""
    run = os.path.realpath(run_dir)
    marker = f"{RUN_ENV}={run}".encode()
    if marker in (_read_list(pid, "environ") or ()):
        return True
    inside = run.rstrip("/") + "/"
    for arg in _read_list(pid, "cmdline") or ():
        if arg.startswith(b"/"):
            path = os.path.realpath(os.fsdecode(arg))
            if path == run or path.startswith(inside):
                return True
    return False


@dataclass(frozen=True)
class Process:
    """A process recognised by `identify`: its pid and the start time it had then."""

    pid: int
    start: int

    def alive(self) -> bool:
        """Whether the pid still names this process (a new process on a reused pid does not)."""
        return start_time(self.pid) == self.start

    def signal(self, sig: int) -> bool:
        """Send `sig` to this process while it is still this process; whether it was sent."""
        if not self.alive():
            return False
        try:
            os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def signal_group(self, sig: int) -> bool:
        """Send `sig` to the process group this process leads (services run in their own
        session); nothing when it is gone or leads no group. Whether it was sent."""
        if not self.alive():
            return False
        try:
            if os.getpgid(self.pid) != self.pid:
                return False
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True


def identify(pid: int, start: int | None, in_run: Callable[[int], bool]) -> Process | None:
    """The recorded process (pid `pid`, start time `start`) when it is still running and still
    that process: its start time equals `start` and `in_run(pid)` holds. A record without a
    start time (written before rlx recorded them) is recognised by the run check alone. None
    means gone: never signal it."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    now = start_time(pid)
    if now is None or (start is not None and now != start):
        return None
    if not in_run(pid):
        return None
    # read again: the run check must have seen the same process
    return Process(pid, now) if start_time(pid) == now else None
