"""The controller service's logic, as plain Python (no grpc here).

It serves the run one process drives (`rlx up`, `rlx resume`) through a `RunControl`: the loop's
live `progress`, `request_snapshot`, `request_stop` and its metrics lines. The service never
imports the loop; `Driver` satisfies the protocol. Without a run (the bare `rlx-controller`
console script) it answers health checks, and its run RPCs are FailedPrecondition.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, Protocol

from rlx_controller._version import __version__
from rlx_controller.config import ControllerConfig
from rlx_core.clients.controller import ControllerStatus, check_deadline, check_reason
from rlx_core.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    ResourceExhausted,
    RlxError,
)
from rlx_core.lifecycle import Lifecycle

__all__ = ["ControllerService", "MetricsSubscription", "RunControl", "RunProgress"]

# metrics lines kept in memory for a stream that starts from an earlier step (a line is 1-3 KB;
# older ones are in metrics.jsonl)
HISTORY_LINES = 2_000
BACKLOG_LINES = 10_000  # lines a stream may fall behind before it is ended (RESOURCE_EXHAUSTED)


class RunProgress(Protocol):
    """What the loop publishes about itself (`rlx_controller.driver.Progress`)."""

    step: int
    steps: int
    reward: float
    heldout: dict[int, float]
    tokens_per_s: float
    steps_per_s: float
    staleness: dict[int, int]
    phase: str
    components: dict[str, str]
    messages: list[str]
    loaded: dict[str, int]
    last_snapshot: tuple[int, str] | None


class RunControl(Protocol):
    """The run a controller process drives, as its service sees it (`Driver` is one)."""

    @property
    def progress(self) -> RunProgress: ...

    def request_stop(self, reason: str = ...) -> None: ...

    def request_snapshot(self) -> Future[int]: ...

    def add_metrics_listener(self, fn: Callable[[dict[str, Any]], None]) -> None: ...


class MetricsSubscription:
    """One StreamMetrics call's lines: iterate them; `close` frees it (a client that went away).
    The iteration ends when the service closes (the run ended)."""

    def __init__(self, service: ControllerService, replay: list[str]) -> None:
        self._service = service
        self._queue: queue.Queue[str | None] = queue.Queue()
        for line in replay:
            self._queue.put(line)
        self.overflowed = False

    def push(self, line: str | None) -> None:
        if line is not None and self._queue.qsize() >= BACKLOG_LINES:
            self.overflowed = True
            self._queue.put(None)
            self._service.unsubscribe(self)
            return
        self._queue.put(line)

    def lines(self, alive: Callable[[], bool], poll_s: float = 0.5) -> Iterator[str]:
        """The lines while `alive()` (the client is still there) and the run goes on, then
        `close`. ResourceExhausted when the client fell BACKLOG_LINES behind."""
        try:
            while alive():
                try:
                    line = self._queue.get(timeout=poll_s)
                except queue.Empty:
                    continue
                if line is None:  # the end
                    if self.overflowed:
                        raise ResourceExhausted(
                            f"the metrics stream fell {BACKLOG_LINES} lines behind; reconnect "
                            "with from_step to catch up"
                        )
                    return
                yield line
        finally:
            self.close()

    def close(self) -> None:
        self._service.unsubscribe(self)


class ControllerService:
    """Owns the controller's lifecycle and serves the run it drives (`run`; None: no run)."""

    def __init__(
        self,
        config: ControllerConfig,
        run: RunControl | None = None,
        *,
        run_id: str = "",
        run_dir: str = "",
    ) -> None:
        self.config = config
        self.lifecycle = Lifecycle("controller", __version__)
        self.run_id = run_id
        self.run_dir = run_dir
        self._run = run
        self._lock = threading.Lock()
        self._history: deque[tuple[int, str]] = deque(maxlen=HISTORY_LINES)
        self._subscribers: set[MetricsSubscription] = set()
        self._closed = False
        if run is not None:
            run.add_metrics_listener(self._on_metrics)

    def _control(self) -> RunControl:
        if self._run is None:
            raise FailedPrecondition("this controller drives no run (`rlx up` serves one)")
        return self._run

    # --- Status -----------------------------------------------------------------------------
    def status(self) -> ControllerStatus:
        p = self._control().progress
        reward = p.reward if math.isfinite(p.reward) else None
        eta = None
        if p.steps_per_s > 0 and math.isfinite(p.steps_per_s):
            eta = max(0, p.steps - p.step) / p.steps_per_s
        last = p.last_snapshot
        return ControllerStatus(
            step=p.step,
            steps=p.steps,
            phase=p.phase,
            reward=reward,
            steps_per_s=p.steps_per_s,
            tokens_per_s=p.tokens_per_s,
            # copies: the loop thread updates these dicts while we read them
            heldout={k: v for k, v in dict(p.heldout).items() if v is not None},
            staleness=dict(p.staleness),
            loaded=dict(p.loaded),
            last_snapshot=None if last is None else (int(last[0]), str(last[1])),
            eta_s=eta,
            components=dict(p.components),
            run_id=self.run_id or str(getattr(self._run, "run_id", "") or ""),
            run_dir=self.run_dir,
            pid=os.getpid(),
            messages=tuple(p.messages),
        )

    # --- Snapshot and Stop ------------------------------------------------------------------
    @staticmethod
    def _wait(future: Future[int], seconds: float, what: str) -> int:
        try:
            return int(future.result(timeout=seconds))
        except concurrent.futures.TimeoutError:
            raise DeadlineExceeded(
                f"{what} not written within {seconds:g} s (it still is, at the end of the step "
                "in progress)",
                field="deadline_s",
            ) from None
        except RlxError:
            raise
        except Exception as e:  # the loop failed while writing it
            raise Internal(f"{what} failed: {type(e).__name__}: {e}") from None

    def snapshot(self, deadline_s: float) -> int:
        """Take a committed snapshot at the end of the step in progress; its step."""
        wait = check_deadline(deadline_s)
        return self._wait(self._control().request_snapshot(), wait, "the snapshot")

    def stop(self, reason: str, *, wait: bool, deadline_s: float) -> int | None:
        """Stop the run as SIGTERM does (a snapshot, then its services stop). With `wait`, the
        stop snapshot's step once written (None when nothing was trained, so none is)."""
        reason = check_reason(reason)
        patience = check_deadline(deadline_s)
        run = self._control()
        run.request_stop(reason)
        try:
            future = run.request_snapshot()  # the stop snapshot's step
        except FailedPrecondition:  # no step trained: the run stops without a snapshot
            return None
        if not wait:
            return None
        try:
            return self._wait(future, patience, "the stop snapshot")
        except FailedPrecondition:
            return None

    # --- metrics ----------------------------------------------------------------------------
    def _on_metrics(self, record: dict[str, Any]) -> None:
        """Called by the loop right after it writes a metrics line."""
        line = json.dumps(record, sort_keys=True)  # as MetricsWriter writes it
        with self._lock:
            self._history.append((int(record.get("step", 0)), line))
            subscribers = list(self._subscribers)
        for s in subscribers:
            s.push(line)

    def subscribe(self, from_step: int | None = None) -> MetricsSubscription:
        """The metrics lines from now on; first those written since this service started from
        step `from_step` on, when given."""
        if from_step is not None and from_step < 0:
            raise InvalidArgument(f"from_step = {from_step} must be >= 0", field="from_step")
        self._control()
        with self._lock:
            replay = [] if from_step is None else [t for s, t in self._history if s >= from_step]
            sub = MetricsSubscription(self, replay)
            if self._closed:
                sub.push(None)
            else:
                self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: MetricsSubscription) -> None:
        with self._lock:
            self._subscribers.discard(sub)

    @property
    def subscribers(self) -> int:
        """Open metrics streams."""
        with self._lock:
            return len(self._subscribers)

    def close(self) -> None:
        """The run is over: end every metrics stream."""
        with self._lock:
            self._closed = True
            subscribers = list(self._subscribers)
            self._subscribers.clear()
        for s in subscribers:
            s.push(None)
