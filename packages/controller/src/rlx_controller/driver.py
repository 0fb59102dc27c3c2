"""The controller's loop (DESIGN §2-§4, §10a): train batch after batch on the run's services,
snapshot, resume.

    driver = Driver(cfg, run_dir, open_services=open_services)  # a launcher's; or s3:// / gs://
    summary = driver.run(resume=False)      # `rlx up`; resume=True: `rlx resume`

The loop is handed its services (rlx_controller.service_set): `open_services` makes the run's
service set (local processes, TPU nodes, or in-process simulations), which the loop starts,
talks to through a session (rlx_controller.session: retries, liveness, restarts) and stops; it
never starts a process or calls a cloud API itself. While it runs, `request_snapshot()` asks for
a committed snapshot at the end of the step in progress, `add_metrics_listener(fn)` hears every
metrics line, and `request_stop(reason)` stops it at a snapshot (the controller's gRPC service
uses these).

For b = step, step + 1, ...: the schedule's work units of every batch whose version exists are
dispatched to the inference workers (generation runs ahead of training by `lag`; the pipeline,
rlx_controller.pipeline); each unit's rollouts are scored and appended to the rollout log before
they count (rlx_controller.units); batch b's groups go through prefer-newest acceptance into one
fixed-shape TrainBatch (rlx_controller.batching); TrainStep carries expected_step = b.
Checkpoints every `snapshots.checkpoint_every` steps, snapshots at reload boundaries and on
SIGTERM / Ctrl-C (rlx_controller.snapshot_writer), held-out accuracy (greedy, through the
workers) every `eval.every` steps, one metrics line per step in `<run>/metrics.jsonl`.

Resume: the newest snapshot that verifies names a trainer checkpoint; the trainer is initialised
from it (pushing that version to the replicas), batches from the checkpoint on are trained again
from the rollout log (nothing logged is generated twice), and the run continues. A component that
stops answering is retried with backoff; a dead service is restarted and the run resumes from
its newest snapshot inside the same process.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlx_controller.batching import build_batch
from rlx_controller.evaluation import heldout_figures
from rlx_controller.inputs import load_run_inputs
from rlx_controller.lease import Lease
from rlx_controller.metrics import METRICS_FILE, MetricsUpload
from rlx_controller.pipeline import Pipeline, Stop
from rlx_controller.progress import MetricsLines, Progress, RunSummary, Stage, untimed
from rlx_controller.rollout_log import RolloutLog
from rlx_controller.rundir import CONTROLLER_PID, RUN_INFO, SUMMARY_FILE, RunPaths, read_run_info
from rlx_controller.service_set import OpenServices, ServiceSet
from rlx_controller.session import ComponentFailed, Session, params_hash, start_session
from rlx_controller.snapshot import Snapshot, SnapshotStore
from rlx_controller.snapshot_writer import SnapshotRequests, SnapshotWriter
from rlx_controller.units import TrainingUnits, UnitRunner
from rlx_core.clients import StepResult
from rlx_core.configs.run import RunConfig, config_hash
from rlx_core.errors import RlxError

__all__ = ["ComponentFailed", "Driver", "Progress", "RunSummary", "params_hash"]

# The interpreter's thread switch interval while the loop runs. Its threads mostly wait on RPCs;
# with hundreds of workers their replies arrive together and, at the default 5 ms, the waiting
# threads keep forcing the interpreter lock from whoever holds it: tools/bench/e2e/sim.py at
# 1024 workers measured 5.54 s/step at 5 ms, 4.54 at 250 ms (ideal 4.08).
SWITCH_INTERVAL_S = 0.25
# The cyclic garbage collector's thresholds while the loop runs, and the start-up objects
# (datasets, clients, modules) frozen out of its scans. Each unit's rollouts make thousands of
# containers, freed by reference counting, yet at the default gen0 threshold (700) they set off
# a collection every few hundred microseconds, each holding the interpreter lock, and full ones
# of 0.27 s: at 1024 simulated workers, 2.2 s of collections per 8-step run and 86-93% scaling
# efficiency; with these, 0.5 s (longest 0.02 s) and 96-99%.
GC_THRESHOLDS = (50_000, 20, 100)


@contextlib.contextmanager
def _interpreter_tuned() -> Iterator[None]:
    """SWITCH_INTERVAL_S and GC_THRESHOLDS (start-up objects frozen) inside; as before after."""
    old_switch, old_gc = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(max(old_switch, SWITCH_INTERVAL_S))
    gc.set_threshold(*GC_THRESHOLDS)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*old_gc)
        sys.setswitchinterval(old_switch)


@dataclass
class _Pass:
    """One pass of the loop, from the newest snapshot to the end or a stop."""

    pipe: Pipeline
    totals: dict[str, float]  # the snapshot's running figures
    replay_until: int  # the batches before it are in the rollout log already
    before: float | None  # held-out accuracy at step 0
    after: float | None  # the newest held-out accuracy
    t_last: float  # when the step before ended


class Driver:
    """One run of the controller loop on the services `open_services` hands it."""

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: str | Path,
        *,
        open_services: OpenServices,
        work_dir: str | Path | None = None,
        progress: Progress | None = None,
        log: Callable[[str], None] = print,
        component_deadline_s: float = 60.0,
        max_recoveries: int = 5,
        stage: Stage = untimed,
    ) -> None:
        self.cfg = cfg
        # durable state at the run directory (a path or s3:// / gs://), this machine's processes
        # in the work directory (the same directory for a local run): rlx_controller.rundir
        self.paths = RunPaths.of(run_dir, work_dir)
        self.run_dir, self.work_dir = self.paths.uri, self.paths.work
        self.storage = self.paths.storage
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.progress = progress or Progress(steps=cfg.steps)
        self.progress.steps = cfg.steps
        self._log, self._open_services, self.stage = log, open_services, stage
        self.deadline_s, self.max_recoveries = component_deadline_s, max_recoveries
        # a remote run's metrics.jsonl goes up with its snapshots, a piece at a time
        self._uploads = (
            MetricsUpload(self.storage, self.work_dir / METRICS_FILE) if self.paths.remote else None
        )
        self.rollouts = RolloutLog(self.storage)
        self.snapshots = SnapshotStore(self.storage, keep=cfg.snapshots.keep)
        self.hash = config_hash(cfg)
        self.inputs = load_run_inputs(cfg, self.storage, log)
        self.tokenizer, self.datasets = self.inputs.tokenizer, self.inputs.datasets
        self.prompt_tokens, self.schedule = self.inputs.prompt_tokens, self.inputs.schedule
        self.eval_sets, self.eval_ids = self.inputs.eval_sets, self.inputs.eval_ids
        self._stop, self._stop_reason = threading.Event(), ""
        self.services: ServiceSet | None = None
        self.session: Session | None = None
        self.units: TrainingUnits | None = None  # once the services are up
        self.run_id = ""
        self._train_times: list[float] = []
        self.metrics = MetricsLines(self.work_dir, self.log, stage)
        self._lease: Lease | None = None  # this run's, while run() runs
        self.requests = SnapshotRequests(self.progress)
        self.writer = SnapshotWriter(
            cfg, self.snapshots, self.rollouts, self.inputs, self._uploads, self.progress, stage
        )

    @property
    def _s(self) -> Session:
        assert self.session is not None, "the services are not started"
        return self.session

    # --- output -----------------------------------------------------------------------------
    def log(self, message: str) -> None:
        self.progress.messages = [*self.progress.messages[-4:], message]
        self._log(message)

    def add_metrics_listener(self, fn: Callable[[dict[str, Any]], None]) -> None:
        """Call `fn(record)` with every metrics line right after it is written to
        metrics.jsonl, on the loop's thread (an exception in fn is logged, nothing more)."""
        self.metrics.add_listener(fn)

    # --- requests from other threads (signals, the controller service) ------------------------
    def request_stop(self, reason: str = "signal") -> None:
        self._stop_reason = reason
        self._stop.set()

    def request_snapshot(self) -> Future[int]:
        """A committed snapshot at the end of the step in progress (reason "manual", the
        snapshot format's name for one asked for), written as the SIGTERM path writes it; the
        loop goes on training. The future holds its step, or the error; when the run ends or
        stops first, the final / stop snapshot's step. FailedPrecondition before the loop has a
        step to train."""
        return self.requests.ask()

    # --- the run --------------------------------------------------------------------------------
    def run(self, *, resume: bool, force: bool = False) -> RunSummary:
        """Train to cfg.steps (fresh, or from the newest snapshot); stop services at the end.

        The run's lease (rlx_controller.lease) is held throughout: RunBusy, before anything is
        touched, when another live controller holds it, unless `force`."""
        start = time.monotonic()
        try:
            lease = self._lease = Lease.acquire(self.storage, force=force)
            try:
                # for `rlx status` / `rlx down` on this machine (written once the run is ours)
                (self.work_dir / CONTROLLER_PID).write_text(str(os.getpid()))
                summary = self._run_leased(resume, start)
            finally:
                self._lease = None
                lease.release()
        except BaseException as e:
            self.requests.end(None, e)
            raise
        self.requests.end(summary.steps or None)  # 0: stopped before any step, no snapshot
        return summary

    def _run_leased(self, resume: bool, start: float) -> RunSummary:
        self.run_id = self.writer.run_id = _claim_run(self, resume)
        if self._uploads is not None:
            # resumed: continue the uploaded metrics, which hold every step up to the newest
            # snapshot (the steps after it are trained and written again); fresh: drop any
            # parts an earlier run that made no snapshot left
            (self._uploads.restore if resume else self._uploads.reset)()
        old_handlers = _install_signals(self.request_stop)
        try:
            with _interpreter_tuned():
                self._start_services()
                result = self._run_recovering()
            result.wall_s = time.monotonic() - start
            # (a remote run's metrics went up with its final or SIGTERM snapshot, after its
            # last line; a run stopped before its first step has only the step-0 evaluation,
            # which a resume runs again)
            self.storage.put(SUMMARY_FILE, json.dumps(result.to_dict(), indent=1).encode())
            return result
        finally:
            self.writer.shutdown()
            _restore_signals(old_handlers)
            if self.session is not None:
                self.session.close()
            self.metrics.close()
            if self.services is not None:
                self.progress.phase = "stopping services"
                self.services.stop()

    def _start_services(self) -> None:
        # Ctrl-C / SIGTERM while provisioning (the stop event) stops the wait
        opened = self._open_services(
            self.cfg, self.paths, log=self.log, on_preempted=self.request_stop, cancel=self._stop
        )
        self.services = opened
        self.session = self.writer.session = start_session(
            opened, deadline_s=self.deadline_s, log=self.log, progress=self.progress
        )
        runner = UnitRunner(self.session, self.tokenizer, self.cfg.batch.max_new_tokens, self.log)
        self.units = TrainingUnits(self.cfg, runner, self.inputs, self.rollouts, stage=self.stage)

    def _run_recovering(self) -> RunSummary:
        """`_run_from_snapshot`; when a component fails for good, restart the dead services and
        resume from the newest snapshot, up to max_recoveries times."""
        recoveries = 0
        while True:
            try:
                return self._run_from_snapshot()
            except ComponentFailed as e:
                if self._stop.is_set():
                    # stopping anyway (a preempted node, a signal): the newest snapshot is
                    # where `rlx resume` continues
                    self.log(f"{e}; stopping ({self._stop_reason}) at the newest snapshot")
                    return _stopped_summary(self.snapshots, self._train_times)
                recoveries += 1
                if recoveries > self.max_recoveries:
                    raise
                self.log(f"{e}; restarting dead services, resuming from the newest snapshot")
                self._s.restart(e)

    # --- one pass of the loop -----------------------------------------------------------------
    def _run_from_snapshot(self) -> RunSummary:
        run = self._restore()
        stopped = False
        self.requests.in_loop = True
        try:
            for b in range(self.progress.step, self.cfg.steps):
                self._step(b, run)
            self.writer.wait()
        except Stop:
            stopped = True
            self.log(f"stopping ({self._stop_reason}): writing a snapshot")
            at = self.progress.step
            if at > 0:
                self.writer.write_between_steps(at, "sigterm", run.pipe.outstanding(), run.totals)
        except BaseException:
            self.writer.settle(self.log)
            raise
        finally:
            self.requests.in_loop = False
            run.pipe.close(stopped)
        final = self.progress.step
        return RunSummary(
            steps=final,
            heldout_before=run.before,
            heldout_after=run.after,
            params_hash=self._s.params_hash(final) if final else "",
            wall_s=0.0,
            train_s_per_step=_median_train_s(self._train_times),
            stopped=stopped,
        )

    def _restore(self) -> _Pass:
        """The trainer at the newest snapshot's checkpoint (or initialised: a fresh run, with
        the step-0 evaluation), and the pipeline from there."""
        snap = self.snapshots.latest(on_skip=self.log)  # "skipping snapshot ...: why"
        assert self.units is not None
        self.units.logged = set(self.rollouts.unit_ids())
        self.progress.phase = "initialising trainer"
        step = self._init_trainer(snap)
        self.writer.checkpoints = {}
        if snap is not None and snap.checkpoint_step is not None:
            self.writer.checkpoints[snap.checkpoint_step] = snap.checkpoint_uri
        totals: dict[str, float] = dict(snap.metrics) if snap is not None else {}
        before: float | None = totals.get("heldout_before")
        if snap is None and self.eval_sets:
            before = self._evaluate_start()
        if before is not None:
            totals["heldout_before"] = before
        after: float | None = totals.get("heldout_last")
        build = functools.partial(
            build_batch,
            cfg=self.cfg,
            pad_id=self.tokenizer.pad_id,
            prompt_tokens=self.prompt_tokens.ids,
        )
        pipe = Pipeline(self.cfg, self.schedule, self.units, build, first=step, stop=self._stop)
        self.progress.step = step
        replay_until = snap.step if snap is not None else 0
        return _Pass(pipe, totals, replay_until, before, after, time.monotonic())

    def _init_trainer(self, snap: Snapshot | None) -> int:
        """Initialise the trainer from the snapshot's checkpoint (the schedule anchored there)
        or from the model; the step it is at."""
        s = self._s
        if snap is not None and snap.checkpoint_step is not None:
            self.log(
                f"resuming from snapshot at step {snap.step} (checkpoint {snap.checkpoint_step})"
            )
            uri, at = snap.checkpoint_uri, snap.checkpoint_step
            s.call(lambda: s.trainer.init(checkpoint=uri, step=at), "trainer init")
            self.schedule.anchor(snap.next_batch, snap.mixture)
            return at
        if snap is not None:
            self.log(f"resuming from snapshot at step {snap.step} (no checkpoint: from step 0)")
        cfg = self.cfg
        s.call(lambda: s.trainer.init(seed=cfg.seed, hf_dir=cfg.model.path), "trainer init")
        return 0

    def _step(self, b: int, run: _Pass) -> None:
        """Train batch b: dispatch, gather (batch b+1 ahead), TrainStep, then `_after_step`."""
        cfg, pipe, s = self.cfg, run.pipe, self._s
        if self._lease is not None:
            self._lease.check()  # taken over elsewhere (--force): stop, write nothing
        pipe.dispatch(b)
        self.progress.phase = "training" if b >= run.replay_until else "replaying from log"
        batch, info, refill = pipe.batch(b)
        if cfg.dynamic_sampling_enabled and info["groups"] < cfg.batch.prompts:
            self.log(
                f"batch {b}: dynamic sampling found {info['groups']} of "
                f"{cfg.batch.prompts} informative groups within its budget; "
                "training on the smaller batch"
            )
        pipe.prepare_ahead(b)
        t0 = time.monotonic()
        result: StepResult = s.call(
            functools.partial(s.trainer.train_step, batch, expected_step=b), "trainer step"
        )
        self._train_times.append(time.monotonic() - t0)
        pipe.trained(b)
        # the new version's batches go to the workers now, not after the checkpoint,
        # evaluation, metrics and snapshot below (the workers would wait on those)
        pipe.dispatch(result.step)
        self._after_step(result, info, refill, run)

    def _after_step(
        self, result: StepResult, info: dict[str, Any], refill: dict[str, Any], run: _Pass
    ) -> None:
        """The step's figures, checkpoint, evaluation, metrics line and snapshots."""
        cfg, new = self.cfg, result.step
        now = time.monotonic()
        dt, run.t_last = now - run.t_last, now
        self.progress.trained(new, info["reward"], info["gen_tokens"], info["staleness"], dt)
        record = _metrics_record(result, info, refill, dt, self.progress.tokens_per_s, run.totals)
        if new % cfg.snapshots.checkpoint_every == 0 or new == cfg.steps:
            self.writer.save_checkpoint()
        due = new % cfg.eval.every == 0 or new == cfg.steps
        if new >= run.replay_until and self.eval_sets and due:
            record.update(self._evaluate_step(new, run))
        self.metrics.write(record)
        outstanding = run.pipe.outstanding()
        if new == cfg.steps:
            self.writer.write(new, "final", outstanding, run.totals)
        elif self.schedule.is_reload_boundary(new) and new % cfg.snapshot_every == 0:
            self.writer.write(new, "reload", outstanding, run.totals, background=True)
        if new < cfg.steps and not self._stop.is_set():  # else the final / stop one answers
            self.requests.serve(
                new,
                lambda: self.writer.write_between_steps(new, "manual", outstanding, run.totals),
                self.log,
            )
        if self._stop.is_set():  # (asked during `serve`: its snapshot is of this step too)
            raise Stop

    # --- held-out evaluation -----------------------------------------------------------------
    def _heldout(self, version: int) -> dict[str, float | None] | None:
        assert self.units is not None
        runner, cfg = self.units.runner, self.cfg
        return heldout_figures(runner, cfg, self.eval_sets, self.eval_ids, version)

    def _evaluate_start(self) -> float:
        """A fresh run's step-0 held-out accuracy, its metrics line written."""
        self.progress.phase = "evaluating"
        figures0 = self._heldout(0) or {}
        acc0 = figures0.get("heldout") or 0.0
        self.log(f"held-out accuracy at step 0: {acc0:.3f}")
        self.metrics.write({"step": 0, **figures0, "heldout": acc0})
        self.progress.heldout[0] = acc0
        return acc0

    def _evaluate_step(self, new: int, run: _Pass) -> dict[str, float | None]:
        """Step `new`'s held-out figures, for its metrics line."""
        self.progress.phase = "evaluating"
        figures = self._heldout(new) or {}
        after = run.after = figures.get("heldout")
        run.totals["heldout_last"] = after  # type: ignore[assignment]
        self.progress.heldout[new] = after  # type: ignore[assignment]
        shown = "-" if after is None else f"{after:.3f}"  # None: nothing judged
        self.log(f"step {new}: held-out accuracy {shown}")
        return figures


