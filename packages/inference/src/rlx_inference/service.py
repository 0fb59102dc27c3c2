"""The inference service's logic, as plain Python (no grpc here).

One engine, one work unit at a time (later Generate calls wait their turn). `load_version(v)`
pulls v from this worker's paramserver replica (worker i -> replica i mod R) and swaps it in
between units; with `force`, the pull happens while the running unit goes on, and the swap at its
next boundary (which discards its partial rollouts, or recomputes them in interruptible mode).

On a mesh spanning several processes (`rlx_inference.mesh`) every process holds an
InferenceService and a `Lockstep`: process 0 serves gRPC and hands each Generate and LoadVersion
to the others, which run it too, one call at a time in the same order (the engine's scheduler
depends only on the unit, so every process makes the same compiled calls). Every process pulls a
version from the paramserver itself, only the part of each tensor its own devices hold; if the
pull fails on one, it fails on all. A forced
LoadVersion waits for the running unit like any other call (calls do not overlap); Status is
process 0's alone.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from rlx_core.clients.inference import GenerateResult, InferenceStatus, LoadResult, WorkUnit
from rlx_core.clients.paramserver import ParamServerClient, replica_for
from rlx_core.errors import FailedPrecondition, InvalidArgument, Unavailable
from rlx_core.lifecycle import Lifecycle
from rlx_inference._version import __version__
from rlx_inference.config import InferenceConfig, UnitLimits
from rlx_inference.engine import Engine, Swap, params_from_flat
from rlx_inference.mesh import engine_mesh, pull_boxes
from rlx_model import TINY_CONFIGS, ModelConfig, Params, load_checkpoint, load_config, param_shapes
from rlx_model.distributed import HostBox, Lockstep, on_every_process

__all__ = ["InferenceService", "check_limits", "load_model"]

log = logging.getLogger(__name__)


def check_limits(unit: WorkUnit, limits: UnitLimits) -> None:
    """InvalidArgument naming the first field of `unit` past a cap of `limits`."""
    g = unit.samples_per_prompt
    n = len(unit.prompts)
    if n > limits.max_prompts:
        raise _over("prompts", f"{n} prompts", n, "max_prompts", limits.max_prompts)
    if g > limits.max_samples_per_prompt:
        cap = limits.max_samples_per_prompt
        raise _over("samples_per_prompt", str(g), g, "max_samples_per_prompt", cap)
    if unit.num_samples > limits.max_samples:
        what = f"{n} prompts x {g} = {unit.num_samples} samples"
        raise _over("samples_per_prompt", what, g, "max_samples", limits.max_samples)


def _over(name: str, what: str, value: int, cap: str, limit: int) -> InvalidArgument:
    return InvalidArgument(
        f"{name}: {what}, more than this worker's {cap} ({limit}; limits.{cap} in its config)",
        field=name,
        value=value,
    )


def load_model(config: InferenceConfig) -> tuple[ModelConfig, Params | None]:
    """The model config and, for an HF checkpoint holding weights, those weights (version 0)."""
    source = config.model
    dtype, compute = source.dtype, source.compute_dtype or source.dtype
    if source.builtin:
        if source.builtin not in TINY_CONFIGS:
            raise InvalidArgument(
                f"model.builtin: {source.builtin!r} is not one of {sorted(TINY_CONFIGS)}",
                field="model.builtin",
            )
        return replace(TINY_CONFIGS[source.builtin], param_dtype=dtype, compute_dtype=compute), None
    directory = Path(source.checkpoint).expanduser()
    if any(directory.glob("model*.safetensors*")):
        return load_checkpoint(directory, param_dtype=dtype, compute_dtype=compute)
    return load_config(directory, param_dtype=dtype, compute_dtype=compute), None


class InferenceService:
    """Owns the engine, the loaded version, the paramserver link and the lifecycle."""

    def __init__(
        self,
        config: InferenceConfig,
        *,
        model: tuple[ModelConfig, Params | None] | None = None,
        lockstep: Lockstep | None = None,
    ) -> None:
        """`lockstep`: this process's place in a mesh of several processes (None: one)."""
        self.config = config
        self.lockstep = lockstep
        self.lifecycle = Lifecycle("inference", __version__)
        cfg, params = model if model is not None else load_model(config)
        self.engine = Engine(
            cfg,
            params,
            config.engine,
            version=0 if params is not None else None,
            mesh=engine_mesh(config.engine.tensor_parallel),
        )
        self._boxes = pull_boxes(cfg, self.engine.mesh)  # what this process pulls of each tensor
        self._unit_lock = threading.Lock()  # one work unit at a time
        self._load_lock = threading.Lock()  # one pull at a time
        self._pending: Swap | None = None
        self._pending_lock = threading.Lock()
        self._taken = threading.Event()
        self._client: ParamServerClient | None = None
        self._waiting = 0
        self._set_info()

    # --- paramserver ----------------------------------------------------------------------

    @property
    def replica_address(self) -> str:
        addresses = self.config.paramserver.addresses
        if not addresses:
            raise FailedPrecondition(
                "this worker has no paramserver (set paramserver.addresses or --paramserver)"
            )
        return addresses[replica_for(self.config.worker_index, len(addresses))]

    def _paramserver(self) -> ParamServerClient:
        if self._client is None:
            link = self.config.paramserver
            self._client = ParamServerClient(
                self.replica_address, token_file=link.token_file, timeout=link.timeout_s
            )
        return self._client

    # --- the RPCs -------------------------------------------------------------------------

    def generate(
        self, unit: WorkUnit, *, cancelled: Callable[[], bool] | None = None
    ) -> GenerateResult:
        """All rollouts of `unit`, checked first (its fields, and the caps of `config.limits`)
        so a unit that cannot run never waits its turn. `cancelled()` true (its caller went
        away) stops the unit at its next boundary with `Cancelled`, so the next unit runs."""
        if not self.lifecycle.accepting_work():
            raise Unavailable(f"inference is {self.lifecycle.state.name}: not taking work units")
        check_limits(unit, self.config.limits)
        engine = self.engine
        unit.check(vocab_size=engine.cfg.vocab_size, max_context=engine.config.max_context)
        with self._pending_lock:
            self._waiting += 1
        try:
            if self.lockstep is None:
                return self._run(unit, cancelled)
            # every process makes the same calls, so none stops alone: no cancellation
            return self._generate(unit)
        finally:
            self._set_info()

    @on_every_process
    def _generate(self, unit: WorkUnit) -> GenerateResult:
        return self._run(unit, None)

    def _run(self, unit: WorkUnit, cancelled: Callable[[], bool] | None) -> GenerateResult:
        with self._unit_lock:
            with self._pending_lock:  # other processes count no waiting calls (no Status)
                self._waiting = max(0, self._waiting - 1)
            if self.engine.version is None:
                raise FailedPrecondition(
                    f"work unit {unit.unit_id!r} needs version {unit.version}, but no "
                    f"version is loaded; LoadVersion({unit.version}) first",
                    loaded=None,
                )
            # in lockstep no forced reload can arrive mid-unit (calls do not overlap)
            poll = self._take_pending if self.lockstep is None else None
            return self.engine.generate(unit, poll=poll, cancelled=cancelled)

    @on_every_process
    def load_version(self, version: int, *, force: bool = False) -> LoadResult:
        if version < 0:
            raise InvalidArgument(f"version: must be >= 0, got {version}", field="version")
        with self._load_lock:
            previous = self.engine.version
            if previous == version:
                return LoadResult(version=version, previous=previous, pull_s=0.0, nbytes=0)
            start = time.perf_counter()
            got, flat = self._pull(version)
            params = params_from_flat(self.engine.cfg, self._own(flat), mesh=self.engine.mesh)
            pull_s = time.perf_counter() - start
            nbytes = sum(int(v.nbytes) for v in flat.values())
            part = " (this process's part)" if self._boxes else ""
            log.info("pulled version %d: %d bytes%s in %.2f s", got, nbytes, part, pull_s)
            if force and self.lockstep is None:
                self._swap_soon((params, got))
            else:
                with self._unit_lock:
                    self.engine.set_params(params, got)
            self._set_info()
            return LoadResult(version=got, previous=previous, pull_s=pull_s, nbytes=nbytes)

    def _pull(self, version: int) -> tuple[int, dict[str, np.ndarray]]:
        """Version `version` from this worker's replica: on a mesh spanning processes, only the
        part of each tensor this process's devices hold (`pull_boxes`). Each process pulls its
        own, and a failure anywhere is raised everywhere (no process may go on without it)."""
        pull = functools.partial(self._paramserver().pull, version, slices=self._boxes)
        return pull() if self.lockstep is None else self.lockstep.agree(pull)

    def _own(self, flat: dict[str, np.ndarray]) -> dict[str, np.ndarray | HostBox]:
        """The pulled arrays as this process's own copies (a same-host pull may return views
        of the server's files, mapped read-only), each part as the `HostBox` it is. A part is
        never a view (a pull of a box copies it, over either transport): it is not copied
        again, and `put_global` reads only the pieces the devices hold from it."""
        shapes = param_shapes(self.engine.cfg)
        own: dict[str, np.ndarray | HostBox] = {}
        for name, pulled in flat.items():
            box = self._boxes.get(name)
            if box is None:
                own[name] = np.array(pulled, copy=True)
            else:
                own[name] = HostBox(pulled, box[0], shapes[name])
        return own

    def _swap_soon(self, swap: Swap) -> None:
        """Swap now if no unit runs, else hand it to the running unit's next boundary."""
        with self._pending_lock:
            self._pending = swap
            self._taken.clear()
        while not self._taken.wait(0.05):
            if self._unit_lock.acquire(blocking=False):
                try:
                    taken = self._take_pending()
                    if taken is not None:
                        self.engine.set_params(*taken)
                finally:
                    self._unit_lock.release()

    def _take_pending(self) -> Swap | None:
        with self._pending_lock:
            swap, self._pending = self._pending, None
            if swap is not None:
                self._taken.set()
            return swap

    def status(self) -> InferenceStatus:
        e = self.engine
        return InferenceStatus(
            loaded_version=e.version,
            queue_depth=e.progress.queued + self._waiting,
            active=e.progress.active,
            free_blocks=e.free_blocks,
            total_blocks=e.total_blocks,
            tokens_per_s=e.last_tokens_per_s,
            units_done=e.units_done,
            tokens_done=e.tokens_done,
            discarded_partial=e.discarded_partial,
            interruptible=e.config.interruptible,
            slots=e.config.slots,
            block_size=e.config.block_size,
        )

    def _set_info(self) -> None:
        e = self.engine
        c = e.cfg
        self.lifecycle.info.update(
            {
                "loaded_version": "none" if e.version is None else str(e.version),
                "model": f"{c.family} L{c.num_layers} d{c.hidden_size} V{c.vocab_size} "
                f"{c.compute_dtype}",
                "slots": str(e.config.slots),
                "mesh": "one device"
                if e.mesh is None
                else " x ".join(f"{axis} {n}" for axis, n in e.mesh.shape.items()),
                "cache_blocks": str(e.total_blocks),
                "units_done": str(e.units_done),
                "discarded_partial": str(e.discarded_partial),
                "units_cancelled": str(e.cancelled_units),
            }
        )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
