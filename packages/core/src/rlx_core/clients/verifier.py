"""The client of the verifier, and the plain types a Verify batch is made of (no JAX).

    from rlx_core.clients import VerifierClient, VerifySample
    with VerifierClient("127.0.0.1:PORT", token=TOKEN) as v:
        results = v.verify([
            VerifySample.math("s1", response_text, gold="42"),
            VerifySample.stdio("s2", "python", code, tests=[("1 2\\n", "3\\n")]),
            VerifySample.linked("s3", "cpp", code, problem),   # a manifest entry (Oubliette)
        ])
    for r in results:
        if r.excluded:          # INFRA or ERROR: the verifier could not judge it
            ...                 # drop the sample from training; never score it 0
        else:
            reward = r.score

The same types travel as JSON to the AWS Lambda backend (`to_dict` / `from_dict`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import grpc

from rlx_core.clients._base import ServiceClient
from rlx_core.errors import InvalidArgument
from rlx_core.proto.verifier.v1 import verifier_pb2 as pb
from rlx_core.proto.verifier.v1 import verifier_pb2_grpc as pb_grpc
from rlx_core.rpc.client import DEFAULT_TIMEOUT_S, call

__all__ = [
    "EXCLUDED",
    "KINDS",
    "VERDICTS",
    "InlineTest",
    "SampleResult",
    "TestLink",
    "TestVerdict",
    "VerifierClient",
    "VerifierStatus",
    "VerifySample",
    "result_from_proto",
    "result_to_proto",
    "sample_from_proto",
    "sample_to_proto",
]

KINDS = ("math", "stdio", "assert")
VERDICTS = ("AC", "WA", "PE", "TLE", "MLE", "RE", "CE")
# Results without a score: the verifier failed (INFRA, after its retries) or the sample cannot
# be judged as sent (ERROR). The controller must exclude them from training.
EXCLUDED = ("INFRA", "ERROR")


@dataclass(frozen=True)
class InlineTest:
    __test__ = False  # not a pytest class

    stdin: str = ""
    answer: str = ""


@dataclass(frozen=True)
class TestLink:
    """Links (URIs) of one test's input and answer in a test repository."""

    __test__ = False  # not a pytest class

    input: str
    answer: str


