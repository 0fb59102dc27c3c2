"""Verifier.judge and run_program through the public API, with the real sandbox and compilers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlx_core.clients.verifier import VerifySample
from rlx_core.errors import InvalidArgument, Unimplemented
from rlx_verifier import TestCase, Verifier
from rlx_verifier.checkers import compare
from rlx_verifier.runner import quick_result

from .conftest import judge_one

ADD_CPP = """#include <cstdio>
int main() { long long a, b; if (scanf("%lld %lld", &a, &b) != 2) return 1;
             printf("%lld\\n", a + b); }"""
ADD_TESTS = [TestCase(stdin="1 2\n", answer="3\n"), TestCase(stdin="-5 7", answer="2")]


@pytest.mark.parametrize(
    ("source", "status"),
    [
        (ADD_CPP, "AC"),
        (ADD_CPP.replace("a + b", "a + b + (a < 0)"), "WA"),
        (ADD_CPP.replace("a + b);", "a + b)"), "CE"),
        (ADD_CPP.replace('printf("%lld\\n", a + b);', "int *p = 0; *p = 1;"), "RE"),
        (ADD_CPP.replace("printf", "for (;;) a++; printf"), "TLE"),
    ],
)
def test_cpp_stdio_verdicts(verifier: Verifier, source: str, status: str) -> None:
    r = verifier.judge("cpp", source, tests=ADD_TESTS, time_limit_s=1.0)
    assert r.status == status, (r.message, r.compile_output, r.tests)
    assert r.score == (1.0 if status == "AC" else 0.0)
    if status == "CE":
        assert "error" in r.compile_output and r.tests == ()
    if status == "RE":
        assert r.tests[0].signal == 11
    if status == "WA":  # the first test passes, the second fails
        assert [t.status for t in r.tests] == ["AC", "WA"]


def test_python_stdio_and_per_test_details(verifier: Verifier) -> None:
    r = verifier.judge("python", "a, b = map(int, input().split())\nprint(a + b)", ADD_TESTS)
    assert r.status == "AC" and len(r.tests) == 2
    assert all(t.exit_code == 0 and t.status == "AC" for t in r.tests)
    bad = verifier.judge(
        "python", "import sys\nsys.stderr.write('boom')\nraise SystemExit(3)", ADD_TESTS
    )
    assert bad.status == "RE" and bad.tests[0].exit_code == 3 and bad.tests[0].stderr == "boom"


def test_memory_limit_is_mle(verifier: Verifier) -> None:
    py = verifier.judge(
        "python", "x = bytearray(600 << 20)\nprint(3)", ADD_TESTS[:1], memory_mb=128
    )
    assert py.status == "MLE"
    cpp = verifier.judge(
        "cpp",
        "#include <vector>\nint main(){ std::vector<char> v(700u << 20, 1); return v[5]; }",
        ADD_TESTS[:1],
        memory_mb=128,
    )
    assert cpp.status == "MLE"


def test_partial_credit_is_a_fraction_of_tests() -> None:
    from rlx_verifier.config import JudgeConfig

    with Verifier(JudgeConfig(workers=1, partial_credit=True)) as v:
        r = v.judge(
            "python", "a, b = map(int, input().split())\nprint(a + b if a > 0 else 0)", ADD_TESTS
        )
    assert r.status == "WA" and r.score == 0.5 and len(r.tests) == 2


def test_other_languages_where_toolchains_exist(verifier: Verifier) -> None:
    sources = {
        "rust": "use std::io::*;\nfn main(){ let mut s=String::new(); stdin().read_to_string("
        "&mut s).unwrap(); let v:Vec<i64>=s.split_whitespace().map(|x|x.parse()"
        '.unwrap()).collect(); println!("{}", v[0]+v[1]); }',
        "go": 'package main\nimport "fmt"\nfunc main(){ var a, b int; fmt.Scan(&a, &b); '
        "fmt.Println(a + b) }",
        "java": "import java.util.*;\npublic class Main { public static void main(String[] x)"
        "{ Scanner s = new Scanner(System.in); System.out.println(s.nextLong() + "
        "s.nextLong()); } }",
    }
    present = [lang for lang in sources if lang in verifier.languages]
    results = verifier.map(lambda lang: verifier.judge(lang, sources[lang], ADD_TESTS), present)
    assert {lang: r.status for lang, r in zip(present, results, strict=True)} == {
        lang: "AC" for lang in present
    }
    broken = verifier.map(lambda lang: verifier.judge(lang, sources[lang][:-3], ADD_TESTS), present)
    assert [r.status for r in broken] == ["CE"] * len(present)


def test_missing_or_unknown_language_is_an_error_not_ce(verifier: Verifier) -> None:
    with pytest.raises(InvalidArgument, match="unknown language 'cobol'"):
        verifier.judge("cobol", "", ADD_TESTS)
    saved = verifier.languages.pop("java", None)
    try:
        with pytest.raises(Unimplemented, match="no toolchain"):
            verifier.judge("java", "class Main {}", ADD_TESTS)
    finally:
        if saved is not None:
            verifier.languages["java"] = saved


@pytest.mark.parametrize(
    ("output", "answer", "mode", "status"),
    [
        (b"1 2\n3\n", b"1 2\n3", "exact", "AC"),
        (b"1 2\r\n3  \n\n", b"1 2\n3\n", "exact", "AC"),
        (b"1\n2 3\n", b"1 2\n3\n", "exact", "PE"),
        (b"1\n2 3\n", b"1 2\n3\n", "tokens", "AC"),
        (b"1 2 4", b"1 2 3", "tokens", "WA"),
        (b"1 2", b"1 2 3", "tokens", "WA"),
        (b"0.3333334 2", b"0.333333 2", "float", "AC"),
        (b"0.3334 2", b"0.333333 2", "float", "WA"),
        (b"1e9", b"1000000001", "float", "AC"),  # relative 1e-6
        (b"nan", b"nan", "float", "AC"),  # identical tokens
        (b"inf", b"1e308", "float", "WA"),
    ],
)
def test_comparators(output: bytes, answer: bytes, mode: str, status: str) -> None:
    assert compare(output, answer, mode=mode).status == status


def test_assert_style_python(verifier: Verifier) -> None:
    harness = "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n"
    ok = verifier.run_program("python", "def add(a, b):\n    return a + b\n", harness=harness)
    assert ok.status == "AC" and ok.score == 1.0
    wrong = verifier.run_program("python", "def add(a, b):\n    return a - b\n", harness=harness)
    assert wrong.status == "WA" and "AssertionError" in wrong.tests[0].stderr
    plain = verifier.run_program("python", "import sys\nassert 1 + 1 == 2\nsys.exit(0)")
    assert plain.status == "AC"


def test_results_are_cached_by_code_and_tests(verifier: Verifier) -> None:
    src = "print(int(input()) * 2)"
    first = verifier.judge("python", src, [TestCase(stdin="21", answer="42")])
    again = verifier.judge("python", src, [TestCase(stdin="21", answer="42")])
    other = verifier.judge("python", src, [TestCase(stdin="21", answer="43")])
    assert first.status == "AC" and other.status == "WA"
    # the second is the cached verdict: the same verdict, marked cached, at no cost
    assert again.cached and not first.cached and first.run_s > 0
    assert replace(first, compile_s=0.0, run_s=0.0, check_s=0.0, cached=True) == again


# --- partial credit per sample, and what a verdict cost ------------------------------------------

DOUBLE_TESTS = [("1\n", "2\n"), ("2\n", "4\n"), ("3\n", "6\n")]


def test_a_sample_asking_for_partial_credit_scores_the_fraction_passed(verifier: Verifier) -> None:
    # passes the first and third of three tests (the session verifier has no partial credit)
    code = "n = int(input())\nprint(5 if n == 2 else 2 * n)  # partial, inline"
    plain = judge_one(verifier, VerifySample.stdio("p", "python", code, DOUBLE_TESTS))
    assert (plain.status, plain.score) == ("WA", 0.0)
    assert [t.status for t in plain.tests] == ["AC", "WA"]  # stopped at the first failure
    partial = judge_one(
        verifier, VerifySample.stdio("q", "python", code, DOUBLE_TESTS, partial_credit=True)
    )
    # the cache key holds partial_credit: this verdict was not the one above
    assert not partial.cached
    assert (partial.status, partial.score) == ("WA", 2 / 3)
    assert [t.status for t in partial.tests] == ["AC", "WA", "AC"]
    again = judge_one(
        verifier, VerifySample.stdio("r", "python", code, DOUBLE_TESTS, partial_credit=True)
    )
    assert again.cached and (again.status, again.score, again.tests) == (
        "WA",
        2 / 3,
        partial.tests,
    )


def test_partial_credit_runs_every_test_after_a_first_failure(verifier: Verifier) -> None:
    code = "n = int(input())\nprint(0 if n == 1 else 2 * n)  # fails the first test"
    plain = judge_one(verifier, VerifySample.stdio("p", "python", code, DOUBLE_TESTS))
    assert (plain.score, [t.status for t in plain.tests]) == (0.0, ["WA"])
    partial = judge_one(
        verifier, VerifySample.stdio("q", "python", code, DOUBLE_TESTS, partial_credit=True)
    )
    assert (partial.status, partial.score) == ("WA", 2 / 3)
    assert [t.status for t in partial.tests] == ["WA", "AC", "AC"]
    # AC is 1.0 with or without partial credit
    ok = judge_one(
        verifier,
        VerifySample.stdio(
            "ok", "python", "print(2 * int(input()))  # all", DOUBLE_TESTS, partial_credit=True
        ),
    )
    assert (ok.status, ok.score, len(ok.tests)) == ("AC", 1.0, 3)


def test_partial_credit_does_not_apply_to_assert_style(verifier: Verifier) -> None:
    harness = "assert f(1) == 2\nassert f(2) == 3\nassert f(3) == 5"
    r = judge_one(
        verifier,
        VerifySample.asserts(
            "a", "python", "def f(x):\n    return x + 1", harness, partial_credit=True
        ),
    )
    assert (r.status, r.score, len(r.tests)) == ("WA", 0.0, 1)


def test_cost_of_a_fresh_verdict_and_none_for_a_cached_one(verifier: Verifier) -> None:
    code = ADD_CPP + "\n// cost test\n"
    sample = VerifySample.stdio("c", "cpp", code, [(t.stdin, t.answer) for t in ADD_TESTS])
    fresh = judge_one(verifier, sample)
    assert fresh.status == "AC" and not fresh.cached
    assert fresh.compile_s > 0 and fresh.run_s > 0 and fresh.check_s > 0
    cached = judge_one(verifier, sample)
    assert cached.status == "AC" and cached.cached
    assert (cached.compile_s, cached.run_s, cached.check_s) == (0.0, 0.0, 0.0)
    # a compile error costs only the compile
    broken = judge_one(
        verifier, VerifySample.stdio("ce", "cpp", code.replace("a + b);", "a + b)"), [("1 2", "3")])
    )
    assert broken.status == "CE" and broken.compile_s > 0
    assert (broken.run_s, broken.check_s) == (0.0, 0.0)
    # assert style: one build and one run (the marker check is not timed)
    a = judge_one(
        verifier,
        VerifySample.asserts("a", "python", "def f(x):\n    return x  # cost", "assert f(1) == 1"),
    )
    assert a.status == "AC" and a.run_s > 0 and not a.cached


def test_a_math_verdict_is_timed_as_a_check(verifier: Verifier) -> None:
    quick = quick_result(VerifySample.math("m", "The answer is 12.", "12"))
    assert quick is not None and quick.status == "AC" and quick.check_s > 0
    full = judge_one(verifier, VerifySample.math("f", "so \\boxed{\\frac{1}{2}}", "0.5"))
    assert full.status == "AC" and full.check_s > 0 and not full.cached
    assert (full.compile_s, full.run_s) == (0.0, 0.0)
