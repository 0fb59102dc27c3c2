"""The typed rollout record: built from a worker's reply and the verdicts, encoded and decoded
bit-exactly (float32 log-probs, absent rewards, any text), and refused when it does not fit."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rlx_core.clients import GenerateResult, Rollout, SampleResult
from rlx_core.errors import Corrupt, InvalidArgument
from rlx_core.proto.rollout.v1 import rollout_pb2 as pb
from rlx_core.rollout import RolloutGroup, RolloutSample, RolloutUnit

UNIT = {
    "unit_id": "b00000003.r0.u0001",
    "batch": 3,
    "round": 0,
    "index": 1,
    "version": 2,
    "prompts": [
        {"dataset": "gsm8k", "row": 12, "epoch": 0},
        {"dataset": "gsm8k", "row": 7, "epoch": 1},
    ],
    "seeds": [[2**63 + 5, 1], [0, 2**64 - 1]],  # 64-bit seeds survive (JSON ints, not doubles)
    "first_slot": 2,
}
# float32 values a decimal print would not keep: -0.0, the smallest subnormal, -inf (a token
# outside top-k under the plain model), 1/3, and a NaN with a payload
ODD_F32 = struct.pack("<4f", -0.0, 1e-45, float("-inf"), 1 / 3) + bytes.fromhex("0100c07f")


def _rollout(p: int, g: int, tokens: tuple[int, ...], logp: tuple[float, ...]) -> Rollout:
    return Rollout(
        prompt_index=p,
        sample_index=g,
        token_ids=tokens,
        sampler_logprobs=logp,
        model_logprobs=logp,
        finish_reason="stop" if g == 0 else "length",
        versions=(3,) * len(tokens),
    )


def _record() -> RolloutUnit:
    """Two prompts x G 2 from a worker's reply: one INFRA sample, one scored 0.0."""
    f32 = np.frombuffer(ODD_F32, "<f4")
    rollouts = (
        _rollout(0, 0, (11, 12, 2), tuple(float(x) for x in f32[:3])),
        _rollout(0, 1, (13,), (-0.5,)),
        _rollout(1, 0, (151643, 0, 5, 6, 7), tuple(float(x) for x in f32)),
        _rollout(1, 1, (), ()),
    )
    result = GenerateResult(
        unit_id=UNIT["unit_id"], version=3, rollouts=rollouts, generated_tokens=9, elapsed_s=0.1
    )
    verdicts = [
        SampleResult(sample_id="a", status="AC", score=1.0),
        SampleResult(sample_id="b", status="INFRA", score=None, error="sandbox died"),
        SampleResult(sample_id="c", status="WA", score=0.0),
        SampleResult(sample_id="d", status="AC", score=0.25),
    ]
    texts = ["x = 4 ✓", "", "答案是 42 🎉\n\\boxed{42}", "\x00 tab\t"]
    return RolloutUnit.of(
        UNIT,
        prompts=["gsm8k/12", "gsm8k/7"],
        prompt_ids=[[1, 2, 3], (4,)],
        result=result,
        texts=texts,
        verdicts=verdicts,
    )


def test_a_worker_reply_and_its_verdicts_make_one_group_per_prompt() -> None:
    record = _record()
    assert record.unit_id == "b00000003.r0.u0001" and record.version == 3
    assert record.generated_tokens == 9
    first, second = record.groups
    assert (first.prompt, first.prompt_ids, first.version) == ("gsm8k/12", (1, 2, 3), 3)
    assert (second.prompt, second.prompt_ids) == ("gsm8k/7", (4,))
    assert [s.tokens for s in first.samples] == [(11, 12, 2), (13,)]
    assert [(s.status, s.reward) for s in first.samples] == [("AC", 1.0), ("INFRA", None)]
    assert [(s.status, s.reward) for s in second.samples] == [("WA", 0.0), ("AC", 0.25)]
    assert [s.finish for s in second.samples] == ["stop", "length"]
    assert second.samples[0].text == "答案是 42 🎉\n\\boxed{42}"
    # the sampler's floats as float32, bit for bit
    assert second.samples[0].logp_f32 == ODD_F32
    assert second.samples[0].logp.dtype == np.float32 and len(second.samples[1].logp) == 0


def test_the_encoding_round_trips_every_bit() -> None:
    record = _record()
    data = record.to_bytes()
    back = RolloutUnit.from_bytes(data)
    assert back == record
    assert back.to_bytes() == data  # deterministic: equal records, equal bytes
    assert back.unit["seeds"][0][0] == 2**63 + 5 and back.unit["seeds"][1][1] == 2**64 - 1
    nan_bits = back.groups[1].samples[0].logp.view("<u4")[4]
    assert nan_bits == 0x7FC00001  # the NaN's payload too
    rewards = [s.reward for g in back.groups for s in g.samples]
    assert rewards == [1.0, None, 0.0, 0.25]  # None stays absent, 0.0 stays a score
    assert back.groups[1].samples[0].text == "答案是 42 🎉\n\\boxed{42}"
    assert back.groups[1].samples[1].text == "\x00 tab\t"


def test_rewards_keep_their_double_value() -> None:
    r = 0.1 + 0.2  # not a float32; the trainer's reward mean is taken in float64
    sample = RolloutSample(
        tokens=(1,), logp_f32=bytes(4), finish="stop", text="", status="AC", reward=r
    )
    group = RolloutGroup(prompt="d/0", prompt_ids=(1,), version=0, samples=(sample,))
    unit = RolloutUnit(unit={"unit_id": "u"}, version=0, generated_tokens=1, groups=(group,))
    assert RolloutUnit.from_bytes(unit.to_bytes()).groups[0].samples[0].reward == r


def test_a_record_that_does_not_fit_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="8 bytes of float32 log-probs for 3 tokens"):
        RolloutSample(
            tokens=(1, 2, 3), logp_f32=bytes(8), finish="stop", text="", status="AC", reward=1.0
        )
    group = _record().groups[0]
    with pytest.raises(InvalidArgument, match="unit of version 4 holds groups of version 3"):
        RolloutUnit(unit=UNIT, version=4, generated_tokens=0, groups=(group,))
    result = GenerateResult(unit_id="u", version=0, rollouts=(), generated_tokens=0, elapsed_s=0)
    with pytest.raises(InvalidArgument, match="0 rollouts, 1 texts"):
        RolloutUnit.of(
            UNIT, prompts=["d/0"], prompt_ids=[(1,)], result=result, texts=["a"], verdicts=[]
        )
    bad_unit = RolloutUnit(
        unit={"unit_id": "u", "x": float("nan")}, version=0, generated_tokens=0, groups=()
    )
    with pytest.raises(InvalidArgument, match="not JSON-serialisable"):
        bad_unit.to_bytes()


def _unit_bytes(unit_json: str, sample: pb.Sample | None = None) -> bytes:
    groups = [pb.Group(prompt="d/0", samples=[sample])] if sample else []
    return pb.Unit(unit_json=unit_json, groups=groups).SerializeToString()


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xff\xff",
        _unit_bytes("{}"),
        _unit_bytes("[1]"),
        _unit_bytes("{not json"),
        _unit_bytes('{"unit_id":"u"}', pb.Sample(token_ids=[1, 2], sampler_logp=bytes(4))),
    ],
    ids=["not protobuf", "no unit_id", "not an object", "not JSON", "logp of the wrong length"],
)
def test_bytes_that_are_not_a_record_are_corrupt(data: bytes) -> None:
    with pytest.raises(Corrupt, match="not a rollout record"):
        RolloutUnit.from_bytes(data)
