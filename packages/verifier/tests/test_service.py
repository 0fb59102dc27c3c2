"""The Verify/Status service, tested twice: the VerifierService object directly, and through a real
gRPC server on 127.0.0.1:0 with the typed client. Includes the reward contract: a checker that
FAILs (exit 3) is retried, then reported as INFRA with an error and no score, never as 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlx_core.clients import LifecycleClient, SampleResult, VerifierClient, VerifySample
from rlx_core.config import from_dict
from rlx_core.errors import InvalidArgument, Unauthenticated
from rlx_core.proto.verifier.v1 import verifier_pb2 as pb
from rlx_core.rpc.client import call
from rlx_testing import TOKEN, WRONG_TOKEN, serve_in_thread, write_token_file
from rlx_verifier import Repositories, VerifierConfig, VerifierService
from rlx_verifier.servicer import registrations
from rlx_verifier.upload import upload_dataset

from .conftest import FAILING_CHECKER_PY, SUM_CHECKER_PY, SUM_PROGRAMS

RETRIES = 1


@pytest.fixture(scope="module")
def service() -> Iterator[VerifierService]:
    config = from_dict(
        VerifierConfig,
        {"judge": {"workers": 2, "math_workers": 1, "infra_retries": RETRIES}},
    )
    s = VerifierService(config)
    yield s
    s.close()


@pytest.fixture(scope="module")
def manifest(service: VerifierService, tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("dataset")
    two = [{"stdin": "10\n", "answer": "5 5\n"}, {"stdin": "7", "answer": "3 4"}]
    rows = [
        {"id": "sum", "tests": two, "checker": {"language": "python", "source": SUM_CHECKER_PY}},
        {
            "id": "broken",
            "tests": two[:1],
            "checker": {"language": "python", "source": FAILING_CHECKER_PY},
        },
        {
            "id": "add",
            "tests": [{"stdin": "1 2\n", "answer": "3\n"}, {"stdin": "5 5", "answer": "10"}],
        },
    ]
    path = d / "tiny.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert service.verifier is not None
    repos = Repositories()
    try:
        _, manifest = upload_dataset(path, str(d / "repo"), service.verifier, repos)
    finally:
        repos.close()
    return {p["id"]: p for p in manifest["problems"]}


@pytest.fixture(scope="module")
def address(service: VerifierService, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    token_file = write_token_file(tmp_path_factory.mktemp("token") / "token")
    config = from_dict(
        VerifierConfig,
        {"server": {"port": 0, "grace_s": 0.1, "token_file": str(token_file)}},
    )
    address, thread = serve_in_thread(service.lifecycle, config.server, registrations(service))
    yield address
    with LifecycleClient(address, token=TOKEN) as client:
        client.shutdown("test over", grace_s=0.1)
    thread.join(30)


def _batch(m: dict) -> list[VerifySample]:
    add = "a, b = map(int, input().split())\nprint(a + b)"
    return [
        VerifySample.math("math-ok", "so the total is \\boxed{\\frac{1}{2}}", "0.5"),
        VerifySample.math("math-wrong", "#### 7", "8"),
        VerifySample.stdio("inline-ok", "python", add, [("1 2\n", "3\n")]),
        VerifySample.stdio("inline-wrong", "cpp", "int main(){return 0;}", [("1 2\n", "3\n")]),
        VerifySample.asserts("assert-exit", "python", "import sys\nsys.exit(0)", "assert False"),
        VerifySample.linked("linked-ok", "python", add, m["add"]),
        VerifySample.linked("checker-ok", "python", SUM_PROGRAMS["AC"], m["sum"]),
        VerifySample.linked("checker-wa", "python", SUM_PROGRAMS["WA"], m["sum"]),
        VerifySample.linked("checker-pe", "python", SUM_PROGRAMS["PE"], m["sum"]),
        VerifySample.stdio("no-lang", "cobol", "x", [("", "")]),
        VerifySample.linked(
            "bad-link", "python", add, {"tests": [{"input": "/nowhere/x", "answer": "/y"}]}
        ),
    ]


EXPECTED = {
    "math-ok": ("AC", 1.0),
    "math-wrong": ("WA", 0.0),
    "inline-ok": ("AC", 1.0),
    "inline-wrong": ("WA", 0.0),
    "assert-exit": ("RE", 0.0),
    "linked-ok": ("AC", 1.0),
    "checker-ok": ("AC", 1.0),
    "checker-wa": ("WA", 0.0),
    "checker-pe": ("PE", 0.0),
    "no-lang": ("ERROR", None),
    "bad-link": ("ERROR", None),
}


@pytest.mark.parametrize("via", ["service", "grpc"])
def test_verify_batch(via: str, service: VerifierService, address: str, manifest: dict) -> None:
    samples = _batch(manifest)
    if via == "service":
        results = service.verify(samples)
    else:
        with VerifierClient(address, token=TOKEN) as client:
            results = client.verify(samples)
    got = {r.sample_id: (r.status, r.score) for r in results}
    assert [r.sample_id for r in results] == [s.sample_id for s in samples]
    assert got == EXPECTED
    by_id = {r.sample_id: r for r in results}
    assert "Unimplemented" in by_id["no-lang"].error or "unknown language" in by_id["no-lang"].error
    assert "test-repository link" in by_id["bad-link"].error
    assert by_id["checker-wa"].tests[0].message == "1 + 10 != 10"
    assert all(r.excluded == (r.score is None) for r in results)
    # code that ran has a cost; a verdict the cache served (the second `via`) has none
    code = [r for r in results if not r.excluded and not r.sample_id.startswith("math")]
    assert all((r.run_s > 0) != r.cached for r in code)


@pytest.mark.parametrize("via", ["service", "grpc"])
def test_failing_checker_is_an_error_for_that_sample_never_a_zero(
    via: str, service: VerifierService, address: str, manifest: dict
) -> None:
    samples = [
        VerifySample.linked(f"broken-{via}", "python", SUM_PROGRAMS["AC"], manifest["broken"]),
        VerifySample.linked(f"fine-{via}", "python", SUM_PROGRAMS["AC"], manifest["sum"]),
    ]
    results: list[SampleResult]
    if via == "service":
        results = service.verify(samples)
    else:
        with VerifierClient(address, token=TOKEN) as client:
            results = client.verify(samples)
    broken, fine = results
    assert broken.status == "INFRA" and broken.score is None and broken.excluded
    assert broken.attempts == RETRIES + 1
    assert "checker broke: bad test data" in broken.error and "exit code 3" in broken.error
    assert (fine.status, fine.score, fine.excluded) == ("AC", 1.0, False)


def test_infra_has_no_score_field_on_the_wire(service: VerifierService, manifest: dict) -> None:
    from rlx_core.clients.verifier import result_to_proto

    broken = VerifySample.linked("b", "python", SUM_PROGRAMS["AC"], manifest["broken"])
    (result,) = service.verify([broken])
    message = result_to_proto(result)
    assert not message.HasField("score") and message.status == "INFRA"
    ok = result_to_proto(service.verify([_batch(manifest)[1]])[0])
    assert ok.HasField("score") and ok.score == 0.0  # a real 0 is present, and distinct


def test_status(service: VerifierService, address: str) -> None:
    with VerifierClient(address, token=TOKEN) as client:
        before = client.status()
        client.verify([VerifySample.math("s", "\\boxed{3}", "3")])
        after = client.status()
    assert {"python", "cpp"} <= set(after.toolchains)
    assert after.toolchains["cpp"].startswith("g++")
    assert after.sandboxed and after.sandbox.startswith("bwrap")
    bwrap = service.verifier.sandbox.bwrap if service.verifier else None
    assert after.bwrap.startswith((f"system {bwrap} (bubblewrap ", f"wheel {bwrap} (bubblewrap "))
    assert (after.workers, after.backend, after.infra_retries) == (2, "local", RETRIES)
    assert (after.queued, after.running) == (0, 0)
    assert after.judged == before.judged + 1
    assert after == service.status()


def test_every_call_needs_the_token(address: str) -> None:
    with VerifierClient(address, token=WRONG_TOKEN) as client:
        with pytest.raises(Unauthenticated):
            client.status()
        with pytest.raises(Unauthenticated):
            client.verify([VerifySample.math("s", "1", "1")])


def test_a_malformed_sample_names_itself(address: str) -> None:
    with VerifierClient(address, token=TOKEN) as client:
        request = pb.VerifyRequest(samples=[pb.Sample(sample_id="x7", kind="poetry")])
        with pytest.raises(InvalidArgument, match=r"samples\[0\] \('x7'\).*kind 'poetry'"):
            call(client._stub.Verify, request, timeout=30, target=client.address)


def test_config_rejects_lambda_without_a_function(tmp_path: Path) -> None:
    from rlx_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"aws_lambda\.function_name"):
        from_dict(VerifierConfig, {"backend": "lambda"})
    with pytest.raises(ConfigError, match="backend"):
        from_dict(VerifierConfig, {"backend": "cloud"})
