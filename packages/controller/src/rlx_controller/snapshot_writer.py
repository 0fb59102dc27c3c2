"""Writing a run's snapshots (rlx_controller.snapshot) as the loop goes: what each names, the
trainer checkpoints behind them, the background thread that writes reload snapshots while the
next step trains, and the snapshots asked for from outside (`SnapshotRequests`).

A snapshot at step S names the newest checkpoint at or below the oldest version a batch from S
on is generated with; a resume initialises the trainer from it and trains the batches from it
on again from the rollout log. A snapshot not yet written when the process dies is simply
absent: resume starts from the one before it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from rlx_controller.metrics import MetricsUpload
from rlx_controller.mixture import PromptMixture
from rlx_controller.progress import Progress, Stage, untimed
from rlx_controller.rollout_log import RolloutLog
from rlx_controller.schedule import Schedule, WorkUnit
from rlx_controller.snapshot import Snapshot, SnapshotStore
from rlx_core.configs.run import RunConfig, config_hash
from rlx_core.errors import FailedPrecondition

if TYPE_CHECKING:
    from rlx_controller.inputs import RunInputs
    from rlx_controller.session import Session

__all__ = ["SnapshotRequests", "SnapshotWriter"]


class SnapshotWriter:
    """The snapshots and checkpoints of one run. `session` (the params hash, checkpoints) and
    `run_id` are set once the services are up and the run is known."""

    def __init__(
        self,
        cfg: RunConfig,
        snapshots: SnapshotStore,
        rollouts: RolloutLog,
        inputs: RunInputs,
        uploads: MetricsUpload | None,
        progress: Progress,
        stage: Stage = untimed,
    ) -> None:
        self.snapshots = snapshots
        self.rollouts = rollouts
        self.schedule: Schedule = inputs.schedule
        self.mixture: PromptMixture = inputs.mixture
        self.steps = cfg.steps
        self.config_hash = config_hash(cfg)
        self.uploads = uploads  # a remote run's metrics.jsonl goes up with its snapshots
        self.progress = progress
        self.stage = stage
        self.session: Session | None = None
        self.run_id = ""
        self.checkpoints: dict[int, str] = {}  # step -> uri of the trainer's checkpoints
        self._thread: ThreadPoolExecutor | None = None  # writes reload snapshots
        self._pending: Future[None] | None = None

    def _session(self) -> Session:
        assert self.session is not None, "the services are not started"
        return self.session

    def oldest_version_needed(self, step: int) -> int:
        """The oldest version the batches from `step` on are generated with."""
        return step if step >= self.steps else self.schedule.version(step)

    def resume_point(self, step: int) -> tuple[int, str] | None:
        """The checkpoint a snapshot at `step` names: the newest one at or below the oldest
        version a batch from `step` on is generated with (v(step); `step` itself at the end).
        A newer checkpoint would leave a resume without that version: batch `step`, not yet in
        the rollout log, could never be generated again. None: replay from step 0."""
        need = self.oldest_version_needed(step)
        usable = [s for s in self.checkpoints if s <= need]
        if not usable:
            return None
        best = max(usable)
        return best, self.checkpoints[best]

    def save_checkpoint(self) -> None:
        s = self._session()
        step, uri = s.call(s.trainer.save_checkpoint, "trainer checkpoint")
        self.checkpoints[step] = uri

    def write(
        self,
        step: int,
        reason: str,
        outstanding: list[WorkUnit],
        totals: dict[str, float],
        *,
        background: bool = False,
    ) -> None:
        """Write the snapshot of `step`. Its contents are fixed here; with `background` the
        params-hash RPC and the durable write run on the snapshot thread while the loop goes on
        (one at a time, in step order: the previous one is waited for, its error raised,
        first)."""
        with self.stage("snapshot"):
            self.wait()
            ckpt = self.resume_point(step)
            state = self.schedule.state_before(step)
            fields: dict[str, Any] = {
                "run_id": self.run_id,
                "config_hash": self.config_hash,
                "step": step,
                "version": step,
                "checkpoint_step": None if ckpt is None else ckpt[0],
                "checkpoint_uri": "" if ckpt is None else ckpt[1],
                "next_batch": step,
                "mixture": state,
                "epochs": self.mixture.epochs(state),
                "rng": {"samples": step, "train/pick": state.draws},
                "rollout_log": self.rollouts.position(),
                "outstanding": tuple(u for u in outstanding if u.batch >= step),
                "metrics": dict(totals),
                "reason": reason,
                "created_unix": time.time(),
            }
            # a remote run's metrics go with its snapshots, so a resume elsewhere keeps its
            # history
            uploads = self.uploads
            upto = uploads.take() if uploads is not None else None

            def write() -> None:
                if uploads is not None and upto is not None:
                    uploads.upload(upto)
                params_hash = self._session().params_hash(step)
                self.snapshots.write(Snapshot(**fields, params_hash=params_hash))
                self.progress.components["snapshot"] = f"step {step} ({reason})"
                self.progress.last_snapshot = (step, reason)

            if not background:
                write()
                return
            if self._thread is None:
                self._thread = ThreadPoolExecutor(1, thread_name_prefix="snapshot")
            self._pending = self._thread.submit(write)

    def write_between_steps(
        self, at: int, reason: str, outstanding: list[WorkUnit], totals: dict[str, float]
    ) -> None:
        """The committed snapshot of step `at` between two steps (SIGTERM, a request): with a
        checkpoint at `at` first when the batches from `at` on are generated with version `at`
        (else the snapshot names an older checkpoint and a resume replays from the log)."""
        if self.oldest_version_needed(at) >= at:
            self.save_checkpoint()
        self.write(at, reason, outstanding, totals)

    def wait(self) -> None:
        """Wait for the snapshot being written in the background, if any; raise its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def settle(self, log: Callable[[str], None]) -> None:
        """`wait` while another error is on its way out: log this one, not raise."""
        try:
            self.wait()
        except Exception as e:  # the error already on its way out matters more
            log(f"the snapshot being written failed too: {e}")

    def shutdown(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None


class SnapshotRequests:
    """Snapshots asked for from other threads (`Driver.request_snapshot`), each answered at the
    end of the step in progress with the step of the snapshot written, or its error. Asked
    before the loop has a step to train: FailedPrecondition; after the run ended: its final or
    stop snapshot's step."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self._lock = threading.Lock()
        self._waiting: list[Future[int]] = []
        self.in_loop = False  # the step loop is running (a request is served at a step's end)
        self._ended_at: int | None = None  # the run ended at a snapshot of this step

    def ask(self) -> Future[int]:
        future: Future[int] = Future()
        with self._lock:
            if self._ended_at is not None:
                future.set_result(self._ended_at)
            elif self.in_loop or self.progress.step > 0:
                self._waiting.append(future)
            else:
                future.set_exception(
                    FailedPrecondition(
                        "no step trained yet: a snapshot can be taken once the first step is "
                        f"under way (phase: {self.progress.phase})"
                    )
                )
        return future

    def take(self) -> list[Future[int]]:
        with self._lock:
            taken, self._waiting = self._waiting, []
        return taken

    def serve(self, at: int, write: Callable[[], None], log: Callable[[str], None]) -> None:
        """`write()` the snapshot of step `at` (just trained) if any is asked; answer them."""
        taken = self.take()
        if not taken:
            return
        log(f"step {at}: writing a requested snapshot")
        try:
            write()
        except BaseException as e:
            for future in taken:
                future.set_exception(e)
            raise
        for future in taken:
            future.set_result(at)

    def end(self, step: int | None, error: BaseException | None = None) -> None:
        """The run ended with the snapshot of `step` (None: none), or with `error`: every
        waiting request gets it."""
        with self._lock:
            if step is not None and error is None:
                self._ended_at = step
            taken, self._waiting = self._waiting, []
        for future in taken:
            if error is not None:
                future.set_exception(error)
            elif step is None:
                future.set_exception(
                    FailedPrecondition("the run stopped before a step was trained: no snapshot")
                )
            else:
                future.set_result(step)
