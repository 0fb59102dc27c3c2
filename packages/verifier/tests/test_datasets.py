"""Acceptance on real data: HumanEval-X C++ canonical solutions, and code_contests problems with
solutions written here (a right one is AC on every test, a subtly wrong one is WA)."""

# ruff: noqa: E501  (embedded C++ and Python programs keep their own line lengths)

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from rlx_core.clients.verifier import VerifySample
from rlx_verifier import Repositories, TestCase, Verifier, judge_sample
from rlx_verifier.upload import upload_dataset

from .conftest import DATA, load_jsonl

# These four need headers the problem's declaration does not include (data/README.md); 22 and
# 137 also take `boost::any`, a type the assert-style judge cannot pass between its two programs.
NEEDS_EXTRA_HEADERS = {"CPP/22", "CPP/38", "CPP/137", "CPP/162"}


WRONG_BODY = "\n    return {};\n}\n"  # the declared type's default value: a wrong answer


# every CPP_SUBSET-th problem by default (RLX_VERIFIER_FULL=1: all 164, minutes on 2 cores)
CPP_SUBSET = 1 if os.environ.get("RLX_VERIFIER_FULL") == "1" else 2


@pytest.mark.slow
@pytest.mark.timeout(900)  # 110 compiles (all: 220): minutes on 2 loaded cores
def test_humaneval_x_cpp(verifier: Verifier) -> None:
    problems = load_jsonl(DATA / "code" / "humaneval_cpp.jsonl.gz")
    assert len(problems) == 164
    problems = problems[::CPP_SUBSET]  # CPP/0, CPP/2, ...: three of the four below among them

    def run(p: dict, body: str) -> str:
        return verifier.run_program(
            "cpp", p["declaration"] + body, harness=p["test"], time_limit_s=5.0
        ).status

    canonical = verifier.map(lambda p: run(p, p["canonical_solution"]), problems)
    got = {p["task_id"]: s for p, s in zip(problems, canonical, strict=True)}
    assert {t for t, s in got.items() if s == "CE"} == NEEDS_EXTRA_HEADERS & got.keys()
    assert {t for t, s in got.items() if s != "CE"} == {t for t, s in got.items() if s == "AC"}, {
        t: s for t, s in got.items() if s not in "ACCE"
    }
    compiling = [p for p in problems if p["task_id"] not in NEEDS_EXTRA_HEADERS]
    wrong = verifier.map(lambda p: run(p, WRONG_BODY), compiling[::3])
    statuses = {p["task_id"]: s for p, s in zip(compiling[::3], wrong, strict=True)}
    # `return {};` is right for a handful of problems whose every test expects the default
    # (none in HumanEval-X); everything else must fail as WA (an assertion) or RE.
    bad = {t: s for t, s in statuses.items() if s not in ("WA", "RE")}
    assert not bad, bad


# HumanEval-X Go and Rust. Go tests use testify (Debian: golang-github-stretchr-testify-dev);
# Rust declarations `use` the rand, regex and md5 crates, which this machine does not have: those
# lines are dropped, and the problems that really use the crates are expected CE.
# Their `import` blocks do not match the canonical solutions (a package used but not imported, or
# imported and unused): CE with the official harness too.
GO_NEEDS_MORE = {"Go/17", "Go/20", "Go/27", "Go/59", "Go/65", "Go/75"}
# rand (32, 38, 50, 53), regex (91), md5 (162)
RUST_NEEDS_CRATES = {"Rust/32", "Rust/38", "Rust/50", "Rust/53", "Rust/91", "Rust/162"}
# Signatures with `Box<dyn Any>` / `&dyn Any` and a candidate-defined enum: the assert-style judge
# cannot pass them between its two programs, so they are CE naming the type.
RUST_UNSUPPORTED = {"Rust/22", "Rust/137"}
# Its declaration opens a helper (is_palindrome_10); the tested make_palindrome is defined by the
# canonical solution only, so a wrong body leaves it undefined: CE.
RUST_WRONG_IS_CE = {"Rust/10"}
# One symbol per package the Go prompts import, so a wrong body still uses every import.
GO_USES = {
    "math": "math.Abs", "strings": "strings.Split", "sort": "sort.Ints",
    "strconv": "strconv.Itoa", "fmt": "fmt.Sprint", "regexp": "regexp.MustCompile",
    "bytes": "bytes.Equal", "time": "time.Now", "crypto/md5": "md5.Sum",
}  # fmt: skip
# The full sets take minutes on 2 cores; by default every SUBSET-th problem
# (RLX_VERIFIER_FULL=1 runs them all).
SUBSET = 1 if os.environ.get("RLX_VERIFIER_FULL") == "1" else 6


