"""The prompt mixture: weights, cursors, epochs, and exact continuation from a saved state (its
draws come from rlx_core.rng, tested in packages/core/tests/test_rng.py)."""

from __future__ import annotations

import collections

import pytest

from rlx_controller.mixture import MixtureSource, MixtureState, PromptMixture
from rlx_core.errors import Corrupt, InvalidArgument


def _mixture(seed: int = 11) -> PromptMixture:
    return PromptMixture(
        [MixtureSource("a", 3.0, range(50)), MixtureSource("b", 1.0, [2, 4, 6, 8])], seed=seed
    )


def test_mixture_follows_weights_and_walks_epochs() -> None:
    mix = _mixture()
    refs, state = mix.draw(mix.initial_state(), 400)
    by_ds = collections.Counter(r.dataset for r in refs)
    assert by_ds["a"] + by_ds["b"] == 400
    assert 0.68 < by_ds["a"] / 400 < 0.82  # weight 3:1
    assert state.draws == 400 and state.cursors == (by_ds["a"], by_ds["b"])
    # each epoch of a dataset visits every eligible row exactly once, in a new order
    a_refs = [r for r in refs if r.dataset == "a"]
    for epoch in range(by_ds["a"] // 50):
        rows = [r.row for r in a_refs[epoch * 50 : (epoch + 1) * 50]]
        assert sorted(rows) == list(range(50))
        assert {r.epoch for r in a_refs[epoch * 50 : (epoch + 1) * 50]} == {epoch}
    first, second = (
        [r.row for r in a_refs[:50]],
        [r.row for r in a_refs[50:100]],
    )
    assert first != second
    b_rows = {r.row for r in refs if r.dataset == "b"}
    assert b_rows == {2, 4, 6, 8}  # only the eligible (pre-filtered) rows
    assert mix.epochs(state) == {"a": by_ds["a"] // 50, "b": by_ds["b"] // 4}


def test_mixture_continues_exactly_from_a_saved_state() -> None:
    mix = _mixture()
    all_at_once, end = mix.draw(mix.initial_state(), 97)
    part1, mid = mix.draw(mix.initial_state(), 40)
    saved = MixtureState.from_dict(mid.to_dict())
    part2, end2 = _mixture().draw(saved, 57)  # a fresh object, as after a restart
    assert part1 + part2 == all_at_once
    assert end2 == end
    assert [r.id for r in all_at_once[:3]] == [f"{r.dataset}/{r.row}" for r in all_at_once[:3]]


def test_mixture_depends_on_seed_and_checks_states() -> None:
    a, _ = _mixture(1).draw(_mixture(1).initial_state(), 30)
    b, _ = _mixture(2).draw(_mixture(2).initial_state(), 30)
    assert a != b
    mix = _mixture()
    with pytest.raises(Corrupt, match="2 datasets"):
        mix.check_state(MixtureState(3, (3,)))
    with pytest.raises(Corrupt, match="add up"):
        mix.check_state(MixtureState(3, (1, 1)))
    with pytest.raises(Corrupt):
        MixtureState.from_dict({"draws": 1})
    with pytest.raises(InvalidArgument, match="no prompts left"):
        PromptMixture([MixtureSource("a", 1.0, [])], seed=0)
    with pytest.raises(InvalidArgument, match="repeat"):
        PromptMixture([MixtureSource("a", 1.0, [1]), MixtureSource("a", 1.0, [1])], seed=0)
