"""Judging one `VerifySample`: the runner shared by the gRPC service and the Lambda handler.

Kinds: `math` (extract and compare), `assert` (program with a harness), `stdio` with inline tests
(`Verifier.judge`), and `stdio` with test links (the Oubliette flow, in two phases):

1. `run_outputs`: compile once, run the code on every input (fetched by link), store each output
   under a transient prefix of the input's repository, return their links (no verdicts);
2. `check_outputs`: compare each output with its answer, or run the checker on (input, output,
   answer) links, and return only the verdict.

`judge_sample` does both, cached by (code hash, test hash): blob links are content addresses,
so the links themselves are the test hash.

Partial credit (`VerifySample.partial_credit`, or `judge.partial_credit` for every sample): a
stdio sample runs every test and scores the fraction passed. An assert-style sample is one run
of a harness, so it is AC (1) or not (0) either way; math is right or wrong.

A result's `compile_s`, `run_s` and `check_s` are the wall seconds its verdict cost this
verifier (`rlx_verifier.cost`); a verdict served from the cache has `cached` and costs 0.

The reward contract: an INFRA verdict has been retried `infra_retries` times before it comes out
here, and it has no score; a sample that cannot be judged as sent (unknown language, missing
toolchain, bad link) is ERROR, without a score either. Neither is ever scored 0.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rlx_core.clients.verifier import SampleResult, TestLink, TestVerdict, VerifySample
from rlx_core.errors import Corrupt, InvalidArgument, RlxError, Unavailable
from rlx_verifier.checkers import check_output, compare
from rlx_verifier.cost import charged
from rlx_verifier.judge import TestCase, TestResult, Verdict, Verifier
from rlx_verifier.languages import resolve
from rlx_verifier.math_answers import EXTRACTORS, quick_verdict
from rlx_verifier.repository import Repositories, split_link

__all__ = [
    "PhaseOne",
    "TestRun",
    "check_outputs",
    "judge_sample",
    "quick_result",
    "run_outputs",
    "to_result",
]

log = logging.getLogger(__name__)

DEFAULT_LIMITS = {"stdio": (2.0, 256), "assert": (5.0, 512)}


@dataclass(frozen=True)
class TestRun:
    """Phase 1's record of one test: the output's link, or how the run failed."""

    __test__ = False  # not a pytest class

    output: str  # link of the stored stdout ("" when the run failed)
    failed: str | None  # TLE, MLE, RE, WA (output limit) or None
    result: TestResult


@dataclass(frozen=True)
class PhaseOne:
    compile_error: Verdict | None
    runs: tuple[TestRun, ...]


def run_outputs(
    verifier: Verifier,
    repos: Repositories,
    language: str,
    code: str,
    inputs: Sequence[str],
    *,
    time_limit_s: float = 2.0,
    memory_mb: int = 256,
    partial_credit: bool = False,
) -> PhaseOne:
    """Phase 1: run `code` on each input link; store outputs under a transient prefix. Runs
    stop at the first failure unless the sample has partial credit (or the config gives it)."""
    partial = verifier.partial_credit(partial_credit)
    verifier.check_limits(time_limit_s, memory_mb, tests=len(inputs))
    lang = resolve(verifier.languages, language)
    paths = [repos.fetch(link) for link in inputs]
    root = split_link(inputs[0])[0]
    run_key = repos.new_run(root)
    build, ce = verifier._build(lang, code)
    try:
        if ce is not None:
            return PhaseOne(ce, ())
        limits = verifier._limits(lang, time_limit_s, memory_mb)
        runs: list[TestRun] = []
        for i, path in enumerate(paths):
            r = verifier._execute(lang, build, b"", limits, stdin_path=path)
            failed = verifier._failure(lang, r, time_limit_s, memory_mb)
            link = "" if failed else repos.put_output(root, run_key, str(i), r.stdout)
            runs.append(TestRun(link, failed, verifier._result(r, failed or "")))
            if failed and verifier.stops_at(runs[-1].result, partial):
                break
        return PhaseOne(None, tuple(runs))
    finally:
        shutil.rmtree(build, ignore_errors=True)


def check_outputs(
    verifier: Verifier,
    repos: Repositories,
    phase: PhaseOne,
    tests: Sequence[TestLink],
    *,
    checker: str = "",
    comparator: str = "",
    partial_credit: bool = False,
) -> Verdict:
    """Phase 2: the verdict of phase 1's outputs against the tests' answers (or a checker);
    with partial credit (asked, or the config's) scored passed / tests."""
    partial = verifier.partial_credit(partial_credit)
    if phase.compile_error is not None:
        return phase.compile_error
    checker_path = repos.fetch(checker, executable=True) if checker else None
    results: list[TestResult] = []
    for run, test in zip(phase.runs, tests, strict=False):
        if run.failed is not None:
            results.append(replace(run.result, status=run.failed))
        else:
            output = repos.read(run.output)
            answer = repos.fetch(test.answer)
            if checker_path is None:
                with open(answer, "rb") as f:
                    expected = f.read()
                with charged("check"):
                    check = compare(output, expected, mode=comparator or "tokens")
            else:
                test_input = repos.fetch(test.input)
                scratch = verifier.sandbox.workdir()
                try:
                    out_path = os.path.join(scratch, "output")
                    with open(out_path, "wb") as f:
                        f.write(output)
                    os.chmod(out_path, 0o644)
                    with charged("check"):
                        check = check_output(
                            verifier.sandbox,
                            checker_path,
                            test_input,
                            out_path,
                            answer,
                            limits=verifier.checker_limits,
                        )
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
            results.append(
                replace(run.result, status=check.status, message=check.message, score=check.score)
            )
        if verifier.stops_at(results[-1], partial):
            break
    return verifier._aggregate(results, len(tests), partial)


def _linked(verifier: Verifier, repos: Repositories, s: VerifySample, t: float, m: int) -> Verdict:
    lang = resolve(verifier.languages, s.language)
    for link in (*(x for tl in s.test_links for x in (tl.input, tl.answer)), s.checker):
        if link:
            split_link(link)  # a bad link is the request's fault: fail before anything runs
    partial = verifier.partial_credit(s.partial_credit)
    key = verifier._key(
        "linked",
        lang.name,
        hashlib.sha256(s.code.encode()).hexdigest(),
        s.checker.rsplit("/", 1)[-1],
        s.comparator or "tokens",
        t,
        m,
        partial,
        [(tl.input.rsplit("/", 1)[-1], tl.answer.rsplit("/", 1)[-1]) for tl in s.test_links],
    )

    def compute() -> Verdict:
        phase = run_outputs(
            verifier,
            repos,
            lang.name,
            s.code,
            [tl.input for tl in s.test_links],
            time_limit_s=t,
            memory_mb=m,
            partial_credit=partial,
        )
        return check_outputs(
            verifier,
            repos,
            phase,
            s.test_links,
            checker=s.checker,
            comparator=s.comparator,
            partial_credit=partial,
        )

    return verifier._cached(key, compute)


def _verdict(verifier: Verifier, repos: Repositories, s: VerifySample) -> Verdict:
    if s.kind == "math":
        return verifier.math(s.code, s.gold_answer, extractor=s.extractor or "auto")
    default_t, default_m = DEFAULT_LIMITS[s.kind]
    t, m = s.time_limit_s or default_t, s.memory_mb or default_m
    if s.kind == "assert":
        return verifier.run_program(
            s.language, s.code, harness=s.harness, time_limit_s=t, memory_mb=m
        )
    if s.test_links:
        if s.tests:
            raise InvalidArgument("a sample carries either inline tests or test links, not both")
        return _linked(verifier, repos, s, t, m)
    if s.checker:
        raise InvalidArgument("a checker (a link) needs tests given by link too")
    tests = [TestCase(stdin=x.stdin, answer=x.answer) for x in s.tests]
    return verifier.judge(
        s.language,
        s.code,
        tests,
        comparator=s.comparator or "tokens",
        time_limit_s=t,
        memory_mb=m,
        partial_credit=s.partial_credit,
    )


def to_result(sample_id: str, v: Verdict) -> SampleResult:
    tests = tuple(
        TestVerdict(
            status=t.status,
            time_s=t.time_s,
            memory_kb=t.memory_kb,
            exit_code=t.exit_code,
            signal=t.signal,
            stderr=t.stderr,
            message=t.message,
            score=t.score,
        )
        for t in v.tests
    )
    infra = v.status == "INFRA"
    return SampleResult(
        sample_id=sample_id,
        status=v.status,
        score=None if infra else v.score,
        error=(v.message or "the verifier failed") if infra else "",
        message="" if infra else v.message,
        compile_output=v.compile_output,
        attempts=v.attempts,
        tests=tests,
        compile_s=v.compile_s,
        run_s=v.run_s,
        check_s=v.check_s,
        cached=v.cached,
    )


def quick_result(sample: VerifySample) -> SampleResult | None:
    """The result of a math sample that needs no math-verify (no answer found, or two plain
    integers), computed in the caller's thread: a pool round trip per sample cost ~20x more
    than the comparison. None: judge it with `judge_sample`."""
    extractor = sample.extractor or "auto"
    if sample.kind != "math" or extractor not in EXTRACTORS:
        return None
    start = time.perf_counter()
    verdict = quick_verdict(sample.code, sample.gold_answer, extractor=extractor)
    if verdict is None:
        return None
    return to_result(sample.sample_id, replace(verdict, check_s=time.perf_counter() - start))


def judge_sample(verifier: Verifier, repos: Repositories, sample: VerifySample) -> SampleResult:
    """The result of one sample; never raises for a problem of that sample alone."""
    try:
        return to_result(sample.sample_id, _verdict(verifier, repos, sample))
    except (Unavailable, Corrupt) as e:  # storage down or a corrupt blob, after the retries
        return SampleResult(
            sample_id=sample.sample_id, status="INFRA", score=None, error=str(e), attempts=1
        )
    except RlxError as e:  # the request: unknown language, missing toolchain, bad link
        return SampleResult(
            sample_id=sample.sample_id,
            status="ERROR",
            score=None,
            error=f"{type(e).__name__}: {e}",
        )
    except Exception as e:  # a bug in the verifier is still the verifier's failure
        log.exception("verifier: sample %s failed", sample.sample_id)
        return SampleResult(
            sample_id=sample.sample_id, status="INFRA", score=None, error=f"internal error: {e!r}"
        )
