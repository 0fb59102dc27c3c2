"""Where the controller's time goes: timed wrappers around the Driver's calls (tools/bench/e2e).

The bench and the simulation run rlx_controller's Driver unchanged: the clients of the service
set they hand it (trainer, workers, verifiers, paramserver) are wrapped (`Timed`), and its
stages timed through its `stage` hook (`Timings.stage`), so that every call records (category,
start, end, main thread or not). `breakdown()` then sums the calls inside a steady-state window,
clipped to it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "Timed", "Timings"]


@dataclass(frozen=True)
class Event:
    category: str
    start: float
    end: float
    main: bool  # recorded on the controller's main thread (the loop itself)
    cpu: float  # CPU seconds of the calling thread during the call (sleeps and waits excluded)


@dataclass
class Timings:
    """Every timed call of a run."""

    events: list[Event] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, category: str, start: float, end: float, cpu: float = 0.0) -> None:
        main = threading.current_thread() is threading.main_thread()
        with self.lock:
            self.events.append(Event(category, start, end, main, cpu))

    def wrap(self, category: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0, c0 = time.monotonic(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.record(category, t0, time.monotonic(), time.thread_time() - c0)

        return timed

    @contextlib.contextmanager
    def stage(self, category: str) -> Iterator[None]:
        """Time the block as a call of `category` (the Driver's `stage` hook)."""
        t0, c0 = time.monotonic(), time.thread_time()
        try:
            yield
        finally:
            self.record(category, t0, time.monotonic(), time.thread_time() - c0)

    def ends(self, category: str) -> list[float]:
        """End times of `category`'s calls, in order (e.g. the trainer steps: step boundaries)."""
        return sorted(e.end for e in self.events if e.category == category)

    def breakdown(self, start: float, end: float) -> dict[tuple[str, bool], tuple[float, int]]:
        """(category, main) -> (seconds inside [start, end], calls that ended inside it)."""
        out: dict[tuple[str, bool], tuple[float, int]] = {}
        for e in self.events:
            s, t = max(e.start, start), min(e.end, end)
            if t <= s:
                continue
            secs, n = out.get((e.category, e.main), (0.0, 0))
            out[(e.category, e.main)] = (secs + t - s, n + (start < e.end <= end))
        return out

    def cpu(self, start: float, end: float) -> dict[str, tuple[float, float, int]]:
        """category -> (CPU seconds, wall seconds, calls) of the calls that ended inside
        (start, end], every thread."""
        out: dict[str, tuple[float, float, int]] = {}
        for e in self.events:
            if start < e.end <= end:
                c, w, n = out.get(e.category, (0.0, 0.0, 0))
                out[e.category] = (c + e.cpu, w + e.end - e.start, n + 1)
        return out


class Timed:
    """A client whose named methods are timed; every other attribute passes through."""

    def __init__(self, inner: Any, timings: Timings, methods: dict[str, str]) -> None:
        self._inner = inner
        for name, category in methods.items():
            setattr(self, name, timings.wrap(category, getattr(inner, name)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
