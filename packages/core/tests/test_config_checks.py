"""rlx_core.configs.checks: the lower bound and the "did you mean" hint every config shares."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rlx_core.configs.checks import at_least, suggest
from rlx_core.errors import ConfigError


@dataclass
class _Fields:
    workers: int = 1
    retries: int | None = None
    wait_s: float = 0.5


def test_at_least_names_the_first_field_below_the_bound() -> None:
    at_least(_Fields(), 0, "workers", "retries", "wait_s")  # None is unset: not checked
    with pytest.raises(ConfigError) as e:
        at_least(_Fields(workers=0, wait_s=-1.0), 1, "workers", "wait_s")
    assert (e.value.field, e.value.value) == ("workers", 0)
    assert str(e.value).startswith("workers: must be >= 1")
    with pytest.raises(ConfigError) as e:
        at_least(_Fields(wait_s=0.25), 0.5, "workers", "wait_s", prefix="limits.")
    assert (e.value.field, e.value.value) == ("limits.wait_s", 0.25)
    assert "must be >= 0.5" in str(e.value)


def test_suggest_offers_the_closest_choice_and_those_the_word_begins() -> None:
    assert suggest("grpoo", ["grpo", "dapo", "gspo"]) == "did you mean 'grpo'?"
    assert suggest("INFERENC", ["trainer", "inference"]) == "did you mean 'inference'?"
    # the closest first ("infix"), then the others "inf" begins
    assert suggest("inf", ["inference", "infix", "trainer"]) == (
        "did you mean 'infix' or 'inference'?"
    )
    assert suggest("zzz", ["trainer", "inference"]) == ""
