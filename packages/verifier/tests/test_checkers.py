"""Special checkers following the testlib protocol, written here in C++ (no testlib.h) and Python,
run by `judge`: OK, WA and PE come through; FAIL and crashing checkers are INFRA, never WA."""

# ruff: noqa: E501  (embedded C++ and Python programs keep their own line lengths)

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rlx_verifier import TestCase, Verifier

from .conftest import SUM_CHECKER_PY

# Task: print two non-negative integers whose sum is N (many right answers: needs a checker).
CPP_CHECKER = r"""
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
    if (argc != 4) { fprintf(stderr, "usage"); return 3; }
    FILE* in = fopen(argv[1], "r"); FILE* out = fopen(argv[2], "r");
    if (!in || !out) { fprintf(stderr, "cannot open files"); return 3; }
    long long n, a, b;
    if (fscanf(in, "%lld", &n) != 1) { fprintf(stderr, "bad input"); return 3; }
    if (fscanf(out, "%lld %lld", &a, &b) != 2) { fprintf(stderr, "expected two integers"); return 2; }
    if (a < 0 || b < 0 || a + b != n) { fprintf(stderr, "%lld + %lld != %lld", a, b, n); return 1; }
    fprintf(stderr, "ok"); return 0;
}
"""

PY_CHECKER = "#!/usr/bin/python3\n" + SUM_CHECKER_PY + "sys.exit(0)\n"  # as a script

TESTS = [TestCase(stdin="10\n", answer="5 5\n"), TestCase(stdin="7\n", answer="3 4\n")]
PROGRAMS = {
    "AC": "n = int(input())\nprint(1, n - 1)",
    "WA": "n = int(input())\nprint(1, n)",
    "PE": "n = int(input())\nprint('one', n - 1)",
}


@pytest.fixture(scope="module")
def checkers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("checkers")
    os.chmod(d, 0o755)
    cpp = d / "check_cpp"
    subprocess.run(
        ["g++", "-O2", "-o", str(cpp), "-x", "c++", "-"], input=CPP_CHECKER.encode(), check=True
    )
    py = d / "check.py"
    py.write_text(PY_CHECKER)
    for path in (cpp, py):
        path.chmod(0o755)
    fail = d / "fail.py"
    fail.write_text(
        "#!/usr/bin/python3\nimport sys\nsys.stderr.write('broken data')\nsys.exit(3)\n"
    )
    crash = d / "crash.py"
    crash.write_text(
        "#!/usr/bin/python3\nimport os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    for path in (fail, crash):
        path.chmod(0o755)
    return {"cpp": str(cpp), "python": str(py), "fail": str(fail), "crash": str(crash)}


@pytest.mark.parametrize("kind", ["cpp", "python"])
@pytest.mark.parametrize("expected", ["AC", "WA", "PE"])
def test_checker_verdicts(
    verifier: Verifier, checkers: dict[str, str], kind: str, expected: str
) -> None:
    r = verifier.judge("python", PROGRAMS[expected], TESTS, checker=checkers[kind])
    assert r.status == expected, r
    if expected == "WA":
        assert r.tests[0].message == "1 + 10 != 10"
    if expected == "AC":  # the answer file says "5 5"; the checker accepts "1 9"
        assert [t.status for t in r.tests] == ["AC", "AC"]


@pytest.mark.parametrize("kind", ["fail", "crash"])
def test_failing_checker_is_infra_after_retries(
    verifier: Verifier, checkers: dict[str, str], kind: str
) -> None:
    r = verifier.judge("python", PROGRAMS["AC"], TESTS, checker=checkers[kind])
    assert r.status == "INFRA" and r.score is None
    assert r.attempts == verifier.config.infra_retries + 1
    assert ("broken data" if kind == "fail" else "signal 11") in r.message


def test_checker_must_be_executable(verifier: Verifier, tmp_path: Path) -> None:
    from rlx_core.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="not an executable"):
        verifier.judge("python", PROGRAMS["AC"], TESTS, checker=str(tmp_path / "nope"))