@dataclass(frozen=True, kw_only=True)
class VerifySample:
    """One sample to judge. `kind` decides which fields matter (see the constructors)."""

    sample_id: str
    kind: str  # "math", "stdio" or "assert"
    language: str = ""  # stdio, assert
    code: str = ""  # the program; for math the response text
    gold_answer: str = ""  # math
    harness: str = ""  # assert: tests run after the candidate
    tests: tuple[InlineTest, ...] = ()  # stdio, inline
    test_links: tuple[TestLink, ...] = ()  # stdio, in a test repository
    checker: str = ""  # link of a testlib-protocol checker; "" = comparator
    comparator: str = ""  # exact, tokens, float; "" = tokens
    time_limit_s: float = 0.0  # CPU seconds per run; 0 = the kind's default
    memory_mb: int = 0  # MiB; 0 = the kind's default
    extractor: str = ""  # math answer extractor; "" = auto
    # stdio: run every test and score passed/total (the service's judge.partial_credit turns it
    # on for all samples); False: 1.0 for AC, else 0. Not for assert (one run) or math.
    partial_credit: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidArgument(
                f"sample {self.sample_id!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}",
                field="kind",
            )
        # NaN compares false with everything: say what is allowed, not what is refused.
        if not (math.isfinite(self.time_limit_s) and self.time_limit_s >= 0):
            raise InvalidArgument(
                f"sample {self.sample_id!r}: time_limit_s = {self.time_limit_s!r} must be a "
                "finite number >= 0 (0: the kind's default)",
                field="time_limit_s",
            )
        if self.memory_mb < 0:
            raise InvalidArgument(
                f"sample {self.sample_id!r}: memory_mb = {self.memory_mb!r} must be >= 0 "
                "(0: the kind's default)",
                field="memory_mb",
            )

    @classmethod
    def math(cls, sample_id: str, response: str, gold: str, *, extractor: str = "") -> VerifySample:
        return cls(
            sample_id=sample_id, kind="math", code=response, gold_answer=gold, extractor=extractor
        )

    @classmethod
    def stdio(
        cls,
        sample_id: str,
        language: str,
        code: str,
        tests: Iterable[tuple[str, str] | InlineTest],
        **options: Any,
    ) -> VerifySample:
        """Inline stdin/stdout tests: (stdin, answer) pairs."""
        inline = tuple(t if isinstance(t, InlineTest) else InlineTest(*t) for t in tests)
        return cls(
            sample_id=sample_id, kind="stdio", language=language, code=code, tests=inline, **options
        )

    @classmethod
    def linked(
        cls, sample_id: str, language: str, code: str, problem: Mapping[str, Any], **options: Any
    ) -> VerifySample:
        """Tests by link: `problem` is one entry of a manifest written by `rlx verifier upload`
        (`tests` [{input, answer}], `checker`, `comparator`, `time_limit_s`, `memory_mb`)."""
        links = tuple(TestLink(t["input"], t["answer"]) for t in problem["tests"])
        defaults = {
            "checker": problem.get("checker") or "",
            "comparator": problem.get("comparator") or "",
            "time_limit_s": float(problem.get("time_limit_s") or 0.0),
            "memory_mb": int(problem.get("memory_mb") or 0),
        }
        return cls(
            sample_id=sample_id,
            kind="stdio",
            language=language,
            code=code,
            test_links=links,
            **{**defaults, **options},
        )

    @classmethod
    def asserts(
        cls, sample_id: str, language: str, code: str, harness: str, **options: Any
    ) -> VerifySample:
        """Assert style: AC iff the harness runs to its end after the candidate."""
        return cls(
            sample_id=sample_id,
            kind="assert",
            language=language,
            code=code,
            harness=harness,
            **options,
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        # Left out at its default: a Lambda function deployed before the field rejects it.
        if not self.partial_credit:
            del data["partial_credit"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VerifySample:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidArgument(f"unknown sample fields: {', '.join(unknown)}", field=unknown[0])
        values = dict(data)
        values["tests"] = tuple(InlineTest(**t) for t in data.get("tests", ()))
        values["test_links"] = tuple(TestLink(**t) for t in data.get("test_links", ()))
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class TestVerdict:
    __test__ = False  # not a pytest class

    status: str
    time_s: float = 0.0
    memory_kb: int = 0
    exit_code: int | None = None
    signal: int | None = None
    stderr: str = ""
    message: str = ""
    score: float = 0.0


@dataclass(frozen=True, kw_only=True)
class SampleResult:
    """The verdict of one sample. `score` is None exactly when `status` is INFRA or ERROR."""

    sample_id: str
    status: str
    score: float | None
    error: str = ""  # why INFRA or ERROR
    message: str = ""
    compile_output: str = ""
    attempts: int = 1
    tests: tuple[TestVerdict, ...] = field(default=())
    # What judging this sample cost the verifier, wall seconds (all 0 when `cached`): compiling,
    # running the program on the tests, and running the checker or comparator (math: the answer
    # comparison). Storage reads and writes of linked tests are in none of them.
    compile_s: float = 0.0
    run_s: float = 0.0
    check_s: float = 0.0
    cached: bool = False  # served from the verifier's verdict cache: nothing ran

    @property
    def excluded(self) -> bool:
        """True when the sample has no reward and must be left out of training."""
        return self.status in EXCLUDED

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SampleResult:
        values = dict(data)
        values["tests"] = tuple(TestVerdict(**t) for t in data.get("tests", ()))
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class VerifierStatus:
    toolchains: dict[str, str]  # language -> version line
    sandbox: str
    sandboxed: bool
    workers: int
    queued: int
    running: int
    backend: str
    judged: int
    cache_entries: int
    infra_retries: int
    bwrap: str = ""  # the bubblewrap binary: "system|wheel|configured PATH (VERSION)"; "" = none


# --- proto conversions (used by the servicer and the client) -----------------------------------


def sample_to_proto(s: VerifySample) -> pb.Sample:
    return pb.Sample(
        sample_id=s.sample_id,
        kind=s.kind,
        language=s.language,
        code=s.code,
        gold_answer=s.gold_answer,
        harness=s.harness,
        tests=[pb.InlineTest(stdin=t.stdin, answer=t.answer) for t in s.tests],
        test_links=[pb.TestLink(input=t.input, answer=t.answer) for t in s.test_links],
        checker=s.checker,
        comparator=s.comparator,
        limits=pb.Limits(time_limit_s=s.time_limit_s, memory_mb=s.memory_mb),
        extractor=s.extractor,
        partial_credit=s.partial_credit,
    )


def sample_from_proto(m: pb.Sample) -> VerifySample:
    return VerifySample(
        sample_id=m.sample_id,
        kind=m.kind,
        language=m.language,
        code=m.code,
        gold_answer=m.gold_answer,
        harness=m.harness,
        tests=tuple(InlineTest(t.stdin, t.answer) for t in m.tests),
        test_links=tuple(TestLink(t.input, t.answer) for t in m.test_links),
        checker=m.checker,
        comparator=m.comparator,
        time_limit_s=m.limits.time_limit_s,
        memory_mb=m.limits.memory_mb,
        extractor=m.extractor,
        partial_credit=m.partial_credit,
    )


def _test_to_proto(t: TestVerdict) -> pb.TestVerdict:
    m = pb.TestVerdict(
        status=t.status,
        time_s=t.time_s,
        memory_kb=t.memory_kb,
        stderr=t.stderr,
        message=t.message,
        score=t.score,
    )
    if t.exit_code is not None:
        m.exit_code = t.exit_code
    if t.signal is not None:
        m.signal = t.signal
    return m


def result_to_proto(r: SampleResult) -> pb.SampleResult:
    m = pb.SampleResult(
        sample_id=r.sample_id,
        status=r.status,
        error=r.error,
        message=r.message,
        compile_output=r.compile_output,
        attempts=r.attempts,
        tests=[_test_to_proto(t) for t in r.tests],
        compile_s=r.compile_s,
        run_s=r.run_s,
        check_s=r.check_s,
        cached=r.cached,
    )
    if r.score is not None:
        m.score = r.score
    return m


def result_from_proto(m: pb.SampleResult) -> SampleResult:
    return SampleResult(
        sample_id=m.sample_id,
        status=m.status,
        score=m.score if m.HasField("score") else None,
        error=m.error,
        message=m.message,
        compile_output=m.compile_output,
        attempts=m.attempts,
        tests=tuple(
            TestVerdict(
                status=t.status,
                time_s=t.time_s,
                memory_kb=t.memory_kb,
                exit_code=t.exit_code if t.HasField("exit_code") else None,
                signal=t.signal if t.HasField("signal") else None,
                stderr=t.stderr,
                message=t.message,
                score=t.score,
            )
            for t in m.tests
        ),
        compile_s=m.compile_s,
        run_s=m.run_s,
        check_s=m.check_s,
        cached=m.cached,
    )


def status_to_proto(s: VerifierStatus) -> pb.StatusReply:
    return pb.StatusReply(**asdict(s))


class VerifierClient(ServiceClient):
    """Typed access to the verifier service."""

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        token_file: str | None = None,
        channel: grpc.Channel | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        verify_timeout: float = 3600.0,
    ) -> None:
        """`timeout` bounds Status; `verify_timeout` a Verify batch (it compiles and runs code)."""
        super().__init__(
            address, token=token, token_file=token_file, channel=channel, timeout=timeout
        )
        self._stub = pb_grpc.VerifierStub(self._channel)
        self._verify_timeout = verify_timeout

    def verify(
        self, samples: Sequence[VerifySample], *, timeout: float | None = None
    ) -> list[SampleResult]:
        """One result per sample, in order. Judging is deterministic and cached by the server, so
        a Verify call is retried while the server is UNAVAILABLE."""
        request = pb.VerifyRequest(samples=[sample_to_proto(s) for s in samples])
        reply = call(
            self._stub.Verify,
            request,
            timeout=timeout or self._verify_timeout,
            idempotent=True,
            target=self.address,
        )
        if len(reply.results) != len(samples):
            raise InvalidArgument(
                f"{self.address}: {len(reply.results)} results for {len(samples)} samples"
            )
        return [result_from_proto(r) for r in reply.results]

    def status(self) -> VerifierStatus:
        reply = call(
            self._stub.Status,
            pb.StatusRequest(),
            timeout=self._timeout,
            idempotent=True,
            target=self.address,
        )
        return VerifierStatus(
            toolchains=dict(reply.toolchains),
            sandbox=reply.sandbox,
            sandboxed=reply.sandboxed,
            workers=reply.workers,
            queued=reply.queued,
            running=reply.running,
            backend=reply.backend,
            judged=reply.judged,
            cache_entries=reply.cache_entries,
            infra_retries=reply.infra_retries,
            bwrap=reply.bwrap,
        )
