"""The Oubliette flow on every storage backend (a directory, moto's S3 server, the GCS emulator):
`rlx verifier upload` stores tests and compiled checkers by content and writes a manifest of
links; phase 1 stores outputs under a transient prefix and returns their links; phase 2 returns
only verdicts; outputs expire after their TTL; verdicts are cached by (code hash, test hash)."""

# ruff: noqa: E501  (embedded C++ keeps its own line lengths)

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_core.clients.verifier import TestLink, VerifySample
from rlx_core.storage import open_storage
from rlx_verifier import Repositories, Verifier, judge_sample
from rlx_verifier.config import RepositoryConfig
from rlx_verifier.repository import split_link
from rlx_verifier.runner import check_outputs, run_outputs

from .conftest import SUM_PROGRAMS

CPP_SUM_CHECKER = r"""
#include <cstdio>
int main(int argc, char** argv) {
    if (argc != 4) return 3;
    FILE* in = fopen(argv[1], "r"); FILE* out = fopen(argv[2], "r");
    long long n, a, b;
    if (!in || !out || fscanf(in, "%lld", &n) != 1) { fprintf(stderr, "bad input"); return 3; }
    if (fscanf(out, "%lld %lld", &a, &b) != 2) { fprintf(stderr, "expected two integers"); return 2; }
    if (a < 0 || b < 0 || a + b != n) { fprintf(stderr, "%lld + %lld != %lld", a, b, n); return 1; }
    return 0;
}
"""

ROWS = [
    {
        "id": "sum",
        "tests": [{"stdin": "10\n", "answer": "5 5\n"}, {"stdin": "7\n", "answer": "3 4\n"}],
        "checker": {"language": "cpp", "source": CPP_SUM_CHECKER},
    },
    {
        "id": "sum-again",  # the same checker: compiled and stored once
        "tests": [{"stdin": "10\n", "answer": "5 5\n"}],
        "checker": {"language": "cpp", "source": CPP_SUM_CHECKER},
    },
    {
        "id": "double",
        "tests": [{"stdin": "2\n", "answer": "4\n"}, {"stdin": "5\n", "answer": "10\n"}],
    },
]


@pytest.fixture
def repos() -> Iterator[Repositories]:
    r = Repositories(RepositoryConfig(transient_ttl_s=60.0))
    yield r
    r.close()


def _upload(tmp_path: Path, repo_uri: str, rows: list[dict]) -> tuple[str, dict]:
    dataset = tmp_path / "tiny.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(app, ["verifier", "upload", str(dataset), repo_uri, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    root, key = summary["manifest"].rsplit("/manifests/", 1)
    manifest = json.loads(open_storage(root).get(f"manifests/{key}"))
    return summary, manifest


def test_upload_then_two_phases_on_each_backend(
    verifier: Verifier, repos: Repositories, repo_uri: str, tmp_path: Path
) -> None:
    summary, manifest = _upload(tmp_path, repo_uri, ROWS)
    assert (summary["problems"], summary["tests"], summary["checkers"]) == (3, 5, 1)
    problems = {p["id"]: p for p in manifest["problems"]}
    sum_tests = problems["sum"]["tests"]
    # content addressing: the same input/answer/checker is one object
    assert problems["sum-again"]["tests"][0] == sum_tests[0]
    assert problems["sum-again"]["checker"] == problems["sum"]["checker"]
    store = open_storage(repo_uri)
    blobs = store.list("blobs/")
    assert len(blobs) == len({"10\n", "5 5\n", "7\n", "3 4\n", "2\n", "4\n", "5\n"}) + 1
    checker_key = split_link(problems["sum"]["checker"])[1]
    assert store.get(checker_key)[:4] == b"\x7fELF"  # compiled once, the binary stored

    # phase 1: outputs stored under a transient prefix, links returned
    phase = run_outputs(
        verifier, repos, "python", SUM_PROGRAMS["WA"], [t["input"] for t in sum_tests]
    )
    assert phase.compile_error is None and [r.failed for r in phase.runs] == [None, None]
    outputs = [r.output for r in phase.runs]
    assert all("/transient/" in link for link in outputs)
    assert [repos.read(link) for link in outputs] == [b"1 10\n", b"1 7\n"]
    # phase 2: only verdicts
    links = [TestLink(t["input"], t["answer"]) for t in sum_tests]
    verdict = check_outputs(verifier, repos, phase, links, checker=problems["sum"]["checker"])
    assert verdict.status == "WA" and verdict.tests[0].message == "1 + 10 != 10"
    # both at once, for the three verdicts a checker gives
    for expected, code in SUM_PROGRAMS.items():
        r = judge_sample(verifier, repos, VerifySample.linked("s", "python", code, problems["sum"]))
        assert (r.status, r.score) == (expected, 1.0 if expected == "AC" else 0.0)
    r = judge_sample(
        verifier,
        repos,
        VerifySample.linked(
            "d",
            "cpp",
            '#include <cstdio>\nint main(){int n; scanf("%d",&n); printf("%d\\n", 2*n);}',
            problems["double"],
        ),
    )
    assert r.status == "AC" and len(r.tests) == 2

    # outputs expire: nothing is due now; everything is a day later
    # (on the second and third backend the judge_sample verdicts come from the cache: the same
    # content has the same links' digests, so only the explicit phase 1 above ran)
    runs = {k.split("/")[1] for k in store.list("transient/")}
    assert len(runs) >= 1
    assert repos.clean(repo_uri) == 0
    import time

    assert repos.clean(repo_uri, now=time.time() + 86400) == len(runs)
    assert store.list("transient/") == []


