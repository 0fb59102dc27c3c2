"""The public judge: `Verifier.judge` (stdin/stdout tests), `run_program` (assert style), `math`.

A verdict is one of AC WA PE TLE MLE RE CE INFRA. INFRA means the verifier failed (sandbox could
not start, a checker FAILed); it is retried `infra_retries` times and then reported with
`score = None`, which callers must exclude from training, never count as 0.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import secrets
import shutil
import signal
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from threading import Lock
from typing import TYPE_CHECKING, TypeVar

from rlx_core.errors import InvalidArgument, Unavailable
from rlx_verifier import assert_python
from rlx_verifier.checkers import CHECKER_LIMITS, CheckResult, check_output, compare
from rlx_verifier.config import JudgeConfig
from rlx_verifier.cost import charged, metered
from rlx_verifier.languages import (
    GO_SEED,
    Language,
    compose_assert_program,
    detect_languages,
    resolve,
)
from rlx_verifier.sandbox import Limits, RunResult, Sandbox

if TYPE_CHECKING:
    from rlx_verifier.math_answers import MathPool

__all__ = ["STATUSES", "TestCase", "TestResult", "Verdict", "Verifier"]

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

STATUSES = ("AC", "WA", "PE", "TLE", "MLE", "RE", "CE", "INFRA")
# Assert-style languages whose verdict still needs the per-request marker (the harness runs in
# the candidate's process); the others judge in a process that never loaded the candidate (C++
# and Rust: rlx_verifier.assert_native, Python: rlx_verifier.assert_python, where the judge's
# exit status is the verdict).
MARKED_LANGUAGES = frozenset({"go"})
# stderr of a failed assertion: Python, C/C++ (glibc), Rust (Go's testing prints "--- FAIL:"
# on stdout)
ASSERT_MARKERS = (b"AssertionError", b"Assertion `", b"assertion `left == right` failed")


@dataclass(frozen=True)
class TestCase:
    """One stdin/stdout test."""

    __test__ = False  # not a pytest class

    stdin: str | bytes = ""
    answer: str | bytes = ""


@dataclass(frozen=True, kw_only=True)
class TestResult:
    __test__ = False  # not a pytest class

    status: str
    time_s: float = 0.0  # CPU seconds
    memory_kb: int = 0  # peak resident memory
    exit_code: int | None = None
    signal: int | None = None
    stderr: str = ""  # first bytes
    message: str = ""  # comparator or checker message
    score: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Verdict:
    status: str
    score: float | None  # None for INFRA: exclude the sample, never score it 0
    tests: tuple[TestResult, ...] = ()
    message: str = ""
    compile_output: str = ""
    attempts: int = 1
    extra: dict[str, str] = field(default_factory=dict)
    # Wall seconds this verdict cost (see rlx_verifier.cost); all 0 when `cached`.
    compile_s: float = 0.0
    run_s: float = 0.0
    check_s: float = 0.0
    cached: bool = False  # served from the verdict cache


def _b(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else data


class Verifier:
    """Local backend: a bubblewrap sandbox and a pool of `workers` concurrent runs."""

    def __init__(self, config: JudgeConfig | None = None) -> None:
        self.config = config or JudgeConfig()
        self.sandbox = Sandbox(
            unsafe=self.config.unsafe_no_sandbox,
            uid_base=self.config.sandbox_uid_base,
            runner=self.config.sandbox_runner,
            bwrap=self.config.sandbox_bwrap,
        )
        self.languages: dict[str, Language] = detect_languages()
        self.sandbox.toolchains = tuple(
            dict.fromkeys(b for lang in self.languages.values() for b in lang.binds)
        )
        self.workers = self.config.workers or os.cpu_count() or 1
        self.checker_limits = CHECKER_LIMITS  # a special checker's limits per run
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="rlx-judge")
        self._cache: OrderedDict[str, Verdict] = OrderedDict()
        self._cache_lock = Lock()
        self._math: MathPool | None = None
        self._math_lock = Lock()
        self._seed: str | None = None  # Go build-cache seed ("" = could not be made)
        self._seed_lock = Lock()
        log.info(
            "verifier: sandbox %s with bwrap %s, %d workers, languages: %s",
            self.sandbox.mode,
            self.sandbox.bwrap_description,
            self.workers,
            ", ".join(f"{n} ({lang.version})" for n, lang in self.languages.items()),
        )

    # --- public API -------------------------------------------------------------------------
    def judge(
        self,
        language: str,
        source: str,
        tests: Sequence[TestCase],
        *,
        checker: str | None = None,
        comparator: str = "tokens",
        time_limit_s: float = 2.0,
        memory_mb: int = 256,
        partial_credit: bool = False,
    ) -> Verdict:
        """Compile once, run every test, compare (or run `checker`): the verdict of the first
        failing test, or AC. `partial_credit` (or the config's): every test runs and the score
        is the fraction passed; otherwise 1.0 for AC, else 0."""
        if not tests:
            raise InvalidArgument("judge needs at least one test")
        self.check_limits(time_limit_s, memory_mb, tests=len(tests))
        lang = resolve(self.languages, language)
        partial = self.partial_credit(partial_credit)
        key = self._key(
            "judge",
            lang.name,
            source,
            comparator,
            checker,
            time_limit_s,
            memory_mb,
            partial,
            [(_b(t.stdin).hex(), _b(t.answer).hex()) for t in tests],
        )
        return self._cached(
            key,
            lambda: self._judge(
                lang, source, tests, checker, comparator, time_limit_s, memory_mb, partial
            ),
        )

    def partial_credit(self, asked: bool) -> bool:
        """Whether a sample gets partial credit: it asked, or the config gives it to all."""
        return asked or self.config.partial_credit

    def stops_at(self, result: TestResult, partial: bool) -> bool:
        """Whether the remaining tests are skipped after `result` (never with partial credit)."""
        return result.status != "AC" and self.config.stop_on_first_failure and not partial

    def run_program(
        self,
        language: str,
        source: str,
        *,
        harness: str = "",
        stdin: str | bytes = "",
        time_limit_s: float = 5.0,
        memory_mb: int = 512,
    ) -> Verdict:
        """Assert style: AC iff the program runs to its end with exit status 0.

        With a `harness` (the tests), AC needs the harness's end: Python, C++ and Rust run it in
        a judge process the candidate never runs in, whose exit status is the verdict (only data
        crosses); Go's candidate runs first and only the harness's end prints the per-request
        marker. Exiting early or returning always-equal objects is not AC. Without a harness,
        exit status 0 is AC.
        """
        self.check_limits(time_limit_s, memory_mb)
        lang = resolve(self.languages, language)
        key = self._key("run", lang.name, source, harness, _b(stdin).hex(), time_limit_s, memory_mb)
        return self._cached(
            key,
            lambda: self._run_program(lang, source, harness, _b(stdin), time_limit_s, memory_mb),
        )

    def check_limits(self, time_limit_s: float, memory_mb: int, *, tests: int = 1) -> None:
        """Raise InvalidArgument, naming the field and its value, unless the limits a request
        asks for are finite, positive and within the configured caps."""
        cfg = self.config
        if not (math.isfinite(time_limit_s) and 0 < time_limit_s <= cfg.max_time_limit_s):
            raise InvalidArgument(
                f"time_limit_s = {time_limit_s!r}: must be > 0 and <= {cfg.max_time_limit_s} "
                "(judge.max_time_limit_s)",
                field="time_limit_s",
            )
        if not 0 < memory_mb <= cfg.max_memory_mb:
            raise InvalidArgument(
                f"memory_mb = {memory_mb!r}: must be > 0 and <= {cfg.max_memory_mb} "
                "(judge.max_memory_mb)",
                field="memory_mb",
            )
        if tests > cfg.max_tests:
            raise InvalidArgument(
                f"{tests} tests: at most {cfg.max_tests} (judge.max_tests)", field="tests"
            )

    def math(self, response: str, gold: str, *, extractor: str = "auto") -> Verdict:
        """Extract the final answer of `response` and compare it with `gold` (math-verify); its
        wall time is the verdict's `check_s`."""
        start = time.perf_counter()
        verdict = self._math_pool().judge(response, gold, extractor=extractor)
        return replace(verdict, check_s=time.perf_counter() - start)

    def warm_math(self) -> None:
        """Start the math-verify workers now, not at the first answer that needs one: each
        imports math-verify (sympy), ~4 s of CPU, which would otherwise stall that request."""
        self._math_pool()

    def _math_pool(self) -> MathPool:
        from rlx_verifier.math_answers import MathPool

        with self._math_lock:
            if self._math is None:
                workers = self.config.math_workers or min(2, os.cpu_count() or 1)
                self._math = MathPool(workers, self.config.math_timeout_s)
            return self._math

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """Run `fn` over `items` on the worker pool (for batches of judge calls)."""
        return list(self._pool.map(fn, items))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if self._math is not None:
            self._math.close()
        self.sandbox.close()

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals --------------------------------------------------------------------------
    @staticmethod
    def _key(*parts: object) -> str:
        return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()

    def _cached(self, key: str, compute: Callable[[], Verdict]) -> Verdict:
        """The cached verdict of `key` (no cost, `cached`), or `compute`'s with what it cost."""
        if self.config.unsafe_no_sandbox:
            log.warning("verifier: running untrusted code WITHOUT a sandbox (unsafe_no_sandbox)")
        with self._cache_lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        with metered() as cost:
            verdict = self._with_retries(compute)
        verdict = replace(verdict, compile_s=cost.compile_s, run_s=cost.run_s, check_s=cost.check_s)
        if verdict.status != "INFRA" and self.config.cache_size:
            with self._cache_lock:
                self._cache[key] = replace(
                    verdict, compile_s=0.0, run_s=0.0, check_s=0.0, cached=True
                )
                while len(self._cache) > self.config.cache_size:
                    self._cache.popitem(last=False)
        return verdict

    def _with_retries(self, compute: Callable[[], Verdict]) -> Verdict:
        attempts = self.config.infra_retries + 1
        verdict = Verdict(status="INFRA", score=None)
        for attempt in range(1, attempts + 1):
            try:
                verdict = compute()
            except Unavailable as e:  # the sandbox, a checker, or test storage failed
                log.warning("verifier: INFRA (attempt %d/%d): %s", attempt, attempts, e)
                verdict = Verdict(status="INFRA", score=None, message=str(e))
            if verdict.status != "INFRA":
                break
        return Verdict(**{**verdict.__dict__, "attempts": attempt})

    def _build(
        self,
        lang: Language,
        source: str | dict[str, str],
        *,
        test: bool = False,
        keep_cache: bool = False,
    ) -> tuple[str, Verdict | None]:
        """Write and compile the submission (one source, or {file name: text}); (build dir, a CE
        verdict or None). `test`: the language's assert-style build (Go's test binary)."""
        build = self.sandbox.workdir()
        files = source if isinstance(source, dict) else {lang.source: source}
        for name, text in files.items():
            path = os.path.join(build, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o644)
        argv = lang.test_compile if test and lang.test_compile else lang.compile
        if not argv:
            return build, None
        env = dict(lang.env)
        binds = list(lang.binds)
        if test and lang.test_compile:
            env.update(lang.test_env)
            seed = self._go_seed(lang) if lang.name == "go" else None
            if seed is not None:
                binds.append((seed, GO_SEED))
        # an assert-style C++ or Rust build compiles two programs, one after the other
        steps = 2 if test and lang.name in ("cpp", "rust") else 1
        limits = Limits(
            cpu_s=lang.compile_s,
            wall_s=(lang.compile_s * 2 + 5) * steps,
            memory_mb=lang.compile_as_mb,
            nproc=64,
            output_mb=256,
            tmp_mb=512,
        )
        with charged("compile"):
            r = self.sandbox.run(
                list(argv),
                limits=limits,
                rw_binds=[(build, "/build")],
                ro_binds=binds,
                cwd="/build",
                env=env,
            )
        if r.exit_code == 0:
            if not keep_cache:
                shutil.rmtree(os.path.join(build, ".gocache"), ignore_errors=True)
            return build, None
        why = "compilation timed out" if r.wall_timeout or r.signal else "compilation failed"
        text = r.stderr.decode(errors="replace") or r.stdout[:4096].decode(errors="replace")
        return build, Verdict(status="CE", score=0.0, message=why, compile_output=text)

    def _go_seed(self, lang: Language) -> str | None:
        """A Go build cache with testify compiled, made once from a trivial test program of our
        own (so untrusted code never writes into it); None if that build failed."""
        with self._seed_lock:
            if self._seed is None:
                program = compose_assert_program(
                    lang,
                    "package main\n\nfunc one() int { return 1 }\n",
                    'package main\n\nimport (\n    "testing"\n'
                    '    "github.com/stretchr/testify/assert"\n)\n\n'
                    "func TestOne(t *testing.T) { assert.Equal(t, 1, one()) }\n",
                )
                build, ce = self._build(
                    Language(**{**lang.__dict__, "name": "go-seed"}),
                    program,
                    test=True,
                    keep_cache=True,
                )
                seed = os.path.join(self.sandbox.scratch_root, "goseed")
                cache = os.path.join(build, ".gocache")
                if ce is None and os.path.isdir(cache):
                    os.rename(cache, seed)
                    for root, dirs, names in os.walk(seed):
                        for d in dirs:
                            os.chmod(os.path.join(root, d), 0o755)
                        for n in names:
                            os.chmod(os.path.join(root, n), 0o644)
                    self._seed = seed
                else:
                    log.warning("verifier: no Go build-cache seed: %s", ce and ce.compile_output)
                    self._seed = ""
                shutil.rmtree(build, ignore_errors=True)
            return self._seed or None

    def _limits(self, lang: Language, time_limit_s: float, memory_mb: int) -> Limits:
        return Limits(
            cpu_s=time_limit_s,
            wall_s=time_limit_s * 2 + 1,
            memory_mb=memory_mb + lang.extra_as_mb,
            nproc=lang.nproc,
            output_mb=self.config.output_mb,
        )

    def _execute(
        self,
        lang: Language,
        build: str,
        stdin: bytes,
        limits: Limits,
        *,
        stdin_path: str | None = None,
    ) -> RunResult:
        memory = limits.memory_mb - lang.extra_as_mb
        argv = [a.replace("{memory_mb}", str(memory)) for a in lang.run]
        with charged("run"):
            return self.sandbox.run(
                argv,
                limits=limits,
                stdin=stdin,
                stdin_path=stdin_path,
                ro_binds=[(build, "/prog"), *lang.binds],
                env=dict(lang.env),
            )

    @staticmethod
    def _failure(lang: Language, r: RunResult, time_limit_s: float, memory_mb: int) -> str | None:
        """TLE, MLE or RE when the run itself failed, else None."""
        if r.wall_timeout or r.signal == signal.SIGXCPU:
            return "TLE"
        # Peak RSS from wait4 also counts the launcher (forked from this process), so it cannot
        # decide MLE: runtimes that hit RLIMIT_AS say so on stderr.
        if any(m in r.stderr or m in r.stdout[-4096:] for m in lang.memory_markers):
            return "MLE"
        if r.output_limit:
            return "WA"
        if r.exit_code != 0:
            return "RE"
        return None

    @staticmethod
    def _result(r: RunResult, status: str, message: str = "", score: float = 0.0) -> TestResult:
        return TestResult(
            status=status,
            time_s=round(r.wall_s, 4),
            memory_kb=r.max_rss_kb,
            exit_code=r.exit_code,
            signal=r.signal,
            stderr=r.stderr[:1024].decode(errors="replace"),
            message=message or ("output limit exceeded" if r.output_limit else ""),
            score=score,
        )

    def _judge(
        self,
        lang: Language,
        source: str,
        tests: Sequence[TestCase],
        checker: str | None,
        comparator: str,
        time_limit_s: float,
        memory_mb: int,
        partial: bool,
    ) -> Verdict:
        build, ce = self._build(lang, source)
        try:
            if ce is not None:
                return ce
            limits = self._limits(lang, time_limit_s, memory_mb)
            results: list[TestResult] = []
            for test in tests:
                r = self._execute(lang, build, _b(test.stdin), limits)
                failed = self._failure(lang, r, time_limit_s, memory_mb)
                if failed is not None:
                    results.append(self._result(r, failed))
                else:
                    if checker is not None:
                        check = self._check(checker, test, r.stdout)
                    else:
                        with charged("check"):
                            check = compare(r.stdout, _b(test.answer), mode=comparator)
                    results.append(self._result(r, check.status, check.message, check.score))
                if self.stops_at(results[-1], partial):
                    break
            return self._aggregate(results, len(tests), partial)
        finally:
            shutil.rmtree(build, ignore_errors=True)

    def _check(self, checker: str, test: TestCase, output: bytes) -> CheckResult:
        with charged("check"):
            return self._run_checker(checker, test, output)

    def _run_checker(self, checker: str, test: TestCase, output: bytes) -> CheckResult:
        data = self.sandbox.workdir()
        try:
            paths = []
            for name, content in (
                ("input", _b(test.stdin)),
                ("output", output),
                ("answer", _b(test.answer)),
            ):
                path = os.path.join(data, name)
                with open(path, "wb") as f:
                    f.write(content)
                os.chmod(path, 0o644)
                paths.append(path)
            return check_output(self.sandbox, checker, *paths, limits=self.checker_limits)
        finally:
            shutil.rmtree(data, ignore_errors=True)

    @staticmethod
    def _aggregate(results: list[TestResult], total: int, partial: bool) -> Verdict:
        """AC (1.0), or the first failure's verdict scored passed / total with `partial` (a
        checker's points count as a fraction of a test), else 0."""
        failed = next((t for t in results if t.status != "AC"), None)
        if failed is None:
            return Verdict(status="AC", score=1.0, tests=tuple(results))
        passed = sum(t.score if t.status == "AC" else 0.0 for t in results)
        score = passed / total if partial else 0.0
        return Verdict(
            status=failed.status, score=score, tests=tuple(results), message=failed.message
        )

    def _run_program(
        self,
        lang: Language,
        source: str,
        harness: str,
        stdin: bytes,
        time_limit_s: float,
        memory_mb: int,
    ) -> Verdict:
        # The marker is the first line of the program's stdin, never in a file, argv or the
        # environment; the harness's prelude takes it before any candidate code runs.
        mark = secrets.token_hex(16) if harness and lang.name in MARKED_LANGUAGES else ""
        program = compose_assert_program(lang, source, harness) if harness else source
        build, ce = self._build(lang, program, test=bool(harness))
        try:
            if ce is not None:
                return ce
            if mark:
                stdin = mark.encode() + b"\n" + stdin
            elif harness and lang.name == "python":
                stdin = assert_python.judge_input(harness, stdin)
            r = self._execute(lang, build, stdin, self._limits(lang, time_limit_s, memory_mb))
            failed = self._failure(lang, r, time_limit_s, memory_mb)
            if failed == "WA":  # an output flood is not running to the end
                failed = "RE"
            if failed == "RE" and (
                any(m in r.stderr for m in ASSERT_MARKERS) or b"--- FAIL:" in r.stdout
            ):
                failed = "WA"  # a failed assertion is a wrong answer
            if failed is None and mark and r.stdout.rstrip().rsplit(b"\n", 1)[-1] != mark.encode():
                result = self._result(r, "RE", "the program did not run to the end of the tests")
                return Verdict(status="RE", score=0.0, tests=(result,), message=result.message)
            result = self._result(r, failed or "AC")
            if failed is None:
                return Verdict(status="AC", score=1.0, tests=(result,))
            return Verdict(status=failed, score=0.0, tests=(result,), message=result.message)
        finally:
            shutil.rmtree(build, ignore_errors=True)
