"""The generation pipeline's bookkeeping (rlx_controller.pipeline): a newly scored unit counts
once scored, its append to the rollout log runs on, and `trained(b)` returns only once batch b's
records are in the log. The units are a small stand-in for `TrainingUnits` (the pipeline's seam:
generate, score, log) whose log waits for the test's word; the schedule and config are real."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from rlx_controller.mixture import MixtureSource, PromptMixture
from rlx_controller.pipeline import Pipeline, Stop
from rlx_controller.progress import untimed
from rlx_controller.schedule import Schedule, WorkUnit
from rlx_core.configs.run import RunConfig, loads_run_config
from rlx_core.errors import Unavailable

CONFIG = """
run_dir = "/unused"
steps = 3
[model]
path = "/unused"
[[datasets]]
name = "a"
path = "/unused.jsonl"
[staleness]
reload = 1
accept = 1
lag = 0
[batch]
prompts = 4
group_size = 3
prompts_per_unit = 2
"""


class _Runner:
    workers = 1


class _Units:
    """generate -> the unit id, score -> ("scored", id), log -> waits for `release`, then
    records the id in `appended` (or raises `fail`); a unit in `logged` had a record listed at
    the restart, and its log returns ("from the log", id)."""

    def __init__(self) -> None:
        self.runner = _Runner()
        self.stage = untimed
        self.logged: set[str] = set()
        self.release = threading.Event()
        self.appended: list[str] = []
        self.fail: Exception | None = None

    def worker_of(self, unit: WorkUnit) -> int:
        return 0

    def logged_record(self, unit: WorkUnit) -> Any:
        return None

    def generate(self, unit: WorkUnit) -> str:
        return unit.unit_id

    def score(self, unit: WorkUnit, result: str) -> tuple[str, str]:
        return ("scored", result)

    def never_logged(self, unit: WorkUnit) -> bool:
        return unit.unit_id not in self.logged

    def log(self, unit: WorkUnit, record: tuple[str, str]) -> tuple[str, str]:
        assert self.release.wait(10), "the test never released the log"
        if self.fail is not None:
            raise self.fail
        self.appended.append(unit.unit_id)
        return record if self.never_logged(unit) else ("from the log", unit.unit_id)


def _pipeline(units: _Units, stop: threading.Event | None = None) -> tuple[Pipeline, RunConfig]:
    cfg = loads_run_config(CONFIG)
    mix = PromptMixture([MixtureSource("a", 1.0, range(9))], seed=1)
    schedule = Schedule.from_config(cfg, mix)

    def build(b: int, records: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
        return list(records), {}

    # (units: the seam's stand-in, not a TrainingUnits)
    pipe = Pipeline(
        cfg,
        schedule,
        units,  # type: ignore[arg-type]
        build,  # type: ignore[arg-type]
        first=0,
        stop=stop or threading.Event(),
    )
    return pipe, cfg


def _ids(pipe: Pipeline, b: int) -> list[str]:
    return [u.unit_id for u in pipe.plans[b]]


def test_a_batch_is_built_before_its_records_are_appended_and_trained_waits_for_them() -> None:
    units = _Units()
    pipe, _ = _pipeline(units)
    try:
        pipe.dispatch(0)
        ids = _ids(pipe, 0)
        assert len(ids) == 2  # 4 prompts, 2 a unit
        batch, _, _ = pipe.batch(0)
        assert batch == [("scored", i) for i in ids]
        assert units.appended == []  # built while the appends wait
        waiter = threading.Thread(target=pipe.trained, args=(0,))
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive(), "trained(0) returned before its records were in the log"
        units.release.set()
        waiter.join(10)
        assert not waiter.is_alive()
        assert sorted(units.appended) == sorted(ids)
        assert 0 not in pipe.plans and not pipe.appends and not pipe.futures
    finally:
        units.release.set()
        pipe.close(stopped=False)


def test_an_append_error_is_raised_by_trained() -> None:
    units = _Units()
    units.fail = Unavailable("the run directory is unreachable")
    units.release.set()
    pipe, _ = _pipeline(units)
    try:
        pipe.dispatch(0)
        batch, _, _ = pipe.batch(0)  # scored: the batch builds
        assert batch == [("scored", i) for i in _ids(pipe, 0)]
        with pytest.raises(Unavailable, match="unreachable"):
            pipe.trained(0)
    finally:
        pipe.close(stopped=False)


def test_a_unit_listed_at_the_restart_counts_as_the_log_returns_it() -> None:
    units = _Units()
    units.release.set()
    pipe, _ = _pipeline(units)
    try:
        pipe.dispatch(0)
        ids = _ids(pipe, 0)
        units.logged = {ids[1]}  # its record was listed (and found torn): the log decides
        batch, _, _ = pipe.batch(0)
        assert batch == [("scored", ids[0]), ("from the log", ids[1])]
        pipe.trained(0)
        assert sorted(units.appended) == sorted(ids)
    finally:
        pipe.close(stopped=False)


def test_a_stop_ends_the_wait_for_appends() -> None:
    units = _Units()
    stop = threading.Event()
    pipe, _ = _pipeline(units, stop)
    try:
        pipe.dispatch(0)
        pipe.batch(0)
        stop.set()
        with pytest.raises(Stop):
            pipe.trained(0)
        assert 0 in pipe.plans  # still outstanding: a stop snapshot lists its units
    finally:
        units.release.set()
        pipe.close(stopped=True)
