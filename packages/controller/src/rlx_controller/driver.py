"""The controller's loop (DESIGN §2-§4): start the services, train batch after batch, resume.

    driver = Driver(cfg, run_dir, open_services=rlx_launch.open_services)  # or s3:// / gs://
    summary = driver.run(resume=False)      # `rlx up`; resume=True: `rlx resume`

The loop is handed its services (rlx_controller.service_set): `open_services` makes the run's
service set (local processes, TPU nodes, or in-process simulations), which the loop starts,
connects to, watches and restarts; it never starts a process or calls a cloud API itself. While
it runs, `request_snapshot()` asks for a committed snapshot at the end of the step in progress,
`add_metrics_listener(fn)` hears every metrics line, and `request_stop(reason)` stops it at a
snapshot (rlx_controller's gRPC service uses these).

For b = step, step + 1, ...: the schedule's work units of every batch whose version exists are
dispatched to the inference workers in threads (generation runs ahead of training by `lag`);
each unit's rollouts are scored by the verifier and appended to the rollout log before they
count; batch b's groups go through prefer-newest acceptance into one fixed-shape TrainBatch;
TrainStep carries expected_step = b. Checkpoints every `snapshots.checkpoint_every` steps,
snapshots at reload boundaries and on SIGTERM / Ctrl-C, held-out accuracy (greedy, through the
workers) every `eval.every` steps, one metrics line per step in `<run>/metrics.jsonl`.

Resume: the newest snapshot that verifies names a trainer checkpoint; the trainer is initialised
from it (pushing that version to the replicas), batches from the checkpoint on are trained again
from the rollout log (nothing logged is generated twice), and the run continues. A component that
stops answering is retried with backoff; a dead local service is restarted and the run resumes
from its newest snapshot inside the same process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import gc
import hashlib
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from rlx_controller.code_tasks import NO_CODE
from rlx_controller.datasets import Dataset, Prompt, load_dataset, load_prefilter, mixture_sources
from rlx_controller.evaluation import EvalSample, evaluate_version, metric_fields
from rlx_controller.lease import Lease
from rlx_controller.liveness import Liveness, NotAnswering
from rlx_controller.metrics import METRICS_FILE, MetricsUpload, MetricsWriter
from rlx_controller.mixture import MixtureSource, PromptMixture
from rlx_controller.prompts import PromptIds
from rlx_controller.rng import sample_seed
from rlx_controller.rollout_log import RolloutLog
from rlx_controller.run_config import RunConfig, config_hash
from rlx_controller.rundir import (
    CONTROLLER_PID,
    RUN_INFO,
    SUMMARY_FILE,
    RunPaths,
    read_run_info,
)
from rlx_controller.schedule import (
    GroupRef,
    Schedule,
    WorkUnit,
    budget_prompts,
    refill_count,
    select_groups,
)
from rlx_controller.scoring import score_responses
from rlx_controller.service_set import Clients, OpenServices, ServiceSet
from rlx_controller.snapshot import Snapshot, SnapshotStore
from rlx_core.clients import (
    Sampling,
    StepResult,
    TrainBatch,
    VerifySample,
)
from rlx_core.clients import WorkUnit as GenUnit
from rlx_core.clients.paramserver import TensorSpec
from rlx_core.clients.verifier import SampleResult
from rlx_core.errors import (
    ConfigError,
    DeadlineExceeded,
    FailedPrecondition,
    NotFound,
    RlxError,
    Unavailable,
)
from rlx_core.rollout import RolloutGroup, RolloutUnit
from rlx_core.storage import open_storage
from rlx_core.tokenizer import Tokenizer, load_tokenizer

__all__ = ["Driver", "Progress", "RunSummary", "params_hash"]

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
_TRANSIENT = (Unavailable, DeadlineExceeded)


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


def params_hash(manifest: Sequence[TensorSpec]) -> str:
    """sha256 over a version's manifest in name order: each tensor's name, dtype, shape and the
    digest (XXH3-128) the paramserver computed over its bytes when it received them. It
    identifies the params exactly without moving them (a snapshot at every reload boundary must
    not pull the whole model)."""
    h = hashlib.sha256()
    for t in sorted(manifest, key=lambda t: t.name):
        h.update(f"{t.name}|{t.dtype.str}|{t.shape}|{t.digest}\n".encode())
    return h.hexdigest()


class _Filled(NamedTuple):
    tokens: np.ndarray  # [B, G, P + R]
    valid: np.ndarray
    mask: np.ndarray
    logp: np.ndarray
    rewards: np.ndarray  # [B, G]
    reward_sum: float
    rewards_counted: int
    excluded: int
    gen_tokens: int


def _fill_arrays(
    groups: Sequence[RolloutGroup], shape: tuple[int, int, int, int], pad_id: int
) -> _Filled:
    """The arrays of the accepted groups for shape (B, G, P, R): each group's prompt ids
    right-aligned at P, its responses from P; slots past len(groups) stay empty; and the counts
    (reward sum, rewards counted, samples excluded, response tokens).

    The responses go in with one masked assignment per array (a slice assignment per sample
    cost ~20 us: 170 ms a step at 1024 units of 8)."""
    B, G, P, R = shape
    S = P + R
    tokens = np.full((B, G, S), pad_id, np.int32)  # never attended to (valid) nor trained
    valid = np.zeros((B, G, S), bool)
    mask = np.zeros((B, G, S), np.float32)
    logp = np.zeros((B, G, S), np.float32)
    rewards = np.zeros((B, G), np.float32)
    rsum, rcount, excluded, gen_tokens = 0.0, 0, 0, 0
    lengths = np.zeros((B, G), np.intp)  # response tokens per row
    resp_tokens: list[int] = []  # every row's response, concatenated in row order
    resp_logp: list[np.ndarray] = []
    scored_rows = np.zeros((B, G), bool)
    for i, group in enumerate(groups):
        ids = group.prompt_ids
        tokens[i, :, P - len(ids) : P] = ids
        valid[i, :, P - len(ids) : P] = True
        scored = [s.reward for s in group.samples if s.reward is not None]
        mean = float(np.mean(scored)) if scored else 0.0
        for g, s in enumerate(group.samples):
            resp = s.tokens[:R]
            n = len(resp)
            lengths[i, g] = n
            resp_tokens += resp
            gen_tokens += n
            if s.reward is None:  # INFRA / ERROR: left out, never scored 0
                excluded += 1
                rewards[i, g] = mean
                resp_logp.append(np.zeros(n, np.float32))
                continue
            resp_logp.append(s.logp[:n])  # one float32 per token (the record checks it)
            scored_rows[i, g] = True
            rewards[i, g] = s.reward
            rsum += s.reward
            rcount += 1
    # row-major boolean selection of the response positions [B, G, R]: its order is the
    # concatenation's, so each array takes one masked assignment
    inside = np.arange(R) < lengths[..., None]
    tokens[..., P:][inside] = resp_tokens
    valid[..., P:][inside] = True
    logp[..., P:][inside] = np.concatenate(resp_logp) if resp_logp else []
    mask[..., P:][inside & scored_rows[..., None]] = 1.0
    return _Filled(tokens, valid, mask, logp, rewards, rsum, rcount, excluded, gen_tokens)


def _judge_metrics(groups: Sequence[RolloutGroup], records: Sequence[RolloutUnit]) -> dict:
    """A batch's rewards per dataset (`reward/<name>`, the mean over its scored samples) and
    verdicts (`verdicts`: {status: samples}) over the groups it trains on, and what judging
    cost: the verifier's mean wall seconds per judged code sample (NO_CODE ones never reach it)
    compiling, running and checking
    (`verifier/compile_s`, `/run_s`, `/check_s`; 0 for a cached verdict), and the seconds the
    controller waited on it for the batch's units (`verifier/wait_s`); `verifier_errors`: the
    samples it refused (ERROR) in all of the batch's units, trained on or not."""
    rewards: dict[str, list[float]] = {}
    verdicts: dict[str, int] = {}
    costs = np.zeros(3)
    judged = 0
    for group in groups:
        scored = rewards.setdefault(group.prompt.rpartition("/")[0], [])
        for s in group.samples:
            verdicts[s.status] = verdicts.get(s.status, 0) + 1
            if s.reward is not None:
                scored.append(s.reward)
            j = s.judgement
            if j.tests_total and s.status != NO_CODE:  # a code sample the verifier judged
                costs += (j.compile_s, j.run_s, j.check_s)
                judged += 1
    out: dict[str, Any] = {
        f"reward/{name}": float(np.mean(values)) if values else float("nan")
        for name, values in sorted(rewards.items())
    }
    out["verdicts"] = dict(sorted(verdicts.items()))
    out["verifier_errors"] = sum(
        s.status == "ERROR" for r in records for g in r.groups for s in g.samples
    )
    if judged:
        for name, total in zip(("compile_s", "run_s", "check_s"), costs, strict=True):
            out[f"verifier/{name}"] = float(total / judged)
    out["verifier/wait_s"] = float(sum(r.verify_s for r in records))
    return out


