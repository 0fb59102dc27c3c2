"""The rollout log on every backend: append before count, idempotent by unit id, torn records
read as missing and are rewritten, and records of the first format (RLXROLL1, JSON) still read."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import numpy as np
import pytest

from rlx_controller.rollout_log import LogScan, RolloutLog, decode_record, encode_record
from rlx_core.errors import AlreadyExists, InvalidArgument
from rlx_core.rollout import RolloutGroup, RolloutSample, RolloutUnit
from rlx_core.storage import open_storage


def _unit(unit_id: str, rows: tuple[int, ...] = (5, 9)) -> dict[str, Any]:
    """A work unit as rlx_controller.schedule.WorkUnit.to_dict() writes it (G = 2)."""
    return {
        "unit_id": unit_id,
        "batch": int(unit_id[1:9]),
        "round": 0,
        "index": 0,
        "version": 1,
        "prompts": [{"dataset": "add", "row": r, "epoch": 0} for r in rows],
        "seeds": [[10 * r, 10 * r + 1] for r in rows],
        "first_slot": 0,
    }


def _record(unit_id: str, reward: float = 1.0) -> RolloutUnit:
    """Two prompts of G 2; the second sample of each was not judged (INFRA)."""
    groups = []
    for p, row in enumerate((5, 9)):
        tokens = (30 + p, 31, 2)
        logp = np.array([-0.5, -1 / 3, -1e-8], "<f4").tobytes()
        samples = (
            RolloutSample(
                tokens=tokens, logp_f32=logp, finish="stop", text="7 ✓", status="AC", reward=reward
            ),
            RolloutSample(
                tokens=(), logp_f32=b"", finish="length", text="", status="INFRA", reward=None
            ),
        )
        groups.append(
            RolloutGroup(prompt=f"add/{row}", prompt_ids=(1, 2 + p), version=1, samples=samples)
        )
    return RolloutUnit(unit=_unit(unit_id), version=1, generated_tokens=6, groups=tuple(groups))


U0, U1 = "b00000000.r0.u0000", "b00000001.r0.u0000"


def test_append_get_scan(run_root: str) -> None:
    log = RolloutLog(open_storage(run_root))
    assert log.get(U1) is None
    assert log.position() == {"records": 0, "last_unit": ""}
    record = _record(U1)
    assert log.append(record) == record
    log.append(_record(U0))
    again = RolloutLog(open_storage(run_root))  # as after a restart
    assert again.get(U1) == record
    assert again.contains(U0)
    scan = again.scan()
    assert scan.valid == (U0, U1) and scan.torn == ()
    assert scan.last == U1 and scan.count == 2
    assert again.position() == {"records": 2, "last_unit": U1}


def test_append_is_idempotent_by_unit_id(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = RolloutLog(open_storage(tmp_path))
    first, other = _record(U1), _record(U1, reward=0.0)
    log.append(first)
    # a second append of the same unit keeps what was logged first: a resumed run reuses it
    assert log.append(other) == first
    assert log.get(U1) == first
    assert log.append_strict(first) == first
    with pytest.raises(AlreadyExists, match="different record"):
        log.append_strict(other)


def test_torn_record_reads_as_missing_and_is_rewritten(run_root: str) -> None:
    storage = open_storage(run_root)
    log = RolloutLog(storage)
    log.append(_record(U0))
    log.append(_record(U1))
    whole = storage.get(f"rollouts/{U1}.rec")
    storage.put(f"rollouts/{U1}.rec", whole[: len(whole) // 2])  # a torn last record
    fresh = RolloutLog(storage)
    assert fresh.get(U1) is None
    assert fresh.scan().torn == (U1,) and fresh.scan().valid == (U0,)
    assert U1 in fresh.torn
    assert fresh.append(_record(U1)) == _record(U1)  # regenerated and logged again
    assert RolloutLog(storage).get(U1) == _record(U1)
    assert fresh.scan().torn == ()


def test_record_format_detects_damage() -> None:
    data = encode_record(_record(U1))
    assert data.startswith(b"RLXROLL2 ")
    assert decode_record(data) == _record(U1)
    assert decode_record(data[:-1]) is None  # truncated
    assert decode_record(data + b" ") is None  # longer than its header says
    for at in (-3, len(data) // 2, data.index(b"\n") + 1):  # a bit flipped in the body
        flipped = bytearray(data)
        flipped[at] ^= 1
        assert decode_record(bytes(flipped)) is None
    flipped = bytearray(data)
    flipped[12] ^= 1  # ... or in the header's sha256
    assert decode_record(bytes(flipped)) is None
    assert decode_record(b"RLXROLL9" + data[8:]) is None  # an unknown format
    assert decode_record(b"") is None and decode_record(b"RLXROLL2 x 3\nabc") is None
    # a frame that checks around bytes that are not a record
    body = b"not a record"
    framed = b"RLXROLL2 %s %d\n%s" % (hashlib.sha256(body).hexdigest().encode(), len(body), body)
    assert decode_record(framed) is None


def test_a_record_under_another_units_name_reads_as_torn(tmp_path) -> None:  # type: ignore[no-untyped-def]
    storage = open_storage(tmp_path)
    RolloutLog(storage).append(_record(U0))
    storage.put(f"rollouts/{U1}.rec", storage.get(f"rollouts/{U0}.rec"))
    log = RolloutLog(storage)
    assert log.get(U1) is None and log.torn == {U1}


def _v1(payload: dict[str, Any]) -> bytes:
    """An RLXROLL1 record as the log wrote them before RLXROLL2: canonical JSON in the frame."""
    body = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False
    ).encode()
    return b"RLXROLL1 %s %d\n" % (hashlib.sha256(body).hexdigest().encode(), len(body)) + body


def _v1_payload(record: RolloutUnit, logp_as: str) -> dict[str, Any]:
    """`record` as the driver logged it in RLXROLL1: samples prompt-major, log-probs as base64
    of float32 (`logp_f32`) or, in the first records, a JSON list (`logp`)."""
    samples = []
    for group in record.groups:
        for s in group.samples:
            logp: Any = (
                base64.b64encode(s.logp_f32).decode()
                if logp_as == "logp_f32"
                else [float(x) for x in s.logp]
            )
            samples.append(
                {
                    "tokens": list(s.tokens),
                    logp_as: logp,
                    "finish": s.finish,
                    "text": s.text,
                    "status": s.status,
                    "reward": s.reward,
                }
            )
    return {
        "unit": record.unit,
        "prompt_ids": [list(g.prompt_ids) for g in record.groups],
        "version": record.version,
        "generated_tokens": record.generated_tokens,
        "samples": samples,
    }


@pytest.mark.parametrize("logp_as", ["logp_f32", "logp"])
def test_an_rlxroll1_record_reads_as_the_same_record(tmp_path, logp_as: str) -> None:  # type: ignore[no-untyped-def]
    record = _record(U1)
    data = _v1(_v1_payload(record, logp_as))
    assert decode_record(data) == record
    # a run logged before RLXROLL2 resumes: its records are reused, never rewritten
    storage = open_storage(tmp_path)
    storage.put(f"rollouts/{U1}.rec", data)
    log = RolloutLog(storage)
    assert log.scan() == LogScan((U1,), ())
    assert log.append(_record(U1, reward=0.0)) == record
    assert storage.get(f"rollouts/{U1}.rec") == data


def test_an_rlxroll1_record_without_prompt_ids_or_text() -> None:
    """The first records: no prompt ids (the batch recomputes them), no text."""
    payload = _v1_payload(_record(U1), "logp")
    del payload["prompt_ids"]
    for s in payload["samples"]:
        del s["text"]
    back = decode_record(_v1(payload))
    assert back is not None
    assert [g.prompt_ids for g in back.groups] == [(), ()]
    assert [s.text for g in back.groups for s in g.samples] == [""] * 4
    assert [g.prompt for g in back.groups] == ["add/5", "add/9"]
    assert back.groups[0].samples[0].logp_f32 == _record(U1).groups[0].samples[0].logp_f32


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.pop("samples"),
        lambda p: p["samples"].pop(),  # 3 samples for 2 prompts
        lambda p: p["samples"][0].update(logp=[-1.0]),  # 1 log-prob for 3 tokens
        lambda p: p.update(unit={"unit_id": U1}),
    ],
    ids=["no samples", "uneven groups", "short logp", "bad unit"],
)
def test_an_rlxroll1_payload_that_is_not_a_unit_reads_as_torn(damage: Any) -> None:
    payload = _v1_payload(_record(U1), "logp")
    damage(payload)
    assert decode_record(_v1(payload)) is None


def test_bad_unit_ids(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = RolloutLog(open_storage(tmp_path))
    bad = RolloutUnit(
        unit={**_unit(U0), "unit_id": "../x"}, version=1, generated_tokens=0, groups=()
    )
    with pytest.raises(InvalidArgument):
        log.append(bad)


def test_known_absent_append_writes_without_reading_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    storage = open_storage(tmp_path)
    log = RolloutLog(storage)
    # the single writer looked the unit up and found nothing: one write, no read, and its record
    # comes back as given, equal to what a read gives
    reads = []
    real_get = storage.get
    storage.get = lambda key: reads.append(key) or real_get(key)  # type: ignore[method-assign]
    record = _record(U1)
    stored = log.append(record, known_absent=True)
    assert reads == []
    assert stored is record
    assert decode_record(real_get(f"rollouts/{U1}.rec")) == record
    assert RolloutLog(storage).get(U1) == record


def test_position_follows_appends_after_one_listing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    storage = open_storage(tmp_path)
    RolloutLog(storage).append(_record("b00000000.r0.u0001"))
    log = RolloutLog(storage)
    assert log.position() == {"records": 1, "last_unit": "b00000000.r0.u0001"}  # listed once
    listings = []
    real_list = storage.list
    storage.list = lambda prefix: listings.append(prefix) or real_list(prefix)  # type: ignore[method-assign]
    log.append(_record(U1), known_absent=True)
    log.append(_record(U0), known_absent=True)
    log.append(_record(U0))  # already logged: counted once
    assert log.position() == {"records": 3, "last_unit": U1}
    assert listings == []  # a snapshot's position lists nothing once the log is known
    assert RolloutLog(storage).position() == log.position()  # what a fresh listing finds


def _retries(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rlx_core.storage"]


def test_an_append_rides_through_a_5_s_outage(
    new_root: Any, outage_proxy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    root = new_root("s3", "runs/r1")
    proxy = outage_proxy("s3")
    log = RolloutLog(open_storage(root, timeout_s=5))
    U4, U5 = "b00000004.r0.u0000", "b00000005.r0.u0000"
    log.append(_record(U4))
    with caplog.at_level("WARNING", logger="rlx_core.storage"):
        back = proxy.down_for(5.0)
        assert log.append(_record(U5)) == _record(U5)
        back.join()
    assert any(f"rollouts/{U5}.rec" in line for line in _retries(caplog))
    again = RolloutLog(open_storage(root))
    assert again.scan() == LogScan((U4, U5), ())
    assert again.get(U5) == _record(U5)


def test_an_append_whose_answer_was_lost_is_logged_once_and_intact(
    new_root: Any, outage_proxy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    root = new_root("s3", "runs/r1")
    proxy = outage_proxy("s3")
    log = RolloutLog(open_storage(root, timeout_s=5))
    U6 = "b00000006.r0.u0000"
    proxy.drop_responses(b"PUT ", f"/{U6}.rec".encode())
    with caplog.at_level("WARNING", logger="rlx_core.storage"):
        assert log.append(_record(U6)) == _record(U6)
    assert len(_retries(caplog)) == 1  # the write landed, was reported lost, and was repeated
    storage = open_storage(root)
    assert storage.list("rollouts/") == [f"rollouts/{U6}.rec"]
    assert storage.get(f"rollouts/{U6}.rec") == encode_record(_record(U6))
    assert log.position() == {"records": 1, "last_unit": U6}
