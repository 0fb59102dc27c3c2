"""The rollout log on every backend: append before count, idempotent by unit id, torn records
read as missing and are rewritten."""

from __future__ import annotations

from typing import Any

import pytest

from rlx_controller.rollout_log import LogScan, RolloutLog, decode_record, encode_record
from rlx_core.errors import AlreadyExists, InvalidArgument
from rlx_core.storage import open_storage

PAYLOAD = {
    "unit": "b00000001.r0.u0000",
    "samples": [
        {"tokens": [1, 2, 3], "logp": [-0.5, -1.25], "reward": 1.0},
        {"tokens": [4], "logp": [-0.1], "reward": None},
    ],
}


def test_append_get_scan(run_root: str) -> None:
    log = RolloutLog(open_storage(run_root))
    assert log.get("b00000001.r0.u0000") is None
    assert log.position() == {"records": 0, "last_unit": ""}
    stored = log.append("b00000001.r0.u0000", PAYLOAD)
    assert stored == PAYLOAD
    log.append("b00000000.r0.u0000", {"x": 1})
    again = RolloutLog(open_storage(run_root))  # as after a restart
    assert again.get("b00000001.r0.u0000") == PAYLOAD
    assert again.contains("b00000000.r0.u0000")
    scan = again.scan()
    assert scan.valid == ("b00000000.r0.u0000", "b00000001.r0.u0000") and scan.torn == ()
    assert scan.last == "b00000001.r0.u0000" and scan.count == 2
    assert again.position() == {"records": 2, "last_unit": "b00000001.r0.u0000"}


def test_append_is_idempotent_by_unit_id(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = RolloutLog(open_storage(tmp_path))
    log.append("u1", PAYLOAD)
    # a second append of the same unit keeps what was logged first: a resumed run reuses it
    assert log.append("u1", {"other": True}) == PAYLOAD
    assert log.get("u1") == PAYLOAD
    assert log.append_strict("u1", PAYLOAD) == PAYLOAD
    with pytest.raises(AlreadyExists, match="different payload"):
        log.append_strict("u1", {"other": True})


def test_torn_record_reads_as_missing_and_is_rewritten(run_root: str) -> None:
    storage = open_storage(run_root)
    log = RolloutLog(storage)
    log.append("u1", PAYLOAD)
    log.append("u2", {"y": 2})
    whole = storage.get("rollouts/u2.rec")
    storage.put("rollouts/u2.rec", whole[: len(whole) // 2])  # a torn last record
    fresh = RolloutLog(storage)
    assert fresh.get("u2") is None
    assert fresh.scan().torn == ("u2",) and fresh.scan().valid == ("u1",)
    assert "u2" in fresh.torn
    assert fresh.append("u2", {"y": 2}) == {"y": 2}  # regenerated and logged again
    assert RolloutLog(storage).get("u2") == {"y": 2}
    assert fresh.scan().torn == ()


def test_record_format_detects_damage() -> None:
    data = encode_record(PAYLOAD)
    assert decode_record(data) == PAYLOAD
    assert decode_record(data[:-1]) is None
    assert decode_record(data + b" ") is None
    flipped = bytearray(data)
    flipped[-3] ^= 1
    assert decode_record(bytes(flipped)) is None
    assert decode_record(b"") is None and decode_record(b"RLXROLL1 x 3\nabc") is None
    with pytest.raises(InvalidArgument, match="JSON"):
        encode_record({"x": float("nan")})


def test_bad_unit_ids(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = RolloutLog(open_storage(tmp_path))
    with pytest.raises(InvalidArgument):
        log.append("../x", {})


def test_known_absent_append_writes_without_reading_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    storage = open_storage(tmp_path)
    log = RolloutLog(storage)
    # the single writer looked the unit up and found nothing: one write, no read, and its
    # (JSON-native) payload comes back as given, value for value what a read gives
    reads = []
    real_get = storage.get
    storage.get = lambda key: reads.append(key) or real_get(key)  # type: ignore[method-assign]
    payload = {"t": [1, 2], "r": 0.1, "s": [{"logp": [-0.1234567890123, -1e-300], "x": None}]}
    stored = log.append("u1", payload, known_absent=True)
    assert reads == []
    assert stored == payload and stored is not payload
    assert decode_record(real_get("rollouts/u1.rec")) == stored
    assert RolloutLog(storage).get("u1") == stored


def test_position_follows_appends_after_one_listing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    storage = open_storage(tmp_path)
    RolloutLog(storage).append("b00000000.r0.u0001", {"x": 1})
    log = RolloutLog(storage)
    assert log.position() == {"records": 1, "last_unit": "b00000000.r0.u0001"}  # listed once
    listings = []
    real_list = storage.list
    storage.list = lambda prefix: listings.append(prefix) or real_list(prefix)  # type: ignore[method-assign]
    log.append("b00000001.r0.u0000", {"x": 2}, known_absent=True)
    log.append("b00000000.r0.u0000", {"x": 3}, known_absent=True)
    log.append("b00000000.r0.u0000", {"x": 3})  # already logged: counted once
    assert log.position() == {"records": 3, "last_unit": "b00000001.r0.u0000"}
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
    log.append("b00000004.r0.u0000", {"x": 4})
    with caplog.at_level("WARNING", logger="rlx_core.storage"):
        back = proxy.down_for(5.0)
        assert log.append("b00000005.r0.u0000", PAYLOAD) == PAYLOAD
        back.join()
    assert any("rollouts/b00000005.r0.u0000.rec" in line for line in _retries(caplog))
    again = RolloutLog(open_storage(root))
    assert again.scan() == LogScan(("b00000004.r0.u0000", "b00000005.r0.u0000"), ())
    assert again.get("b00000005.r0.u0000") == PAYLOAD


def test_an_append_whose_answer_was_lost_is_logged_once_and_intact(
    new_root: Any, outage_proxy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    root = new_root("s3", "runs/r1")
    proxy = outage_proxy("s3")
    log = RolloutLog(open_storage(root, timeout_s=5))
    proxy.drop_responses(b"PUT ", b"/b00000006.r0.u0000.rec")
    with caplog.at_level("WARNING", logger="rlx_core.storage"):
        assert log.append("b00000006.r0.u0000", PAYLOAD) == PAYLOAD
    assert len(_retries(caplog)) == 1  # the write landed, was reported lost, and was repeated
    storage = open_storage(root)
    assert storage.list("rollouts/") == ["rollouts/b00000006.r0.u0000.rec"]
    assert storage.get("rollouts/b00000006.r0.u0000.rec") == encode_record(PAYLOAD)
    assert log.position() == {"records": 1, "last_unit": "b00000006.r0.u0000"}
