"""`rlx verifier upload DATASET.jsonl REPO_URI`: put a dataset's tests into a test repository.

Each JSON line is one problem. Tests come as `tests: [{"stdin", "answer"}]`, or in the
code_contests layout `test: [{"input": {"stdin"}, "output": {"stdout"}}]` (a JSON string or a
list). Optional per problem: `id` (default: the line number), `checker` (`{"language": "cpp",
"source": "..."}`; Python checkers are stored as scripts), `comparator`, `time_limit_s`,
`memory_mb` (each checked as the controller checks a manifest: a number, finite, > 0, within
this verifier's caps `judge.max_time_limit_s` / `judge.max_memory_mb`, and at most
`judge.max_tests` tests). A line is read only up to MAX_LINE_BYTES and parsed with its nesting
bounded (rlx_core.jsonlimits). Inputs and answers are stored once each by content; a checker is
compiled once, in the sandbox, and its binary stored. The manifest (links per problem) is written to
`manifests/<dataset>-<sha12>.json` in the repository; its link is returned.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlx_core.errors import InvalidArgument
from rlx_core.jsonlimits import loads_bounded
from rlx_core.storage import join_uri
from rlx_verifier.checkers import COMPARATORS
from rlx_verifier.config import JudgeConfig
from rlx_verifier.judge import Verifier
from rlx_verifier.languages import resolve
from rlx_verifier.repository import MANIFESTS, Repositories

__all__ = ["MANIFEST_FORMAT", "MAX_LINE_BYTES", "read_dataset", "upload_dataset"]

MANIFEST_FORMAT = "rlx-verifier-manifest/1"
MAX_LINE_BYTES = 1 << 30  # one problem's line (its tests inline), bytes
Progress = Callable[[int, int], None]


def _tests(row: dict[str, Any], where: str) -> list[tuple[str, str]]:
    try:
        if "tests" in row:
            raw = row["tests"]
            pairs = [
                (t.get("stdin", t.get("input", "")), t.get("answer", t.get("output"))) for t in raw
            ]
        elif "test" in row:
            raw = loads_bounded(row["test"]) if isinstance(row["test"], str) else row["test"]
            pairs = [(t["input"]["stdin"], t["output"]["stdout"]) for t in raw]
        else:
            raise InvalidArgument(f"{where}: no tests (expected a 'tests' or 'test' field)")
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise InvalidArgument(
            f"{where}: the tests are not a list of {{stdin, answer}} objects (or code_contests' "
            f"{{input: {{stdin}}, output: {{stdout}}}}): {type(e).__name__}: {e}"
        ) from None
    if not pairs:
        raise InvalidArgument(f"{where}: the test list is empty")
    for i, (stdin, answer) in enumerate(pairs):
        if not isinstance(stdin, str) or not isinstance(answer, str):
            raise InvalidArgument(f"{where}: test {i}: stdin and answer must be strings")
    return pairs


def read_dataset(path: str | os.PathLike[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) per non-empty line; InvalidArgument naming the line for bad JSON (nested
    too deep among it), text that is not UTF-8 or a line longer than MAX_LINE_BYTES."""
    with open(path, "rb") as f:
        n = 0
        while raw := f.readline(MAX_LINE_BYTES + 1):
            n += 1
            where = f"{os.fspath(path)}:{n}"
            if len(raw) > MAX_LINE_BYTES:
                raise InvalidArgument(f"{where}: the line is longer than {MAX_LINE_BYTES} bytes")
            try:
                line = raw.decode()
            except UnicodeDecodeError as e:
                raise InvalidArgument(f"{where}: not UTF-8 text ({e.reason})") from None
            if not line.strip():
                continue
            try:
                row = loads_bounded(line)
            except ValueError as e:  # JSONDecodeError, or nested too deep
                raise InvalidArgument(f"{where}: not JSON: {e}") from None
            if not isinstance(row, dict):
                raise InvalidArgument(f"{where}: a line must be a JSON object")
            row.setdefault("id", n - 1)
            yield where, row


