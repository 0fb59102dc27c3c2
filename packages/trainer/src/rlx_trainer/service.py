"""The trainer service's logic, as plain Python (no grpc here).

Init loads a model (a trainer checkpoint, an HF directory, or a built-in tiny config) and pushes
its version; TrainStep trains on one batch, pushes the new version to every paramserver replica,
and only then adopts it; SaveCheckpoint and Restore write and read Orbax checkpoints; Status
reports. Mutating calls run one at a time.

Nothing is half-applied: a batch is checked before anything runs, and if the push of the new
version fails the trainer keeps its previous state (and says so). With `expected_step`, a retried
TrainStep whose reply was lost gets the recorded result instead of a second update.

On a mesh spanning several processes (`rlx_model.distributed`) every process holds a
TrainerService and a `Lockstep`: process 0 serves gRPC, and each call it serves runs on every
process in the same order (one at a time, Status included). What only process 0 knows (whether it
is draining, whether the push to the paramserver worked) is decided there and shared; pulls of old
versions happen on every process and fail on all if they fail on one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from rlx_core.clients.paramserver import ParamServerClient, ReplicatedPushClient
from rlx_core.clients.trainer import InitResult, StepResult, TrainBatch, TrainerStatus
from rlx_core.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    RlxError,
    Unavailable,
)
from rlx_core.lifecycle import Lifecycle
from rlx_model import enable_compile_cache
from rlx_model.distributed import Lockstep, on_every_process
from rlx_trainer._version import __version__
from rlx_trainer.checkpoint import CheckpointStore
from rlx_trainer.config import TrainerConfig
from rlx_trainer.trainer import Trainer

__all__ = ["TrainerService"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class TrainerService:
    """Owns the trainer's state, its checkpoints, its paramserver link and its lifecycle."""

    def __init__(self, config: TrainerConfig, *, lockstep: Lockstep | None = None) -> None:
        """`lockstep`: this process's place in a mesh of several processes (None: one)."""
        self.config = config
        self.lockstep = lockstep
        enable_compile_cache(config.compile_cache_dir)  # a restarted trainer does not recompile
        self.lifecycle = Lifecycle("trainer", __version__)
        self.trainer: Trainer | None = None
        self._lock = threading.Lock()
        self._store: CheckpointStore | None = None
        self._pusher: ReplicatedPushClient | None = None
        self._last: tuple[int, StepResult] | None = None  # (step it started from, its result)
        self.lifecycle.info["initialized"] = "false"

    # --- helpers --------------------------------------------------------------------------
    def _require(self) -> Trainer:
        if self.trainer is None:
            raise FailedPrecondition("the trainer is not initialized: call Init first")
        return self.trainer

    def _decide(self, run: Callable[[], T]) -> T | None:
        """`run()` here, or with several processes on process 0, its outcome shared."""
        return run() if self.lockstep is None else self.lockstep.decide(run)

    def _accepting(self) -> None:
        def check() -> None:
            if not self.lifecycle.accepting_work():
                raise Unavailable(f"the trainer is {self.lifecycle.state.name}, not taking work")

        self._decide(check)

    def store(self, uri: str = "") -> CheckpointStore:
        """The checkpoint store at `uri` ("" = the configured checkpoint.uri)."""
        c = self.config.checkpoint
        if self.lockstep is not None and (uri or c.uri).startswith("s3://"):
            # Orbax writes each process's shards into one directory; s3:// stages per process
            raise FailedPrecondition(
                "checkpoint.uri: s3:// checkpoints are staged in a local directory per process, "
                "which a mesh of several processes cannot share; use gs:// or a shared path"
            )
        if uri and uri != c.uri:
            return CheckpointStore(uri, keep=c.keep, staging_dir=c.staging_dir)
        if not c.uri:
            raise FailedPrecondition("checkpoint.uri is not configured: nowhere to checkpoint")
        if self._store is None:
            self._store = CheckpointStore(c.uri, keep=c.keep, staging_dir=c.staging_dir)
        return self._store

    def _pusher_or_none(self) -> ReplicatedPushClient | None:
        link = self.config.paramserver
        if not link.addresses:
            return None
        if self._pusher is None:
            self._pusher = ReplicatedPushClient(
                list(link.addresses), token_file=link.token_file, timeout=link.timeout_s
            )
        return self._pusher

    def _puller(self) -> Callable[[int], dict[str, np.ndarray]] | None:
        link = self.config.paramserver
        if not link.addresses:
            return None

        def pull(version: int) -> dict[str, np.ndarray]:
            with ParamServerClient(
                link.addresses[0], token_file=link.token_file, timeout=link.timeout_s
            ) as client:
                return client.pull(version)[1]

        lockstep = self.lockstep
        if lockstep is None:
            return pull
        return lambda version: lockstep.agree(lambda: pull(version))

    def _push(self, trainer: Trainer, version: int, tensors: dict[str, np.ndarray]) -> float:
        """Put `version` on every replica (from process 0); seconds taken."""
        return self._decide(lambda: self._push_here(trainer, version, tensors)) or 0.0

    def _push_here(self, trainer: Trainer, version: int, tensors: dict[str, np.ndarray]) -> float:
        """Put `version` on every replica; seconds taken. A replica that already holds it (a
        replay after a restart makes the same bytes) is left as it is."""
        pusher = self._pusher_or_none()
        if pusher is None:
            return 0.0
        start = time.perf_counter()
        axes = trainer.shard_axes()
        timeout = self.config.paramserver.timeout_s
        try:
            pusher.push(version, tensors, shard_axes=axes, timeout=timeout)
        except AlreadyExists:
            for client in pusher.clients:
                if version not in client.versions():
                    client.push(version, tensors, shard_axes=axes, timeout=timeout)
            log.info("version %d was already on some replica(s); kept as it is", version)
        return time.perf_counter() - start

    def _set_info(self) -> None:
        t = self.trainer
        info = self.lifecycle.info
        info["initialized"] = "true" if t else "false"
        if t is not None:
            info["step"] = str(t.state.step)
            info["model"] = t.describe()

    # --- the RPCs (with several processes, each runs on all of them) ------------------------
    @on_every_process
    def init(
        self,
        *,
        checkpoint: str | None = None,
        step: int | None = None,
        hf_dir: str | None = None,
        builtin: str | None = None,
        seed: int = 0,
    ) -> InitResult:
        """Load a model from exactly one source, then push its version."""
        sources = [s for s in (checkpoint, hf_dir, builtin) if s is not None]
        if len(sources) != 1:
            raise InvalidArgument("source: Init needs exactly one of checkpoint, hf_dir, builtin")
        with self._lock:
            self._accepting()
            puller = self._puller()
            if checkpoint is not None:
                trainer = Trainer.from_checkpoint(
                    self.config, self.store(checkpoint), step, puller=puller
                )
            elif hf_dir is not None:
                from rlx_model import load_checkpoint

                cfg, params = load_checkpoint(hf_dir, param_dtype="float32")
                trainer = Trainer(self.config, cfg, params, seed=seed, puller=puller)
            else:
                from rlx_model import TINY_CONFIGS, init_params

                if builtin not in TINY_CONFIGS:
                    raise InvalidArgument(
                        f"builtin: {builtin!r} is not a built-in config "
                        f"({', '.join(sorted(TINY_CONFIGS))})",
                        field="builtin",
                    )
                cfg = TINY_CONFIGS[builtin]
                trainer = Trainer(
                    self.config, cfg, init_params(cfg, seed), seed=seed, puller=puller
                )
            host = trainer.host_params()
            self._push(trainer, trainer.state.step, host)
            trainer.commit(trainer.state, host)
            self.trainer = trainer
            self._last = None
            self._set_info()
            return InitResult(
                trainer.state.step, trainer.state.step, trainer.num_params, trainer.describe()
            )

    @on_every_process
    def train_step(self, batch: TrainBatch, expected_step: int | None = None) -> StepResult:
        with self._lock:
            self._accepting()
            trainer = self._require()
            at = trainer.state.step
            if expected_step is not None and expected_step != at:
                if self._last is not None and self._last[0] == expected_step:
                    log.info("TrainStep for step %d retried: returning its result", expected_step)
                    return self._last[1]
                raise FailedPrecondition(
                    f"expected_step: the batch is for step {expected_step} but the trainer is "
                    f"at step {at}"
                )
            start = time.perf_counter()
            new, result = trainer.compute_step(batch)
            # the same on every process: host_params is an all-gather they all take part in
            needs_host = bool(self.config.paramserver.addresses) or self.config.keep_versions > 0
            host = trainer.host_params(new) if needs_host else None
            try:
                push_s = self._push(trainer, new.step, host) if host is not None else 0.0
            except RlxError as e:
                raise type(e)(
                    f"step {new.step} not applied: pushing version {new.step} failed: {e}"
                ) from e
            trainer.commit(new, host)
            metrics = dict(result.metrics)
            elapsed = time.perf_counter() - start
            metrics["push_s"] = push_s
            metrics["step_time_s"] = elapsed
            metrics["tokens_per_s"] = metrics["tokens"] / elapsed if elapsed > 0 else 0.0
            warnings = list(result.warnings)
            every = self.config.checkpoint.every
            if every and new.step % every == 0:
                try:
                    trainer.save(self.store())
                except RlxError as e:  # the step is applied and pushed: report, don't undo
                    log.error("checkpoint of step %d failed: %s", new.step, e)
                    warnings.append(f"checkpoint of step {new.step} failed: {e}")
            result = StepResult(new.step, new.step, metrics, tuple(warnings))
            trainer.last_metrics = metrics
            self._last = (at, result)
            self._set_info()
            return result

    @on_every_process
    def save_checkpoint(self) -> tuple[int, str]:
        with self._lock:
            trainer = self._require()
            store = self.store()
            return trainer.save(store), store.uri

    @on_every_process
    def restore(self, step: int | None = None) -> tuple[int, int]:
        """Go back to checkpoint `step` (None = newest) and push that version."""
        with self._lock:
            self._accepting()
            trainer = self._require()
            restored = trainer.restore(self.store(), step)
            host = trainer.host_params()
            self._push(trainer, restored, host)
            trainer.commit(trainer.state, host)
            self._last = None
            self._set_info()
            return restored, restored

    @on_every_process
    def status(self) -> TrainerStatus:
        t = self.trainer
        steps: tuple[int, ...] = ()
        if t is not None and self.config.checkpoint.uri:
            try:
                steps = tuple(self.store().steps())
            except (NotFound, Unavailable) as e:
                log.warning("cannot list checkpoints: %s", e)
        return TrainerStatus(
            initialized=t is not None,
            step=t.state.step if t else 0,
            model=t.describe() if t else "",
            num_params=t.num_params if t else 0,
            kept_versions=tuple(t.kept_versions) if t else (),
            checkpoint_steps=steps,
            last_metrics=dict(t.last_metrics) if t else {},
            mesh_shape=t.mesh_shape if t else self.config.mesh.shape,
            checkpoint_uri=self.config.checkpoint.uri,
        )

    def close(self) -> None:
        if self._pusher is not None:
            self._pusher.close()
        if self._store is not None:
            self._store.close()
