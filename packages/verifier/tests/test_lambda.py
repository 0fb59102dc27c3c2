"""The AWS Lambda backend: the handler called locally (it runs the same runner, sandbox included),
and the client side through boto3 with botocore's Stubber, answering with what the handler
returned. A failing function is retried, then its samples are INFRA without a score."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from rlx_core.clients.verifier import SampleResult, VerifySample
from rlx_core.config import from_dict
from rlx_core.errors import InvalidArgument
from rlx_verifier import VerifierConfig, VerifierService, lambda_handler
from rlx_verifier.config import LambdaConfig
from rlx_verifier.lambda_backend import LambdaBackend

FUNCTION = "rlx-verifier-test"


@pytest.fixture(scope="module")
def handler() -> Iterator[object]:
    mp = pytest.MonkeyPatch()
    mp.setenv("RLX_VERIFIER_WORKERS", "2")
    mp.setenv("RLX_VERIFIER_INFRA_RETRIES", "1")
    yield lambda_handler.handler
    lambda_handler.reset()
    mp.undo()


@pytest.fixture
def lambda_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[object]:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    client = boto3.client(
        "lambda", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    yield client


SAMPLES = [
    VerifySample.math("m", "The answer is 12.", "12"),
    VerifySample.stdio("py", "python", "print(int(input()) * 2)", [("4\n", "8\n"), ("5", "11")]),
    VerifySample.asserts("as", "python", "def f(x):\n    return x + 1", "assert f(1) == 2"),
    VerifySample.stdio("go?", "fortran", "x", [("", "")]),
]


def _payload(samples: list[VerifySample]) -> bytes:
    return json.dumps({"op": "verify", "samples": [s.to_dict() for s in samples]}).encode()


def _reply(body: bytes, **extra: object) -> dict:
    return {"StatusCode": 200, "Payload": StreamingBody(io.BytesIO(body), len(body)), **extra}


def test_handler_runs_the_runner(handler) -> None:  # type: ignore[no-untyped-def]
    out = handler(json.loads(_payload(SAMPLES)), None)
    results = [SampleResult.from_dict(r) for r in json.loads(json.dumps(out))["results"]]
    assert [(r.sample_id, r.status, r.score) for r in results] == [
        ("m", "AC", 1.0),
        ("py", "WA", 0.0),
        ("as", "AC", 1.0),
        ("go?", "ERROR", None),
    ]
    assert results[1].tests[1].message == "token 1: expected 11, got 10"
    status = handler({"op": "status"}, None)
    assert "python" in status["toolchains"] and status["sandbox"].startswith("bwrap")
    assert status["judge"]["infra_retries"] == 1 and status["workers"] == 2
    with pytest.raises(InvalidArgument, match="unknown op 'dance'"):
        handler({"op": "dance"}, None)


def test_handler_honours_partial_credit_and_reports_cost(handler) -> None:  # type: ignore[no-untyped-def]
    code = "n = int(input())\nprint(5 if n == 2 else 2 * n)  # lambda"
    tests = [("1\n", "2\n"), ("2\n", "4\n"), ("3\n", "6\n")]
    sample = VerifySample.stdio("pc", "python", code, tests, partial_credit=True)
    for cached in (False, True):
        out = handler(json.loads(_payload([sample])), None)
        (r,) = [SampleResult.from_dict(x) for x in json.loads(json.dumps(out))["results"]]
        assert (r.status, r.score, len(r.tests), r.cached) == ("WA", 2 / 3, 3, cached)
        assert (r.run_s > 0 and r.check_s > 0) != cached
        assert cached == (r.run_s == r.check_s == r.compile_s == 0.0)


def test_client_invokes_through_boto3(handler, lambda_client) -> None:  # type: ignore[no-untyped-def]
    config = LambdaConfig(function_name=FUNCTION, batch_size=2, concurrency=1)
    backend = LambdaBackend(config, infra_retries=1, client=lambda_client)
    with Stubber(lambda_client) as stub:
        for batch in (SAMPLES[:2], SAMPLES[2:]):
            answer = json.dumps(handler(json.loads(_payload(batch)), None)).encode()
            stub.add_response(
                "invoke",
                _reply(answer),
                {
                    "FunctionName": FUNCTION,
                    "InvocationType": "RequestResponse",
                    "Payload": _payload(batch),
                },
            )
        results = backend.verify(SAMPLES)
        stub.assert_no_pending_responses()
    assert [(r.sample_id, r.status) for r in results] == [
        ("m", "AC"),
        ("py", "WA"),
        ("as", "AC"),
        ("go?", "ERROR"),
    ]
    backend.close()


def test_failing_function_is_retried_then_infra(handler, lambda_client) -> None:  # type: ignore[no-untyped-def]
    config = LambdaConfig(function_name=FUNCTION, batch_size=4, concurrency=1)
    backend = LambdaBackend(config, infra_retries=2, client=lambda_client)
    crash = json.dumps({"errorMessage": "Task timed out after 900.00 seconds"}).encode()
    with Stubber(lambda_client) as stub:
        stub.add_client_error("invoke", "TooManyRequestsException", http_status_code=429)
        stub.add_response("invoke", _reply(crash, FunctionError="Unhandled"))
        stub.add_response("invoke", _reply(crash, FunctionError="Unhandled"))
        failed = backend.verify(SAMPLES[:2])
        stub.assert_no_pending_responses()
        # a throttle, then an answer: retried, and the answer is used
        answer = json.dumps(handler(json.loads(_payload(SAMPLES[:1])), None)).encode()
        stub.add_client_error("invoke", "TooManyRequestsException", http_status_code=429)
        stub.add_response("invoke", _reply(answer))
        (ok,) = backend.verify(SAMPLES[:1])
    assert [(r.status, r.score, r.attempts) for r in failed] == [("INFRA", None, 3)] * 2
    assert all(r.excluded and "Task timed out" in r.error for r in failed)
    assert (ok.status, ok.score) == ("AC", 1.0)
    backend.close()


def test_service_with_the_lambda_backend(handler, lambda_client) -> None:  # type: ignore[no-untyped-def]
    config = from_dict(
        VerifierConfig,
        {"backend": "lambda", "aws_lambda": {"function_name": FUNCTION, "batch_size": 8}},
    )
    service = VerifierService(config, lambda_client=lambda_client)
    try:
        answer = json.dumps(handler(json.loads(_payload(SAMPLES)), None)).encode()
        with Stubber(lambda_client) as stub:
            stub.add_response("invoke", _reply(answer))
            results = service.verify(SAMPLES)
        assert [r.status for r in results] == ["AC", "WA", "AC", "ERROR"]
        status = service.status()
        assert (status.backend, status.sandbox, status.judged) == ("lambda", "lambda", 4)
    finally:
        service.close()
