"""What the loop tells the world about itself: the live view's figures (`Progress`, updated as it
runs), its metrics lines (`MetricsLines`: metrics.jsonl, TensorBoard, listeners), the summary of
a run (`RunSummary`, written to `<run>/summary.json`), and the hook that times its stages
(`Stage`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlx_controller.metrics import MetricsWriter

__all__ = ["MetricsLines", "Progress", "RunSummary", "Stage", "untimed"]

# `stage(name)`: a context manager around each of the loop's stages ("gen stage", "score+log
# stage", "build_batch", "snapshot", "metrics line"), on the thread that runs it; a benchmark
# passes one that times them (tools/bench/e2e)
Stage = Callable[[str], AbstractContextManager[None]]


@dataclass
class Progress:
    """What the live view and the controller service show; updated by the loop."""

    step: int = 0
    steps: int = 0
    reward: float = float("nan")
    heldout: dict[int, float] = field(default_factory=dict)
    tokens_per_s: float = 0.0
    steps_per_s: float = 0.0
    staleness: dict[int, int] = field(default_factory=dict)
    phase: str = "starting"
    components: dict[str, str] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    loaded: dict[str, int] = field(default_factory=dict)  # "inference-<i>" -> version it holds
    last_snapshot: tuple[int, str] | None = None  # (step, reason) this process committed last

    def trained(self, step: int, reward: float, gen_tokens: int, staleness: int, dt: float) -> None:
        """A step trained `dt` seconds after the one before."""
        self.step, self.reward = step, reward
        self.tokens_per_s = gen_tokens / dt if dt > 0 else 0.0
        self.steps_per_s = 1 / dt if dt > 0 else 0.0
        self.staleness[staleness] = self.staleness.get(staleness, 0) + 1


@dataclass
class RunSummary:
    steps: int
    heldout_before: float | None
    heldout_after: float | None
    params_hash: str
    wall_s: float
    train_s_per_step: float
    stopped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def untimed(_name: str) -> AbstractContextManager[None]:
    """The default `Stage`: times nothing."""
    return contextlib.nullcontext()


class MetricsLines:
    """The run's metrics lines: each written to `<work>/metrics.jsonl` and TensorBoard
    (rlx_controller.metrics; opened at the first), then handed to every listener on the
    writing thread (a listener's exception is logged, never raised)."""

    def __init__(self, work_dir: Path, log: Callable[[str], None], stage: Stage) -> None:
        self.work_dir, self.log, self.stage = work_dir, log, stage
        self.writer: MetricsWriter | None = None
        self._listeners: list[Callable[[dict[str, Any]], None]] = []

    def add_listener(self, fn: Callable[[dict[str, Any]], None]) -> None:
        self._listeners.append(fn)

    def write(self, record: dict[str, Any]) -> None:
        with self.stage("metrics line"):
            if self.writer is None:
                self.writer = MetricsWriter(self.work_dir)
            self.writer.write(record)
            for fn in list(self._listeners):
                try:
                    fn(record)
                except Exception as e:  # a listener never breaks the loop
                    self.log(f"metrics listener {getattr(fn, '__name__', fn)!r} failed: {e!r}")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