def _uniform(group: RolloutGroup) -> bool:
    """Whether a group teaches nothing: its scored rewards are all equal (or none is scored)."""
    scored = {s.reward for s in group.samples if s.reward is not None}
    return len(scored) <= 1


def _run_tokenizer(cfg: RunConfig, storage: Any) -> Tokenizer:
    """The tokenizer of the run's checkpoint, its chat template's date fixed to the run's first
    start (run.json's `chat_date`; now, for a new run)."""
    now = None
    with contextlib.suppress(RlxError, ValueError):  # a damaged run.json is reported later
        info = read_run_info(storage)
        if info is not None and info.get("chat_date"):
            now = datetime.datetime.fromisoformat(info["chat_date"])
    return load_tokenizer(cfg.model.path, now=now)


def _fitting_sources(sources: list[MixtureSource], table: PromptIds) -> list[MixtureSource]:
    """The mixture's sources without the rows whose prompt is longer than max_prompt_tokens."""
    out = []
    for src in sources:
        fits = set(table.fitting(src.name))
        rows = [r for r in src.rows if r in fits]
        if not rows:
            raise ConfigError(
                f"no prompt of {src.name!r} that the pre-filter keeps fits in "
                f"batch.max_prompt_tokens = {table.max_tokens}",
                field="batch.max_prompt_tokens",
            )
        out.append(MixtureSource(src.name, src.weight, rows))
    return out


class ComponentFailed(RlxError):
    """A service died or stopped answering: restart and resume from the newest snapshot.
    `service` names the one that stopped answering ("" when not known)."""

    def __init__(self, message: str, *, service: str = "") -> None:
        super().__init__(message, service=service)
        self.service = service


class Stop(Exception):
    """SIGTERM / Ctrl-C: snapshot and stop."""


@dataclass
class Progress:
    """What the live view shows; updated by the loop."""

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


def _service_of(what: str) -> str:
    """The service a call's description names first ("trainer step" -> "trainer")."""
    return what.split(" ", 1)[0]


def _waits_on(service: str, live: Liveness) -> tuple[str, ...]:
    """The services a call to `service` waits on through it: the trainer pushes every version
    to the paramservers and a worker pulls from one, so a hung paramserver (SIGSTOPped) holds
    their calls while they still answer status calls themselves."""
    if service == "trainer" or service.startswith("inference"):
        return tuple(s for s in live.services if s.startswith("paramserver"))
    return ()


def _retry(
    fn: Callable[[], Any],
    what: str,
    deadline_s: float,
    log: Callable[[str], None],
    dead: Callable[[], list[str]] = list,
) -> Any:
    """fn() with exponential backoff while it raises Unavailable / DeadlineExceeded; a dead
    local service ends the retries at once (it needs a restart, not patience). `what` starts
    with the name of the service called ("trainer step")."""
    start = time.monotonic()
    delay = 0.5
    while True:
        try:
            return fn()
        except _TRANSIENT as e:
            gone = dead()
            if gone:
                raise ComponentFailed(f"{what}: {', '.join(gone)} not running: {e}") from e
            if time.monotonic() - start + delay > deadline_s:
                raise ComponentFailed(
                    f"{what}: no answer within {deadline_s:.0f} s: {e}", service=_service_of(what)
                ) from e
            log(f"{what}: {type(e).__name__}; retrying in {delay:.1f} s")
            time.sleep(delay)
            delay = min(delay * 2, 8.0)


