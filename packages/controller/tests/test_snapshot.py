"""Snapshots: every field round-trips, the file checks itself, writes are atomic, the last K are
kept, and loading skips (and names) a corrupt or truncated newest snapshot."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlx_controller.mixture import MixtureState, PromptRef
from rlx_controller.schedule import GroupRef, WorkUnit
from rlx_controller.snapshot import Snapshot, SnapshotStore, decode_snapshot
from rlx_core.errors import Corrupt, NotFound
from rlx_core.storage import open_storage


def make(step: int, **changes: object) -> Snapshot:
    unit = WorkUnit(
        unit_id=f"b{step:08d}.r0.u0000",
        batch=step,
        round=0,
        index=0,
        version=step - 1,
        prompts=(PromptRef("math", 3, 0), PromptRef("code", 1, 2)),
        seeds=((11, 12), (13, 14)),
        first_slot=0,
    )
    fields: dict[str, object] = {
        "run_id": "run-abc",
        "config_hash": "c" * 64,
        "step": step,
        "version": step,
        "checkpoint_step": step - step % 4,
        "checkpoint_uri": "s3://b/run/checkpoints",
        "params_hash": "p" * 64,
        "next_batch": step,
        "mixture": MixtureState(step * 2, (step, step)),
        "epochs": {"math": 0, "code": 1},
        "rng": {"mixture_draws": step * 2, "refill_round": 0},
        "rollout_log": {"records": step, "last_unit": f"b{step - 1:08d}.r0.u0000"},
        "outstanding": (unit,),
        "pool": (GroupRef(step - 1, step - 1, 1, 0, "b.r1.u0"),),
        "metrics": {"dropped_stale": 3.0, "reward_sum": 12.5},
        "reason": "reload",
        "created_unix": 1700000000.0 + step,
        "extra": {"note": "x"},
    }
    fields.update(changes)
    return Snapshot(**fields)  # type: ignore[arg-type]


def test_every_field_round_trips_with_checksum() -> None:
    snap = make(12)
    data = snap.encode()
    assert decode_snapshot(data) == snap
    doc = json.loads(data)
    assert set(doc["snapshot"]) == {
        "run_id",
        "config_hash",
        "step",
        "version",
        "checkpoint_step",
        "checkpoint_uri",
        "params_hash",
        "next_batch",
        "mixture",
        "epochs",
        "rng",
        "rollout_log",
        "outstanding",
        "pool",
        "metrics",
        "reason",
        "created_unix",
        "extra",
    }
    doc["snapshot"]["step"] = 13  # edited by hand: the checksum catches it
    with pytest.raises(Corrupt, match="checksum mismatch"):
        decode_snapshot(json.dumps(doc).encode(), "s13")
    with pytest.raises(Corrupt, match="truncated"):
        decode_snapshot(data[:-20], "s12")
    with pytest.raises(Corrupt, match="later checkpoint"):
        make(3, checkpoint_step=4)


def test_write_list_keep_last_k(run_root: str) -> None:
    store = SnapshotStore(open_storage(run_root), keep=3)
    keys = [store.write(make(s)) for s in (1, 2, 3, 4, 5)]
    assert keys[-1] == "snapshots/s0000000005"
    entries = store.entries()
    assert [e.step for e in entries] == [3, 4, 5] and all(e.ok for e in entries)
    assert store.latest() == make(5)
    assert store.load(4) == make(4)
    with pytest.raises(NotFound, match="step 1"):
        store.load(1)
    # a second snapshot at the same step (SIGTERM right after a reload boundary) is kept apart
    key = store.write(make(5, reason="sigterm"))
    assert key == "snapshots/s0000000005-1"
    assert store.latest() == make(5, reason="sigterm")


# every kind of damage locally; the object stores with one kind each (they are slower)
DAMAGE = [("local", d) for d in ("truncate", "flip", "garbage", "no_marker")]
DAMAGE += [("s3", "truncate"), ("gcs", "no_marker")]


@pytest.mark.parametrize(("run_root", "damage"), DAMAGE, indirect=["run_root"])
def test_corrupted_newest_snapshot_is_named_and_skipped(run_root: str, damage: str) -> None:
    storage = open_storage(run_root)
    store = SnapshotStore(storage, keep=5)
    store.write(make(4))
    store.write(make(8))
    newest = "snapshots/s0000000008/snapshot.json"
    data = storage.get(newest)
    if damage == "truncate":
        storage.put(newest, data[: len(data) // 2])
    elif damage == "flip":
        storage.put(newest, data.replace(b'"step": 8', b'"step": 9'))
    elif damage == "garbage":
        storage.put(newest, b"\x00" * len(data))
    else:
        storage.delete("snapshots/s0000000008/_COMMITTED")
    skipped: list[str] = []
    found = SnapshotStore(storage).latest(on_skip=skipped.append)
    assert found == make(4)
    assert len(skipped) == 1
    assert "s0000000008" in skipped[0] and storage.key_uri("snapshots") in skipped[0]
    entries = {e.step: e for e in store.entries()}
    assert entries[4].ok and not entries[8].ok and entries[8].problem
    with pytest.raises(Corrupt, match="s0000000008"):
        store.load(8)


def test_nothing_verifies(tmp_path) -> None:  # type: ignore[no-untyped-def]
    storage = open_storage(tmp_path)
    store = SnapshotStore(storage)
    assert store.latest() is None
    with pytest.raises(NotFound):
        store.load()
    store.write(make(2))
    storage.put("snapshots/s0000000002/snapshot.json", b"{}")
    assert store.latest(on_skip=lambda m: None) is None
    with pytest.raises(Corrupt, match="no snapshot verifies"):
        store.load()


def _retries(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rlx_core.storage"]


def test_a_snapshot_write_rides_through_a_5_s_outage(
    new_root: Any, outage_proxy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    root = new_root("s3", "runs/r1")
    proxy = outage_proxy("s3")
    store = SnapshotStore(open_storage(root, timeout_s=5), keep=2)
    store.write(make(1))
    store.write(make(2))
    with caplog.at_level("WARNING", logger="rlx_core.storage"):
        back = proxy.down_for(5.0)
        assert store.write(make(3)) == "snapshots/s0000000003"  # and prunes s1
        back.join()
    assert _retries(caplog) and all(root in line for line in _retries(caplog))
    fresh = SnapshotStore(open_storage(root), keep=2)
    assert [(e.key, e.ok) for e in fresh.entries()] == [
        ("snapshots/s0000000002", True),
        ("snapshots/s0000000003", True),
    ]
    assert fresh.latest() == make(3)


@pytest.mark.parametrize("lost", ["/snapshot.json", "/_COMMITTED"])
def test_a_snapshot_write_whose_answer_was_lost_is_written_once(
    lost: str, new_root: Any, outage_proxy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The write landed but was reported failed: the retry repeats it (same key, same bytes);
    no second snapshot at the step (`-1`), and it verifies."""
    root = new_root("s3", "runs/r1")
    proxy = outage_proxy("s3")
    store = SnapshotStore(open_storage(root, timeout_s=5), keep=3)
    proxy.drop_responses(b"PUT ", lost.encode())
    with caplog.at_level("WARNING", logger="rlx_core.storage"):
        assert store.write(make(7)) == "snapshots/s0000000007"
    assert len(_retries(caplog)) == 1
    entries = SnapshotStore(open_storage(root)).entries()
    assert [(e.key, e.ok) for e in entries] == [("snapshots/s0000000007", True)]
    assert entries[0].snapshot == make(7)
