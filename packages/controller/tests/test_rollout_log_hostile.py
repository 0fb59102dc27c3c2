"""Rollout-log records whose sha256 is right but whose content rlx never writes (deep nesting, a
non-integer batch, negative ids, groups that do not match the unit): the reader names the file and
the field, reads them as lost (the unit is regenerated and rewritten), and `read` refuses them
with one Corrupt line instead of letting a traceback through."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rlx_controller.rollout_log import RolloutLog, decode_record, encode_record
from rlx_core.errors import Corrupt
from rlx_core.proto.rollout.v1 import rollout_pb2 as pb
from rlx_core.rollout import RolloutGroup, RolloutSample, RolloutUnit
from rlx_core.storage import open_storage

U = "b00000003.r0.u0001"


def _good() -> RolloutUnit:
    """A unit of two prompts, G 2, as the driver logs it."""
    unit = {
        "unit_id": U,
        "batch": 3,
        "round": 0,
        "index": 1,
        "version": 2,
        "prompts": [{"dataset": "add", "row": r, "epoch": 0} for r in (5, 9)],
        "seeds": [[11, 12], [13, 14]],
        "first_slot": 2,
    }
    groups = tuple(
        RolloutGroup(
            prompt=f"add/{row}",
            prompt_ids=(1, 7, row),
            version=2,
            samples=tuple(
                RolloutSample(
                    tokens=(30 + g, 2),
                    logp_f32=np.array([-0.5, -0.25], "<f4").tobytes(),
                    finish="stop",
                    text=str(g),
                    status="AC",
                    reward=1.0,
                )
                for g in range(2)
            ),
        )
        for row in (5, 9)
    )
    return RolloutUnit(unit=unit, version=2, generated_tokens=4, groups=groups)


def _framed(msg: pb.Unit) -> bytes:
    """`msg` in an RLXROLL2 frame whose sha256 and length are right."""
    body = msg.SerializeToString()
    return b"RLXROLL2 %s %d\n" % (hashlib.sha256(body).hexdigest().encode(), len(body)) + body


def _with_unit(text: str) -> pb.Unit:
    msg = pb.Unit.FromString(_good().to_bytes())
    msg.unit_json = text
    return msg


def _unit_json(**changes: object) -> str:
    return json.dumps({**_good().unit, **changes})


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _deep_unit() -> pb.Unit:
    # deeper than Python's parser recurses: json.loads raises RecursionError, not ValueError
    return _with_unit(_unit_json(batch=0).replace('"batch": 0', f'"batch": {_deep(100_000)}'))


def _nested_prompt() -> pb.Unit:
    # parses, but a list of lists sits where a prompt belongs
    return _with_unit(_unit_json(prompts=[[[[[1]]]]], seeds=[[1, 2]]))


def _negative_token() -> pb.Unit:
    msg = pb.Unit.FromString(_good().to_bytes())
    msg.groups[1].samples[0].token_ids[1] = -5
    return msg


def _negative_prompt_id() -> pb.Unit:
    msg = pb.Unit.FromString(_good().to_bytes())
    msg.groups[0].prompt_ids[2] = -1
    return msg


def _negative_version() -> pb.Unit:
    msg = pb.Unit.FromString(_good().to_bytes())
    msg.version = -1
    return msg


def _extra_group() -> pb.Unit:
    msg = pb.Unit.FromString(_good().to_bytes())
    msg.groups.add().CopyFrom(msg.groups[0])
    return msg


HOSTILE: dict[str, tuple[Callable[[], pb.Unit], str]] = {
    "deep nesting": (_deep_unit, "unit: nested deeper"),
    "nested where a prompt belongs": (_nested_prompt, "unit.prompts[0]: expected an object"),
    "string batch": (lambda: _with_unit(_unit_json(batch="3")), "unit.batch: expected an int"),
    "float batch": (lambda: _with_unit(_unit_json(batch=3.5)), "unit.batch: expected an int"),
    "negative batch": (lambda: _with_unit(_unit_json(batch=-3)), "unit.batch: expected an int"),
    "negative row": (
        lambda: _with_unit(_unit_json(prompts=[{"dataset": "add", "row": -5, "epoch": 0}] * 2)),
        "unit.prompts[0].row",
    ),
    "negative token id": (_negative_token, "groups[1].samples[0].token_ids[1]: expected a token"),
    "negative prompt id": (_negative_prompt_id, "groups[0].prompt_ids[2]: expected a token id"),
    "negative version": (_negative_version, "version: expected an integer"),
    "a group too many": (_extra_group, "groups: 3 groups for 2 prompts"),
    "unit not an object": (lambda: _with_unit("[1, 2]"), "payload:"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_record_is_named_read_as_lost_and_rewritten(
    case: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make, field = HOSTILE[case]
    data = _framed(make())
    storage = open_storage(tmp_path)
    key = f"rollouts/{U}.rec"
    storage.put(key, data)
    where = storage.key_uri(key)

    assert decode_record(data) is None
    log = RolloutLog(storage)
    with caplog.at_level(logging.WARNING, logger="rlx_controller.rollout_log"):
        assert log.get(U) is None  # lost: the driver regenerates the unit
        assert not log.contains(U)
    assert log.torn == {U}
    assert log.scan().torn == (U,)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0]  # said once, on one line
    assert f"{where}: {field}" in lines[0]

    with pytest.raises(Corrupt) as err:  # what `rlx rollouts show` reads with
        log.read(U)
    message = str(err.value)
    assert message.startswith(f"{where}: {field}") and "\n" not in message
    assert len(message) < 400

    # regenerated: the genuine record replaces it, and reads back
    assert log.append(_good()) == _good()
    assert storage.get(key) == encode_record(_good())
    assert RolloutLog(storage).read(U) == _good() and U not in log.bad


def test_a_genuine_record_reads_back_and_a_torn_one_is_not_called_hostile(
    tmp_path: Path,
) -> None:
    storage = open_storage(tmp_path)
    log = RolloutLog(storage)
    log.append(_good())
    assert RolloutLog(storage).read(U) == _good()
    whole = storage.get(f"rollouts/{U}.rec")
    storage.put(f"rollouts/{U}.rec", whole[:-7])  # torn by a crash: its sha256 fails
    fresh = RolloutLog(storage)
    assert fresh.read(U) is None and fresh.torn == {U} and fresh.bad == {}


def _v1(payload: dict[str, object]) -> bytes:
    """`payload` in an RLXROLL1 frame (the first format, JSON) whose sha256 and length are right."""
    body = json.dumps(payload).encode()
    return b"RLXROLL1 %s %d\n" % (hashlib.sha256(body).hexdigest().encode(), len(body)) + body


def test_a_first_format_record_whose_reward_no_float_holds_is_read_as_lost(
    tmp_path: Path,
) -> None:
    good = _good()
    samples = [
        {
            "tokens": list(s.tokens),
            "logp": [-0.5, -0.25],
            "finish": "stop",
            "status": "AC",
            "reward": 1.0,
        }
        for group in good.groups
        for s in group.samples
    ]
    payload = {"unit": good.unit, "version": 2, "generated_tokens": 4, "samples": samples}
    assert decode_record(_v1(payload)) is not None  # the control: the genuine one reads
    samples[0]["reward"] = 10**400  # JSON's integers have no bound; a float's range does
    assert decode_record(_v1(payload)) is None
    storage = open_storage(tmp_path)
    storage.put(f"rollouts/{U}.rec", _v1(payload))
    with pytest.raises(Corrupt, match="payload: not an RLXROLL1 payload: OverflowError"):
        RolloutLog(storage).read(U)
