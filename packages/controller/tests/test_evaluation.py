"""Evaluation figures: the pass@k estimator against hand-worked values and enumeration, and the
per-dataset summary of a hand-made sample list (no services needed)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from rlx_controller.evaluation import (
    EvalSample,
    heldout_accuracy,
    metric_fields,
    pass_at_k,
    summarize,
)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),  # 1 - C(3,1)/C(5,1) = 1 - 3/5
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 2, 3, 0.9),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
        (5, 2, 4, 1.0),  # n - c = 3 < k: every draw of 4 holds a correct one
        (4, 0, 1, 0.0),
        (4, 0, 4, 0.0),
        (4, 4, 1, 1.0),
        (4, 4, 4, 1.0),
        (4, 1, 4, 1.0),  # k = n: any correct answer
        (4, 0, 4, 0.0),
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
    ],
)
def test_pass_at_k_hand_worked(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_the_chance_a_draw_of_k_holds_a_correct_answer() -> None:
    """Exact enumeration of every k-subset of n answers, for every (n, c, k) with n <= 7."""
    for n in range(1, 8):
        for c in range(n + 1):
            answers = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                draws = list(itertools.combinations(answers, k))
                expected = sum(any(d) for d in draws) / len(draws)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)


def test_pass_at_k_matches_the_binomials_where_they_are_exact() -> None:
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 200)
        c, k = rng.randint(0, n), rng.randint(1, n)
        exact = 1 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-9)


def test_pass_at_1_is_the_fraction_correct() -> None:
    for n in range(1, 20):
        for c in range(n + 1):
            assert pass_at_k(n, c, 1) == pytest.approx(c / n, abs=1e-12)


@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [
        (4, 0, 5, "needs 1 <= k <= n, got n=4, k=5"),
        (4, 0, 0, "needs 1 <= k <= n, got n=4, k=0"),
        (4, 5, 1, "needs 0 <= c <= n, got n=4, c=5"),
        (4, -1, 1, "needs 0 <= c <= n, got n=4, c=-1"),
        (0, 0, 1, "needs 1 <= k <= n, got n=0, k=1"),
    ],
)
def test_pass_at_k_rejects_impossible_arguments(n: int, c: int, k: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pass_at_k(n, c, k)


def _s(
    dataset: str,
    row: int,
    sample: int,
    status: str,
    score: float | None,
    tokens: int,
    *,
    greedy: bool = False,
) -> EvalSample:
    return EvalSample(
        dataset=dataset,
        row=row,
        prompt_id=f"{dataset}/{row}",
        sample=sample,
        greedy=greedy,
        text=f"answer {sample}",
        status=status,
        score=score,
        response_tokens=tokens,
        finish_reason="stop",
    )


# dataset "a": 2 prompts, a greedy answer each and 4 sampled ones
#   row 0: greedy AC; sampled AC WA WA WA                   -> n = 4, c = 1, mean score 1/4
#   row 1: greedy ERROR (not judged); sampled WA (0.5 partial credit), INFRA, AC, WA
#                                                            -> n = 3, c = 1, mean score 1/2
# dataset "b": 1 prompt, greedy WA only
SAMPLES = [
    _s("a", 0, 0, "AC", 1.0, 3, greedy=True),
    _s("a", 1, 0, "ERROR", None, 5, greedy=True),
    _s("a", 0, 0, "AC", 1.0, 1),
    _s("a", 0, 1, "WA", 0.0, 2),
    _s("a", 0, 2, "WA", 0.0, 3),
    _s("a", 0, 3, "WA", 0.0, 4),
    _s("a", 1, 0, "WA", 0.5, 5),
    _s("a", 1, 1, "INFRA", None, 6),
    _s("a", 1, 2, "AC", 1.0, 7),
    _s("a", 1, 3, "WA", 0.0, 8),
    _s("b", 0, 0, "WA", 0.0, 2, greedy=True),
]


def test_summarize_hand_made_samples_at_k_2() -> None:
    out = summarize(SAMPLES, k=2)
    assert list(out) == ["a", "b"]
    a = out["a"]
    assert (a.prompts, a.k) == (2, 2)
    assert a.greedy == 1.0  # the ERROR greedy answer is left out, not a failure
    assert a.pass_at_1 == pytest.approx((1 / 4 + 1 / 3) / 2)  # 7/24
    # row 0: 1 - C(3,2)/C(4,2) = 1/2; row 1: 1 - C(2,2)/C(3,2) = 2/3
    assert a.pass_at_k == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert a.avg_at_k == pytest.approx((1 / 4 + (0.5 + 1.0 + 0.0) / 3) / 2)  # 0.375
    assert a.greedy_tokens == 4.0
    assert a.sampled_tokens == 4.5
    assert a.excluded == 2
    assert a.short_prompts == 0
    assert a.verdicts == {
        "greedy": {"AC": 1, "ERROR": 1},
        "sampled": {"AC": 2, "INFRA": 1, "WA": 5},
    }
    b = out["b"]
    assert (b.prompts, b.k, b.greedy) == (1, 0, 0.0)
    assert (b.pass_at_1, b.pass_at_k, b.avg_at_k, b.sampled_tokens) == (None, None, None, None)
    assert b.verdicts == {"greedy": {"WA": 1}}


def test_summarize_default_k_is_the_answers_per_prompt() -> None:
    a = summarize(SAMPLES)["a"]
    assert a.k == 4
    # row 0: n = 4, c = 1, k = 4 -> 1; row 1 has 3 judged answers (< k): left out of pass@4
    assert a.pass_at_k == 1.0
    assert a.short_prompts == 1
    assert a.pass_at_1 == pytest.approx(7 / 24)  # pass@1 still counts row 1


def test_excluded_samples_are_never_failures() -> None:
    """Replacing the judged-but-failed answers' twins by INFRA changes nothing but the counts."""
    base = [
        _s("d", 0, 0, "AC", 1.0, 1, greedy=True),
        _s("d", 0, 0, "AC", 1.0, 1),
        _s("d", 0, 1, "WA", 0.0, 1),
    ]
    noisy = [
        *base,
        _s("d", 1, 0, "INFRA", None, 1, greedy=True),
        _s("d", 0, 2, "INFRA", None, 1),
        _s("d", 0, 3, "ERROR", None, 1),
    ]
    clean, dirty = summarize(base, 2)["d"], summarize(noisy, 2)["d"]
    for f in ("greedy", "pass_at_1", "pass_at_k", "avg_at_k"):
        assert getattr(clean, f) == getattr(dirty, f), f
    assert (clean.greedy, clean.pass_at_1, clean.pass_at_k) == (1.0, 0.5, 1.0)
    assert (clean.excluded, dirty.excluded) == (0, 3)
    # nothing judged at all: no figure, not 0
    none = summarize([_s("e", 0, 0, "INFRA", None, 1, greedy=True)])["e"]
    assert none.greedy is None and none.excluded == 1
    assert heldout_accuracy([_s("e", 0, 0, "INFRA", None, 1, greedy=True)]) is None


def test_summary_is_invariant_to_sample_order() -> None:
    shuffled = list(SAMPLES)
    random.Random(3).shuffle(shuffled)
    assert summarize(shuffled, 2)["a"] == summarize(SAMPLES, 2)["a"]


def test_metric_fields() -> None:
    fields = metric_fields(SAMPLES, 2)
    assert fields == {
        "heldout": 0.5,  # a/0 AC and b/0 WA judged; a/1 ERROR left out
        "eval/a/greedy": 1.0,
        "eval/a/pass@1": pytest.approx(7 / 24),
        "eval/a/pass@2": pytest.approx(7 / 12),
        "eval/a/avg@2": pytest.approx(0.375),
        "eval/b/greedy": 0.0,
    }
    greedy_only = metric_fields([s for s in SAMPLES if s.greedy])
    assert greedy_only == {"heldout": 0.5, "eval/a/greedy": 1.0, "eval/b/greedy": 0.0}