class Driver:
    """One run of the controller loop against local services."""

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
    ) -> None:
        self.cfg = cfg
        self._open_services = open_services
        # durable state at the run directory (a path or s3:// / gs://), this machine's processes
        # in the work directory (the same directory for a local run): rlx_controller.rundir
        self.paths = RunPaths.of(run_dir, work_dir)
        self.run_dir = self.paths.uri
        self.work_dir = self.paths.work
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.progress = progress or Progress(steps=cfg.steps)
        self.progress.steps = cfg.steps
        self._log = log
        self.deadline_s = component_deadline_s
        self.max_recoveries = max_recoveries
        self.storage = self.paths.storage
        # a remote run's metrics.jsonl goes up with its snapshots, a piece at a time
        self._uploads = (
            MetricsUpload(self.storage, self.work_dir / METRICS_FILE) if self.paths.remote else None
        )
        self.rollouts = RolloutLog(self.storage)
        self.snapshots = SnapshotStore(self.storage, keep=cfg.snapshots.keep)
        self.hash = config_hash(cfg)
        self.P = cfg.batch.max_prompt_tokens
        self.R = cfg.batch.max_new_tokens
        # the run's own tokenizer, once: every prompt's ids are computed here and travel with
        # the work; a chat template's date (strftime_now) is the run's first start, so a resume
        # renders what the run it continues rendered
        self.tokenizer = _run_tokenizer(cfg, self.storage)
        judge = cfg.verifier.judge  # every limit and link checked against the verifier's caps
        self.datasets = {
            d.name: load_dataset(d, field_path=f"datasets[{i}]", judge=judge)
            for i, d in enumerate(cfg.datasets)
        }
        self.prompt_ids = PromptIds(self.tokenizer, self.datasets, max_tokens=self.P, log=log)
        pre = load_prefilter(cfg.prefilter.file) if cfg.prefilter.file else None
        sources = _fitting_sources(
            mixture_sources(cfg, list(self.datasets.values()), pre), self.prompt_ids
        )
        self.mixture = PromptMixture(sources, seed=cfg.seed)
        self.schedule = Schedule.from_config(cfg, self.mixture)
        self.eval_sets = [
            load_dataset(d, field_path=f"eval.datasets[{i}]", judge=judge)
            for i, d in enumerate(cfg.eval.datasets)
        ]
        self.eval_ids = PromptIds(
            self.tokenizer,
            {d.name: d for d in self.eval_sets},
            max_tokens=self.P,
            field_path="eval.datasets",
            log=log,
        )
        self._stop = threading.Event()
        self._stop_reason = ""
        self.services: ServiceSet | None = None
        self._clients: Clients | None = None
        self.run_id = ""
        self._worker_locks: list[threading.Lock] = []
        self._train_times: list[float] = []
        self.dynamic = cfg.dynamic_sampling_enabled
        self._logged: set[str] = set()  # unit ids with a record in the rollout log (listed)
        self.metrics: MetricsWriter | None = (
            None  # metrics.jsonl + TensorBoard, opened at first use
        )
        self.refill_budget = budget_prompts(cfg.batch.prompts, cfg.dynamic_sampling.budget)
        self._snapshot_thread: ThreadPoolExecutor | None = None  # writes reload snapshots
        self._pending_snapshot: Future[None] | None = None
        self._lease: Lease | None = None  # this run's, while run() runs
        self._checkpoints: dict[int, str] = {}  # step -> uri of the trainer's checkpoints
        self._liveness: Liveness | None = None  # status pings of the services, once connected
        self._metrics_listeners: list[Callable[[dict[str, Any]], None]] = []
        # request_snapshot: the futures waiting for the end of the step in progress
        self._requests_lock = threading.Lock()
        self._snapshot_requests: list[Future[int]] = []
        self._in_loop = False  # the step loop is running (a request is served at a step's end)
        self._ended_at: int | None = None  # the run ended at a snapshot of this step

    # --- output -----------------------------------------------------------------------------
    def log(self, message: str) -> None:
        self.progress.messages = [*self.progress.messages[-4:], message]
        self._log(message)

    def _metrics_line(self, record: dict[str, Any]) -> None:
        if self.metrics is None:
            self.metrics = MetricsWriter(self.work_dir)
        self.metrics.write(record)
        for fn in list(self._metrics_listeners):
            try:
                fn(record)
            except Exception as e:  # a listener never breaks the loop
                self.log(f"metrics listener {getattr(fn, '__name__', fn)!r} failed: {e!r}")

    def add_metrics_listener(self, fn: Callable[[dict[str, Any]], None]) -> None:
        """Call `fn(record)` with every metrics line right after it is written to
        metrics.jsonl, on the loop's thread (an exception in fn is logged, nothing more)."""
        self._metrics_listeners.append(fn)

    # --- services ---------------------------------------------------------------------------
    def _start_services(self) -> None:
        self.services = self._open_services(
            self.cfg,
            self.paths,
            log=self.log,
            on_preempted=self.request_stop,
            cancel=self._stop,  # Ctrl-C / SIGTERM while provisioning stops the wait
        )
        self.progress.phase = "starting services"
        shown: dict[str, float] = {}

        def on_wait(name: str, t: float) -> None:
            if t - shown.get(name, 0.0) >= 10:
                shown[name] = t
                self.log(f"waiting for {name} ({t:.0f} s)")

        self.services.start(on_wait=on_wait)
        self._connect()

    def _connect(self) -> None:
        assert self.services is not None
        s = self.services
        clients = self._clients = s.connect()
        self.trainer = clients.trainer
        self.workers = list(clients.workers)
        self.verifiers = list(clients.verifiers)
        self.paramserver = clients.paramservers[0]
        addresses = s.addresses()  # none: services with no address to ping (in-process)
        self._liveness = (
            Liveness(addresses, str(s.token_file), deadline_s=self.deadline_s)
            if addresses
            else None
        )
        self._reset_worker_state()
        for name, address in addresses.items():
            self.progress.components[name] = f"up {address}"

    def _reset_worker_state(self) -> None:
        """Per inference worker: the lock that serialises its calls and the version it holds
        (unknown after a (re)connect)."""
        self._worker_locks = [threading.Lock() for _ in self.workers]
        self._loaded: list[int | None] = [None] * len(self.workers)
        self.progress.loaded.clear()

    def _set_loaded(self, worker: int, version: int | None) -> None:
        """Worker `worker` holds `version` (None: not known), for the loop and the live view."""
        self._loaded[worker] = version
        if version is None:
            self.progress.loaded.pop(f"inference-{worker}", None)
        else:
            self.progress.loaded[f"inference-{worker}"] = version

    def _close_clients(self) -> None:
        if self._liveness is not None:
            self._liveness.close()
            self._liveness = None
        if self._clients is not None:
            self._clients.close()
            self._clients = None

    def _call(self, fn: Callable[[], Any], what: str) -> Any:
        """fn() through `_retry`; a call to a service that stops answering status calls (it
        hangs) is given up after the component deadline (rlx_controller.liveness)."""
        live = self._liveness
        service = _service_of(what)
        watched = (
            fn
            if live is None
            else functools.partial(live.call, fn, service, through=_waits_on(service, live))
        )
        try:
            dead = self.services.dead if self.services is not None else list
            return _retry(watched, what, self.deadline_s, self.log, dead)
        except NotAnswering as e:
            raise ComponentFailed(f"{what}: {e}", service=e.service) from e
        except ComponentFailed:
            raise
        except _TRANSIENT as e:
            raise ComponentFailed(f"{what}: {e}", service=_service_of(what)) from e

    # --- prompts and units --------------------------------------------------------------------
    def _prompt(self, dataset: str, row: int) -> Prompt:
        return self.datasets[dataset].prompt(row)

    def _ids(self, dataset: str, row: int) -> tuple[int, ...]:
        return self.prompt_ids.ids(dataset, row)

    def _gen_unit(self, unit: WorkUnit) -> GenUnit:
        prompts = [self._ids(ref.dataset, ref.row) for ref in unit.prompts]
        s = self.cfg.sampling
        return GenUnit(
            unit_id=unit.unit_id,
            version=unit.version,
            prompts=tuple(prompts),
            samples_per_prompt=unit.group_size,
            sampling=Sampling(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k),
            seeds=tuple(x for seeds in unit.seeds for x in seeds),
            max_new_tokens=self.R,
            stop_token_ids=self.tokenizer.stop_ids,
        )

    def _generate(self, worker: int, unit: GenUnit) -> Any:
        client = self.workers[worker]
        with self._worker_locks[worker]:
            for attempt in (0, 1):
                if self._loaded[worker] != unit.version:  # one LoadVersion per change, not per unit
                    self._call(
                        lambda: client.load_version(unit.version), f"inference-{worker} load"
                    )
                    self._set_loaded(worker, unit.version)
                    self.progress.components[f"inference-{worker}"] = f"up, version {unit.version}"
                try:
                    return self._call(lambda: client.generate(unit), f"inference-{worker} generate")
                except FailedPrecondition:
                    # the worker holds another version than we thought (restarted by someone
                    # else, or forced to reload): load again, once
                    self._set_loaded(worker, None)
                    if attempt:
                        raise
            raise AssertionError("unreachable")

    def _decode(self, rollouts: Sequence[Any]) -> list[str]:
        """Each rollout's response text (special tokens, EOS among them, left out): decoded
        once, scored and logged as is."""
        return [self.tokenizer.decode(r.token_ids) for r in rollouts]

    def _verify_rollouts(
        self, unit_id: str, prompts: Sequence[Prompt], texts: Sequence[str], key: int
    ) -> list[SampleResult]:
        """The verdict on every response of a unit (rlx_controller.scoring): texts[i * G + g]
        answers prompts[i]; a sample the verifier refuses is an ERROR verdict, logged."""
        return score_responses(unit_id, prompts, texts, lambda s: self._verify(s, key), self.log)

    def _verify(self, samples: list[VerifySample], key: int) -> list[Any]:
        i = key % len(self.verifiers)
        return list(self._call(lambda: self.verifiers[i].verify(samples), f"verifier-{i} verify"))

    def run_unit(self, unit: WorkUnit) -> RolloutUnit:
        """A unit's scored rollouts: from the rollout log when logged, else generated, scored and
        appended (the logged record is what counts)."""
        logged = self._logged_record(unit)
        if logged is not None:
            return logged
        return self._score_and_log(unit, self._generate_unit(unit))

    def _submit(
        self, unit: WorkUnit, gen_pools: list[ThreadPoolExecutor], post_pool: ThreadPoolExecutor
    ) -> Future[RolloutUnit]:
        """`run_unit` in two stages: generation on its worker's own thread (`gen_pools[w]`,
        mostly waiting on the RPC), then scoring and logging on the smaller `post_pool`, so a
        worker's thread is free for its next unit the moment its reply is in, and few threads
        compete for the interpreter. The future holds the logged record (or the stage's error)."""
        done: Future[RolloutUnit] = Future()

        def post(result: Any) -> None:
            try:
                done.set_result(self._score_and_log(unit, result))
            except BaseException as e:
                done.set_exception(e)

        def gen() -> None:
            try:
                logged = self._logged_record(unit)
                if logged is not None:
                    done.set_result(logged)
                    return
                result = self._generate_unit(unit)
                post_pool.submit(post, result)
            except BaseException as e:
                done.set_exception(e)

        gen_pools[self._worker_of(unit)].submit(gen)
        return done

    def _logged_record(self, unit: WorkUnit) -> RolloutUnit | None:
        if unit.unit_id not in self._logged:  # one listing at (re)start, not a read per unit
            return None
        return self.rollouts.get(unit.unit_id)

    def _worker_of(self, unit: WorkUnit) -> int:
        """The inference worker a unit is generated on (round-robin over the schedule)."""
        return (unit.batch * self.cfg.batch.units_per_batch + unit.index) % len(self.workers)

    def _generate_unit(self, unit: WorkUnit) -> Any:
        return self._generate(self._worker_of(unit), self._gen_unit(unit))

    def _score_and_log(self, unit: WorkUnit, result: Any) -> RolloutUnit:
        """Verify a generated unit's rollouts and append them to the rollout log."""
        prompts = [self._prompt(ref.dataset, ref.row) for ref in unit.prompts]
        texts = self._decode(result.rollouts)
        t0 = time.monotonic()
        verdicts = self._verify_rollouts(unit.unit_id, prompts, texts, unit.index)
        verify_s = time.monotonic() - t0
        record = RolloutUnit.of(
            unit.to_dict(),
            prompts=[ref.id for ref in unit.prompts],
            # the prompts' ids as generated from: the batch is built from these, never again
            # from the text
            prompt_ids=[self._ids(ref.dataset, ref.row) for ref in unit.prompts],
            result=result,
            texts=texts,
            verdicts=verdicts,
            tests_total=[p.code.total_tests if p.code else 0 for p in prompts],
            verify_s=verify_s,
        )
        return self.rollouts.append(record, known_absent=unit.unit_id not in self._logged)

    # --- batches --------------------------------------------------------------------------------
    def build_batch(self, b: int, records: Sequence[RolloutUnit]) -> tuple[TrainBatch, dict]:
        """Batch b's groups (prefer-newest acceptance over them) as one fixed-shape TrainBatch."""
        cfg = self.cfg
        B, G, P, R = cfg.batch.prompts, cfg.batch.group_size, self.P, self.R
        groups: dict[GroupRef, RolloutGroup] = {}
        for record in records:
            unit = WorkUnit.from_dict(record.unit)
            for i, (ref, group) in enumerate(zip(unit.prompts, record.groups, strict=True)):
                gref = GroupRef(
                    unit.version, unit.batch, unit.round, unit.first_slot + i, unit.unit_id
                )
                groups[gref] = (
                    group
                    if group.prompt_ids  # () when logged before records carried them
                    else dataclasses.replace(group, prompt_ids=self._ids(ref.dataset, ref.row))
                )
        uniform = {g for g in groups if _uniform(groups[g])} if self.dynamic else set()
        candidates = [g for g in groups if g not in uniform]
        sel = select_groups(candidates, trainer_version=b, accept=cfg.staleness.accept, need=B)
        groups_in = [groups[g] for g in sel.accepted]
        tokens, valid, mask, logp, rewards, rsum, rcount, excluded, gen_tokens = _fill_arrays(
            groups_in, (B, G, P, R), self.tokenizer.pad_id
        )
        if len(sel.accepted) < B:
            # a short batch (dynamic sampling ran out of budget) keeps its fixed shape: the empty
            # slots hold a prompt of the batch with no response, no loss mask and rewards 0, so
            # they contribute nothing (like a zero-advantage group in plain GRPO)
            ids = groups[sel.accepted[0] if sel.accepted else next(iter(groups))].prompt_ids
            tokens[len(sel.accepted) :, :, P - len(ids) : P] = ids
            valid[len(sel.accepted) :, :, P - len(ids) : P] = True
        batch = TrainBatch.rl(
            tokens,
            mask,
            logp,
            rewards,
            version=min((g.version for g in sel.accepted), default=b),
            valid=valid,
            max_len=R,
        )
        info = {
            "reward": rsum / rcount if rcount else float("nan"),
            "excluded": excluded,
            "dropped_stale": len(sel.dropped),
            "dropped_uniform": len(uniform),
            "groups": len(sel.accepted),
            "staleness": b - min((g.version for g in sel.accepted), default=b),
            "gen_tokens": gen_tokens,
            "prompt_ids": [groups[g].prompt for g in sel.accepted],
            "metrics": _judge_metrics(groups_in, records),
        }
        return batch, info

    def _refill(
        self, b: int, records: list[RolloutUnit], gen_pools: list[ThreadPoolExecutor]
    ) -> dict[str, Any]:
        """DAPO dynamic sampling for batch b: while fewer than B groups are informative (rewards
        not all equal), generate refill rounds (prompts a pure function of (b, round, slot), so a
        resume draws the same ones and finds them in the rollout log) within the budget. Appends
        the refill records to `records`; returns the refill cost for the metrics."""
        B = self.cfg.batch.prompts

        def informative(recs: list[RolloutUnit]) -> int:
            return sum(not _uniform(g) for rec in recs for g in rec.groups)

        kept, used, rounds, gen_tokens = informative(records), 0, 0, 0
        for r in range(1, self.cfg.dynamic_sampling.max_rounds + 1):
            count = refill_count(B - kept, used, self.refill_budget)
            if count == 0:
                break
            units = self.schedule.refill_units(b, r, count)
            runs = [gen_pools[self._worker_of(u)].submit(self.run_unit, u) for u in units]
            extra = [f.result() for f in runs]
            records.extend(extra)
            kept += informative(extra)
            used += count
            rounds += 1
            gen_tokens += sum(rec.generated_tokens for rec in extra)
        return {"refill_prompts": used, "refill_rounds": rounds, "refill_gen_tokens": gen_tokens}

    # --- evaluation -------------------------------------------------------------------------
    def evaluate(self, version: int) -> dict[str, float | None] | None:
        """The held-out figures of `version` through the inference workers, as metrics-line
        fields (`rlx_controller.evaluation.metric_fields`): `heldout` (greedy accuracy over all
        eval datasets), per dataset `eval/<name>/greedy` and, with `eval.samples` > 0, its
        pass@1, pass@k and avg@k. None without eval datasets."""
        if not self.eval_sets:
            return None
        samples = evaluate_version(self, version, samples=self.cfg.eval.samples)
        return metric_fields(samples, self.cfg.eval.samples)

    def evaluate_model(self, *, samples: int = 0) -> list[EvalSample]:
        """`rlx eval`: start the services, load `[model] path` as version 0, and return its
        `EvalSample`s on the eval datasets (a greedy answer per prompt and `samples` sampled
        ones); the services stop at the end."""
        with self._base_model_services():
            self.progress.phase = "evaluating"
            return evaluate_version(self, 0, samples=samples, log=self.log)

    @contextlib.contextmanager
    def _base_model_services(self) -> Iterator[None]:
        """The services of a one-off command (`rlx eval`, `rlx prefilter`), started with
        `[model] path` as version 0, and stopped when it ends."""
        cfg = self.cfg
        try:
            self._start_services()
            self._call(
                lambda: self.trainer.init(seed=cfg.seed, hf_dir=cfg.model.path), "trainer init"
            )
            yield
        finally:
            self._close_clients()
            if self.services is not None:
                self.services.stop()

    # --- pre-filtering ------------------------------------------------------------------------
    def prefilter(self, out: str, *, samples: int = 0, limit: int = 0) -> dict[str, Any]:
        """`rlx prefilter`: start the services, sample `samples` (default: the group size)
        answers per training prompt with the base model (version 0) and the run's sampling,
        score them, and write each prompt's pass rate as JSONL to `out` (a path or URI):
        {"dataset", "row", "pass_rate", "scored"}. Samples the verifier could not score (INFRA)
        do not count; a prompt with none scored is left out (so `prefilter.file` drops it).
        Seeds are a pure function of (seed, dataset, row, sample): the same file every time."""
        cfg = self.cfg
        G = samples or cfg.batch.group_size
        per = cfg.batch.unit_prompts
        records: list[dict[str, Any]] = []
        with self._base_model_services():
            s = cfg.sampling
            sampling = Sampling(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)
            for d, ds in enumerate(cfg.datasets):
                data = self.datasets[ds.name]
                # the first `limit` prompts that fit in max_prompt_tokens (all when 0)
                todo = self.prompt_ids.fitting(data.name)
                todo = todo[:limit] if limit else todo
                n = len(todo)
                chunks = [todo[i : i + per] for i in range(0, n, per)]

                def one(
                    k: int, rows: list[int], data: Dataset = data, d: int = d
                ) -> list[tuple[float, int]]:
                    prompts = [data.prompt(r) for r in rows]
                    unit = GenUnit(
                        unit_id=f"prefilter.{data.name}.{k}",
                        version=0,
                        prompts=tuple(self._ids(data.name, r) for r in rows),
                        samples_per_prompt=G,
                        sampling=sampling,
                        seeds=tuple(
                            sample_seed(cfg.seed, "prefilter", d, r, g)
                            for r in rows
                            for g in range(G)
                        ),
                        max_new_tokens=self.R,
                        stop_token_ids=self.tokenizer.stop_ids,
                    )
                    res = self._generate(k % len(self.workers), unit)
                    texts = self._decode(res.rollouts)
                    verdicts = self._verify_rollouts(unit.unit_id, prompts, texts, k)
                    rates: list[tuple[float, int]] = []
                    for i in range(len(rows)):
                        scored = [v for v in verdicts[i * G : (i + 1) * G] if not v.excluded]
                        ok = sum(1 for v in scored if (v.score or 0) >= 1.0)
                        rates.append((ok / len(scored) if scored else 0.0, len(scored)))
                    return rates

                self.progress.phase = f"pre-filtering {data.name}"
                done, t_shown = 0, time.monotonic()
                with ThreadPoolExecutor(max(1, len(self.workers)) * 2) as pool:
                    for rows, out_rates in zip(
                        chunks, pool.map(one, range(len(chunks)), chunks), strict=True
                    ):
                        for r, (rate, scored) in zip(rows, out_rates, strict=True):
                            if scored:
                                records.append(
                                    {
                                        "dataset": data.name,
                                        "row": r,
                                        "pass_rate": rate,
                                        "scored": scored,
                                    }
                                )
                        done += len(rows)
                        if time.monotonic() - t_shown >= 5 or done == n:
                            t_shown = time.monotonic()
                            self.log(f"pre-filter {data.name}: {done}/{n} prompts")
        parent, _, name = out.rstrip("/").rpartition("/")
        body = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
        open_storage(parent or ".").put(name, body.encode())
        rates = [r["pass_rate"] for r in records]
        lo, hi = cfg.prefilter.min_pass_rate, cfg.prefilter.max_pass_rate
        return {
            "prompts": len(records),
            "never": sum(1 for x in rates if x == 0.0),
            "always": sum(1 for x in rates if x == 1.0),
            "kept": sum(1 for x in rates if lo < x < hi),
            "mean_pass_rate": float(np.mean(rates)) if rates else float("nan"),
            "out": out,
        }

    # --- snapshots --------------------------------------------------------------------------
    def _params_hash(self, version: int) -> str:
        _, specs = self._call(lambda: self.paramserver.manifest(version), "paramserver-0 manifest")
        return params_hash(specs)

    def _resume_point(self, step: int) -> tuple[int, str] | None:
        """The checkpoint a snapshot at `step` names: the newest one at or below the oldest
        version a batch from `step` on is generated with (v(step); `step` itself at the end).
        A newer checkpoint would leave a resume without that version: batch `step`, not yet in
        the rollout log, could never be generated again. None: replay from step 0."""
        need = self._oldest_version_needed(step)
        usable = [s for s in self._checkpoints if s <= need]
        if not usable:
            return None
        best = max(usable)
        return best, self._checkpoints[best]

    def _oldest_version_needed(self, step: int) -> int:
        """The oldest version the batches from `step` on are generated with."""
        return step if step >= self.cfg.steps else self.schedule.version(step)

    def _save_checkpoint(self) -> None:
        step, uri = self._call(self.trainer.save_checkpoint, "trainer checkpoint")
        self._checkpoints[step] = uri

    def _snapshot(
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
        (one at a time, in step order: the previous one is waited for, its error raised, first).
        A snapshot not yet written when the process dies is simply absent: resume starts from
        the one before it."""
        self._wait_snapshot()
        ckpt = self._resume_point(step)
        state = self.schedule.state_before(step)
        fields: dict[str, Any] = {
            "run_id": self.run_id,
            "config_hash": self.hash,
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

        # a remote run's metrics go with its snapshots, so a resume elsewhere keeps its history
        uploads = self._uploads
        upto = uploads.take() if uploads is not None else None

        def write() -> None:
            if uploads is not None and upto is not None:
                uploads.upload(upto)
            self.snapshots.write(Snapshot(**fields, params_hash=self._params_hash(step)))
            self.progress.components["snapshot"] = f"step {step} ({reason})"
            self.progress.last_snapshot = (step, reason)

        if not background:
            write()
            return
        if self._snapshot_thread is None:
            self._snapshot_thread = ThreadPoolExecutor(1, thread_name_prefix="snapshot")
        self._pending_snapshot = self._snapshot_thread.submit(write)

    def _wait_snapshot(self) -> None:
        """Wait for the snapshot being written in the background, if any; raise its error."""
        pending, self._pending_snapshot = self._pending_snapshot, None
        if pending is not None:
            pending.result()

    def _settle_snapshot(self) -> None:
        """`_wait_snapshot` while another error is on its way out: log this one, not raise."""
        try:
            self._wait_snapshot()
        except Exception as e:  # the error already on its way out matters more
            self.log(f"the snapshot being written failed too: {e}")

    def _stop_snapshot(
        self, at: int, reason: str, outstanding: list[WorkUnit], totals: dict[str, float]
    ) -> None:
        """The committed snapshot of step `at` between two steps (SIGTERM, a request): with a
        checkpoint at `at` first when the batches from `at` on are generated with version `at`
        (else the snapshot names an older checkpoint and a resume replays from the log)."""
        if self._oldest_version_needed(at) >= at:
            self._save_checkpoint()
        self._snapshot(at, reason, outstanding, totals)

    # --- requests from other threads (the controller service) ---------------------------------
    def request_stop(self, reason: str = "signal") -> None:
        self._stop_reason = reason
        self._stop.set()

    def request_snapshot(self) -> Future[int]:
        """A committed snapshot at the end of the step in progress (reason "manual", the
        snapshot format's name for one asked for); the loop goes on training. The future holds
        its step, or the error. When the run ends or stops first: the final / stop snapshot's
        step. FailedPrecondition before the loop has a step to train."""
        future: Future[int] = Future()
        with self._requests_lock:
            if self._ended_at is not None:
                future.set_result(self._ended_at)
            elif self._in_loop or self.progress.step > 0:
                self._snapshot_requests.append(future)
            else:
                future.set_exception(
                    FailedPrecondition(
                        "no step trained yet: a snapshot can be taken once the first step is "
                        f"under way (phase: {self.progress.phase})"
                    )
                )
        return future

    def _take_requests(self) -> list[Future[int]]:
        with self._requests_lock:
            taken, self._snapshot_requests = self._snapshot_requests, []
        return taken

    def _answer_requests(self, step: int | None, error: BaseException | None = None) -> None:
        """Every waiting request_snapshot gets `step` (the run ended there), or the error."""
        with self._requests_lock:
            if step is not None and error is None:
                self._ended_at = step
            taken, self._snapshot_requests = self._snapshot_requests, []
        for future in taken:
            if error is not None:
                future.set_exception(error)
            elif step is None:
                future.set_exception(
                    FailedPrecondition("the run stopped before a step was trained: no snapshot")
                )
            else:
                future.set_result(step)

    def _serve_requests(
        self, at: int, outstanding: list[WorkUnit], totals: dict[str, float]
    ) -> None:
        """Write the requested snapshot of step `at` (the step just trained), if any is asked."""
        taken = self._take_requests()
        if not taken:
            return
        self.log(f"step {at}: writing a requested snapshot")
        try:
            self._stop_snapshot(at, "manual", outstanding, totals)
        except BaseException as e:
            for future in taken:
                future.set_exception(e)
            raise
        for future in taken:
            future.set_result(at)

    # --- the loop ---------------------------------------------------------------------------

    def run(self, *, resume: bool, force: bool = False) -> RunSummary:
        """Train to cfg.steps (fresh, or from the newest snapshot); stop services at the end.

        The run's lease (rlx_controller.lease) is held throughout: RunBusy, before anything is
        touched, when another live controller holds it, unless `force`."""
        start = time.monotonic()
        try:
            lease = self._lease = Lease.acquire(self.storage, force=force)
        except BaseException as e:
            self._answer_requests(None, e)
            raise
        try:
            # for `rlx status` / `rlx down` on this machine (written once the run is ours)
            (self.work_dir / CONTROLLER_PID).write_text(str(os.getpid()))
            summary = self._run_leased(resume, start)
        except BaseException as e:
            self._answer_requests(None, e)
            raise
        finally:
            self._lease = None
            lease.release()
        # the final or stop snapshot's step (0: stopped before any step, no snapshot)
        self._answer_requests(summary.steps or None)
        return summary

    def _run_leased(self, resume: bool, start: float) -> RunSummary:
        info = read_run_info(self.storage) if resume else None
        if info is not None:
            if info["config_hash"] != self.hash:
                raise RlxError(f"{self.run_dir}: the config differs from the run's (hash)")
            self.run_id = info["run_id"]
        else:
            if not resume and any(self.snapshots.entries()):
                raise RlxError(
                    f"{self.run_dir} already holds a run: `rlx resume {self.run_dir}` continues it"
                )
            self.run_id = uuid.uuid4().hex[:12]
            info = {
                "run_id": self.run_id,
                "config_hash": self.hash,
                # the chat template's "today" (strftime_now) for every start of this run
                "chat_date": self.tokenizer.now.isoformat(),
            }
            self.storage.put(RUN_INFO, json.dumps(info).encode())
        if self._uploads is not None:
            # resumed: continue the uploaded metrics, which hold every step up to the newest
            # snapshot (the steps after it are trained and written again); fresh: drop any
            # parts an earlier run that made no snapshot left
            if resume:
                self._uploads.restore()
            else:
                self._uploads.reset()
        old_handlers = self._install_signals()
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
            if self._snapshot_thread is not None:
                self._snapshot_thread.shutdown(wait=True)
                self._snapshot_thread = None
            self._restore_signals(old_handlers)
            self._close_clients()
            if self.metrics is not None:
                self.metrics.close()
                self.metrics = None
            if self.services is not None:
                self.progress.phase = "stopping services"
                self.services.stop()

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
                    return self._stopped_summary()
                recoveries += 1
                if recoveries > self.max_recoveries:
                    raise
                self.log(f"{e}; restarting dead services, resuming from the newest snapshot")
                assert self.services is not None
                self._close_clients()
                restarted = self.services.restart_dead(self.log)
                if e.service and e.service not in restarted:
                    self.services.restart_hung(e.service, self.log)
                self._connect()
                self._clear_paramservers()

    def _clear_paramservers(self) -> None:
        """Drop every version the live paramserver replicas hold before a resume in this process.
        The resume pushes the versions from its checkpoint on again (the same bytes); left in
        place, the newer ones would make each replayed version the oldest, evicted the moment it
        is committed, before the workers that need it pull it."""
        assert self._clients is not None
        for i, client in enumerate(self._clients.paramservers):
            name = f"paramserver-{i}"
            info = self._call(client.versions_info, f"{name} versions")
            for version in sorted({*(v.version for v in info.versions), *info.staged}):
                with contextlib.suppress(NotFound):  # gone meanwhile (a failed push)
                    self._call(functools.partial(client.drop, version), f"{name} drop")

    def _train_s_per_step(self) -> float:
        """Median seconds of a train step, past the first three (compilation)."""
        return float(np.median(self._train_times[3:] or self._train_times or [0.0]))

    def _stopped_summary(self) -> RunSummary:
        snap = self.snapshots.latest()
        return RunSummary(
            steps=0 if snap is None else snap.step,
            heldout_before=None,
            heldout_after=None,
            params_hash="" if snap is None else snap.params_hash,
            wall_s=0.0,
            train_s_per_step=self._train_s_per_step(),
            stopped=True,
        )

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        old: dict[int, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, lambda s, _f: self.request_stop(signal.Signals(s).name))
        return old

    def _restore_signals(self, old: dict[int, Any]) -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)

    def _run_from_snapshot(self) -> RunSummary:  # noqa: PLR0912, PLR0915
        cfg = self.cfg
        snap = self.snapshots.latest(on_skip=self.log)  # "skipping snapshot ...: why"
        self._logged = set(self.rollouts.unit_ids())
        self.progress.phase = "initialising trainer"
        if snap is not None and snap.checkpoint_step is not None:
            self.log(
                f"resuming from snapshot at step {snap.step} (checkpoint {snap.checkpoint_step})"
            )
            self._call(
                lambda: self.trainer.init(
                    checkpoint=snap.checkpoint_uri, step=snap.checkpoint_step
                ),
                "trainer init",
            )
            step = snap.checkpoint_step
            self.schedule.anchor(snap.next_batch, snap.mixture)
        else:
            if snap is not None:
                self.log(f"resuming from snapshot at step {snap.step} (no checkpoint: from step 0)")
            self._call(
                lambda: self.trainer.init(seed=cfg.seed, hf_dir=cfg.model.path), "trainer init"
            )
            step = 0
        replay_until = snap.step if snap is not None else 0
        self._checkpoints = {}
        if snap is not None and snap.checkpoint_step is not None:
            self._checkpoints[snap.checkpoint_step] = snap.checkpoint_uri
        totals: dict[str, float] = dict(snap.metrics) if snap is not None else {}
        before: float | None = totals.get("heldout_before")
        if snap is None and self.eval_sets:
            self.progress.phase = "evaluating"
            figures0 = self.evaluate(0) or {}
            acc0 = figures0.get("heldout") or 0.0
            before = acc0
            self.log(f"held-out accuracy at step 0: {acc0:.3f}")
            self._metrics_line({"step": 0, **figures0, "heldout": acc0})
            self.progress.heldout[0] = acc0
        if before is not None:
            totals["heldout_before"] = before
        after: float | None = totals.get("heldout_last")
        nworkers = max(1, len(self.workers))
        futures: dict[str, Future[RolloutUnit]] = {}
        plans: dict[int, list[WorkUnit]] = {}
        # one generation thread and queue per worker, so a worker's next unit starts the moment
        # its current one ends (from one shared pool a freed thread took the next unit in
        # dispatch order, and a worker sat idle until the units queued before its own had been
        # taken), and a small pool that scores and logs what comes back
        gen_pools = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"gen{i}") for i in range(nworkers)
        ]
        post_pool = ThreadPoolExecutor(
            max_workers=max(4, min(64, nworkers)), thread_name_prefix="score"
        )
        dispatched = step - 1
        # batch b+1's rollouts are gathered, refilled and built on this thread while batch b
        # trains (a pure function of its logged records, so where it runs changes nothing)
        prep_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch")
        prepared: dict[int, Future[tuple[TrainBatch, dict[str, Any], dict[str, Any]]]] = {}
        halt = threading.Event()  # the loop ended: a batch being gathered stops waiting

        def prepare(b: int) -> tuple[TrainBatch, dict[str, Any], dict[str, Any]]:
            """Batch b from its units' scored rollouts (waiting for them), after dynamic
            sampling's refills."""
            records = []
            for u in plans[b]:
                while True:
                    try:
                        records.append(futures[u.unit_id].result(timeout=0.5))
                        break
                    except TimeoutError:
                        if self._stop.is_set() or halt.is_set():
                            raise Stop from None
            refill = self._refill(b, records, gen_pools) if self.dynamic else {}
            batch, info = self.build_batch(b, records)
            return batch, info, refill

        def dispatch(newest_version: int) -> None:
            """Submit every batch whose version exists (generation runs ahead by lag)."""
            nonlocal dispatched
            last = min(self.schedule.last_dispatchable(newest_version), cfg.steps - 1)
            while dispatched < last:
                dispatched += 1
                plans[dispatched] = list(self.schedule.plan(dispatched).units)
                for u in plans[dispatched]:
                    futures[u.unit_id] = self._submit(u, gen_pools, post_pool)

        self.progress.step = step
        t_last = time.monotonic()
        stopped = False
        self._in_loop = True
        try:
            for b in range(step, cfg.steps):
                if self._lease is not None:
                    self._lease.check()  # taken over elsewhere (--force): stop, write nothing
                dispatch(b)
                self.progress.phase = "training" if b >= replay_until else "replaying from log"
                ahead = prepared.pop(b, None)
                batch, info, refill = ahead.result() if ahead is not None else prepare(b)
                if self.dynamic and info["groups"] < cfg.batch.prompts:
                    self.log(
                        f"batch {b}: dynamic sampling found {info['groups']} of "
                        f"{cfg.batch.prompts} informative groups within its budget; "
                        "training on the smaller batch"
                    )
                if b + 1 < cfg.steps and b + 1 in plans:
                    # batch b+1 is out already (lag >= 1): gather and build it while b trains
                    prepared[b + 1] = prep_pool.submit(prepare, b + 1)
                t0 = time.monotonic()
                result: StepResult = self._call(
                    functools.partial(self.trainer.train_step, batch, expected_step=b),
                    "trainer step",
                )
                self._train_times.append(time.monotonic() - t0)
                for u in plans.pop(b):
                    futures.pop(u.unit_id, None)
                new = result.step
                # the new version's batches go to the workers now, not after the checkpoint,
                # evaluation, metrics and snapshot below (the workers would wait on those)
                dispatch(new)
                now = time.monotonic()
                dt, t_last = now - t_last, now
                p = self.progress
                p.step, p.reward = new, info["reward"]
                p.tokens_per_s = info["gen_tokens"] / dt if dt > 0 else 0.0
                p.steps_per_s = 1 / dt if dt > 0 else 0.0
                p.staleness[info["staleness"]] = p.staleness.get(info["staleness"], 0) + 1
                totals["steps"] = new
                totals["excluded"] = totals.get("excluded", 0) + info["excluded"]
                totals["verifier_errors"] = (
                    totals.get("verifier_errors", 0) + info["metrics"]["verifier_errors"]
                )
                totals["dropped_stale"] = totals.get("dropped_stale", 0) + info["dropped_stale"]
                record = {
                    "step": new,
                    "reward": info["reward"],
                    "staleness": info["staleness"],
                    "excluded": info["excluded"],
                    "dropped_stale": info["dropped_stale"],
                    "groups": info["groups"],
                    "prompt_ids": info["prompt_ids"],
                    **refill,
                    **info["metrics"],
                    "step_s": dt,
                    "gen_tokens_per_s": p.tokens_per_s,
                    **{f"trainer/{k}": v for k, v in sorted(result.metrics.items())},
                }
                if new % cfg.snapshots.checkpoint_every == 0 or new == cfg.steps:
                    self._save_checkpoint()
                if (
                    new >= replay_until
                    and self.eval_sets
                    and (new % cfg.eval.every == 0 or new == cfg.steps)
                ):
                    self.progress.phase = "evaluating"
                    figures = self.evaluate(new) or {}
                    after = figures.get("heldout")
                    record.update(figures)
                    totals["heldout_last"] = after  # type: ignore[assignment]
                    p.heldout[new] = after  # type: ignore[assignment]
                    shown = "-" if after is None else f"{after:.3f}"  # None: nothing judged
                    self.log(f"step {new}: held-out accuracy {shown}")
                self._metrics_line(record)
                outstanding = [u for units in plans.values() for u in units]
                if new == cfg.steps:
                    self._snapshot(new, "final", outstanding, totals)
                elif self.schedule.is_reload_boundary(new) and new % cfg.snapshot_every == 0:
                    self._snapshot(new, "reload", outstanding, totals, background=True)
                if self._stop.is_set():
                    raise Stop
                if new < cfg.steps:  # (at the end, the final snapshot answers them)
                    self._serve_requests(new, outstanding, totals)
            self._wait_snapshot()
        except Stop:
            stopped = True
            self.log(f"stopping ({self._stop_reason}): writing a snapshot")
            at = self.progress.step
            outstanding = [u for units in plans.values() for u in units]
            if at > 0:
                self._stop_snapshot(at, "sigterm", outstanding, totals)
        except BaseException:
            self._settle_snapshot()
            raise
        finally:
            self._in_loop = False
            halt.set()
            prep_pool.shutdown(wait=False, cancel_futures=True)
            for pool in gen_pools:
                pool.shutdown(wait=False, cancel_futures=True)
            for pool in gen_pools:
                pool.shutdown(wait=not stopped)
            post_pool.shutdown(wait=not stopped, cancel_futures=True)
        final = self.progress.step
        return RunSummary(
            steps=final,
            heldout_before=before,
            heldout_after=after,
            params_hash=self._params_hash(final) if final else "",
            wall_s=0.0,
            train_s_per_step=self._train_s_per_step(),
            stopped=stopped,
        )