def _go_wrong(p: dict) -> str:
    uses = "".join(f"var _ = {GO_USES[path]}\n" for path in re.findall(r'"([^"]+)"', p["import"]))
    return p["import"] + uses + p["declaration"] + '\n    panic("wrong")\n}\n'


def _rust_source(p: dict, body: str) -> str:
    return re.sub(r"^use (rand|regex|md5)\b.*$", "", p["declaration"], flags=re.M) + body


@pytest.mark.slow
@pytest.mark.skipif(
    not os.path.isdir("/usr/share/gocode/src/github.com/stretchr/testify"),
    reason="needs Go and testify (golang-go, golang-github-stretchr-testify-dev)",
)
def test_humaneval_x_go(verifier: Verifier) -> None:
    if "go" not in verifier.languages:
        pytest.skip("no Go toolchain")
    problems = load_jsonl(DATA / "code" / "humaneval_go.jsonl.gz")[::SUBSET]

    def run(p: dict, source: str) -> str:
        harness = p["test_setup"] + p["test"]
        return verifier.run_program("go", source, harness=harness, time_limit_s=5.0).status

    canonical = verifier.map(lambda p: run(p, p["prompt"] + p["canonical_solution"]), problems)
    got = {p["task_id"]: s for p, s in zip(problems, canonical, strict=True)}
    assert {t for t, s in got.items() if s != "AC"} == GO_NEEDS_MORE & set(got), got
    compiling = [p for p in problems if p["task_id"] not in GO_NEEDS_MORE]
    wrong = verifier.map(lambda p: run(p, _go_wrong(p)), compiling)
    bad = {p["task_id"]: s for p, s in zip(compiling, wrong, strict=True) if s not in ("WA", "RE")}
    assert not bad, bad


@pytest.mark.slow
@pytest.mark.timeout(900)  # 160+ compiles: minutes on 2 loaded cores
def test_humaneval_x_rust(verifier: Verifier) -> None:
    if "rust" not in verifier.languages:
        pytest.skip("no Rust toolchain")
    problems = load_jsonl(DATA / "code" / "humaneval_rust.jsonl.gz")[::SUBSET]
    problems += [p for p in load_jsonl(DATA / "code" / "humaneval_rust.jsonl.gz")
                 if p["task_id"] in RUST_NEEDS_CRATES | RUST_UNSUPPORTED and p not in problems]  # fmt: skip

    def run(p: dict, body: str) -> str:
        source = _rust_source(p, body)
        return verifier.run_program("rust", source, harness=p["test"], time_limit_s=5.0).status

    canonical = verifier.map(lambda p: run(p, p["canonical_solution"]), problems)
    got = {p["task_id"]: s for p, s in zip(problems, canonical, strict=True)}
    not_judged = RUST_NEEDS_CRATES | RUST_UNSUPPORTED
    assert {t for t, s in got.items() if s == "CE"} == not_judged, got
    assert all(s == "AC" for t, s in got.items() if t not in not_judged), got
    for p in problems:
        if p["task_id"] in RUST_UNSUPPORTED:
            r = verifier.run_program(
                "rust", _rust_source(p, p["canonical_solution"]), harness=p["test"]
            )
            assert "dyn Any" in r.compile_output and "not supported" in r.compile_output, r
    compiling = [p for p in problems if p["task_id"] not in not_judged]
    # a body that compiles for every return type and fails every test
    wrong = verifier.map(lambda p: run(p, '\n    panic!("wrong")\n}\n'), compiling)
    bad = {
        p["task_id"]: s
        for p, s in zip(compiling, wrong, strict=True)
        if s not in (("CE",) if p["task_id"] in RUST_WRONG_IS_CE else ("WA", "RE"))
    }
    assert not bad, bad


CONTESTS = DATA / "code" / "code_contests_sample.jsonl"


def _contest(index: int) -> list[TestCase]:
    rows = load_jsonl(CONTESTS)
    tests = rows[index]["test"]
    tests = json.loads(tests) if isinstance(tests, str) else tests
    return [TestCase(stdin=t["input"]["stdin"], answer=t["output"]["stdout"]) for t in tests]


