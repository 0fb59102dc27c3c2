"""ParamServerService called directly (no gRPC): storage, manifest, chunking, GC and admission."""

from __future__ import annotations

import gc
import os
import threading
import time

import google_crc32c
import ml_dtypes
import numpy as np
import pytest
import xxhash

from rlx_core.config import from_dict
from rlx_core.errors import (
    AlreadyExists,
    Cancelled,
    ConfigError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from rlx_paramserver import ParamServerConfig, ParamServerService
from rlx_paramserver.service import TensorDecl
from rlx_paramserver.store import Version, _runs_of_bytes, chunk_shape_for


def make(**config: object) -> ParamServerService:
    return ParamServerService(from_dict(ParamServerConfig, {"chunk_kib": 4, **config}))


def push(
    service: ParamServerService,
    version: int,
    tensors: dict[str, np.ndarray],
    *,
    axes: dict[str, int] | None = None,
    piece: int = 1000,
    timeout: float | None = 0.0,
) -> None:
    decls = [
        TensorDecl(n, a.dtype.name, a.shape, (axes or {}).get(n, 0)) for n, a in tensors.items()
    ]
    session = service.begin_push(version, decls, timeout=timeout)
    for name, array in tensors.items():
        raw = array.tobytes()
        for start in range(0, max(1, len(raw)), piece):
            session.write(name, start, raw[start : start + piece])
    session.finish()
    service.commit(version)


def read(service: ParamServerService, version: int | None = None, **kw: object) -> dict:
    plan = service.plan_pull(version, **kw)  # type: ignore[arg-type]
    out = {}
    for meta in plan.metas:
        slabs = list(plan.slabs(meta))
        shape = plan.out_shape(meta)
        out[meta.name] = (
            np.concatenate([s.reshape(-1) for s in slabs]).reshape(shape)
            if slabs
            else np.empty(shape, meta.dtype)
        )
    return out


def tensors(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "layers/0/w": rng.standard_normal((50, 30)).astype(ml_dtypes.bfloat16),
        "layers/0/b": rng.standard_normal(30).astype(np.float32),
        "embed": rng.integers(-100, 100, (17, 9, 5)).astype(np.int8),
        "scale": np.asarray(rng.standard_normal(), dtype=np.float64),
        "mask": rng.integers(0, 2, (7, 3)).astype(bool),
        "empty": np.zeros((0, 4), np.float16),
    }


def test_round_trip_keeps_dtype_bytes_and_manifest() -> None:
    service = make()
    data = tensors()
    push(service, 3, data, piece=777)
    out = read(service, 3)
    assert sorted(out) == sorted(data)
    for name, array in data.items():
        assert out[name].dtype == array.dtype and out[name].shape == array.shape, name
        assert out[name].tobytes() == array.tobytes(), name
    stored = service.get(None)
    assert stored.version == 3
    meta = stored.metas["layers/0/w"]
    raw = data["layers/0/w"].tobytes()
    assert meta.digest == xxhash.xxh3_128(raw).hexdigest()
    assert meta.dtype.name == "bfloat16" and meta.nbytes == 50 * 30 * 2
    assert stored.metas["empty"].digest == xxhash.xxh3_128(b"").hexdigest()
    assert stored.nbytes == sum(a.nbytes for a in data.values())


def test_chunks_stored_straight_are_the_chunks_tensorstore_writes() -> None:
    """Chunks that are runs of bytes skip the TensorStore array on push (and the read-back for
    their CRC); they must be byte for byte what the array itself stores, edge chunks padded,
    and read back through the array as the tensor."""
    service = make(chunk_kib=1)  # (50, 30) bf16 -> chunks of 17, 17 and 16 (padded) rows
    data = tensors(1)
    push(service, 0, data, piece=333)
    stored = service.get(0)
    metas = list(stored.metas.values())
    reference = Version(1, metas)  # in memory, written through TensorStore only
    for name, array in data.items():
        meta = stored.metas[name]
        assert _runs_of_bytes(meta), name
        if array.size:
            reference.array(name).write(array).result()
        assert np.array_equal(stored.array(name).read().result(), array), name
        for index in stored.chunks_of(name):
            raw = stored._read_raw(name, index)
            assert raw == reference._read_raw(name, index), (name, index)
            linear = int(np.ravel_multi_index(index, meta.grid)) if index else 0
            assert meta.chunk_crc32c[linear] == google_crc32c.value(raw)
    assert stored.metas["layers/0/w"].grid == (3, 1)
    push(service, 2, {"w": np.arange(64 * 64, dtype=np.float32).reshape(64, 64)}, axes={"w": 1})
    assert not _runs_of_bytes(service.get(2).metas["w"])  # column chunks: through the array


def test_chunks_split_only_the_shard_axis() -> None:
    assert chunk_shape_for((1000, 64), 4, 0, 64 << 10) == (250, 64)  # 4 equal chunks <= 64 KiB
    assert chunk_shape_for((64, 1000), 4, 1, 64 << 10) == (64, 250)
    assert chunk_shape_for((896, 4864), 2, 1, 8 << 20) == (896, 2432)  # not 4681 + padding
    assert chunk_shape_for((8, 8), 4, 0, 1 << 20) == (8, 8)  # small: one chunk
    assert chunk_shape_for((3, 1 << 20), 4, 0, 1 << 20) == (1, 1 << 20)  # a row beats the target
    assert chunk_shape_for((), 4, 0, 1024) == ()
    service = make(chunk_kib=1)
    push(service, 0, {"w": np.ones((64, 64), np.float32)}, axes={"w": 1})
    assert service.get(0).metas["w"].chunk_shape == (64, 4)


@pytest.mark.parametrize("axis", [0, 1])
def test_slice_reads_only_the_chunks_it_overlaps(axis: int) -> None:
    service = make(chunk_kib=1)  # (64, 64) float32 -> 16 chunks of 1 KiB along `axis`
    w = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    push(service, 0, {"w": w}, axes={"w": axis})
    box = [(0, 64), (0, 64)]
    box[axis] = (8, 12)  # exactly chunk 2 along the shard axis
    start, stop = [b[0] for b in box], [b[1] for b in box]
    assert service.bytes_read == 0
    out = read(service, 0, slices={"w": (start, stop)})
    assert np.array_equal(out["w"], w[tuple(slice(a, b) for a, b in box)])
    assert service.bytes_read == 1024
    box[axis] = (3, 13)  # straddles chunks 0..3 of 4 rows each
    start, stop = [b[0] for b in box], [b[1] for b in box]
    out = read(service, 0, slices={"w": (start, stop)})
    assert np.array_equal(out["w"], w[tuple(slice(a, b) for a, b in box)])
    assert service.bytes_read == 1024 + 4 * 1024
    read(service, 0)
    assert service.bytes_read == 5 * 1024 + 64 * 64 * 4


def test_already_exists_staged_and_committed() -> None:
    service = make()
    push(service, 1, {"a": np.ones(3)})
    with pytest.raises(AlreadyExists, match="version 1 is already committed"):
        service.begin_push(1, [TensorDecl("a", "float64", (3,))], timeout=0)
    session = service.begin_push(2, [TensorDecl("a", "float64", (3,))], timeout=0)
    with pytest.raises(AlreadyExists, match="version 2 is already being pushed"):
        service.begin_push(2, [TensorDecl("a", "float64", (3,))], timeout=0)
    session.abort()
    push(service, 2, {"a": np.ones(3)})
    assert [v.version for v in service.versions().versions] == [1, 2]


@pytest.mark.parametrize(
    ("decls", "match"),
    [
        ([], "at least one tensor"),
        ([TensorDecl("a", "float32", (2,)), TensorDecl("a", "float32", (2,))], "declared twice"),
        ([TensorDecl("a", "complex_thing", (2,))], "unknown dtype"),
        ([TensorDecl("a", "float32", (2, -1))], "negative dimension"),
        ([TensorDecl("a", "float32", (2, 3), 2)], "shard_axis 2 out of range"),
        ([TensorDecl("", "float32", (2,))], "empty name"),
        ([TensorDecl("a\x00b", "float32", (2,))], "control character"),
        ([TensorDecl("a" * 1025, "float32", (2,))], "1025 characters, more than 1024"),
        ([TensorDecl("a", "float32", (1,) * 33)], "rank 33, more than 32"),
        # 2^64 elements: 0 in int64 arithmetic, so the count is taken in Python integers
        (
            [TensorDecl("a", "float32", (2**32, 2**32))],
            r"'a': shape \[4294967296, 4294967296\] float32 holds 18446744073709551616 elements",
        ),
        ([TensorDecl("a", "float32", (0, 2**62))], r"'a': shape \[0, 4611686018427387904\] float"),
    ],
)
def test_bad_push_headers(decls: list[TensorDecl], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        make().begin_push(0, decls, timeout=0)


def test_shapes_past_the_version_bound_are_refused_naming_tensor_and_bytes() -> None:
    service = make(max_version_mib=1)
    with pytest.raises(InvalidArgument, match=r"'big': shape \[1024, 257\] float32 holds "):
        service.begin_push(0, [TensorDecl("big", "float32", (1024, 257))], timeout=0)
    two = [TensorDecl("a", "float32", (512, 256)), TensorDecl("b", "float32", (512, 257))]
    with pytest.raises(InvalidArgument, match=r"version 0: 2 tensors of 1050624 bytes"):
        service.begin_push(0, two, timeout=0)
    assert service.versions().staged == ()
    push(service, 0, {"a": np.ones((1024, 256), np.float32)})  # exactly 1 MiB fits


def test_refused_pushes_never_stay_staged_so_valid_ones_still_get_room() -> None:
    """Four pushes of 2^32 x 2^32 elements, then a valid push: with max_versions=2, versions
    left staged by failed pushes would leave it no room (RESOURCE_EXHAUSTED)."""
    service = make(max_versions=2)
    for version in (500, 501, 502, 503):
        with pytest.raises(InvalidArgument, match=r"tensor 'w': shape .* elements"):
            service.begin_push(version, [TensorDecl("w", "float32", (2**32, 2**32))], timeout=0)
    assert service.versions().staged == ()
    push(service, 152, {"w": np.ones(3, np.float32)})
    assert [v.version for v in service.versions().versions] == [152]


def store_dirs(service: ParamServerService) -> list[str]:
    assert service.store_root is not None
    return sorted(d for d in os.listdir(service.store_root) if d != "pool")  # versions


def test_an_aborted_push_frees_its_storage_at_once() -> None:
    """The partly received version's chunk files go with the abort itself, not whenever the
    garbage collector breaks a reference cycle that still holds the session (an exception's
    traceback does)."""
    service = make()
    push(service, 1, {"w": np.ones((64, 64), np.float32)})
    held = store_dirs(service)
    gc.disable()
    try:
        session = service.begin_push(2, [TensorDecl("w", "float32", (64, 64))], timeout=0)
        session.write("w", 0, np.ones(2048, np.float32).tobytes())
        assert len(store_dirs(service)) == 2
        keep = session  # a reference the abort cannot see (as a traceback's frame holds one)
        session.abort()
        assert store_dirs(service) == held and service.versions().staged == ()
        with pytest.raises(FailedPrecondition, match="version 2: the push was aborted"):
            keep.write("w", 8192, np.ones(2048, np.float32).tobytes())
        push(service, 2, {"w": np.ones((64, 64), np.float32)})
    finally:
        gc.enable()


def test_an_abort_after_a_drop_leaves_a_new_push_of_that_version_alone() -> None:
    service = make()
    first = service.begin_push(1, [TensorDecl("w", "float32", (2,))], timeout=0)
    service.drop(1)  # forget the staged push (a replicated push that failed elsewhere)
    second = service.begin_push(1, [TensorDecl("w", "float32", (2,))], timeout=0)
    first.abort()  # the first push's handler notices only now
    assert service.versions().staged == (1,)
    second.write("w", 0, np.ones(2, np.float32).tobytes())
    second.finish()
    service.commit(1)
    assert np.array_equal(read(service, 1)["w"], np.ones(2, np.float32))


def test_a_push_waiting_for_room_stops_when_cancelled() -> None:
    service = make(max_versions=1)
    push(service, 0, {"a": np.ones(2)})
    service.confirm("w", 0)  # version 0 cannot be freed until w passes it
    cancelled = threading.Event()
    threading.Timer(0.2, lambda: (cancelled.set(), service.wake())).start()
    with pytest.raises(Cancelled, match="version 1: the push was cancelled while waiting"):
        service.begin_push(
            1, [TensorDecl("a", "float64", (2,))], timeout=600, cancelled=cancelled.is_set
        )
    assert service.versions().staged == ()


def test_bad_bytes_and_incomplete_pushes() -> None:
    service = make()
    session = service.begin_push(0, [TensorDecl("a", "float32", (4,))], timeout=0)
    with pytest.raises(InvalidArgument, match="not in the push header"):
        session.write("b", 0, b"1234")
    with pytest.raises(InvalidArgument, match="expected bytes at offset 0, got 4"):
        session.write("a", 4, b"1234")
    with pytest.raises(InvalidArgument, match="20 bytes sent, more than the 16"):
        session.write("a", 0, b"x" * 20)
    session.write("a", 0, b"x" * 8)
    with pytest.raises(InvalidArgument, match=r"a \(8/16 bytes\)"):
        session.finish()
    session.abort()
    assert service.versions().staged == ()
    with pytest.raises(NotFound, match="not staged"):
        service.commit(0)


def test_pull_errors_name_what_is_held() -> None:
    service = make(replica_id=3)
    with pytest.raises(NotFound, match=r"replica 3 holds no versions.*restarted replica is empty"):
        service.get(None)
    push(service, 4, {"a": np.ones((4, 4))})
    with pytest.raises(NotFound, match=r"version 9 is not held by replica 3; held: \[4\]"):
        service.plan_pull(9)
    with pytest.raises(NotFound, match="no tensor 'b'"):
        service.plan_pull(4, ["b"])
    with pytest.raises(InvalidArgument, match=r"slice \[2, 5\) out of range on axis 1"):
        service.plan_pull(4, slices={"a": ([0, 2], [4, 5])})
    with pytest.raises(InvalidArgument, match="rank 2"):
        service.plan_pull(4, slices={"a": ([0], [4])})


def test_without_consumers_commit_evicts_the_oldest_beyond_n() -> None:
    service = make(max_versions=2)
    for v in range(4):
        push(service, v, {"a": np.full(3, v)})
    assert [s.version for s in service.versions().versions] == [2, 3]
    assert read(service, None)["a"].tolist() == [3, 3, 3]


def test_gc_waits_for_every_consumer_and_keeps_the_newest() -> None:
    service = make(max_versions=3)
    for v in range(3):
        push(service, v, {"a": np.full(3, v)})
    assert service.confirm("w0", 1) == [0]  # w0 past 0, nobody else registered: 0 goes
    assert [s.version for s in service.versions().versions] == [1, 2]
    assert service.confirm("w1", 1) == []  # w1 has not passed 1
    assert service.confirm("w1", 2) == []  # w0 still at 1
    assert service.confirm("w0", 5) == [1]  # both past 1; 2 is the newest: kept
    summary = service.versions()
    assert [s.version for s in summary.versions] == [2]
    assert summary.consumers == {"w0": 5, "w1": 2}
    assert summary.versions[0].confirmed_by == ("w0", "w1")
    assert service.confirm("w0", 0) == [] and service.versions().consumers["w0"] == 5
    with pytest.raises(InvalidArgument, match="consumer_id"):
        service.confirm("", 1)


def test_full_push_fails_after_its_deadline_naming_versions_and_laggards() -> None:
    service = make(max_versions=2, replica_id=1)
    push(service, 0, {"a": np.ones(2)})
    push(service, 1, {"a": np.ones(2)})
    service.confirm("slow", 0)
    service.confirm("fast", 1)
    with pytest.raises(ResourceExhausted) as info:
        service.begin_push(2, [TensorDecl("a", "float64", (2,))], timeout=0.2)
    message = str(info.value)
    assert "replica 1 holds versions [0, 1]" in message and "max_versions=2" in message
    assert "slow (confirmed 0)" in message and "fast" not in message


def test_full_push_proceeds_when_a_confirmation_frees_a_version() -> None:
    service = make(max_versions=2)
    push(service, 0, {"a": np.ones(2)})
    push(service, 1, {"a": np.ones(2)})
    service.confirm("w", 0)
    admitted = threading.Event()

    def pusher() -> None:
        push(service, 2, {"a": np.full(2, 2.0)}, timeout=60)
        admitted.set()

    thread = threading.Thread(target=pusher)
    thread.start()
    time.sleep(0.2)
    assert not admitted.is_set() and [v.version for v in service.versions().versions] == [0, 1]
    service.confirm("w", 1)  # past 0: it is freed, the push gets its room
    thread.join(30)
    assert admitted.is_set()
    assert [v.version for v in service.versions().versions] == [1, 2]


def test_drop_frees_room_and_unknown_drop_is_not_found() -> None:
    service = make(max_versions=1)
    push(service, 0, {"a": np.ones(2)})
    service.confirm("w", 0)
    with pytest.raises(ResourceExhausted):
        service.begin_push(1, [TensorDecl("a", "float64", (2,))], timeout=0)
    service.drop(0)
    push(service, 1, {"a": np.ones(2)})
    with pytest.raises(NotFound, match="held: \\[1\\]"):
        service.drop(7)


def test_a_pull_in_flight_survives_gc_of_its_version() -> None:
    service = make(max_versions=1)
    w = np.arange(4096, dtype=np.float32).reshape(64, 64)
    push(service, 0, {"w": w})
    plan = service.plan_pull(0)
    push(service, 1, {"w": w + 1})  # evicts 0 while the plan still holds it
    with pytest.raises(NotFound):
        service.plan_pull(0)
    got = np.concatenate([s.reshape(-1) for s in plan.slabs(plan.metas[0])])
    assert np.array_equal(got.reshape(64, 64), w)


def test_config_checks_its_fields() -> None:
    with pytest.raises(ConfigError, match="max_versions"):
        from_dict(ParamServerConfig, {"max_versions": 0})
    with pytest.raises(ConfigError, match="replica_id"):
        from_dict(ParamServerConfig, {"replica_id": -1})
    with pytest.raises(ConfigError, match="max_version_mib"):
        from_dict(ParamServerConfig, {"max_version_mib": -1})
