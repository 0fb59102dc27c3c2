"""The prompt mixture: several datasets drawn with weights, each walked in shuffled epochs.

Draw n picks a dataset with probability proportional to its weight, from
`uniform(seed, "<stream>/pick", n)`; that dataset then gives its next prompt: position c of its
cursor is row `perm_e(c mod N)` of epoch e = c div N, where perm_e is a `KeyedPermutation` keyed
by (seed, "<stream>/<dataset name>/<e>"). A dataset visits every row once per epoch, in an order
that changes each epoch. The whole state is `MixtureState` (the draw counter and one cursor per
dataset): save it, and a restored mixture continues exactly.

    mix = PromptMixture([MixtureSource("math", 2.0, rows=range(1000)), ...], seed=7)
    refs, state = mix.draw(mix.initial_state(), 32)

A run's sources are its datasets, each kept to the rows its pre-filter keeps:
`mixture_sources(cfg, datasets, load_prefilter(cfg.prefilter.file))`.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlx_core.configs.run import RunConfig
from rlx_core.errors import ConfigError, Corrupt, InvalidArgument
from rlx_core.rng import KeyedPermutation, uniform
from rlx_data import Dataset, kept_rows

__all__ = ["MixtureSource", "MixtureState", "PromptMixture", "PromptRef", "mixture_sources"]


@dataclass(frozen=True)
class PromptRef:
    """One drawn prompt: which dataset, which row of its file, in which epoch of that dataset."""

    dataset: str
    row: int  # 0-based line number among the file's records
    epoch: int

    @property
    def id(self) -> str:
        """The prompt id, "<dataset>/<row>", as in the consumed-prompts sequence."""
        return f"{self.dataset}/{self.row}"

    def to_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "row": self.row, "epoch": self.epoch}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PromptRef:
        return cls(str(data["dataset"]), int(data["row"]), int(data["epoch"]))


@dataclass(frozen=True)
class MixtureSource:
    """A dataset as the mixture sees it: its name, weight, and the rows it may draw."""

    name: str
    weight: float
    rows: Sequence[int]  # the file's row numbers that are eligible (after pre-filtering)


@dataclass(frozen=True)
class MixtureState:
    """Where the mixture is: draws made so far, and per dataset how many prompts it gave."""

    draws: int
    cursors: tuple[int, ...]  # one per source, in the mixture's order

    def to_dict(self) -> dict[str, Any]:
        return {"draws": self.draws, "cursors": list(self.cursors)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MixtureState:
        try:
            return cls(int(data["draws"]), tuple(int(c) for c in data["cursors"]))
        except (KeyError, TypeError, ValueError) as e:
            raise Corrupt(f"not a mixture state: {data!r} ({e})") from None


class PromptMixture:
    """Counter-based weighted mixture of datasets with per-dataset cursors and epochs."""

    def __init__(self, sources: Sequence[MixtureSource], *, seed: int, stream: str = "train"):
        if not sources:
            raise InvalidArgument("a prompt mixture needs at least one dataset")
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise InvalidArgument(f"dataset names repeat in the mixture: {names}")
        for s in sources:
            if not s.weight > 0:
                raise InvalidArgument(f"dataset {s.name!r}: weight must be > 0, got {s.weight}")
            if len(s.rows) == 0:
                raise InvalidArgument(
                    f"dataset {s.name!r} has no prompts left to draw (empty file, or all "
                    "removed by the pre-filter)"
                )
        self.sources = tuple(sources)
        self.seed = seed
        self.stream = stream
        total = sum(s.weight for s in sources)
        acc = 0.0
        self._cumulative: list[float] = []
        for s in sources:
            acc += s.weight / total
            self._cumulative.append(acc)
        self._cumulative[-1] = 1.0
        self._perms: dict[tuple[int, int], KeyedPermutation] = {}

    def initial_state(self) -> MixtureState:
        return MixtureState(0, (0,) * len(self.sources))

    def check_state(self, state: MixtureState) -> None:
        """Corrupt if `state` cannot belong to this mixture (other number of datasets, or
        counts that do not add up)."""
        if len(state.cursors) != len(self.sources) or min(state.cursors, default=0) < 0:
            raise Corrupt(
                f"mixture state has {len(state.cursors)} cursors for {len(self.sources)} datasets"
            )
        if sum(state.cursors) != state.draws:
            raise Corrupt(f"mixture state cursors {state.cursors} do not add up to {state.draws}")

    def _permutation(self, source: int, epoch: int) -> KeyedPermutation:
        key = (source, epoch)
        perm = self._perms.get(key)
        if perm is None:
            s = self.sources[source]
            perm = KeyedPermutation(len(s.rows), self.seed, f"{self.stream}/{s.name}/{epoch}")
            if len(self._perms) > 64:  # a few epochs of each dataset are ever live at once
                self._perms.clear()
            self._perms[key] = perm
        return perm

    def source_for(self, u: float) -> int:
        """The source index a uniform number u in [0, 1) selects (by cumulative weight)."""
        return min(bisect.bisect_right(self._cumulative, u), len(self.sources) - 1)

    def pick(self, draw: int) -> int:
        """The source index chosen by draw number `draw`."""
        return self.source_for(uniform(self.seed, f"{self.stream}/pick", draw))

    def prompt_at(self, source: int, position: int) -> PromptRef:
        """The prompt at cursor position `position` of source `source`."""
        s = self.sources[source]
        n = len(s.rows)
        epoch, offset = divmod(position, n)
        return PromptRef(s.name, int(s.rows[self._permutation(source, epoch)(offset)]), epoch)

    def draw(self, state: MixtureState, n: int) -> tuple[list[PromptRef], MixtureState]:
        """The next `n` prompts after `state`, and the state after them."""
        if n < 0:
            raise InvalidArgument(f"cannot draw {n} prompts")
        cursors = list(state.cursors)
        refs = []
        for d in range(state.draws, state.draws + n):
            source = self.pick(d)
            refs.append(self.prompt_at(source, cursors[source]))
            cursors[source] += 1
        return refs, MixtureState(state.draws + n, tuple(cursors))

    def epochs(self, state: MixtureState) -> dict[str, int]:
        """The epoch each dataset is in (completed passes over its rows)."""
        return {s.name: c // len(s.rows) for s, c in zip(self.sources, state.cursors, strict=True)}


def mixture_sources(
    cfg: RunConfig,
    datasets: Sequence[Dataset],
    prefilter: Mapping[str, Mapping[int, float]] | None = None,
) -> list[MixtureSource]:
    """The mixture's sources for the run's datasets, pre-filtered; ConfigError naming the
    dataset when none of its prompts is left."""
    prefilter = prefilter or {}
    unknown = sorted(set(prefilter) - {d.name for d in datasets})
    if unknown:
        raise ConfigError(
            f"the pre-filter file names datasets the config does not have: {', '.join(unknown)}",
            field="prefilter.file",
        )
    sources = []
    for i, ds in enumerate(datasets):
        rows = kept_rows(len(ds), ds.name, prefilter, cfg.prefilter)
        if not rows:
            raise ConfigError(
                f"the pre-filter keeps none of {ds.name!r}'s {len(ds)} prompts (pass rate "
                f"strictly between {cfg.prefilter.min_pass_rate} and "
                f"{cfg.prefilter.max_pass_rate})",
                field=f"datasets[{i}]",
            )
        sources.append(MixtureSource(ds.name, ds.config.weight, rows))
    return sources
