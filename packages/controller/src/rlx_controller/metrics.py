"""The run's per-step metrics: one JSON line per record in `<run>/metrics.jsonl`, and every numeric
scalar of the record as a TensorBoard scalar at the record's `step` under `<run>/tensorboard/`.

    with MetricsWriter(run_dir) as metrics:
        metrics.write({"step": 3, "reward": 0.5, "trainer/loss": 0.1, "prompt_ids": [...]})

The JSONL file is the record of truth (`rlx status` and `rlx plot` read it); the event files are a
view of it for `tensorboard --logdir RUN/tensorboard`. Lists, strings, booleans and None stay in
the JSONL only.

A resumed run replays from its snapshot, so steps after the snapshot may be written twice. Each
writer opens a new event file at its first record and marks that step with TensorBoard's
`SessionLog.START`, so TensorBoard drops the killed run's points from that step on (readers of the
JSONL keep the last line of each step).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from rlx_core.errors import InvalidArgument

__all__ = ["MetricsWriter", "scalars"]

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The TensorBoard scalars of a record: every int or float value except `step` (booleans are
    flags, not measurements, and are left out)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out[key] = float(value)
    return out


class MetricsWriter:
    """Appends metric records of one run; thread-safe; a context manager that closes itself.

    Every `write` reaches the disk before it returns (both files are flushed), so `rlx status`,
    `rlx plot` and a live TensorBoard see each step at once; one flush per step costs nothing
    next to a step's seconds. tensorboardX's synchronous `EventsWriter` does the TFRecord framing
    (its `SummaryWriter` would add a writer thread and a multiprocessing queue that `flush` does
    not drain).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = self.run_dir / METRICS_FILE
        self.tensorboard_dir = self.run_dir / TENSORBOARD_DIR
        self._lock = threading.Lock()
        self._events: Any = None  # tensorboardX EventsWriter, opened at the first record
        self._closed = False

    def _open_events(self, first_step: int) -> Any:
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        self.tensorboard_dir.mkdir(parents=True, exist_ok=True)
        # events.out.tfevents.<seconds>.<host>.<ns>: unique, and TensorBoard reads the files of a
        # directory in name order, so a resumed run's file comes after the killed run's.
        writer = EventsWriter(str(self.tensorboard_dir / "events"), f".{time.time_ns()}")
        start = SessionLog(status=SessionLog.START)
        writer.write_event(Event(wall_time=time.time(), step=first_step, session_log=start))
        return writer

    def write(self, record: dict[str, Any]) -> None:
        """Append `record` (it must hold an integer `step` >= 0) to the JSONL file and its numeric
        scalars to the event files."""
        step = record.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise InvalidArgument(
                f"metrics record needs an integer 'step' >= 0, got {step!r}", field="step"
            )
        line = json.dumps(record, sort_keys=True) + "\n"
        values = scalars(record)
        with self._lock:
            if self._closed:
                raise InvalidArgument(f"MetricsWriter of {self.run_dir} is closed", field="write")
            with open(self.jsonl_path, "a") as f:
                f.write(line)
            if not values:
                return
            from tensorboardX.proto.event_pb2 import Event
            from tensorboardX.proto.summary_pb2 import Summary

            if self._events is None:
                self._events = self._open_events(step)
            summary = Summary(
                value=[Summary.Value(tag=k, simple_value=v) for k, v in sorted(values.items())]
            )
            self._events.write_event(Event(wall_time=time.time(), step=step, summary=summary))
            self._events.flush()

    def close(self) -> None:
        """Close the event file; later writes fail. Closing twice is fine."""
        with self._lock:
            if self._events is not None:
                self._events.close()
                self._events = None
            self._closed = True

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
