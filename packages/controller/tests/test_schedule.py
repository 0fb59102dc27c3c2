"""The deterministic schedule (DESIGN §3): versions per batch, staleness bounds, work units as a
pure function of the batch index, refills, prefer-newest acceptance."""

from __future__ import annotations

import pytest

from rlx_controller.mixture import MixtureSource, PromptMixture
from rlx_controller.schedule import (
    GroupRef,
    Schedule,
    budget_prompts,
    check_staleness,
    parse_unit_id,
    refill_count,
    select_groups,
    unit_id,
    version_for_batch,
)
from rlx_core.errors import ConfigError, Corrupt


@pytest.mark.parametrize(
    ("reload", "lag", "expected"),
    [
        (1, 0, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
        (1, 1, [0, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
        (2, 0, [0, 0, 2, 2, 4, 4, 6, 6, 8, 8]),
        (2, 3, [0, 0, 0, 0, 0, 2, 2, 4, 4, 6]),
        (4, 1, [0, 0, 0, 0, 0, 4, 4, 4, 4, 8]),
    ],
)
def test_version_for_batch_by_hand(reload: int, lag: int, expected: list[int]) -> None:
    assert [version_for_batch(b, reload, lag) for b in range(10)] == expected


@pytest.mark.parametrize(
    ("reload", "accept", "lag"),
    [(1, 1, 0), (1, 1, 1), (1, 2, 2), (2, 4, 3), (4, 8, 5), (3, float("inf"), 9)],
)
def test_allowed_configs_never_exceed_accept(reload: int, accept: float, lag: int) -> None:
    check_staleness(reload, accept, lag)
    worst = max(b - version_for_batch(b, reload, lag) for b in range(200))
    assert worst == lag + reload - 1 <= accept
    # versions only move at reload boundaries and never backwards
    versions = [version_for_batch(b, reload, lag) for b in range(200)]
    assert all(v % reload == 0 for v in versions)
    assert versions == sorted(versions)


@pytest.mark.parametrize(("reload", "accept", "lag"), [(2, 1, 1), (1, 1, 2), (4, 2, 0), (1, 0, 1)])
def test_impossible_staleness_is_rejected(reload: int, accept: float, lag: int) -> None:
    with pytest.raises(ConfigError, match="impossible staleness"):
        check_staleness(reload, accept, lag)


def _schedule(seed: int = 3, reload: int = 2, lag: int = 1, unit: int = 2) -> Schedule:
    mix = PromptMixture(
        [MixtureSource("a", 1.0, range(7)), MixtureSource("b", 2.0, range(5))], seed=seed
    )
    return Schedule(
        mix,
        seed=seed,
        prompts_per_batch=4,
        group_size=3,
        prompts_per_unit=unit,
        reload=reload,
        accept=4,
        lag=lag,
    )


def test_work_units_are_a_pure_function_of_the_batch() -> None:
    s1 = _schedule()
    sequential = [s1.plan(b) for b in range(12)]
    s2 = _schedule()  # a fresh schedule asked out of order, as after a resume
    for b in (9, 3, 11, 0):
        assert s2.plan(b) == sequential[b]
    plan = sequential[5]
    assert plan.version == version_for_batch(5, 2, 1) == 4
    assert [u.unit_id for u in plan.units] == ["b00000005.r0.u0000", "b00000005.r0.u0001"]
    assert all(u.version == 4 and u.batch == 5 and u.round == 0 for u in plan.units)
    assert [len(u.prompts) for u in plan.units] == [2, 2]
    assert [u.first_slot for u in plan.units] == [0, 2]
    assert all(u.group_size == 3 for u in plan.units)
    # the prompt sequence is the mixture's, batch after batch
    ids = [pid for p in sequential for pid in p.prompt_ids]
    refs, _ = s1.mixture.draw(s1.mixture.initial_state(), 48)
    assert ids == [r.id for r in refs]
    # every sample of the run has its own seed
    seeds = [s for p in sequential for u in p.units for group in u.seeds for s in group]
    assert len(seeds) == 12 * 4 * 3 == len(set(seeds))
    assert sequential[4].state_after == sequential[5].state_before


def test_schedule_resumes_from_an_anchor() -> None:
    s1 = _schedule()
    expected = s1.plan(8)
    s2 = _schedule()
    s2.anchor(8, expected.state_before)
    assert s2.plan(8) == expected
    with pytest.raises(Corrupt, match="32 draws"):
        s2.anchor(8, s1.plan(7).state_before)


def test_seed_changes_everything() -> None:
    a, b = _schedule(seed=1).plan(2), _schedule(seed=2).plan(2)
    assert a.units[0].seeds != b.units[0].seeds


def test_dispatch_window() -> None:
    s = _schedule(reload=4, lag=1)
    # batches whose version exists once version t is pushed
    for t in range(0, 13):
        last = s.last_dispatchable(t)
        assert version_for_batch(last, 4, 1) <= t < version_for_batch(last + 1, 4, 1)
    assert s.is_reload_boundary(8) and not s.is_reload_boundary(6)


def test_refills_are_pure_and_do_not_move_the_main_stream() -> None:
    s = _schedule()
    before = s.plan(3)
    units = s.refill_units(3, 1, 3)
    assert [u.unit_id for u in units] == ["b00000003.r1.u0000", "b00000003.r1.u0001"]
    assert [len(u.prompts) for u in units] == [2, 1]
    assert units == _schedule().refill_units(3, 1, 3)
    assert units != s.refill_units(3, 2, 3)
    assert all(p.epoch == -1 for u in units for p in u.prompts)
    assert all(u.version == before.version for u in units)
    assert s.plan(3) == before and _schedule().plan(4) == s.plan(4)
    seeds = {x for u in units + list(before.units) for g in u.seeds for x in g}
    assert len(seeds) == (3 + 4) * 3
    assert budget_prompts(32, 0.5) == 16
    assert refill_count(missing=10, used=12, budget_prompts=16) == 4
    assert refill_count(missing=3, used=0, budget_prompts=16) == 3


def _g(version: int, batch: int, slot: int) -> GroupRef:
    return GroupRef(version, batch, 0, slot, f"b{batch}")


def test_select_groups_prefers_newest_and_counts_drops() -> None:
    pool = [_g(3, 5, 0), _g(5, 6, 1), _g(1, 2, 0), _g(5, 6, 0), _g(4, 5, 2), _g(2, 3, 0)]
    sel = select_groups(pool, trainer_version=6, accept=3, need=3)
    assert sel.accepted == (_g(5, 6, 0), _g(5, 6, 1), _g(4, 5, 2))
    assert sel.leftover == (_g(3, 5, 0),)
    assert sel.dropped == (_g(1, 2, 0), _g(2, 3, 0))  # 6 - 1 > 3 and 6 - 2 > 3
    # order of the pool does not matter
    assert select_groups(list(reversed(pool)), trainer_version=6, accept=3, need=3) == sel
    # unbounded k drops nothing; a short pool gives what it has
    short = select_groups(pool, trainer_version=100, accept=float("inf"), need=10)
    assert len(short.accepted) == 6 and not short.dropped and not short.leftover


def test_a_unit_id_parses_back_into_batch_round_and_index() -> None:
    for b, r, i in [(0, 0, 0), (12, 0, 3), (123_456_789, 2, 10_000)]:
        assert parse_unit_id(unit_id(b, r, i)) == (b, r, i)
    assert unit_id(12, 1, 3) == "b00000012.r1.u0003"
    for other in ["eval.v3.gsm8k.0", "b12.r0.u0000", "b00000012.r0.u0000.rec", "x"]:
        assert parse_unit_id(other) is None
