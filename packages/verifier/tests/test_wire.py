"""The sample and result types on the wire: protobuf (the gRPC service) and JSON (the Lambda
backend) carry partial credit and the per-sample cost, and old payloads still parse."""

from __future__ import annotations

import json

from rlx_core.clients.verifier import (
    SampleResult,
    TestVerdict,
    VerifySample,
    result_from_proto,
    result_to_proto,
    sample_from_proto,
    sample_to_proto,
)
from rlx_core.proto.verifier.v1 import verifier_pb2 as pb

SAMPLE = VerifySample.stdio(
    "s", "cpp", "int main(){}", [("1\n", "2\n"), ("2\n", "4\n")], partial_credit=True
)
RESULT = SampleResult(
    sample_id="s",
    status="WA",
    score=0.5,
    message="token 1: expected 4, got 5",
    tests=(TestVerdict(status="AC", time_s=0.01, score=1.0), TestVerdict(status="WA")),
    compile_s=0.75,
    run_s=0.125,
    check_s=0.0625,
)
CACHED = SampleResult(sample_id="c", status="AC", score=1.0, cached=True)


def test_partial_credit_round_trips_through_the_proto() -> None:
    wire = pb.Sample.FromString(sample_to_proto(SAMPLE).SerializeToString())
    assert wire.partial_credit is True
    assert sample_from_proto(wire) == SAMPLE
    plain = VerifySample.stdio("p", "python", "print(1)", [("", "1")])
    assert sample_from_proto(sample_to_proto(plain)).partial_credit is False


def test_cost_and_cached_round_trip_through_the_proto() -> None:
    for r in (RESULT, CACHED):
        wire = pb.SampleResult.FromString(result_to_proto(r).SerializeToString())
        assert result_from_proto(wire) == r
    assert result_to_proto(CACHED).cached and result_to_proto(RESULT).compile_s == 0.75


def test_lambda_json_round_trips_both_fields() -> None:
    assert VerifySample.from_dict(json.loads(json.dumps(SAMPLE.to_dict()))) == SAMPLE
    for r in (RESULT, CACHED):
        assert SampleResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_payloads_without_the_new_fields_still_parse() -> None:
    # a sample without partial credit leaves the field out, for functions deployed before it
    plain = VerifySample.stdio("p", "python", "print(1)", [("", "1")])
    assert "partial_credit" not in plain.to_dict()
    assert VerifySample.from_dict(plain.to_dict()) == plain
    # results from a function deployed before the cost fields: no cost, not cached
    old = {k: v for k, v in RESULT.to_dict().items() if k not in ("compile_s", "run_s", "check_s")}
    parsed = SampleResult.from_dict(old)
    assert (parsed.compile_s, parsed.run_s, parsed.check_s, parsed.cached) == (0.0, 0.0, 0.0, False)
