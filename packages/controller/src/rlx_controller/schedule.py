"""The deterministic schedule (DESIGN §3): what each batch generates, and with which version.

Batch b (the b-th training batch, from 0) is generated with weight version

    v(b) = the newest multiple of j that is <= b - lag      (0 while b - lag < j)

and the trainer, at version t = b when it consumes batch b, may use a rollout of version v only
if t - v <= k. The worst case over a run is lag + j - 1; `RunConfig` rejects configurations where
that exceeds k. Batch b's work units (prompt ids, per-sample seeds, version) are a pure function
of b and the mixture state before b; since every batch draws exactly B prompts from the mixture,
that state is itself a function of b (replayed from the nearest known state). Timing decides
only when a unit runs, never what it contains.

Refills (dynamic sampling) are drawn with replacement from the same datasets and weights by a
pure function of (b, round, slot), so they never shift the main stream's cursors.

    sched = Schedule.from_config(cfg, mixture)
    plan = sched.plan(12)                # BatchPlan: units, mixture state before and after
    sched.version(12), sched.last_dispatchable(newest_version=10)
    select_groups(pool, trainer_version=12, accept=2, need=32)   # prefer-newest acceptance
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlx_controller.mixture import MixtureState, PromptMixture, PromptRef
from rlx_core.configs.run import RunConfig
from rlx_core.errors import ConfigError, Corrupt, InvalidArgument
from rlx_core.rng import randbelow, sample_seed, uniform

__all__ = [
    "BatchPlan",
    "GroupRef",
    "Schedule",
    "Selection",
    "WorkUnit",
    "budget_prompts",
    "check_staleness",
    "parse_unit_id",
    "refill_count",
    "select_groups",
    "unit_id",
    "version_for_batch",
]


def version_for_batch(b: int, reload: int, lag: int) -> int:
    """v(b): the newest multiple of `reload` (j) at or below b - lag; 0 before that exists."""
    if b < 0:
        raise InvalidArgument(f"batch index must be >= 0, got {b}")
    if reload < 1 or lag < 0:
        raise InvalidArgument(f"need reload >= 1 and lag >= 0, got {reload}, {lag}")
    ahead = b - lag
    return 0 if ahead < 0 else (ahead // reload) * reload


def check_staleness(reload: int, accept: float, lag: int) -> None:
    """ConfigError when some batch would be generated more than `accept` (k) versions before the
    trainer consumes it, i.e. when lag + j - 1 > k."""
    worst = lag + reload - 1
    if worst > accept:
        raise ConfigError(
            f"impossible staleness: with reload j={reload} and lag={lag}, batches are generated "
            f"up to b - v(b) = lag + j - 1 = {worst} versions before the trainer uses them, "
            f"more than accept k={accept:g}",
            field="staleness",
            value={"reload": reload, "accept": accept, "lag": lag},
        )


@dataclass(frozen=True)
class WorkUnit:
    """One request to an inference worker: G samples for each prompt, with version `version`."""

    unit_id: str  # "b<batch>.r<round>.u<index>": unique in a run, stable across resumes
    batch: int
    round: int  # 0 = the batch's own prompts; 1, 2, ... = dynamic-sampling refills
    index: int  # position among the batch's units of this round
    version: int  # the weight version the worker must have loaded
    prompts: tuple[PromptRef, ...]
    seeds: tuple[tuple[int, ...], ...]  # per prompt, the G per-sample seeds
    first_slot: int  # slot of prompts[0] within the batch's round (slots number the prompts)

    @property
    def group_size(self) -> int:
        return len(self.seeds[0]) if self.seeds else 0

    @property
    def prompt_ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.prompts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit_id": self.unit_id,
            "batch": self.batch,
            "round": self.round,
            "index": self.index,
            "version": self.version,
            "prompts": [p.to_dict() for p in self.prompts],
            "seeds": [list(s) for s in self.seeds],
            "first_slot": self.first_slot,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkUnit:
        try:
            return cls(
                unit_id=str(data["unit_id"]),
                batch=int(data["batch"]),
                round=int(data["round"]),
                index=int(data["index"]),
                version=int(data["version"]),
                prompts=tuple(PromptRef.from_dict(p) for p in data["prompts"]),
                seeds=tuple(tuple(int(x) for x in s) for s in data["seeds"]),
                first_slot=int(data["first_slot"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise Corrupt(f"not a work unit: {e}") from None


def unit_id(batch: int, round: int, index: int) -> str:
    return f"b{batch:08d}.r{round}.u{index:04d}"


_UNIT_ID = re.compile(r"^b(\d{8,})\.r(\d+)\.u(\d{4,})$")


def parse_unit_id(name: str) -> tuple[int, int, int] | None:
    """(batch, round, index) of a name `unit_id` made; None for any other name."""
    m = _UNIT_ID.match(name)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


@dataclass(frozen=True)
class BatchPlan:
    """Batch b's main work units, and the mixture state before and after its draws."""

    batch: int
    version: int
    units: tuple[WorkUnit, ...]
    state_before: MixtureState
    state_after: MixtureState

    @property
    def prompt_ids(self) -> list[str]:
        return [pid for u in self.units for pid in u.prompt_ids]


