"""One Verifier (real bubblewrap, real compilers) shared by the verifier tests."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlx_core.clients.verifier import SampleResult, VerifySample
from rlx_verifier import Repositories, Verifier, judge_sample
from rlx_verifier.config import JudgeConfig

DATA = Path(__file__).resolve().parents[3] / "testdata"


def judge_one(verifier: Verifier, sample: VerifySample) -> SampleResult:
    """One sample through `judge_sample`, the path the verifier service and the controller take,
    with a repository set of its own."""
    repos = Repositories()
    try:
        return judge_sample(verifier, repos, sample)
    finally:
        repos.close()


def load_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session")
def verifier() -> Iterator[Verifier]:
    v = Verifier(JudgeConfig(workers=2, math_workers=1, math_timeout_s=3.0))
    yield v
    v.close()


@pytest.fixture(params=["local", "s3", "gcs"])
def repo_uri(request: pytest.FixtureRequest, new_root: Callable[[str, str], str]) -> str:
    """A fresh, empty test-repository root on each storage backend (rlx_testing.plugin)."""
    return new_root(request.param, "tests")


# Task used by the service and repository tests: print two non-negative integers summing to N
# (many right answers, so it needs a checker), and a checker that FAILs (exit 3) on every call.
SUM_CHECKER_PY = """import sys
n = int(open(sys.argv[1]).read())
try:
    a, b = map(int, open(sys.argv[2]).read().split())
except ValueError:
    sys.stderr.write("expected two integers"); sys.exit(2)
if a < 0 or b < 0 or a + b != n:
    sys.stderr.write(f"{a} + {b} != {n}"); sys.exit(1)
"""
FAILING_CHECKER_PY = "import sys\nsys.stderr.write('checker broke: bad test data')\nsys.exit(3)\n"
SUM_PROGRAMS = {
    "AC": "n = int(input())\nprint(1, n - 1)",
    "WA": "n = int(input())\nprint(1, n)",
    "PE": "n = int(input())\nprint('one', n - 1)",
}
