"""The generation engine: paged KV cache, continuous batching over fixed slots, per-sample seeds.

One work unit at a time. Its samples (prompt-major) wait in a FIFO queue; at each *boundary* the
scheduler fills free slots, lowest slot first, with the queue's head while the block pool can
hold the head's whole sequence (prompt + max_new_tokens: blocks are reserved on admission, so a
running sequence never runs out; when the pool is full the head waits for blocks, never OOMs).
The admitted sequences are prefilled together (longest first, grouped by padded length), then
every live slot decodes `steps_per_call` tokens in one compiled call (the cached keys gathered
once per call, the call's own keys kept aside and written at its end); finished sequences (stop
token, stop sequence, max_new_tokens) return their blocks, and the next boundary refills their
slots.

Every decision depends only on the unit (prompt lengths, drawn tokens), never on wall time, so
the tokens and log-probs of a unit are a pure function of (weights, prompts, sampling, seeds).
Shapes are bucketed (decode: `slots` rows, span rounded up to `span_bucket`; prefill: rows
rounded up to a power of two, length to an eighth of one), so a steady state runs only compiled
programs; with the persistent compilation cache a restarted worker does not compile them again.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from rlx_core.clients.inference import GenerateResult, Rollout, WorkUnit
from rlx_core.errors import Cancelled, ConfigError, FailedPrecondition, InvalidArgument
from rlx_inference.blocks import BlockPool
from rlx_inference.config import EngineConfig
from rlx_inference.mesh import init_cache, on_mesh, place_params
from rlx_inference.sampling import knobs_of, sample_columns, seed_keys
from rlx_model import ModelConfig, Params, enable_compile_cache, param_shapes
from rlx_model.decoder import DTYPES
from rlx_model.distributed import HostBox
from rlx_model.layers import MATRICES, rms_norm
from rlx_model.paged import (
    PagedKVCache,
    paged_decode_steps,
    paged_prefill,
    split_layers,
)

__all__ = ["Engine", "enable_compile_cache", "engine_form", "params_from_flat"]

log = logging.getLogger(__name__)

# A pending weight swap: (params, version); polled at every boundary of a running unit.
Swap = tuple[Params, int]
_NP = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(jnp.bfloat16)}


def engine_form(cfg: ModelConfig, params: Params) -> Params:
    """The params the engine computes with, one copy of each weight:

    - the layers split into one dict per layer (`split_layers`);
    - every layer matrix output-major, [out, in] as `q_t`, ..., `down_t`: decode runs with the
      activations feature-major ([D, B], see `paged_decode_steps`), where W^T @ h^T streams
      the weights faster than h @ W (the bench config's 4 layers' matmuls and head alone:
      15.2 -> 13.0 ms a step, measured), and prefill reads them as they are (x @ W^T runs
      as fast as x @ W at prefill's row counts);
    - the output head as W [V, D] (`head_vd`), the layout of the vocabulary-major logits (see
      `_vocab_logits`); a tied head is the embedding itself.

    Idempotent; numpy leaves stay numpy (transposed on the host), `HostBox` leaves boxes."""

    def transposed(a: Any) -> Any:
        return np.ascontiguousarray(a.T) if isinstance(a, np.ndarray) else a.T

    params = split_layers(params)
    layers = tuple(
        {
            (f"{k}_t" if k in MATRICES else k): (transposed(v) if k in MATRICES else v)
            for k, v in layer.items()
        }
        for layer in params["layers"]
    )
    params = {**params, "layers": layers}
    if cfg.tie_word_embeddings or "lm_head" not in params:
        return params
    form = {k: v for k, v in params.items() if k != "lm_head"}
    form["head_vd"] = transposed(params["lm_head"])
    return form


def _vocab_logits(params: Params, cfg: ModelConfig, hidden: jax.Array) -> jax.Array:
    """float32 logits [V, B] of hidden [B, D]: W [V, D] @ hidden^T. At a decode batch XLA's
    CPU matmul runs this faster than hidden @ W^T (the large dimension is the one its kernel
    tiles well: 7.2 vs 8.7 ms at 32 x 512 x 32000, measured), and the sampler reduces down the
    columns."""
    cdt = DTYPES[cfg.compute_dtype]
    head = params["embed"] if cfg.tie_word_embeddings else params["head_vd"]
    return jnp.einsum(
        "vd,bd->vb", head.astype(cdt), hidden.astype(cdt), preferred_element_type=jnp.float32
    )


def params_from_flat(
    cfg: ModelConfig, flat: Mapping[str, np.ndarray | HostBox], *, mesh: Mesh | None = None
) -> Params:
    """'/'-path -> array (what the paramserver holds) into the params pytree on device (laid out
    on `mesh`, the engine's, if any), every tensor checked against the config's shapes and cast
    to its param dtype, in the form the engine computes with (`engine_form`). A tensor may be
    a `HostBox`, the part of it this process's devices hold on `mesh` (`mesh.pull_boxes`)."""
    shapes = param_shapes(cfg)
    missing = sorted(set(shapes) - set(flat))
    extra = sorted(set(flat) - set(shapes))
    if missing or extra:
        raise InvalidArgument(
            f"weights do not fit the model ({cfg.family} L{cfg.num_layers} d{cfg.hidden_size}): "
            f"missing {missing[:5]}, unexpected {extra[:5]}"
        )
    tree: Params = {}
    dtype = _NP[cfg.param_dtype]
    for path, shape in shapes.items():
        array = flat[path]
        if not isinstance(array, HostBox):
            array = np.asarray(array)
        elif mesh is None:
            raise InvalidArgument(f"tensor {path!r}: a part of it needs a mesh to place it on")
        if tuple(array.shape) != shape:
            raise InvalidArgument(
                f"tensor {path!r} has shape {list(array.shape)}, the model needs {list(shape)}"
            )
        node = tree
        *parents, leaf = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = array.astype(dtype, copy=False)
    form = engine_form(cfg, tree)  # on the host: no copy on device
    return jax.device_put(form) if mesh is None else place_params(cfg, form, mesh)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _round_up(n: int, parts: int, least: int) -> int:
    """n rounded up to a multiple of 1/`parts` of its power of two (at least `least`): a bounded
    set of shapes, parts per octave, at most 1/parts of padding."""
    step = max(least, _pow2(n) // parts)
    return -(-n // step) * step


@on_mesh
@partial(jax.jit, static_argnums=(1,), static_argnames=("tail_rows", "packed"), donate_argnums=(2,))
def _prefill_call(
    params: Params,
    cfg: ModelConfig,
    cache: PagedKVCache,
    tokens: jax.Array,
    lengths: jax.Array,
    tables: jax.Array,
    copies: tuple[jax.Array, jax.Array] | None = None,
    *,
    tail_rows: int,
    packed: int,
) -> tuple[jax.Array, PagedKVCache]:
    """Prompts (tokens, lengths, tables [P, ...]) written to their blocks; returns the last
    layer's output at each prompt's last token [P, D] (before the final norm), its tail
    computed on `tail_rows` rows whatever P, the per-token work on the prompts packed into
    `packed` tokens (see `paged_prefill`).

    For prompts shared by several samples, each distinct prompt is computed into its first
    sample's blocks and `copies` = (from, to) block ids then copies the blocks it fills to its
    other samples' (padding copies the sink onto itself)."""
    x, cache = paged_prefill(
        params,
        cfg,
        tokens,
        lengths,
        tables,
        cache,
        final_norm=False,
        tail_rows=tail_rows,
        packed=packed,
    )
    if copies is None:
        return x, cache
    copy_from, copy_to = copies
    k = cache.k.at[:, :, copy_to].set(cache.k[:, :, copy_from])
    v = cache.v.at[:, :, copy_to].set(cache.v[:, :, copy_from])
    return x, PagedKVCache(k, v)


@on_mesh
@partial(jax.jit, static_argnums=(1,))
def _first_token_call(
    params: Params,
    cfg: ModelConfig,
    x: jax.Array,
    keys: jax.Array,
    positions: jax.Array,
    knobs: tuple[jax.Array, ...],
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Last-layer output x [R, D], keys [R, 2], positions [R] -> each row's first new token and
    its two log-probs. The engine always calls it with R = slots rows, whatever the number of
    samples prefilled: XLA's code for a reduction or a small matmul, and so its rounding, changes
    with the number of rows (at the bench config the final norm of a row differed between 4 and
    8 rows and its logits between 1, 2-32 and 64 rows, enough to flip a near-tie draw), so a
    sample's first token must come from one fixed program to be independent of its batch mates.
    One call per prefill call (the samples admitted at a boundary fit the slots); at a small
    vocabulary the call costs its dispatch, at 32000 tokens and 32 rows the head alone took
    13-16 ms (measured)."""
    hidden = rms_norm(x, params["final_norm"], cfg.rms_norm_eps)
    return sample_columns(_vocab_logits(params, cfg, hidden), keys, positions, *knobs)


@on_mesh
@partial(jax.jit, static_argnums=(1, 2, 3), donate_argnums=(4,))
def _decode_call(
    params: Params,
    cfg: ModelConfig,
    span_blocks: int,
    steps: int,
    cache: PagedKVCache,
    tokens: jax.Array,
    positions: jax.Array,
    tables: jax.Array,
    keys: jax.Array,
    knobs: tuple[jax.Array, ...],
) -> tuple[jax.Array, jax.Array, jax.Array, PagedKVCache]:
    """`steps` decode steps: feed each row's token at its position, sample the next."""

    def choose(hidden: jax.Array, pos: jax.Array) -> tuple[jax.Array, tuple[jax.Array, ...]]:
        new, slp, mlp = sample_columns(_vocab_logits(params, cfg, hidden), keys, pos + 1, *knobs)
        return new, (new, slp, mlp)

    (toks, slps, mlps), cache = paged_decode_steps(
        params, cfg, tokens, positions, tables, cache, choose, span_blocks=span_blocks, steps=steps
    )
    return toks, slps, mlps, cache


@dataclass
class _Seq:
    """One sample of the running unit."""

    index: int  # s = p * G + g
    prompt: list[int]
    key: np.ndarray  # uint32 [2]
    max_new: int
    out: list[int] = field(default_factory=list)
    sampler: list[float] = field(default_factory=list)
    model: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    finish: str | None = None

    @property
    def context(self) -> list[int]:
        """Every token whose key and value the cache holds or will hold."""
        return self.prompt + self.out


@dataclass
class Progress:
    """What Status reports about the running unit (read from other threads)."""

    queued: int = 0
    active: int = 0


class Engine:
    """Generates work units with one model and a paged KV cache of bounded memory."""

    def __init__(
        self,
        cfg: ModelConfig,
        params: Params | None,
        config: EngineConfig | None = None,
        *,
        version: int | None = 0,
        mesh: Mesh | None = None,
    ) -> None:
        """`mesh`: the devices to compute on (`rlx_inference.mesh.engine_mesh`), possibly of
        several processes, each of which then runs the same units; None: one device."""
        self.cfg = cfg
        self.config = config = config or EngineConfig()
        self.mesh = mesh
        enable_compile_cache(config.compile_cache_dir)
        itemsize = jnp.dtype(_NP[cfg.compute_dtype]).itemsize
        self.block_bytes = (
            2 * cfg.num_layers * config.block_size * cfg.num_kv_heads * cfg.head_dim * itemsize
        )
        num_blocks = (config.cache_mib << 20) // self.block_bytes
        self.width = config.max_context // config.block_size  # block-table columns
        if num_blocks - 1 < self.width:
            raise ConfigError(
                f"{config.cache_mib} MiB holds {max(0, num_blocks - 1)} blocks of "
                f"{self.block_bytes} bytes, fewer than one sequence of max_context "
                f"{config.max_context} needs ({self.width})",
                field="engine.cache_mib",
                value=config.cache_mib,
            )
        self.pool = BlockPool(num_blocks, config.block_size)
        self.cache = init_cache(cfg, num_blocks, config.block_size, mesh)
        self.params = None if params is None else place_params(cfg, engine_form(cfg, params), mesh)
        self.version = version if params is not None else None
        self.progress = Progress()
        self.units_done = 0
        self.tokens_done = 0
        self.discarded_partial = 0
        self.cancelled_units = 0  # units stopped because their caller went away
        self.shared_prefills = 0  # samples whose prompt was copied from a sibling's, not computed
        self.last_tokens_per_s = 0.0
        self._tables = np.zeros((config.slots, self.width), np.int32)

    # --- weights --------------------------------------------------------------------------

    def set_params(self, params: Params, version: int) -> None:
        """Swap in new weights (between units; mid-unit swaps go through `generate`'s poll)."""
        self.params = place_params(self.cfg, engine_form(self.cfg, params), self.mesh)
        self.version = version

    # --- the unit -------------------------------------------------------------------------

    def generate(
        self,
        unit: WorkUnit,
        *,
        poll: Callable[[], Swap | None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> GenerateResult:
        """Every sample of `unit`. `poll()` runs at each boundary; a Swap it returns is a forced
        reload: the partial rollouts are discarded (FailedPrecondition) or, in interruptible
        mode, recomputed with the new weights. `cancelled()` runs at each boundary and before
        each prefill call; true (nobody waits for the unit any more) stops it with `Cancelled`.
        Stopping leaves nothing behind that a later unit could see: its blocks go back to the
        pool, and a unit's numbers never depend on which blocks it gets or what they held."""
        unit.check(vocab_size=self.cfg.vocab_size, max_context=self.config.max_context)
        if unit.version != self.version:
            raise FailedPrecondition(
                f"work unit {unit.unit_id!r} needs version {unit.version}, but version "
                f"{self.version} is loaded; LoadVersion({unit.version}) first",
                loaded=self.version,
            )
        start = time.perf_counter()
        g = unit.samples_per_prompt
        keys = seed_keys(np.asarray(unit.seeds, np.int64))
        seqs = [
            _Seq(i, list(unit.prompts[i // g]), keys[i], unit.max_new_tokens)
            for i in range(unit.num_samples)
        ]
        knobs = knobs_of(unit.sampling)
        stops = set(unit.stop_token_ids)
        stop_seqs = [list(q) for q in unit.stop_sequences]
        queue: deque[_Seq] = deque(seqs)
        slots: list[_Seq | None] = [None] * self.config.slots
        recomputed = 0

        def stop_if_cancelled() -> None:
            if cancelled is not None and cancelled():
                done = sum(q.finish is not None for q in seqs)
                self.cancelled_units += 1
                raise Cancelled(
                    f"work unit {unit.unit_id!r}: cancelled (its caller went away or its "
                    f"deadline passed) after {done} of {len(seqs)} samples"
                )

        try:
            while queue or any(slots):
                stop_if_cancelled()
                swap = poll() if poll is not None else None
                if swap is not None:
                    recomputed += self._reload(unit, swap, slots, queue)
                admitted = self._admit(queue, slots)
                if admitted:
                    self._prefill(admitted, knobs, stops, stop_seqs, stop_if_cancelled)
                self._retire(slots)
                self.progress = Progress(len(queue), sum(x is not None for x in slots))
                if any(slots):
                    self._decode(slots, knobs, stops, stop_seqs)
                    self._retire(slots)
        finally:
            for i, seq in enumerate(slots):  # an error mid-unit must not leak blocks
                if seq is not None:
                    self.pool.free(seq.blocks)
                    seq.blocks = []
                    self._tables[i] = 0
            self.progress = Progress()
        elapsed = time.perf_counter() - start
        generated = sum(len(q.out) for q in seqs)
        self.units_done += 1
        self.tokens_done += generated
        self.last_tokens_per_s = generated / elapsed if elapsed > 0 else 0.0
        rollouts = tuple(
            Rollout(
                prompt_index=q.index // g,
                sample_index=q.index % g,
                token_ids=tuple(q.out),
                sampler_logprobs=tuple(q.sampler),
                model_logprobs=tuple(q.model),
                finish_reason=q.finish or "length",
                versions=tuple(q.versions),
            )
            for q in seqs
        )
        return GenerateResult(
            unit_id=unit.unit_id,
            version=int(self.version if self.version is not None else -1),
            rollouts=rollouts,
            generated_tokens=generated,
            elapsed_s=elapsed,
            recomputed=recomputed,
        )

    # --- scheduler steps ------------------------------------------------------------------

    def _reload(
        self, unit: WorkUnit, swap: Swap, slots: list[_Seq | None], queue: deque[_Seq]
    ) -> int:
        """A forced reload at a boundary: drop (or requeue for recompute) every started sample."""
        params, version = swap
        old = self.version
        started = [(i, q) for i, q in enumerate(slots) if q is not None]
        for i, q in started:
            self.pool.free(q.blocks)
            q.blocks = []
            self._tables[i] = 0
            slots[i] = None
        self.set_params(params, version)
        if not self.config.interruptible:
            self.discarded_partial += len(started)
            raise FailedPrecondition(
                f"work unit {unit.unit_id!r}: a reload to version {version} was forced mid-unit; "
                f"{len(started)} partial rollouts of version {old} were discarded",
                loaded=version,
            )
        for _, q in reversed(started):  # first in line again, in their original order
            queue.appendleft(q)
        log.info(
            "unit %s: reload to version %d mid-unit, recomputing %d sequences",
            unit.unit_id,
            version,
            len(started),
        )
        return len(started)

    def _admit(self, queue: deque[_Seq], slots: list[_Seq | None]) -> list[_Seq]:
        """Fill free slots in order from the queue's head while the pool has its blocks."""
        if not self.config.continuous and any(slots):
            return []  # static batching: the next batch starts when the whole batch is done
        admitted = []
        for i in range(len(slots)):
            if slots[i] is not None or not queue:
                continue
            head = queue[0]
            need = self.pool.blocks_for(len(head.prompt) + head.max_new)
            if not self.pool.can_allocate(need):
                break  # FIFO: the head waits for blocks; nobody overtakes it
            queue.popleft()
            head.blocks = self.pool.allocate(need)
            self._tables[i] = 0
            self._tables[i, :need] = head.blocks
            slots[i] = head
            admitted.append(head)
        return admitted

    def _retire(self, slots: list[_Seq | None]) -> None:
        for i, seq in enumerate(slots):
            if seq is not None and seq.finish is not None:
                self.pool.free(seq.blocks)
                seq.blocks = []
                self._tables[i] = 0
                slots[i] = None

    def _rows(self, n: int) -> int:
        """Prefill rows: a power of two >= 4 (below 4 rows the matmuls take another kernel, whose
        rounding differs: a prompt must give the same bits whatever its batch mates)."""
        return min(max(4, _pow2(n)), _pow2(self.config.slots))

    def _bucket_len(self, n: int) -> int:
        """n rounded up to an eighth of its power of two (>= 16): <= 12.5% padding, 8 shapes per
        octave (quarters padded the bench's prompts to 6400 positions for 4560, eighths to
        5888)."""
        return min(_round_up(n, 8, 16), self.config.max_context)

    def _prefill(
        self,
        seqs: list[_Seq],
        knobs: tuple[np.generic, ...],
        stops: set[int],
        stop_seqs: list[list[int]],
        check: Callable[[], None],
    ) -> None:
        """Prefill `seqs`, longest first (ties in admission order), in groups whose rows x padded
        length fit the budget: similar lengths share a call, so little of its attention is
        padding, and its per-token work runs on the prompts packed back to back (`packed`: the
        bench's 4560 prompt tokens are 5888 padded positions). Each row is computed on its own,
        wherever it sits, so the grouping changes no number.

        Samples with the same context (the G samples of a prompt, admitted together) are one
        row: the prompt is computed once and its blocks copied to the others, which then draw
        their own first tokens; the same bits as computing each (rows are independent), at 1/G
        of the prefill's cost."""
        budget = self.config.max_prefill_tokens
        tail = _pow2(self.config.slots)  # the most rows a call has (see `_rows`)
        shared: dict[tuple[int, ...], list[_Seq]] = {}
        for seq in sorted(seqs, key=lambda q: -len(q.context)):
            shared.setdefault(tuple(seq.context), []).append(seq)
        prompts = list(shared.values())
        i = 0
        while i < len(prompts):
            check()  # a cancelled unit stops between prefill calls too
            group = [prompts[i]]
            length = self._bucket_len(len(prompts[i][0].context))  # the longest of the group
            for _ in prompts[i + 1 :]:
                if self._rows(len(group) + 1) * length > budget:
                    break
                group.append(prompts[i + len(group)])
            i += len(group)
            rows = self._rows(len(group))
            tokens = np.zeros((rows, length), np.int32)
            lengths = np.zeros(rows, np.int32)
            tables = np.zeros((rows, self.width), np.int32)
            for r, members in enumerate(group):
                first = members[0]
                ctx = first.context
                tokens[r, : len(ctx)] = ctx
                lengths[r] = len(ctx)
                tables[r, : len(first.blocks)] = first.blocks
            samples = [seq for members in group for seq in members]
            copies: tuple[np.ndarray, np.ndarray] | None = None
            of_row = np.arange(len(samples))
            if len(samples) > len(group):
                n = self._rows(len(samples))
                per_row = -(-length // self.config.block_size)  # blocks a prompt can fill
                copy_from = np.zeros(n * per_row, np.int32)  # 0 -> 0: the sink onto itself
                copy_to = np.zeros(n * per_row, np.int32)
                m = 0
                j = 0
                for r, members in enumerate(group):
                    filled = -(-len(members[0].context) // self.config.block_size)
                    for k, seq in enumerate(members):
                        of_row[j] = r
                        j += 1
                        if k:
                            copy_from[m : m + filled] = members[0].blocks[:filled]
                            copy_to[m : m + filled] = seq.blocks[:filled]
                            m += filled
                copies = (copy_from, copy_to)
                self.shared_prefills += len(samples) - len(group)
            x, self.cache = _prefill_call(
                self.params,
                self.cfg,
                self.cache,
                tokens,
                lengths,
                tables,
                copies,
                tail_rows=tail,
                # the prompts packed back to back (see `paged_prefill`): <= 6.25% padding
                packed=min(_round_up(int(lengths.sum()), 16, 64), rows * length),
            )
            self._first_tokens(samples, np.asarray(x)[of_row], knobs, stops, stop_seqs)

    def _first_tokens(
        self,
        samples: list[_Seq],
        x: np.ndarray,
        knobs: tuple[np.generic, ...],
        stops: set[int],
        stop_seqs: list[list[int]],
    ) -> None:
        """Each prefilled sample's first token from its prompt's last-layer output x [S, D], in
        calls of `slots` rows (a fixed program: see `_first_token_call`)."""
        r = self.config.slots
        for at in range(0, len(samples), r):
            chunk = samples[at : at + r]
            rows = np.zeros((r, x.shape[1]), x.dtype)
            rows[: len(chunk)] = x[at : at + r]
            keys = np.zeros((r, 2), np.uint32)
            positions = np.zeros(r, np.int32)
            for j, seq in enumerate(chunk):
                keys[j] = seq.key
                positions[j] = len(seq.context)
            tok, slp, mlp = _first_token_call(self.params, self.cfg, rows, keys, positions, knobs)
            tok, slp, mlp = np.asarray(tok), np.asarray(slp), np.asarray(mlp)
            for j, seq in enumerate(chunk):
                self._append(seq, int(tok[j]), float(slp[j]), float(mlp[j]), stops, stop_seqs)

    def _decode(
        self,
        slots: list[_Seq | None],
        knobs: tuple[np.generic, ...],
        stops: set[int],
        stop_seqs: list[list[int]],
    ) -> None:
        n = self.config.slots
        steps = self.config.steps_per_call
        tokens = np.zeros(n, np.int32)
        positions = np.zeros(n, np.int32)
        keys = np.zeros((n, 2), np.uint32)
        live = [(i, q) for i, q in enumerate(slots) if q is not None]
        for i, q in live:
            tokens[i] = q.out[-1]
            positions[i] = len(q.prompt) + len(q.out) - 1
            keys[i] = q.key
        # the cached positions 0..position-1 (the call's own steps live outside the cache),
        # rounded up to a bucket
        bucket = self.config.span_bucket
        span = max(1, -(-int(positions.max()) // bucket)) * bucket
        span_blocks = min(self.width, -(-span // self.config.block_size))
        toks, slps, mlps, self.cache = _decode_call(
            self.params,
            self.cfg,
            span_blocks,
            steps,
            self.cache,
            tokens,
            positions,
            self._tables.copy(),
            keys,
            knobs,
        )
        toks, slps, mlps = np.asarray(toks), np.asarray(slps), np.asarray(mlps)
        for i, q in live:
            for j in range(steps):
                if q.finish is not None:
                    break
                self._append(
                    q, int(toks[j, i]), float(slps[j, i]), float(mlps[j, i]), stops, stop_seqs
                )

    def _append(
        self,
        seq: _Seq,
        token: int,
        sampler: float,
        model: float,
        stops: set[int],
        stop_seqs: list[list[int]],
    ) -> None:
        seq.out.append(token)
        seq.sampler.append(sampler)
        seq.model.append(model)
        seq.versions.append(int(self.version if self.version is not None else -1))
        if token in stops or any(
            len(seq.out) >= len(q) and seq.out[-len(q) :] == q for q in stop_seqs
        ):
            seq.finish = "stop"
        elif len(seq.out) >= seq.max_new:
            seq.finish = "length"

    # --- facts ----------------------------------------------------------------------------

    @property
    def free_blocks(self) -> int:
        return self.pool.num_free

    @property
    def total_blocks(self) -> int:
        return self.pool.capacity

    def describe(self) -> dict[str, Any]:
        c = self.config
        return {
            "slots": c.slots,
            "block_size": c.block_size,
            "blocks": self.pool.capacity,
            "block_bytes": self.block_bytes,
            "max_context": c.max_context,
        }