def _claim_run(driver: Driver, resume: bool) -> str:
    """The run's id: run.json's when resuming (its config must be the driver's), else a new
    run's, written to run.json (refused when the run directory holds a run already)."""
    storage, run_dir = driver.storage, driver.run_dir
    info = read_run_info(storage) if resume else None
    if info is not None:
        if info["config_hash"] != driver.hash:
            raise RlxError(f"{run_dir}: the config differs from the run's (hash)")
        return str(info["run_id"])
    if not resume and any(driver.snapshots.entries()):
        raise RlxError(f"{run_dir} already holds a run: `rlx resume {run_dir}` continues it")
    run_id = uuid.uuid4().hex[:12]
    info = {
        "run_id": run_id,
        "config_hash": driver.hash,
        # the chat template's "today" (strftime_now) for every start of this run
        "chat_date": driver.tokenizer.now.isoformat(),
    }
    storage.put(RUN_INFO, json.dumps(info).encode())
    return run_id


def _metrics_record(
    result: StepResult,
    info: dict[str, Any],
    refill: dict[str, Any],
    dt: float,
    tokens_per_s: float,
    totals: dict[str, float],
) -> dict[str, Any]:
    """A step's metrics line; the run's totals updated."""
    totals["steps"] = result.step
    totals["excluded"] = totals.get("excluded", 0) + info["excluded"]
    errors = info["metrics"]["verifier_errors"]
    totals["verifier_errors"] = totals.get("verifier_errors", 0) + errors
    totals["dropped_stale"] = totals.get("dropped_stale", 0) + info["dropped_stale"]
    return {
        "step": result.step,
        "reward": info["reward"],
        "staleness": info["staleness"],
        "excluded": info["excluded"],
        "dropped_stale": info["dropped_stale"],
        "groups": info["groups"],
        # the accepted prompts' references ("dataset/row"); the key is kept as it is
        "prompt_ids": info["prompts"],
        **refill,
        **info["metrics"],
        "step_s": dt,
        "gen_tokens_per_s": tokens_per_s,
        **{f"trainer/{k}": v for k, v in sorted(result.metrics.items())},
    }


def _median_train_s(times: list[float]) -> float:
    """Median seconds of a train step, past the first three (compilation)."""
    return float(np.median(times[3:] or times or [0.0]))


def _stopped_summary(snapshots: SnapshotStore, train_times: list[float]) -> RunSummary:
    """The summary of a run stopped at its newest snapshot."""
    snap = snapshots.latest()
    return RunSummary(
        steps=0 if snap is None else snap.step,
        heldout_before=None,
        heldout_after=None,
        params_hash="" if snap is None else snap.params_hash,
        wall_s=0.0,
        train_s_per_step=_median_train_s(train_times),
        stopped=True,
    )


def _install_signals(on_signal: Callable[[str], None]) -> dict[int, Any]:
    """SIGTERM and SIGINT call `on_signal(name)` (main thread only); the handlers replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    old: dict[int, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        old[sig] = signal.signal(sig, lambda s, _f: on_signal(signal.Signals(s).name))
    return old


def _restore_signals(old: dict[int, Any]) -> None:
    for sig, handler in old.items():
        signal.signal(sig, handler)