def test_verdicts_cached_by_code_and_test_hash(
    verifier: Verifier, repos: Repositories, tmp_path: Path
) -> None:
    repo = str(tmp_path / "repo")
    _, manifest = _upload(tmp_path, repo, ROWS[2:])
    problem = manifest["problems"][0]
    code = "print(2 * int(input()))"
    first = judge_sample(verifier, repos, VerifySample.linked("a", "python", code, problem))
    runs = open_storage(repo).list("transient/")
    again = judge_sample(verifier, repos, VerifySample.linked("b", "python", code, problem))
    assert (first.status, again.status) == ("AC", "AC")
    assert open_storage(repo).list("transient/") == runs  # nothing ran the second time
    other = judge_sample(verifier, repos, VerifySample.linked("c", "python", code + " ", problem))
    assert other.status == "AC" and open_storage(repo).list("transient/") != runs


def test_corrupt_blob_is_infra_and_missing_blob_is_an_error(
    verifier: Verifier, tmp_path: Path
) -> None:
    repo = str(tmp_path / "repo")
    _, manifest = _upload(tmp_path, repo, ROWS[2:])
    problem = manifest["problems"][0]
    key = split_link(problem["tests"][0]["input"])[1]
    open_storage(repo).put(key, b"3\n")  # someone overwrote the data behind a content address
    with _Fresh() as repos:
        r = judge_sample(verifier, repos, VerifySample.linked("x", "python", "print(4)", problem))
        assert r.status == "INFRA" and r.score is None and "does not match its digest" in r.error
        open_storage(repo).delete(key)
        gone = judge_sample(
            verifier, repos, VerifySample.linked("y", "python", "print(5)", problem)
        )
        assert gone.status == "ERROR" and gone.score is None and key in gone.error


class _Fresh:
    def __enter__(self) -> Repositories:
        self.repos = Repositories()
        return self.repos

    def __exit__(self, *exc: object) -> None:
        self.repos.close()


def test_upload_names_the_bad_line(tmp_path: Path) -> None:
    dataset = tmp_path / "bad.jsonl"
    dataset.write_text(json.dumps(ROWS[2]) + "\n" + '{"id": 9, "tests": []}\n')
    result = CliRunner().invoke(app, ["verifier", "upload", str(dataset), str(tmp_path / "r")])
    assert result.exit_code == 1
    assert f"{dataset}:2: the test list is empty" in result.output
    assert not os.path.exists(tmp_path / "r" / "manifests")


TRIPLE = {
    "id": "double3",
    "tests": [
        {"stdin": "1\n", "answer": "2\n"},
        {"stdin": "2\n", "answer": "4\n"},
        {"stdin": "3\n", "answer": "6\n"},
    ],
}


def test_partial_credit_with_linked_tests(
    verifier: Verifier, repos: Repositories, tmp_path: Path
) -> None:
    _, manifest = _upload(tmp_path, str(tmp_path / "repo"), [TRIPLE])
    problem = manifest["problems"][0]
    # passes the first and third of three tests
    code = "n = int(input())\nprint(5 if n == 2 else 2 * n)  # partial, linked"
    plain = judge_sample(verifier, repos, VerifySample.linked("p", "python", code, problem))
    assert (plain.status, plain.score, [t.status for t in plain.tests]) == ("WA", 0.0, ["AC", "WA"])
    partial = judge_sample(
        verifier, repos, VerifySample.linked("q", "python", code, problem, partial_credit=True)
    )
    assert not partial.cached  # partial_credit is part of the cache key
    assert (partial.status, partial.score) == ("WA", 2 / 3)
    assert [t.status for t in partial.tests] == ["AC", "WA", "AC"]
    # a program that fails the first test still runs all three; a crash is a failed test
    first = "n = int(input())\nassert n != 1\nprint(2 * n)"
    r = judge_sample(
        verifier, repos, VerifySample.linked("f", "python", first, problem, partial_credit=True)
    )
    assert (r.status, r.score, [t.status for t in r.tests]) == ("RE", 2 / 3, ["RE", "AC", "AC"])
    stopped = judge_sample(verifier, repos, VerifySample.linked("g", "python", first, problem))
    assert (stopped.score, [t.status for t in stopped.tests]) == (0.0, ["RE"])


def test_cost_of_a_linked_verdict_with_a_checker(
    verifier: Verifier, repos: Repositories, tmp_path: Path
) -> None:
    _, manifest = _upload(tmp_path, str(tmp_path / "repo"), ROWS[:1])
    problem = manifest["problems"][0]
    code = SUM_PROGRAMS["AC"] + "  # cost, linked"
    fresh = judge_sample(verifier, repos, VerifySample.linked("a", "python", code, problem))
    assert fresh.status == "AC" and not fresh.cached
    assert fresh.run_s > 0 and fresh.check_s > 0  # the checker ran on both tests
    again = judge_sample(verifier, repos, VerifySample.linked("b", "python", code, problem))
    assert again.status == "AC" and again.cached
    assert (again.compile_s, again.run_s, again.check_s) == (0.0, 0.0, 0.0)
