"""The trainer's state and its step: π_old recomputation, minibatch updates with gradient
accumulation, metrics, and checkpoints. Plain Python around the compiled pieces of `step.py`;
no RPC here.

On a mesh spanning several processes (`rlx_model.distributed`) every process builds the same
Trainer and runs the same calls; host arrays go onto the mesh with `put_global` and come back with
`to_host` (an all-gather), so what the host sees is the same on every process.

A step is computed first (`compute_step`) and adopted only afterwards (`commit`), so the service
can push the new version to the paramserver in between and keep the old state if that fails:
nothing is ever half-applied.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from rlx_core.clients.trainer import StepResult, TrainBatch
from rlx_core.errors import ConfigError, FailedPrecondition
from rlx_model import ModelConfig, Params, RopeScaling, make_mesh, param_shapes, param_shardings
from rlx_model.decoder import unflatten
from rlx_model.distributed import put_global, to_host
from rlx_model.sharding import batch_sharding
from rlx_trainer.batch import check_batch, split_batch
from rlx_trainer.checkpoint import CheckpointStore
from rlx_trainer.config import TrainerConfig
from rlx_trainer.metrics import check_thresholds, mismatch, policy_lag, summarize
from rlx_trainer.objective import K2KL, K3KL, RLObjective, preset
from rlx_trainer.optim import make_optimizer, make_schedule
from rlx_trainer.step import StepFunctions

Arrays = dict[str, jax.Array]

__all__ = ["TrainState", "Trainer", "flatten", "model_config_from_dict", "model_config_to_dict"]

log = logging.getLogger(__name__)

_NP_DTYPES = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
CHECKPOINT_FORMAT = 1

_FUNCTIONS: dict[tuple[Any, ...], StepFunctions] = {}

# Pulls the params of an older version (from the paramserver): version -> '/'-path -> array
Puller = Callable[[int], dict[str, np.ndarray]]


def flatten(tree: Params, prefix: str = "") -> dict[str, Any]:
    """{'layers': {'q': x}} -> {'layers/q': x}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= flatten(value, path + "/")
        else:
            out[path] = value
    return out