def _checked_tests(judge: JudgeConfig, row: dict[str, Any], where: str) -> list[tuple[str, str]]:
    """A problem's tests, its test count and limits checked against the judge's caps (what
    the controller checks when it reads the manifest)."""
    pairs = _tests(row, where)
    try:
        judge.request_limit("tests", len(pairs), "the number of tests")
        for name in ("time_limit_s", "memory_mb"):
            if row.get(name) is not None:  # absent: the dataset's or the verifier's default
                judge.request_limit(name, row[name])
    except ValueError as e:
        raise InvalidArgument(f"{where}: problem {str(row.get('id'))!r}: {e}") from None
    return pairs


def _checker_binary(verifier: Verifier, spec: Any, where: str) -> bytes:
    """The executable bytes of a checker spec: compiled in the sandbox, or a Python script."""
    if not isinstance(spec, dict) or "source" not in spec or "language" not in spec:
        raise InvalidArgument(f"{where}: checker must be {{'language': ..., 'source': ...}}")
    lang = resolve(verifier.languages, str(spec["language"]))
    source = str(spec["source"])
    if lang.name == "python":
        body = source.split("\n", 1)[1] if source.startswith("#!") else source
        return f"#!/usr/bin/python3 -IS\n{body}".encode()
    if lang.name not in ("cpp", "rust", "go"):
        raise InvalidArgument(f"{where}: checkers in {lang.name} are not supported")
    build, ce = verifier._build(lang, source)
    try:
        if ce is not None:
            raise InvalidArgument(f"{where}: the checker does not compile:\n{ce.compile_output}")
        with open(os.path.join(build, "main"), "rb") as f:
            return f.read()
    finally:
        shutil.rmtree(build, ignore_errors=True)


def upload_dataset(
    dataset: str | os.PathLike[str],
    repo_uri: str,
    verifier: Verifier,
    repos: Repositories,
    *,
    progress: Progress | None = None,
) -> tuple[str, dict[str, Any]]:
    """Store every test and checker of `dataset` in the repository `repo_uri`; returns the
    manifest's link and the manifest."""
    rows = list(read_dataset(dataset))
    tests = [_checked_tests(verifier.config, row, where) for where, row in rows]  # all, first
    total = sum(map(len, tests))
    root = repos.storage(repo_uri).uri
    checkers: dict[str, str] = {}  # sha256 of the checker spec -> link of its binary
    problems = []
    seen: set[str] = set()
    done = 0
    for (where, row), pairs in zip(rows, tests, strict=True):
        pid = str(row["id"])
        if pid in seen:
            raise InvalidArgument(f"{where}: problem id {pid!r} appears twice")
        seen.add(pid)
        comparator = str(row.get("comparator", "tokens"))
        if comparator not in COMPARATORS:
            raise InvalidArgument(f"{where}: comparator {comparator!r} is not one of {COMPARATORS}")
        checker = ""
        if row.get("checker"):
            key = hashlib.sha256(json.dumps(row["checker"], sort_keys=True).encode()).hexdigest()
            if key not in checkers:
                checkers[key] = repos.put_blob(
                    root, _checker_binary(verifier, row["checker"], where)
                )
            checker = checkers[key]
        links = []
        for stdin, answer in pairs:
            links.append(
                {
                    "input": repos.put_blob(root, stdin.encode()),
                    "answer": repos.put_blob(root, answer.encode()),
                }
            )
            done += 1
            if progress is not None:
                progress(done, total)
        entry: dict[str, Any] = {"id": pid, "tests": links, "checker": checker}
        entry["comparator"] = comparator
        for name in ("time_limit_s", "memory_mb"):
            if row.get(name) is not None:
                entry[name] = row[name]
        problems.append(entry)
    manifest = {
        "format": MANIFEST_FORMAT,
        "repo": root,
        "dataset": Path(dataset).name,
        "problems": problems,
    }
    data = json.dumps(manifest, indent=1, sort_keys=True).encode()
    stem = Path(dataset).name.split(".")[0] or "dataset"
    key = f"{MANIFESTS}/{stem}-{hashlib.sha256(data).hexdigest()[:12]}.json"
    repos.storage(root).put(key, data)
    return join_uri(root, key), manifest
