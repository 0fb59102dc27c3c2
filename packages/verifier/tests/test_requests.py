"""Requests that ask for too much or make no sense, against a real verifier process started as the
controller starts it (`python -m rlx_verifier`): limits are checked (finite, positive, within the
`judge.max_*` caps) and named in the error, a call past its deadline has its runs killed, and after
a battery of malformed requests the process is alive and still judges."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rlx_core.clients import SampleResult, VerifierClient, VerifySample
from rlx_core.errors import DeadlineExceeded, InvalidArgument
from rlx_core.proto.verifier.v1 import verifier_pb2 as pb
from rlx_core.proto.verifier.v1 import verifier_pb2_grpc as pb_grpc
from rlx_core.rpc.auth import create_token_file
from rlx_core.rpc.client import connect
from rlx_testing import ServiceProcess
from rlx_verifier import TestCase, Verifier

MAX_TIME_S = 600.0  # the server's judge.max_time_limit_s: room for a long run to cancel
DOUBLE = "print(int(input()) * 2)"


class Server(ServiceProcess):
    def __init__(self, tmp_path: Path) -> None:
        token_file = tmp_path / "token"
        self.token = create_token_file(token_file)
        command = [sys.executable, "-m", "rlx_verifier", "--port", "0"]
        command += ["--token-file", str(token_file)]
        for setting in ("judge.workers=1", "judge.math_workers=1", "judge.infra_retries=0"):
            command += ["--set", setting]
        command += ["--set", f"judge.max_time_limit_s={MAX_TIME_S}"]
        super().__init__(command, token=None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def client(self) -> VerifierClient:
        return VerifierClient(self.address, token=self.token, timeout=30)

    def raw(self, *samples: pb.Sample, timeout: float = 120) -> pb.VerifyReply | grpc.StatusCode:
        """Verify with the request exactly as given (the typed client checks its samples)."""
        with connect(self.address, token=self.token) as channel:
            try:
                reply: pb.VerifyReply = pb_grpc.VerifierStub(channel).Verify(
                    pb.VerifyRequest(samples=samples), timeout=timeout
                )
            except grpc.RpcError as e:
                return e.code()  # type: ignore[no-any-return]
        return reply


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("verifier"))
    yield s
    s.stop()


def _stdio(sample_id: str, **fields: object) -> pb.Sample:
    values: dict[str, object] = {"kind": "stdio", "language": "python", "code": DOUBLE}
    values |= {"tests": [pb.InlineTest(stdin="21\n", answer="42\n")]}
    return pb.Sample(sample_id=sample_id, **{**values, **fields})


def _ok(server: Server) -> SampleResult:
    with server.client() as client:
        return client.verify([VerifySample.stdio("ok", "python", DOUBLE, [("4", "8")])])[0]


@pytest.mark.parametrize(
    ("time_limit_s", "memory_mb", "tests", "message"),
    [
        (math.nan, 256, 1, "time_limit_s = nan: must be > 0 and <= 60.0"),
        (math.inf, 256, 1, "time_limit_s = inf: must be > 0"),
        (-1.0, 256, 1, "time_limit_s = -1.0: must be > 0"),
        (0.0, 256, 1, "time_limit_s = 0.0: must be > 0"),
        (1e9, 256, 1, "time_limit_s = 1000000000.0: must be > 0 and <= 60.0"),
        (2.0, 0, 1, "memory_mb = 0: must be > 0 and <= 8192"),
        (2.0, 1 << 62, 1, f"memory_mb = {1 << 62}: must be > 0 and <= 8192"),
        (2.0, 256, 1001, "1001 tests: at most 1000"),
    ],
)
def test_the_judge_checks_every_limit_naming_it(
    verifier: Verifier, time_limit_s: float, memory_mb: int, tests: int, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(")) as info:
        verifier.judge(
            "python",
            DOUBLE,
            [TestCase(stdin="1", answer="2")] * tests,
            time_limit_s=time_limit_s,
            memory_mb=memory_mb,
        )
    field = "tests" if tests > 1 else message.split(" ", maxsplit=1)[0]
    assert info.value.details["field"] == field
    if tests == 1:  # the same limits for assert style (which has no tests)
        with pytest.raises(InvalidArgument, match=message.split(":", maxsplit=1)[0]):
            verifier.run_program("python", "", time_limit_s=time_limit_s, memory_mb=memory_mb)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0])
def test_a_non_finite_or_negative_time_limit_is_invalid_argument(
    server: Server, value: float
) -> None:
    """Refused for the whole request, as any malformed sample is (never INFRA)."""
    sample = _stdio("bad", limits=pb.Limits(time_limit_s=value))
    assert server.raw(sample) == grpc.StatusCode.INVALID_ARGUMENT


def test_limits_over_the_caps_are_an_error_for_that_sample(server: Server) -> None:
    reply = server.raw(
        _stdio("huge time", limits=pb.Limits(time_limit_s=1e9)),
        _stdio("huge memory", limits=pb.Limits(memory_mb=(1 << 63) - 1)),
        _stdio("many tests", tests=[pb.InlineTest(stdin="1", answer="2")] * 1001),
        _stdio("fine"),
    )
    assert isinstance(reply, pb.VerifyReply)
    got = {r.sample_id: (r.status, r.error, r.HasField("score")) for r in reply.results}
    assert got["huge time"] == (
        "ERROR",
        f"InvalidArgument: time_limit_s = 1000000000.0: must be > 0 and <= {MAX_TIME_S} "
        "(judge.max_time_limit_s)",
        False,
    )
    assert (
        got["huge memory"][0] == "ERROR"
        and "memory_mb = 9223372036854775807" in got["huge memory"][1]
    )
    assert got["many tests"][:2] == (
        "ERROR",
        "InvalidArgument: 1001 tests: at most 1000 (judge.max_tests)",
    )
    assert got["fine"] == ("AC", "", True)


def test_a_call_past_its_deadline_frees_its_worker(server: Server) -> None:
    """One worker: a run of a 500 s limit whose caller gave up after 2 s must be killed, or the
    next request would wait for it."""
    loop = VerifySample.asserts("loop", "python", "while True:\n    pass\n", "", time_limit_s=500)
    with server.client() as client:
        with pytest.raises(DeadlineExceeded):
            client.verify([loop], timeout=2)
        assert (
            client.verify(
                [VerifySample.stdio("next", "python", DOUBLE, [("5", "10")])], timeout=60
            )[0].status
            == "AC"
        )
        status = client.status()
    assert (status.running, status.queued) == (0, 0)


def _invalid_utf8_request() -> bytes:
    """A VerifyRequest whose sample's code is not UTF-8 (proto3 strings must be)."""
    sample = pb.Sample(sample_id="binary", kind="stdio", language="python").SerializeToString()
    code = b"\xff\xfe\x00garbage\x80"
    sample += bytes([4 << 3 | 2, len(code)]) + code  # field 4 (code), length-delimited
    return bytes([1 << 3 | 2, len(sample)]) + sample  # field 1 (samples)


