"""Code prompts: what a code dataset's record says about judging its programs, finding the
program in a response, and the verifier sample that judges it.

    task = code_task(cfg, record, manifest)          # CodeTask: tests, limits, language
    program = extract_program(response, "python")   # the last ```python block, or None
    sample = task.sample("u/0/1", response)          # a VerifySample, or None: no program

A record is judged one of three ways (the dataset's config says which):

- inline stdin/stdout tests in `tests_field`: `[{"input", "output"}]` (or `"stdin"`/`"answer"`
  keys, as `rlx verifier upload` reads them), or `{"inputs": [...], "outputs": [...]}` (the
  APPS/TACO layout);
- tests by link: `tests_manifest` names a manifest written by `rlx verifier upload` and the
  record its problem (`problem_field`); the manifest gives the links, the problem's testlib
  checker, comparator and limits (the verifier fetches the tests; the controller never does);
- assert style: `harness_field` holds code run after the program; AC iff it runs to its end.

Every limit a record or a manifest gives (time, memory, tests) must be finite, positive and
within the verifier's caps (the run's `verifier.judge`: `max_time_limit_s`, `max_memory_mb`,
`max_tests`), and every link of a manifest a content link of its repository (`<repo>/blobs/
<sha256>`, as the uploader writes them): what loads is what the verifier judges.

A response without a program (no fenced block of the language, or an unclosed one: the
response was cut off) is never sent to the verifier: it scores 0 as `NO_CODE`, with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rlx_core.clients.verifier import InlineTest, SampleResult, TestLink, VerifySample
from rlx_core.configs.run import DatasetConfig
from rlx_core.configs.verifier import LANGUAGES, JudgeConfig, canonical_language
from rlx_core.storage import join_uri

__all__ = [
    "NO_CODE",
    "BadRecord",
    "CodeTask",
    "brief",
    "code_task",
    "extract_program",
    "manifest_problems",
    "no_code_result",
]

NO_CODE = "NO_CODE"  # the status of a response holding no program: score 0, never judged

_DIGEST = re.compile(r"[0-9a-f]{64}")  # a blob's name in a test repository: its sha256
# a fence line: three or more backticks (or tildes), then an info string (the language tag)
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n`]*$")


class BadRecord(Exception):
    """A record that does not fit its dataset's config; `field` is the config field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _blocks(text: str) -> list[tuple[str, str, bool]]:
    """The fenced blocks of `text` in order: (tag lower-cased, body, closed)."""
    blocks: list[tuple[str, str, bool]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, tag = m.group(1), m.group(2).lower()
        body: list[str] = []
        j = i + 1
        closed = False
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                closed = True
                break
            body.append(lines[j])
            j += 1
        blocks.append((tag, "\n".join(body) + ("\n" if body else ""), closed))
        i = j + 1
    return blocks


def extract_program(response: str, language: str, mode: str = "last_block") -> str | None:
    """The program in `response`: the whole response (`mode = "whole"`), or the last closed
    fenced block tagged with `language` (any of its spellings: ```py, ```python3) or untagged;
    blocks tagged with another language are passed over. None: no such block."""
    if mode == "whole":
        return response
    want = canonical_language(language) or language.lower()
    found: str | None = None
    for tag, body, closed in _blocks(response):
        if closed and (not tag or (canonical_language(tag) or tag) == want):
            found = body
    return found


def no_code_result(sample_id: str, language: str, mode: str) -> SampleResult:
    """The verdict of a response holding no program: scored 0, never sent to the verifier."""
    fence = "a closed fenced block" if mode == "last_block" else "a program"
    return SampleResult(
        sample_id=sample_id,
        status=NO_CODE,
        score=0.0,
        message=f"no program: the response has no {fence} of {language} (```{language} ... ```)",
    )


@dataclass(frozen=True, kw_only=True)
class CodeTask:
    """How the programs answering one prompt are judged."""

    kind: str  # "stdio" or "assert"
    language: str  # canonical: python, cpp, rust, go, java
    program: str  # the dataset's `program`: "last_block" or "whole"
    tests: tuple[InlineTest, ...] = ()  # inline stdin/stdout tests
    links: tuple[TestLink, ...] = ()  # tests by link (a manifest's problem)
    checker: str = ""  # link of the problem's testlib checker; "" = comparator
    comparator: str = ""  # exact, tokens, float; "" = tokens
    harness: str = ""  # assert style: the tests, run after the program
    time_limit_s: float = 0.0  # 0 = the verifier's default
    memory_mb: int = 0  # 0 = the verifier's default
    partial_credit: bool = False

    @property
    def total_tests(self) -> int:
        """The tests a program is judged on (an assert-style harness is one)."""
        return 1 if self.kind == "assert" else len(self.tests) + len(self.links)

    def sample(self, sample_id: str, response: str) -> VerifySample | None:
        """The verifier sample judging `response`'s program; None when it holds none."""
        code = extract_program(response, self.language, self.program)
        if code is None:
            return None
        limits: dict[str, Any] = {
            "time_limit_s": self.time_limit_s,
            "memory_mb": self.memory_mb,
        }
        if self.partial_credit:
            limits["partial_credit"] = True
        if self.kind == "assert":
            return VerifySample.asserts(sample_id, self.language, code, self.harness, **limits)
        return VerifySample(
            sample_id=sample_id,
            kind="stdio",
            language=self.language,
            code=code,
            tests=self.tests,
            test_links=self.links,
            checker=self.checker,
            comparator=self.comparator,
            **limits,
        )


def brief(value: Any) -> str:
    """`value`'s repr, cut to 80 characters: what an error message quotes of a record."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _text(value: Any, what: str, field: str) -> str:
    if not isinstance(value, str):
        raise BadRecord(field, f"{what} must be a string, got {brief(value)}")
    try:
        value.encode()  # what a Verify request carries: JSON's "\ud800" is no UTF-8 text
    except UnicodeEncodeError as e:
        raise BadRecord(field, f"{what} is not Unicode text: {e.reason} at {e.start}") from None
    return value


def _inline(cfg: DatasetConfig, value: Any) -> tuple[InlineTest, ...]:
    name = cfg.tests_field
    if isinstance(value, Mapping) and "inputs" in value and "outputs" in value:
        ins, outs = value["inputs"], value["outputs"]
        if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
            raise BadRecord(
                "tests_field",
                f"{name!r}: 'inputs' and 'outputs' must be lists of the same length",
            )
        pairs = list(zip(ins, outs, strict=True))
    elif isinstance(value, list):
        pairs = []
        for k, t in enumerate(value):
            if not isinstance(t, Mapping):
                raise BadRecord("tests_field", f"{name!r} test {k} is not an object: {brief(t)}")
            stdin = t.get("input", t.get("stdin"))
            answer = t.get("output", t.get("answer"))
            if stdin is None or answer is None:
                raise BadRecord(
                    "tests_field",
                    f"{name!r} test {k} needs 'input' and 'output' (or 'stdin' and 'answer'): "
                    f"{brief(t)}",
                )
            pairs.append((stdin, answer))
    else:
        raise BadRecord(
            "tests_field",
            f"{name!r} must be a list of {{input, output}} tests or {{inputs, outputs}}, "
            f"got {brief(value)}",
        )
    if not pairs:
        raise BadRecord("tests_field", f"{name!r} holds no tests")
    return tuple(
        InlineTest(
            _text(i, f"{name!r} test {k} input", "tests_field"),
            _text(o, f"{name!r} test {k} output", "tests_field"),
        )
        for k, (i, o) in enumerate(pairs)
    )


def _limit(
    cfg: DatasetConfig, record: Mapping[str, Any], field: str, default: float, judge: JudgeConfig
) -> float:
    """A row's own limit (its record field, when the config names one and the record has it,
    not null) or `default`."""
    name = getattr(cfg, field)
    value = record.get(name) if name else None
    if value is None:
        return default
    kind = "time_limit_s" if field == "time_limit_field" else "memory_mb"
    try:
        return judge.request_limit(kind, value, repr(name))
    except ValueError as e:
        raise BadRecord(field, str(e)) from None


def _content_link(link: Any, blobs: str) -> bool:
    """Whether `link` is a content link under `blobs` (`<repo>/blobs/`): `blobs` + a sha256."""
    return (
        isinstance(link, str)
        and link.startswith(blobs)
        and _DIGEST.fullmatch(link[len(blobs) :]) is not None
    )


def _problem(
    p: Any, k: int, where: str, blobs: str, judge: JudgeConfig
) -> tuple[str, Mapping[str, Any]]:
    """(id, entry) of manifest problem `k`, its links and limits checked; ValueError naming
    `where`, the problem, the field and the value."""
    if not isinstance(p, Mapping):
        raise ValueError(f"{where}: problem {k} is not an object: {brief(p)}")
    pid = p.get("id", k)
    if isinstance(pid, bool) or not isinstance(pid, (str, int)):
        raise ValueError(
            f"{where}: problem {k}: id must be a string or an integer, got {brief(pid)}"
        )
    at = f"{where}: problem {str(pid)!r}"
    tests = p.get("tests")
    if not isinstance(tests, list) or not all(
        isinstance(t, Mapping) and "input" in t and "answer" in t for t in tests
    ):
        raise ValueError(f"{at} has no list of test links ({{input, answer}} each)")
    try:
        judge.request_limit("tests", len(tests), "the number of tests")
        for name in ("time_limit_s", "memory_mb"):
            if p.get(name) is not None:  # absent or null: the dataset's or the verifier's
                judge.request_limit(name, p[name])
    except ValueError as e:
        raise ValueError(f"{at}: {e}") from None
    links = [(f"tests[{i}].{x}", t[x]) for i, t in enumerate(tests) for x in ("input", "answer")]
    if p.get("checker"):
        links.append(("checker", p["checker"]))
    for name, link in links:
        if not _content_link(link, blobs):
            raise ValueError(
                f"{at}: {name} = {brief(link)} is not a content link of the manifest's "
                f"repository ({blobs}<sha256>, as `rlx verifier upload` writes them)"
            )
    return str(pid), p


def manifest_problems(
    manifest: Mapping[str, Any], where: str, judge: JudgeConfig | None = None
) -> dict[str, Mapping[str, Any]]:
    """{problem id: entry} of a manifest written by `rlx verifier upload`, every problem's links
    content links of the manifest's `repo` and its limits within `judge`'s caps (default: the
    verifier's defaults); ValueError naming `where`, the problem, the field and the value."""
    judge = judge or JudgeConfig()
    problems = manifest.get("problems") if isinstance(manifest, Mapping) else None
    if not isinstance(problems, list):
        raise ValueError(f"{where} is not a manifest of `rlx verifier upload` (no 'problems')")
    repo = manifest.get("repo")
    if not isinstance(repo, str) or not repo or ".." in repo.split("/"):
        raise ValueError(
            f"{where}: repo = {brief(repo)} is not the URI of a test repository (the manifest "
            "of `rlx verifier upload` names the repository its links are in)"
        )
    blobs = join_uri(repo, "blobs") + "/"
    table: dict[str, Mapping[str, Any]] = {}
    for k, p in enumerate(problems):
        pid, entry = _problem(p, k, where, blobs, judge)
        if pid in table:  # a row naming it would get either problem's tests
            raise ValueError(f"{where}: problem id {pid!r} appears twice")
        table[pid] = entry
    return table


def code_task(
    cfg: DatasetConfig,
    record: Mapping[str, Any],
    problems: Mapping[str, Mapping[str, Any]] | None = None,
    judge: JudgeConfig | None = None,
) -> CodeTask:
    """How `record`'s programs are judged (`problems`: the dataset's manifest, when it has
    one; `judge`: the verifier's caps, default its defaults); BadRecord naming the config field
    when the record does not fit."""
    judge = judge or JudgeConfig()
    name = cfg.language
    if cfg.language_field:
        name = _text(record[cfg.language_field], repr(cfg.language_field), "language_field")
    language = canonical_language(name)
    if language is None:  # the config's own language was checked when it was read
        raise BadRecord(
            "language_field",
            f"{cfg.language_field!r} is {name!r}, not one of {', '.join(LANGUAGES)}",
        )
    base = CodeTask(
        kind="stdio",
        language=language,
        program=cfg.program,
        time_limit_s=_limit(cfg, record, "time_limit_field", cfg.time_limit_s, judge),
        memory_mb=int(_limit(cfg, record, "memory_field", cfg.memory_mb, judge)),
        partial_credit=cfg.partial_credit,
        comparator=cfg.comparator,
    )
    if cfg.harness_field:
        harness = _text(record[cfg.harness_field], repr(cfg.harness_field), "harness_field")
        if not harness.strip():
            raise BadRecord("harness_field", f"{cfg.harness_field!r} is empty")
        return replace(base, kind="assert", harness=harness)
    if cfg.tests_manifest:
        assert problems is not None, "a dataset with tests_manifest is loaded with its manifest"
        pid = record[cfg.problem_field]
        if isinstance(pid, bool) or not isinstance(pid, (str, int)):
            raise BadRecord(
                "problem_field", f"{cfg.problem_field!r} must be a string or integer id"
            )
        entry = problems.get(str(pid))
        if entry is None:
            raise BadRecord(
                "problem_field",
                f"{cfg.problem_field!r} = {pid!r} is not a problem of {cfg.tests_manifest}",
            )
        # a row's own limits win over its problem's, the problem's over the dataset's
        # (the manifest's were checked when it was read)
        t = _limit(cfg, record, "time_limit_field", 0.0, judge) or float(
            entry.get("time_limit_s") or 0
        )
        m = int(_limit(cfg, record, "memory_field", 0, judge)) or int(entry.get("memory_mb") or 0)
        return replace(
            base,
            links=tuple(TestLink(str(x["input"]), str(x["answer"])) for x in entry["tests"]),
            checker=str(entry.get("checker") or ""),
            comparator=cfg.comparator or str(entry.get("comparator") or ""),
            time_limit_s=t or cfg.time_limit_s,
            memory_mb=m or cfg.memory_mb,
        )
    tests = _inline(cfg, record[cfg.tests_field])
    try:
        judge.request_limit("tests", len(tests), f"the number of tests in {cfg.tests_field!r}")
    except ValueError as e:
        raise BadRecord("tests_field", str(e)) from None
    return replace(base, tests=tests)