def model_config_to_dict(cfg: ModelConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def model_config_from_dict(data: dict[str, Any]) -> ModelConfig:
    data = dict(data)
    if data.get("rope_scaling") is not None:
        data["rope_scaling"] = RopeScaling(**data["rope_scaling"])
    data["eos_token_ids"] = tuple(data.get("eos_token_ids") or ())
    return ModelConfig(**data)


@dataclasses.dataclass(frozen=True)
class TrainState:
    """Everything a checkpoint restores: params, optimizer state, step, update count, RNG."""

    params: Params
    opt_state: Any
    step: int  # completed training steps == the weight version these params are
    updates: int  # optimizer updates applied (the schedule's position)
    rng: jax.Array  # uint32 [2], split once per step


def _has_kl(objective: RLObjective) -> bool:
    return any(isinstance(r, (K3KL, K2KL)) and r.beta > 0 for r in objective.regularisers)


class Trainer:
    """One model's training state on a mesh, and the step that advances it."""

    def __init__(
        self,
        config: TrainerConfig,
        model_cfg: ModelConfig,
        params: Params,
        *,
        seed: int = 0,
        puller: Puller | None = None,
        _restored: tuple[TrainState, Params | None] | None = None,
    ) -> None:
        """Start from `params` (numpy or jax arrays, cast to config.model.param_dtype)."""
        self.config = config
        opts = config.model
        self.cfg = dataclasses.replace(
            model_cfg,
            param_dtype=opts.param_dtype,
            compute_dtype=opts.compute_dtype,
            remat=opts.remat,
        )
        self.seed = seed
        self.puller = puller
        shape = self.mesh_shape = config.mesh.resolve(jax.device_count())
        if jax.process_count() > 1 and math.prod(shape) != jax.device_count():
            raise ConfigError(
                f"mesh {shape} must use all {jax.device_count()} devices of the "
                f"{jax.process_count()} processes (data × fsdp × tensor)",
                field="mesh",
                value=shape,
            )
        self.mesh = make_mesh(shape, jax.devices()[: math.prod(shape)])
        self.shardings = param_shardings(self.cfg, self.mesh)
        self.optimizer = make_optimizer(config.optimizer)
        self.schedule = make_schedule(config.optimizer)
        self.objective = preset(config.objective.preset, **config.objective.overrides())
        if _has_kl(self.objective) and config.reference == "none":
            raise ConfigError(
                f"the {config.objective.preset} preset has a KL term, which needs a reference "
                'model: set update.reference = "init" or objective.beta = 0',
                field="objective.beta",
            )
        self._kept: dict[int, dict[str, np.ndarray]] = {}
        # an older state (params, optimizer state) that nothing reads any more: the next
        # update's outputs are written into its buffers (`StepFunctions.apply`), not fresh ones
        self._spare: tuple[Params, Any] | None = None
        self.last_metrics: dict[str, float] = {}
        if _restored is not None:
            self.state, self.reference = _restored
            return
        placed = self.place(params)
        self.state = TrainState(
            params=placed,
            opt_state=jax.jit(self.optimizer.init, out_shardings=self._state_shardings()[1])(
                placed
            ),
            step=0,
            updates=0,
            # on the mesh, replicated, as a restored one is (one process's device would not do)
            rng=put_global(
                np.asarray(jax.random.PRNGKey(seed)), NamedSharding(self.mesh, PartitionSpec())
            ),
        )
        self.reference = placed if config.reference == "init" else None

    # --- placement ------------------------------------------------------------------------
    def place(self, params: Params) -> Params:
        """Cast to the param dtype (on the host) and put on the mesh."""
        dtype = _NP_DTYPES[self.cfg.param_dtype]
        host = jax.tree.map(lambda x: np.asarray(x).astype(dtype, copy=False), params)
        return put_global(host, self.shardings)

    def host_params(self, state: TrainState | None = None) -> dict[str, np.ndarray]:
        """The params as '/'-path -> numpy array (what the paramserver receives); on several
        processes an all-gather every process takes part in."""
        params = (state or self.state).params
        return dict(to_host(flatten(params)))

    @property
    def num_params(self) -> int:
        return sum(math.prod(s) for s in param_shapes(self.cfg).values())

    def describe(self) -> str:
        c = self.cfg
        return (
            f"{c.family} L{c.num_layers} d{c.hidden_size} h{c.num_heads}/{c.num_kv_heads} "
            f"V{c.vocab_size} {c.param_dtype}/{c.compute_dtype}"
        )

    @property
    def kept_versions(self) -> list[int]:
        return sorted(self._kept)

    def shard_axes(self) -> dict[str, int]:
        """Per tensor, the axis the paramserver chunks it along (`rlx_model.sharding.chunk_axes`:
        the one a tensor-parallel inference worker splits, so its pull of a shard reads the
        chunks of that shard alone)."""
        from rlx_model.sharding import chunk_axes

        return chunk_axes(self.cfg)

    # --- the step -------------------------------------------------------------------------
    def _functions(self, kind: str, group: int) -> StepFunctions:
        c = self.config
        key = (
            self.cfg,
            c.objective,
            c.optimizer,
            kind,
            group,
            c.update.aligned,
            c.model.logprob_chunk,
            self.mesh,
        )
        if key not in _FUNCTIONS:  # shared by trainers of the same setup: compiled once
            _FUNCTIONS[key] = StepFunctions(
                self.cfg,
                self.objective if kind == "rl" else None,
                self.optimizer,
                group=group,
                aligned=c.update.aligned,
                chunk_size=c.model.logprob_chunk,
                state_shardings=self._state_shardings(),
            )
        return _FUNCTIONS[key]

    def _state_shardings(self) -> tuple[Any, Any]:
        """The shardings of the params and of the optimizer state, spelled as placed: what
        the update's outputs are given, so that a step's inputs are spelled like the first's
        (else the update compiles again on the second step)."""
        opt_state = self._abstract(with_reference=False)["opt_state"]
        return self.shardings, jax.tree.map(lambda a: a.sharding, opt_state)

    def _held(self, version: int) -> Params | None:
        """The params of `version` if this trainer holds them (current or kept), else None."""
        if version == self.state.step:
            return self.state.params
        if version in self._kept:
            return self.place(unflatten(self._kept[version]))
        return None

    def params_for_version(self, version: int) -> Params:
        """The params of weight version `version`: current, kept, or pulled."""
        held = self._held(version)
        if held is not None:
            return held
        if self.puller is not None and self.config.paramserver.pull_old_versions:
            log.info("pulling version %d's params from the paramserver for π_old", version)
            return self.place(unflatten(self.puller(version)))
        raise FailedPrecondition(
            f"version {version}: its params are not held here (current {self.state.step}, kept "
            f"{self.kept_versions or 'none'}) and there is no paramserver to pull them from; "
            "raise keep_versions"
        )

    def check(self, batch: TrainBatch) -> None:
        u = self.config.update
        check_batch(
            batch,
            self.cfg,
            u,
            step=self.state.step,
            rows_divisor=self.mesh_shape[0] * self.mesh_shape[1],
        )

    def _old_source(self, batch: TrainBatch) -> int:
        """The version whose params are π_old for `batch`."""
        return batch.version if self.config.old_policy == "generation" else self.state.step

    def _fuses_old(self, batch: TrainBatch) -> bool:
        """π_old is the params the one update of this step differentiates: the training forward
        gives it (`StepFunctions.rl_grad_fused`), no prefill."""
        u = self.config.update
        return (
            batch.kind == "rl"
            and u.fuse_old
            and u.epochs == 1
            and u.minibatches == 1
            and self._old_source(batch) == self.state.step
        )

    def _stale(self, batch: TrainBatch) -> bool:
        """π_old is another version's params than the ones the step differentiates: the ratio
        is not 1 by design, so the update runs the plain forward even in aligned mode."""
        return self._old_source(batch) != self.state.step

    def _prefill(self, params: Params | None, fns: StepFunctions, micro: list[Arrays]) -> list[Any]:
        """Per microbatch, the prefill log-probs of `params` (None without them)."""
        if params is None:
            return [None] * len(micro)
        return [fns.prefill(params, mb)[0] for mb in micro]

    def _microbatches(self, batch: TrainBatch) -> tuple[StepFunctions, list[Arrays]]:
        u = self.config.update
        fns = self._functions(batch.kind, batch.tokens.shape[1])
        micro = [
            {k: put_global(v, batch_sharding(self.mesh, v.ndim)) for k, v in mb.arrays.items()}
            for mb in split_batch(batch, u.minibatches * u.grad_accum)
        ]
        return fns, micro

    def old_logprobs(self, batch: TrainBatch) -> np.ndarray:
        """log π_old of every token of an RL `batch`, [B·G, S] on the host, as `compute_step`
        recomputes it before updating: a prefill of the params of the version the batch was
        generated with (`old_policy` generation) or of the current params (step_start)."""
        self.check(batch)
        fns, micro = self._microbatches(batch)
        old = self._prefill(self.params_for_version(self._old_source(batch)), fns, micro)
        return np.concatenate(to_host(old))

    def _mismatch(
        self, batch: TrainBatch, gen: list[jax.Array]
    ) -> tuple[dict[str, float], list[str]]:
        """The numerical mismatch: the sampler's log-probs vs the trainer's prefill of the same
        version (`gen`); warnings, or FailedPrecondition past a stop threshold."""
        host = np.concatenate(to_host(gen))
        assert batch.sampler_logp is not None
        stats = mismatch(
            batch.sampler_logp.reshape(host.shape),
            host,
            batch.loss_mask.reshape(host.shape),
        )
        return stats, check_thresholds(stats, self.config.metrics)

    def _lag(
        self, batch: TrainBatch, gen: list[jax.Array] | None, cur: list[jax.Array]
    ) -> dict[str, float]:
        """`policy_lag` between the generating version's log-probs `gen` and the step-start
        params' `cur`, over the microbatches `cur` covers (the first ones, in batch order);
        {} when `gen` is not known (the generating version is not held here)."""
        if gen is None:
            return {}
        host_cur = np.concatenate(to_host(cur))
        host_gen = np.concatenate(to_host(gen[: len(cur)]))
        rows = host_cur.shape[0]
        mask = batch.loss_mask.reshape(-1, host_cur.shape[1])[:rows]
        return policy_lag(host_gen, host_cur, mask)

    def _updates(
        self,
        batch: TrainBatch,
        fns: StepFunctions,
        micro: list[Arrays],
        old: list[jax.Array] | None,
        ref: list[jax.Array | None],
    ) -> tuple[Params, Any, list[dict[str, Any]], list[jax.Array], list[jax.Array]]:
        """Epochs × minibatches optimizer updates, each on grad_accum microbatches. With `old`
        None (a fused RL step) the gradients take π_old from their own forward. The last item
        returned is the training forward's log π_θ of each microbatch of the first update
        (RL), when π_θ is still the params the step starts from."""
        u = self.config.update
        params, opt_state = self.state.params, self.state.opt_state
        per_micro: list[dict[str, Any]] = []
        norms: list[jax.Array] = []
        first: list[jax.Array] = []
        max_len = batch.max_len or None
        scale = jnp.float32(1.0 / u.grad_accum if batch.kind == "rl" else 1.0)
        if u.epochs * u.minibatches * u.grad_accum == 1:  # gradient and update in one jit
            return self._one_update(batch, fns, micro[0], old, ref[0], self._take_spare())
        spare: Any = self._take_spare()[1]
        for epoch in range(u.epochs):
            for m in range(u.minibatches):
                idx = range(m * u.grad_accum, (m + 1) * u.grad_accum)
                denom = jnp.float32(sum(float(micro[k]["loss_mask"].sum()) for k in idx))
                grads = None
                for k in idx:
                    if batch.kind != "rl":
                        (_, mets), g = fns.sft_grad(params, micro[k], denom)
                    else:
                        if old is None:
                            (_, (mets, logp)), g = fns.rl_grad_fused(
                                params, micro[k], ref[k], max_len=max_len
                            )
                        else:
                            grad = fns.rl_grad_stale if self._stale(batch) else fns.rl_grad
                            (_, (mets, logp)), g = grad(
                                params, micro[k], old[k], ref[k], max_len=max_len
                            )
                        if epoch == 0 and m == 0:
                            first.append(logp)
                    per_micro.append(mets)
                    grads = g if grads is None else fns.add(grads, g)
                # the new params go into the (donated) gradients' buffers, the new moments into
                # a spare optimizer state: the kept older one's, then the previous update's
                new = fns.apply(params, opt_state, grads, scale, spare)
                spare = opt_state if params is not self.state.params else None
                params, opt_state, norm = new
                norms.append(norm)
        jax.block_until_ready(params)
        return params, opt_state, per_micro, norms, first

    def _one_update(
        self,
        batch: TrainBatch,
        fns: StepFunctions,
        mb: Arrays,
        old: list[jax.Array] | None,
        ref: jax.Array | None,
        spare: tuple[Params, Any],
    ) -> tuple[Params, Any, list[dict[str, Any]], list[jax.Array], list[jax.Array]]:
        """`_updates` when the batch is one microbatch making one update: gradient and
        optimizer update in one call, its new state written into `spare`."""
        params, opt_state = self.state.params, self.state.opt_state
        scale = jnp.float32(1.0)
        if batch.kind != "rl":
            denom = jnp.float32(float(mb["loss_mask"].sum()))
            new = fns.sft_update(params, opt_state, scale, spare, mb, denom)
            jax.block_until_ready(new[0])
            return new[0], new[1], [new[3]], [new[2]], []
        max_len = batch.max_len or None
        if old is None:
            new = fns.rl_update_fused(params, opt_state, scale, spare, mb, ref, max_len=max_len)
        else:
            update = fns.rl_update_stale if self._stale(batch) else fns.rl_update
            new = update(params, opt_state, scale, spare, mb, old[0], ref, max_len=max_len)
        params, opt_state, norm, (mets, logp) = new
        jax.block_until_ready(params)
        return params, opt_state, [mets], [norm], [logp]

    def compute_step(self, batch: TrainBatch) -> tuple[TrainState, StepResult]:
        """The state after training on `batch`, and the step's metrics; `self` is unchanged."""
        start = time.perf_counter()
        self.check(batch)
        u = self.config.update
        parts = u.minibatches * u.grad_accum
        fns, micro = self._microbatches(batch)
        fused = self._fuses_old(batch)
        old: list[jax.Array] | None = None
        gen: list[jax.Array] | None = None  # log π of the version that generated the batch
        ref: list[jax.Array | None] = [None] * parts
        stats: dict[str, float] = {}
        warnings: list[str] = []
        old_version, at = self._old_source(batch), self.state.step
        if batch.kind == "rl":
            ref = self._prefill(self.reference, fns, micro)
            if not fused:  # π_old before any update
                old = self._prefill(self.params_for_version(old_version), fns, micro)
            if batch.version == old_version:
                gen = old  # None when fused: the update's own forward gives it
            elif (held := self._held(batch.version)) is not None:  # step_start, stale batch
                gen = self._prefill(held, fns, micro)
            if gen is not None:  # the numerics check (a stop threshold refuses the step here)
                stats, warnings = self._mismatch(batch, gen)
        recompute_s = time.perf_counter() - start
        params, opt_state, per_micro, norms, first = self._updates(batch, fns, micro, old, ref)
        if batch.kind == "rl":
            if fused and batch.version == old_version:  # raises past a stop threshold
                gen = first
                stats, warnings = self._mismatch(batch, gen)
            # the params the step starts from: π_old itself when that is them, else the first
            # update's forward (the first minibatch: the whole batch when minibatches == 1)
            cur = first if old_version != at or old is None else old
            stats |= self._lag(batch, gen, cur)
        n_updates = u.epochs * u.minibatches
        metrics = summarize(
            to_host(per_micro),
            [float(x) for x in to_host(norms)],
            kind=batch.kind,
            grad_accum=u.grad_accum,
            per_epoch=parts,
        )
        metrics |= stats
        metrics["lr"] = float(self.schedule(self.state.updates + n_updates - 1))
        metrics["updates"] = float(n_updates)
        metrics["recompute_s"] = recompute_s
        metrics["compute_s"] = time.perf_counter() - start
        valid = batch.valid if batch.valid is not None else np.ones(batch.tokens.shape, bool)
        metrics["tokens"] = float(valid.sum())
        new_state = TrainState(
            params=params,
            opt_state=opt_state,
            step=self.state.step + 1,
            updates=self.state.updates + n_updates,
            rng=jax.random.split(self.state.rng)[0],
        )
        return new_state, StepResult(new_state.step, new_state.step, metrics, tuple(warnings))

    def _keeps(self, version: int, current: int) -> bool:
        """Whether past `version` is one π_old may still need at `current`: at most
        keep_versions before it, and a multiple of keep_every."""
        c = self.config
        return current - c.keep_versions <= version < current and version % c.keep_every == 0

    def commit(self, new: TrainState, host_params: dict[str, np.ndarray] | None = None) -> None:
        """Adopt `new`; the previous version's params join the kept versions (for π_old) when
        `_keeps` says so. `host_params`: `new`'s params on the host, if the caller has them
        already (held as well: they are the next step's previous version)."""
        if self.config.keep_versions > 0:
            if host_params is not None:
                self._kept[new.step] = host_params
            prev = self.state.step
            if prev != new.step and prev not in self._kept and self._keeps(prev, new.step):
                self._kept[prev] = self.host_params()
            for v in [v for v in self._kept if v != new.step and not self._keeps(v, new.step)]:
                del self._kept[v]
        before, self.state = self.state, new
        if before.params is not new.params and not self._shares_reference(before.params):
            self._spare = (before.params, before.opt_state)  # the next update writes into it

    def _take_spare(self) -> tuple[Params, Any]:
        """The buffers the step's first update writes its new state into: the kept older
        state, or new ones (the first step, or after a step that was not adopted) laid out
        alike, so the update compiles once."""
        spare, self._spare = self._spare, None
        if spare is not None:
            return spare
        params_sh, opt_sh = self._state_shardings()
        zeros = partial(jax.tree.map, jnp.zeros_like)
        return jax.jit(zeros, out_shardings=(params_sh, opt_sh))(
            (self.state.params, self.state.opt_state)
        )

    def _shares_reference(self, params: Params) -> bool:
        """Whether the frozen reference model is (partly) these very arrays (it is the Init
        params themselves), which the update must then never overwrite."""
        if self.reference is None:
            return False
        held = {id(x) for x in jax.tree.leaves(self.reference)}
        return any(id(x) in held for x in jax.tree.leaves(params))

    def train_step(self, batch: TrainBatch) -> StepResult:
        """compute_step + commit, for callers without a paramserver in between."""
        new, result = self.compute_step(batch)
        self.commit(new)
        self.last_metrics = dict(result.metrics)
        return result

    # --- checkpoints ----------------------------------------------------------------------
    def _state_tree(self) -> dict[str, Any]:
        tree: dict[str, Any] = {
            "params": self.state.params,
            "opt_state": self.state.opt_state,
            "rng": self.state.rng,
        }
        if self.reference is not None:
            tree["reference"] = self.reference
        return tree

    def _past(self) -> dict[int, dict[str, np.ndarray]]:
        """The kept versions older than the current one: what π_old may still need."""
        return {v: p for v, p in sorted(self._kept.items()) if v < self.state.step}

    def meta(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT,
            "step": self.state.step,
            "updates": self.state.updates,
            "seed": self.seed,
            "model": model_config_to_dict(self.cfg),
            "reference": self.reference is not None,
            "past_versions": sorted(self._past()),
        }

    def save(self, store: CheckpointStore) -> int:
        """Checkpoint the state, with the past versions' params π_old may still need, so that
        a trainer restored from it recomputes π_old exactly as this one would have (after any
        restart, even when the paramservers lost their versions too)."""
        past = {f"v{v}": unflatten(p) for v, p in self._past().items()}
        store.save(self.state.step, self._state_tree(), self.meta(), past)
        return self.state.step

    def _abstract(self, with_reference: bool) -> dict[str, Any]:
        dtype = jnp.dtype(_NP_DTYPES[self.cfg.param_dtype])
        shardings = self.shardings
        params = jax.tree.map(
            lambda s, shape: jax.ShapeDtypeStruct(shape, dtype, sharding=s),
            shardings,
            unflatten(param_shapes(self.cfg)),
            is_leaf=lambda x: isinstance(x, tuple),
        )
        replicated = NamedSharding(self.mesh, PartitionSpec())
        opt_shapes = jax.eval_shape(self.optimizer.init, params)
        opt_state = optax.tree_map_params(
            self.optimizer,
            lambda leaf, s: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=s),
            opt_shapes,
            shardings,
            transform_non_params=lambda leaf: jax.ShapeDtypeStruct(
                leaf.shape, leaf.dtype, sharding=replicated
            ),
            is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct),
        )
        tree = {
            "params": params,
            "opt_state": opt_state,
            "rng": jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated),
        }
        if with_reference:
            tree["reference"] = params
        return tree

    def restore(self, store: CheckpointStore, step: int | None = None) -> int:
        """Replace the whole state by checkpoint `step` (None = newest) of this same model."""
        step, meta = store.meta(step)
        saved = model_config_from_dict(meta["model"])
        # the same architecture; precision and remat are this trainer's (Orbax casts on restore)
        saved = dataclasses.replace(
            saved,
            param_dtype=self.cfg.param_dtype,
            compute_dtype=self.cfg.compute_dtype,
            remat=self.cfg.remat,
        )
        if saved != self.cfg:
            raise FailedPrecondition(
                f"checkpoint step {step} under {store.uri} holds a different model "
                f"({saved.family} L{saved.num_layers} d{saved.hidden_size}, "
                f"{saved.param_dtype}) than this trainer's ({self.describe()})"
            )
        tree = store.restore(step, self._abstract(bool(meta.get("reference"))))
        self._spare = None
        self.state = TrainState(
            params=tree["params"],
            opt_state=tree["opt_state"],
            step=int(meta["step"]),
            updates=int(meta["updates"]),
            rng=tree["rng"],
        )
        self.reference = tree.get("reference")
        if self.config.reference == "init" and self.reference is None:
            raise FailedPrecondition(
                f"checkpoint step {step} has no reference model, which this config needs "
                f"(update.reference = {self.config.update.reference!r})"
            )
        self._kept.clear()
        past = [int(v) for v in meta.get("past_versions", ()) if self._keeps(v, self.state.step)]
        if past:
            dtype = jnp.dtype(_NP_DTYPES[self.cfg.param_dtype])
            shapes = {
                path: jax.ShapeDtypeStruct(shape, dtype)
                for path, shape in param_shapes(self.cfg).items()
            }
            abstract = {f"v{v}": unflatten(shapes) for v in past}
            trees = store.restore_past(step, abstract)
            self._kept = {v: flatten(trees[f"v{v}"]) for v in past}
        return step

    @classmethod
    def from_checkpoint(
        cls,
        config: TrainerConfig,
        store: CheckpointStore,
        step: int | None = None,
        *,
        puller: Puller | None = None,
    ) -> Trainer:
        """A trainer restored from `store` (the model config comes from the checkpoint)."""
        step, meta = store.meta(step)
        saved = model_config_from_dict(meta["model"])
        trainer = cls(
            config,
            saved,
            {},
            seed=int(meta.get("seed", 0)),
            puller=puller,
            _restored=(TrainState({}, None, 0, 0, jnp.zeros(2, jnp.uint32)), None),
        )
        trainer.restore(store, step)
        return trainer
