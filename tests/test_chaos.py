"""tools/chaos on the small demo: faults sent to real service processes and to the controller, the
run resumed whenever its controller is gone, and the end compared with an uninterrupted run
(params hash, the prompts of every step, every per-step metric that does not measure time).

Two schedules reproduce runs that were lost before (a paramserver SIGKILLed mid-run; a batch that
was never generated when the controller died; a worker killed more than the paramserver's 8
versions past the last checkpoint), one is drawn at random with a fixed seed. `tools/chaos/
README.md` says how to run many more.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from up_helpers import STEPS, small_sets

# the (j, k) of test_up_resume's runs, so the uninterrupted references are shared (clean_run)
# (lag 1: generation a step ahead of training, as the schedules below need; the demo runs lag 0)
LOCKSTEP = (
    "staleness.reload=1",
    "staleness.accept=1",
    "staleness.lag=1",
    "dynamic_sampling.enabled=false",
)
DYNAMIC = (
    "staleness.reload=2",
    "staleness.accept=4",
    "staleness.lag=1",
    "dynamic_sampling.enabled=true",
)


def _args(extra: tuple[str, ...]) -> list[str]:
    return [*small_sets(), *(x for s in extra for x in ("--set", s))]


def _check(outcome: Any, *, every_fault_hit: bool = True) -> None:
    assert outcome.identical, (outcome.fired, outcome.differences)
    if every_fault_hit:
        assert all("no live target" not in f for f in outcome.fired), outcome.fired


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_a_killed_paramserver_and_a_batch_never_generated(
    chaos: ModuleType, tmp_path: Path, clean_run: Callable[[tuple[str, ...]], Path]
) -> None:
    """The paramserver restarted on its port with a new store (clients negotiated the old one:
    Corrupt), then the worker stopped before batch 4 was generated and the controller killed at
    snapshot 4 (its checkpoint was of step 4, batch 4 needs version 3: every resume failed)."""
    Fault = chaos.Fault
    faults = [
        Fault("step", 1, 0.2, "paramserver-0", "KILL"),
        Fault("step", 3, 0.0, "inference-0", "STOP"),  # held until the controller is gone
        Fault("snapshot", 4, 0.0, "controller", "KILL"),
    ]
    outcome = chaos.run_schedule(
        faults, tmp_path / "run", _args(LOCKSTEP), steps=STEPS, reference=clean_run(LOCKSTEP)
    )
    _check(outcome)
    assert outcome.controllers == 2  # `rlx up`, then one `rlx resume`


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_a_worker_killed_past_the_paramservers_versions(
    chaos: ModuleType, tmp_path: Path, clean_run: Callable[[tuple[str, ...]], Path]
) -> None:
    """No checkpoint yet, 9 versions in: the in-process resume replays from step 0 while the live
    paramserver holds the 8 newest versions, which evicted each replayed one on commit."""
    extra = (*LOCKSTEP, "steps=10", "snapshots.checkpoint_every=100")
    faults = [chaos.Fault("step", 9, 0.0, "inference-0", "KILL")]
    outcome = chaos.run_schedule(
        faults, tmp_path / "run", _args(extra), steps=10, reference=clean_run(extra)
    )
    _check(outcome)
    assert outcome.controllers == 1  # recovered inside the controller


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_a_random_schedule_with_staleness_and_dynamic_sampling(
    chaos: ModuleType, tmp_path: Path, clean_run: Callable[[tuple[str, ...]], Path]
) -> None:
    services = ["trainer", "inference-0", "paramserver-0", "verifier-0"]
    faults = chaos.random_schedule(random.Random(10), steps=STEPS, services=services)
    assert len(faults) >= 2 and any(f.target in ("all", "controller") for f in faults)
    outcome = chaos.run_schedule(
        faults,
        tmp_path / "run",
        _args(DYNAMIC),
        steps=STEPS,
        reference=clean_run(DYNAMIC),
        trigger_timeout_s=60.0,
    )
    _check(outcome, every_fault_hit=False)  # a target may be down from the fault before