class Schedule:
    """Batch index -> work units and versions, as pure functions (plus a replay cache)."""

    def __init__(
        self,
        mixture: PromptMixture,
        *,
        seed: int,
        prompts_per_batch: int,
        group_size: int,
        prompts_per_unit: int,
        reload: int,
        accept: float,
        lag: int,
    ) -> None:
        if prompts_per_batch < 1 or group_size < 1:
            raise InvalidArgument("prompts_per_batch and group_size must be >= 1")
        if prompts_per_unit < 1 or prompts_per_batch % prompts_per_unit:
            raise InvalidArgument(
                f"prompts_per_unit ({prompts_per_unit}) must divide prompts_per_batch "
                f"({prompts_per_batch})"
            )
        check_staleness(reload, accept, lag)
        self.mixture = mixture
        self.seed = seed
        self.B = prompts_per_batch
        self.G = group_size
        self.unit_prompts = prompts_per_unit
        self.reload = reload
        self.accept = accept
        self.lag = lag
        # known mixture states before batch b; replay starts from the nearest one below
        self._anchors: dict[int, MixtureState] = {0: mixture.initial_state()}

    @classmethod
    def from_config(cls, cfg: RunConfig, mixture: PromptMixture) -> Schedule:
        return cls(
            mixture,
            seed=cfg.seed,
            prompts_per_batch=cfg.batch.prompts,
            group_size=cfg.batch.group_size,
            prompts_per_unit=cfg.batch.unit_prompts,
            reload=cfg.staleness.reload,
            accept=cfg.staleness.accept,
            lag=cfg.staleness.effective_lag,
        )

    # --- versions ---------------------------------------------------------------------------
    def version(self, b: int) -> int:
        """v(b), the version batch b is generated with."""
        return version_for_batch(b, self.reload, self.lag)

    def staleness(self, b: int) -> int:
        """b - v(b): how many versions behind the trainer batch b's rollouts are."""
        return b - self.version(b)

    def last_dispatchable(self, newest_version: int) -> int:
        """The largest b whose version v(b) <= newest_version (batches up to it may be
        generated now): lag + (newest_version // j + 1) * j - 1."""
        if newest_version < 0:
            raise InvalidArgument(f"version must be >= 0, got {newest_version}")
        return self.lag + (newest_version // self.reload + 1) * self.reload - 1

    def is_reload_boundary(self, step: int) -> bool:
        """Whether version `step` is one inference reloads (a multiple of j): snapshot time."""
        return step % self.reload == 0

    # --- work units -------------------------------------------------------------------------
    def anchor(self, b: int, state: MixtureState) -> None:
        """Record that the mixture state before batch b is `state` (from a snapshot)."""
        self.mixture.check_state(state)
        if state.draws != b * self.B:
            raise Corrupt(
                f"mixture state before batch {b} must have {b * self.B} draws, has {state.draws}"
            )
        self._anchors[b] = state

    def state_before(self, b: int) -> MixtureState:
        """The mixture state before batch b (replayed from the nearest anchor at or below b)."""
        start = max(a for a in self._anchors if a <= b)
        state = self._anchors[start]
        if start < b:
            _, state = self.mixture.draw(state, (b - start) * self.B)
            self._anchors[b] = state
            if len(self._anchors) > 4096:  # keep the replay cache bounded
                for old in sorted(self._anchors)[1:2048]:
                    del self._anchors[old]
        return state

    def _seeds(self, b: int, round: int, slot: int) -> tuple[int, ...]:
        return tuple(sample_seed(self.seed, "samples", b, round, slot, g) for g in range(self.G))

    def _units(
        self, b: int, round: int, prompts: Sequence[PromptRef], first_index: int, first_slot: int
    ) -> list[WorkUnit]:
        version = self.version(b)
        units = []
        for i in range(0, len(prompts), self.unit_prompts):
            chunk = tuple(prompts[i : i + self.unit_prompts])
            slot0 = first_slot + i
            units.append(
                WorkUnit(
                    unit_id=unit_id(b, round, first_index + i // self.unit_prompts),
                    batch=b,
                    round=round,
                    index=first_index + i // self.unit_prompts,
                    version=version,
                    prompts=chunk,
                    seeds=tuple(self._seeds(b, round, slot0 + k) for k in range(len(chunk))),
                    first_slot=slot0,
                )
            )
        return units

    def plan(self, b: int, state: MixtureState | None = None) -> BatchPlan:
        """Batch b's main work units. `state` (the mixture state before b) is replayed when not
        given; pass it to avoid the replay when you have it."""
        before = self.state_before(b) if state is None else state
        if before.draws != b * self.B:
            raise InvalidArgument(
                f"the mixture state before batch {b} must have {b * self.B} draws, "
                f"not {before.draws}"
            )
        prompts, after = self.mixture.draw(before, self.B)
        self._anchors.setdefault(b + 1, after)
        units = self._units(b, 0, prompts, 0, 0)
        return BatchPlan(b, self.version(b), tuple(units), before, after)

    def refill_prompt(self, b: int, round: int, slot: int) -> PromptRef:
        """The refill prompt of (batch, round, slot): drawn with replacement, weights as in the
        mixture; its `epoch` is -1."""
        if round < 1:
            raise InvalidArgument(f"refill rounds start at 1, got {round}")
        mix = self.mixture
        source = mix.source_for(uniform(self.seed, "refill/pick", b, round, slot))
        rows = mix.sources[source].rows
        row = int(rows[randbelow(len(rows), self.seed, "refill/row", b, round, slot)])
        return PromptRef(mix.sources[source].name, row, -1)

    def refill_units(self, b: int, round: int, count: int) -> list[WorkUnit]:
        """Work units for `count` refill prompts of batch b, round `round` (>= 1), generated
        with v(b) like the batch's own."""
        if count < 0:
            raise InvalidArgument(f"refill count must be >= 0, got {count}")
        prompts = [self.refill_prompt(b, round, s) for s in range(count)]
        return self._units(b, round, prompts, 0, 0)


@dataclass(frozen=True, order=True)
class GroupRef:
    """One scored group (G samples of one prompt) waiting to be trained on."""

    version: int  # the version it was generated with
    batch: int  # the batch it was generated for
    round: int
    slot: int  # prompt slot within (batch, round)
    unit_id: str = field(compare=False)


@dataclass(frozen=True)
class Selection:
    """What one training batch takes from the pool of scored groups."""

    accepted: tuple[GroupRef, ...]  # newest first, at most `need`
    leftover: tuple[GroupRef, ...]  # allowed but not needed: back into the pool
    dropped: tuple[GroupRef, ...]  # too stale for this trainer version: counted, discarded


def select_groups(
    pool: Sequence[GroupRef], *, trainer_version: int, accept: float, need: int
) -> Selection:
    """Prefer-newest acceptance (DESIGN §3): drop groups with trainer_version - version > accept,
    take the `need` newest of the rest (ties: earlier batch, round, slot first), leave the others.

    A pure function of its inputs, so the groups a resumed run trains on are the same.
    """
    if need < 0:
        raise InvalidArgument(f"need must be >= 0, got {need}")
    dropped = tuple(sorted(g for g in pool if trainer_version - g.version > accept))
    fresh = sorted(
        (g for g in pool if trainer_version - g.version <= accept),
        key=lambda g: (-g.version, g.batch, g.round, g.slot),
    )
    return Selection(tuple(fresh[:need]), tuple(fresh[need:]), dropped)


def refill_count(missing: int, used: int, budget_prompts: int) -> int:
    """How many refill prompts the next round may draw: the missing groups, within what is left
    of the batch's refill budget."""
    return max(0, min(missing, budget_prompts - used))


def budget_prompts(prompts_per_batch: int, budget: float) -> int:
    """The dynamic-sampling refill budget in prompts: floor(budget × B)."""
    return math.floor(budget * prompts_per_batch)
