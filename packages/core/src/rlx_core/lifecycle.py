"""The lifecycle every rlx server goes through, as plain Python (no grpc here).

PENDING -> STARTING -> READY -> DRAINING -> STOPPED, with ERROR reachable from any live state.
The Lifecycle servicer reports it; SIGTERM, SIGINT and the Shutdown RPC move it forward.
"""

from __future__ import annotations

import enum
import os
import threading
import time
import uuid
from dataclasses import dataclass, field

from rlx_core.errors import FailedPrecondition

__all__ = ["Lifecycle", "State", "StatusInfo"]


class State(enum.Enum):
    """Server states; the values are the proto enum's numbers."""

    PENDING = 1
    STARTING = 2
    READY = 3
    DRAINING = 4
    STOPPED = 5
    ERROR = 6


_ALLOWED: dict[State, frozenset[State]] = {
    State.PENDING: frozenset({State.STARTING, State.READY, State.DRAINING, State.ERROR}),
    State.STARTING: frozenset({State.READY, State.DRAINING, State.ERROR}),
    State.READY: frozenset({State.DRAINING, State.ERROR}),
    State.DRAINING: frozenset({State.STOPPED, State.ERROR}),
    State.ERROR: frozenset({State.DRAINING, State.STOPPED}),
    State.STOPPED: frozenset(),
}


@dataclass(frozen=True, kw_only=True)
class StatusInfo:
    """What GetStatus reports."""

    service: str  # paramserver, inference, trainer, verifier, controller
    version: str  # the package version
    state: State
    message: str = ""  # why the state is what it is
    instance_id: str = ""  # random per process
    pid: int = 0
    uptime_s: float = 0.0  # seconds since the process created its Lifecycle
    info: dict[str, str] = field(default_factory=dict)  # service-specific facts


class Lifecycle:
    """Thread-safe state holder plus the shutdown request that the serving loop waits on."""

    def __init__(self, service: str, version: str) -> None:
        self.service = service
        self.version = version
        self.instance_id = uuid.uuid4().hex[:12]
        self.info: dict[str, str] = {}
        self._state = State.PENDING
        self._message = ""
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._shutdown = threading.Event()
        self.shutdown_grace_s: float | None = None

    @property
    def state(self) -> State:
        return self._state

    def set(self, state: State, message: str = "") -> None:
        """Move to `state`; a same-state call only updates the message."""
        with self._lock:
            if state is not self._state and state not in _ALLOWED[self._state]:
                raise FailedPrecondition(
                    f"{self.service}: cannot go from {self._state.name} to {state.name}"
                )
            self._state = state
            self._message = message

    def accepting_work(self) -> bool:
        """True only in READY: services refuse new work while draining or stopped."""
        return self._state is State.READY

    def drain(self, reason: str = "") -> None:
        """Stop taking new work (idempotent)."""
        with self._lock:
            if self._state in (State.DRAINING, State.STOPPED):
                return
            self._state = State.DRAINING
            self._message = reason

    def request_shutdown(self, reason: str = "", grace_s: float | None = None) -> None:
        """Drain and wake the serving loop so it stops the server and exits (idempotent)."""
        self.drain(reason)
        if grace_s:
            self.shutdown_grace_s = grace_s
        self._shutdown.set()

    def wait_for_shutdown(self, timeout: float | None = None) -> bool:
        """Block until a shutdown is requested; True if it was."""
        return self._shutdown.wait(timeout)

    def status(self) -> StatusInfo:
        with self._lock:
            return StatusInfo(
                service=self.service,
                version=self.version,
                state=self._state,
                message=self._message,
                instance_id=self.instance_id,
                pid=os.getpid(),
                uptime_s=time.monotonic() - self._started,
                info=dict(self.info),
            )