DIGIT_JUMP = r"""
#include <bits/stdc++.h>
using namespace std;
int main() {
    string s; cin >> s; int n = s.size();
    vector<int> d(n, -1); vector<vector<int>> by(10); vector<bool> used(10, false);
    for (int i = 0; i < n; i++) by[s[i] - '0'].push_back(i);
    deque<int> q; q.push_back(0); d[0] = 0;
    while (!q.empty()) {
        int i = q.front(); q.pop_front();
        auto go = [&](int j) { if (j >= 0 && j < n && d[j] < 0) { d[j] = d[i] + 1; q.push_back(j); } };
        go(i - 1); go(i + 1);
        int c = s[i] - '0';
        if (!used[c]) { used[c] = true; for (int j : by[c]) go(j); }
    }
    cout << d[n - 1] << endl;
}
"""

TSHIRTS = """
from collections import Counter
n = int(input())
a = Counter(input().strip() for _ in range(n))
b = Counter(input().strip() for _ in range(n))
print(sum((b - a).values()))
"""

SMALLEST = """
n = input().strip(); m = input().strip()
digits = sorted(n)
if digits[0] == "0" and len(digits) > 1:
    k = next(i for i, d in enumerate(digits) if d != "0")
    digits[0], digits[k] = digits[k], digits[0]
print("OK" if "".join(digits) == m else "WRONG_ANSWER")
"""

MODS = """
import sys
data = sys.stdin.buffer.read().split(); pos = 0
def nxt():
    global pos
    pos += 1
    return int(data[pos - 1])
out = []
for _ in range(nxt()):
    a, b, q = nxt(), nxt(), nxt()
    p = a * b
    pref = [0] * (p + 1)
    for x in range(p):
        pref[x + 1] = pref[x] + ((x % a) % b != (x % b) % a)
    f = lambda r: (r // p) * pref[p] + pref[r % p + 1]
    res = []
    for _ in range(q):
        l, r = nxt(), nxt()
        res.append(f(r) - f(l - 1))
    out.append(" ".join(map(str, res)))
print("\\n".join(out))
"""

COMPRESSION = """
import sys
from collections import Counter
data = sys.stdin.buffer.read().split()
n, disk = int(data[0]), int(data[1])
counts = sorted(Counter(data[2:2 + n]).items(), key=lambda kv: int(kv[0]))
bits = disk * 8 // n
K = len(counts) if bits >= 30 else min(len(counts), 1 << bits)
c = [v for _, v in counts]
window = sum(c[:K]); best = window
for i in range(K, len(c)):
    window += c[i] - c[i - K]
    best = max(best, window)
print(n - best)
"""

CASES = [
    (
        "digit jump",
        2,
        "cpp",
        DIGIT_JUMP,
        DIGIT_JUMP.replace("for (int j : by[c]) go(j);", "/* no teleports */"),
    ),
    (
        "t-shirts",
        3,
        "python",
        TSHIRTS,
        TSHIRTS.replace(
            "sum((b - a).values())",
            "sum(x != y for x, y in zip(sorted(a.elements()), sorted(b.elements())))",
        ),
    ),
    ("smallest", 17, "python", SMALLEST, SMALLEST.replace('digits[0] == "0"', 'digits[0] == "x"')),
    ("mods", 19, "python", MODS, MODS.replace("pref[r % p + 1]", "pref[r % p]")),
    ("compression", 12, "python", COMPRESSION, COMPRESSION.replace("bits >= 30", "bits >= 3")),
]


@pytest.mark.slow
def test_code_contests_right_is_ac_subtly_wrong_is_wa(verifier: Verifier, tmp_path: Path) -> None:
    """Through the Oubliette flow: the whole sample uploaded to a test repository, then each
    solution judged by links (phase 1 outputs, phase 2 verdicts)."""
    repos = Repositories()
    try:
        _, manifest = upload_dataset(
            DATA / "code" / "code_contests_sample.jsonl", str(tmp_path / "repo"), verifier, repos
        )
        problems = manifest["problems"]
        assert len(problems) == 20

        def run(case: tuple[str, int, str, str, str], right: bool) -> str:
            name, index, lang, good, bad = case
            assert problems[index]["id"] == str(load_jsonl(CONTESTS)[index]["id"])
            assert len(problems[index]["tests"]) == len(_contest(index))
            sample = VerifySample.linked(
                name, lang, good if right else bad, problems[index], time_limit_s=4.0, memory_mb=512
            )
            return judge_sample(verifier, repos, sample).status

        jobs = [(c, right) for c in CASES for right in (True, False)]
        got = verifier.map(lambda job: run(*job), jobs)
    finally:
        repos.close()
    assert {(c[0], right): s for (c, right), s in zip(jobs, got, strict=True)} == {
        (c[0], right): ("AC" if right else "WA") for c, right in jobs
    }