def test_after_a_battery_of_malformed_requests_the_process_still_judges(server: Server) -> None:
    battery = [
        pb.Sample(),  # nothing at all
        pb.Sample(sample_id="kind", kind="weird"),
        _stdio("no language", language=""),
        _stdio("unknown language", language="brainfuck"),
        _stdio("nul in language", language="py\x00thon"),
        _stdio("empty code", code=""),
        _stdio("nul bytes", code="print(1)\x00\x00", tests=[pb.InlineTest(stdin="\x00")]),
        _stdio("huge code", code="x = 1\n" * 3_000_000),  # 18 MB
        _stdio("no tests", tests=[]),
        _stdio("tiny limit", limits=pb.Limits(time_limit_s=1e-300, memory_mb=1)),
        _stdio("huge limits", limits=pb.Limits(time_limit_s=1e308, memory_mb=(1 << 63) - 1)),
        _stdio("many tests", tests=[pb.InlineTest(stdin="1", answer="2")] * 100_000),
        _stdio("bad comparator", comparator="\x00nope"),
        _stdio("checker without links", checker="s3://bucket/checker"),
        _stdio("both", test_links=[pb.TestLink(input="x", answer="y")]),
        pb.Sample(
            sample_id="links",
            kind="stdio",
            language="python",
            code=DOUBLE,
            test_links=[
                pb.TestLink(input="file:///etc/passwd", answer="../../etc/shadow"),
                pb.TestLink(input="s3://no-such-bucket-rlx/blobs/ab", answer="gs://x/y"),
                pb.TestLink(input="http://127.0.0.1:1/x", answer=""),
            ],
        ),
        pb.Sample(sample_id="assert", kind="assert", language="python", code="", harness="\x00"),
        pb.Sample(sample_id="math", kind="math", code="\\boxed{" * 20_000, gold_answer="}" * 9),
        pb.Sample(sample_id="math extractor", kind="math", code="1", extractor="\x00"),
    ]
    for sample in battery:
        reply = server.raw(sample)
        assert server.alive(), (sample.sample_id, server.stderr()[-4000:])
        if isinstance(reply, pb.VerifyReply):  # judged, or an error for that sample alone
            assert [r.status for r in reply.results] != ["INFRA"], (sample.sample_id, reply)
        else:
            assert reply == grpc.StatusCode.INVALID_ARGUMENT, (sample.sample_id, reply)
    with connect(server.address, token=server.token) as channel:
        verify = channel.unary_unary(
            "/rlx.verifier.v1.Verifier/Verify", response_deserializer=pb.VerifyReply.FromString
        )
        with pytest.raises(grpc.RpcError):
            verify(_invalid_utf8_request(), timeout=30)
    assert server.alive()
    assert _ok(server).status == "AC"
