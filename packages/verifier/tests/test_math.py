"""Math answers: extraction rules, math-verify equivalence, and hard kills on hostile inputs."""

from __future__ import annotations

import json

import pytest

from rlx_verifier import Verifier, extract_answer

from .conftest import DATA


@pytest.mark.parametrize(
    ("text", "extractor", "expected"),
    [
        ("so we get \\boxed{\\frac{1}{2}} at last", "auto", "\\frac{1}{2}"),
        ("\\boxed{1} then \\boxed{x^{2}+1}", "auto", "x^{2}+1"),
        ("Natalia sold 48+24 = 72 clips.\n#### 72", "auto", "72"),
        ("#### 1,234", "hash", "1234"),
        ("Thus the answer is 17.", "auto", "17"),
        ("The answer is: $3\\sqrt{2}$", "answer_is", "3\\sqrt{2}"),
        ("I think 3 apples and then 42", "auto", "42"),
        ("no digits here", "auto", None),
        ("\\boxed{5} but the answer is 6", "answer_is", "6"),
    ],
)
def test_extract_answer(text: str, extractor: str, expected: str | None) -> None:
    assert extract_answer(text, extractor) == expected


def test_math_verdicts_and_hostile_inputs(verifier: Verifier) -> None:
    cases = [
        ("so \\boxed{\\frac{1}{2}}", "0.5", "AC"),
        ("the answer is $\\frac{2}{4}$.", "\\frac{1}{2}", "AC"),
        ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", "AC"),
        ("\\boxed{3}", "4", "WA"),
        ("nothing", "4", "WA"),
        ("\\boxed{9^{9^{9^9}}}", "1", "WA"),  # sympy would hang: the worker is killed
        ("\\boxed{10^{10^{10^{10}}}}", "10^{10^{10^{10}}}+1", "WA"),
    ]
    got = verifier.map(lambda c: verifier.math(c[0], c[1]).status, cases)
    assert got == [c[2] for c in cases]
    # The pool survives the kills and still answers.
    assert verifier.math("\\boxed{2}", "2").status == "AC"


def test_gsm8k_and_math500_gold_answers_are_accepted(verifier: Verifier) -> None:
    with open(DATA / "math" / "gsm8k_test.jsonl") as f:
        gsm = [json.loads(line) for _, line in zip(range(10), f, strict=False)]
    with open(DATA / "math" / "math500_test.jsonl") as f:
        m500 = [json.loads(line) for _, line in zip(range(10), f, strict=False)]
    jobs = [(row["answer"], row["answer"].split("####")[-1]) for row in gsm]
    jobs += [(row["solution"], row["answer"]) for row in m500]
    got = verifier.map(lambda j: verifier.math(j[0], j[1]).status, jobs)
    assert got == ["AC"] * len(jobs)
    wrong = verifier.math("So the answer is 1000001.", gsm[0]["answer"])
    assert wrong.status == "WA"


INTEGER_PAIRS = [("72", "72"), ("72", "072"), ("-5", "-5"), ("5", "-5"), ("+3", "3"), ("10", "1")]
INTEGER_PAIRS += [("123456789012345678901234567890", "123456789012345678901234567890")]


@pytest.mark.parametrize(("gold", "answer"), INTEGER_PAIRS)
def test_integer_fast_path_agrees_with_math_verify(gold: str, answer: str) -> None:
    from rlx_verifier.math_answers import _compare, integers_equal

    assert integers_equal(gold, answer) == _compare(gold, answer)


def test_integer_fast_path_leaves_everything_else_to_math_verify() -> None:
    from rlx_verifier.math_answers import integers_equal

    for gold, answer in [("0.5", "1/2"), ("72", "72.0"), ("x", "x"), ("1" * 101, "1" * 101)]:
        assert integers_equal(gold, answer) is None


def test_a_batch_judges_plain_integers_inline_and_the_rest_on_the_pool() -> None:
    """A service batch mixing plain-integer answers (judged in the request's thread), answers
    math-verify must parse and responses without an answer: results in order, the same as each
    sample judged alone through the math pool."""
    from rlx_core.clients.verifier import VerifySample
    from rlx_verifier.config import VerifierConfig
    from rlx_verifier.runner import judge_sample, quick_result
    from rlx_verifier.service import VerifierService

    cases = [
        ("12+30=042", "42"),  # last number, leading zero: AC inline
        ("the answer is 41.", "42"),  # WA inline
        ("\\boxed{\\frac{1}{2}}", "0.5"),  # math-verify: AC
        ("no digits", "7"),  # no answer: WA inline
        ("so $x=2\\sqrt{2}$, the answer is $\\sqrt{8}$.", "2\\sqrt{2}"),  # math-verify: AC
        ("#### 1,000", "1000"),  # AC inline
    ]
    samples = [VerifySample.math(f"s{i}", r, g) for i, (r, g) in enumerate(cases)]
    inline = [quick_result(s) is not None for s in samples]
    assert inline == [True, True, False, True, False, True]
    service = VerifierService(VerifierConfig())
    try:
        got = service.verify(samples)
        alone = [judge_sample(service.verifier, service.repos, s) for s in samples]
        assert [r.sample_id for r in got] == [s.sample_id for s in samples]
        assert [(r.status, r.score) for r in got] == [(r.status, r.score) for r in alone]
        assert [r.status for r in got] == ["AC", "WA", "AC", "WA", "AC", "AC"]
        status = service.status()
        assert (status.queued, status.running, status.judged) == (0, 0, len(cases))
    finally:
        service.close()


def test_warm_math_starts_the_workers_before_the_first_answer() -> None:
    """The server warms its math workers at start (math-verify's import takes seconds): the
    processes run before any answer needs one, and the first such answer uses them."""
    from rlx_verifier.config import JudgeConfig

    v = Verifier(JudgeConfig(math_workers=1))
    try:
        assert v._math is None  # a bare Verifier starts them lazily
        v.warm_math()
        pool = v._math
        assert pool is not None
        (worker,) = list(pool._idle.queue)
        assert worker.proc.poll() is None  # running, importing math-verify
        v.warm_math()
        assert v._math is pool  # once
        assert v.math("so \\boxed{\\frac{1}{2}}", "0.5").status == "AC"
    finally:
        v.close()
