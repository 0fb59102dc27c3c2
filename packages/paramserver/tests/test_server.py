"""The paramserver through a real gRPC server on 127.0.0.1 with the real client: both transports
(gRPC streaming and the same-host shared-memory path), every error path, replicas, and the
16-concurrent-pullers acceptance test."""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import threading
import time
import weakref
import zlib
from collections.abc import Callable
from typing import Any

import grpc
import ml_dtypes
import numpy as np
import pytest
import xxhash

from rlx_core.clients import ParamServerClient, ReplicatedPushClient, replica_for
from rlx_core.errors import (
    AlreadyExists,
    Corrupt,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unauthenticated,
)
from rlx_core.proto.common.v1.tensor_pb2 import TensorChunk
from rlx_core.proto.paramserver.v1 import paramserver_pb2 as pb
from rlx_core.proto.paramserver.v1 import paramserver_pb2_grpc as pb_grpc
from rlx_core.rpc import connect, from_rpc_error
from rlx_testing import TOKEN, WRONG_TOKEN

Running = Any  # conftest.Running: a service and its address
TRANSPORTS = {"grpc": False, "shm": None}


def weights(seed: int, scale: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "embed": rng.standard_normal((200 * scale, 64)).astype(ml_dtypes.bfloat16),
        "layers/0/attn/q": rng.standard_normal((64, 96)).astype(ml_dtypes.bfloat16),
        "layers/0/mlp/up": rng.standard_normal((64, 300)).astype(np.float32),
        "layers/0/norm": rng.standard_normal(64).astype(np.float32),
        "step": np.asarray(seed, dtype=np.int64),
    }


AXES = {"layers/0/attn/q": 1, "layers/0/mlp/up": 1}


def shm_segments() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("rlx-ps-")}


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture(params=list(TRANSPORTS))
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


def test_push_pull_round_trip_on_each_transport(server: Running, transport: str) -> None:
    before = shm_segments()
    with server.client(shared_memory=TRANSPORTS[transport]) as client:
        data = weights(1)
        assert client.push(1, data, shard_axes=AXES) == []
        assert client.last_transport == transport
        version, out = client.pull(1)
        assert client.last_transport == transport
        assert version == 1 and sorted(out) == sorted(data)
        assert all(same(out[n], data[n]) for n in data)
        client.push(2, weights(2))
        version, out = client.pull()  # latest
        assert version == 2 and same(out["embed"], weights(2)["embed"])
        _, specs = client.manifest(1, ["layers/0/mlp/up"])
        raw = data["layers/0/mlp/up"].tobytes()
        assert specs[0].digest == xxhash.xxh3_128(raw).hexdigest()
        # 75 KiB in 5 equal chunks of at most 16 KiB along the shard axis
        assert specs[0].shard_axis == 1 and specs[0].chunk_shape == (64, 60)
        assert client.versions() == [1, 2]
    assert shm_segments() == before


def test_name_filter_and_slices_read_only_needed_chunks(server: Running, transport: str) -> None:
    with server.client(shared_memory=TRANSPORTS[transport]) as client:
        data = weights(3)
        client.push(3, data, shard_axes=AXES)
        read0 = client.versions_info().bytes_read
        _, out = client.pull(3, names=["layers/0/norm"])
        assert list(out) == ["layers/0/norm"] and same(out["layers/0/norm"], data["layers/0/norm"])
        read1 = client.versions_info().bytes_read
        assert read1 - read0 == 64 * 4
        # embed: (200, 64) bf16 in chunks of 100 rows; rows 130..140 are all in chunk 1
        # up: (64, 300) f32 in chunks of 60 columns; columns 70..130 span chunks 1 and 2
        _, out = client.pull(
            3,
            names=["embed", "layers/0/mlp/up"],
            slices={
                "embed": (slice(130, 140),),
                "layers/0/mlp/up": ([0, 70], [64, 130]),
            },
        )
        assert sorted(out) == ["embed", "layers/0/mlp/up"]
        assert same(out["embed"], data["embed"][130:140])
        assert same(out["layers/0/mlp/up"], data["layers/0/mlp/up"][:, 70:130])
        read2 = client.versions_info().bytes_read
        full = sum(a.nbytes for a in data.values())
        assert read2 - read1 == 100 * 64 * 2 + 2 * 64 * 60 * 4
        assert read2 - read1 < full / 2


def test_errors_through_the_server(server: Running, transport: str) -> None:
    before = shm_segments()
    with server.client(shared_memory=TRANSPORTS[transport]) as client:
        with pytest.raises(NotFound, match="holds no versions"):
            client.pull()
        client.push(5, weights(5))
        with pytest.raises(AlreadyExists, match="version 5 is already committed"):
            client.push(5, weights(5))
        with pytest.raises(NotFound, match=r"version 4 is not held by replica 0; held: \[5\]"):
            client.pull(4)
        with pytest.raises(NotFound, match="no tensor 'nope'"):
            client.pull(5, names=["nope"])
        with pytest.raises(InvalidArgument, match="out of range"):
            client.pull(5, slices={"embed": ([0, 0], [500, 64])})
        with pytest.raises(InvalidArgument, match=r"unknown dtype|cannot be sent"):
            client.push(6, {"s": np.array(["text"])})
        with pytest.raises(NotFound, match="held: \\[5\\]"):
            client.drop(9)
        with pytest.raises(InvalidArgument, match="consumer_id"):
            client.confirm("", 5)
    with ParamServerClient(server.address, token=WRONG_TOKEN) as bad:
        with pytest.raises(Unauthenticated):
            bad.versions()
    assert shm_segments() == before


def test_store_corruption_is_caught_by_the_client(server: Running, transport: str) -> None:
    with server.client(shared_memory=TRANSPORTS[transport]) as client:
        data = weights(7)
        client.push(7, data)
        stored = server.service.get(7)
        # flip the stored values of one row behind the server's back (bit rot in the store)
        bad = (data["embed"][10:11].astype(np.float32) + 1).astype(ml_dtypes.bfloat16)
        stored.array("embed")[10:11].write(bad).result()
        with pytest.raises(Corrupt, match="'embed': checksum differs"):
            client.pull(7)
        _, out = client.pull(7, names=["layers/0/norm"])  # untouched tensors still pull fine
        assert same(out["layers/0/norm"], data["layers/0/norm"])


def test_resource_exhausted_names_unconfirmed_consumers(
    make_server: Callable[..., Running],
) -> None:
    server = make_server(max_versions=2, replica_id=4)
    with server.client() as client:
        client.confirm("slow", 0)
        client.confirm("fast", 0)
        client.push(0, weights(0))
        client.push(1, weights(1))
        client.confirm("fast", 1)
        assert client.versions() == [0, 1]
        with pytest.raises(ResourceExhausted) as raised:
            client.push(2, weights(2), timeout=1.5)
        message = str(raised.value)
        assert "replica 4 holds versions [0, 1] (max_versions=2)" in message
        assert "not confirmed past version 0: slow (confirmed 0)" in message
        assert "fast" not in message
        assert client.confirm("slow", 1) == [0]
        client.push(2, weights(2), timeout=10)
        info = client.versions_info()
        assert [v.version for v in info.versions] == [1, 2]
        assert info.versions[0].confirmed_by == ("fast", "slow")
        assert info.consumers == {"fast": 1, "slow": 1}


def raw_push(address: str, requests: list[pb.PushRequest]) -> None:
    channel = connect(address, token=TOKEN)
    try:
        pb_grpc.ParamServerStub(channel).Push(iter(requests), timeout=30)
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None
    finally:
        channel.close()


def header(version: int, shape: list[int], dtype: str = "float32") -> pb.PushRequest:
    spec = pb.TensorSpec(name="w", dtype=dtype, shape=shape)
    return pb.PushRequest(header=pb.PushHeader(version=version, tensors=[spec]))


def chunk(
    data: bytes, shape: list[int], dtype: str = "float32", crc: int | None = None
) -> pb.PushRequest:
    msg = TensorChunk(
        name="w",
        dtype=dtype,
        shape=shape,
        total_bytes=len(data),
        offset=0,
        data=data,
        crc32=zlib.crc32(data) if crc is None else crc,
    )
    return pb.PushRequest(chunk=msg)


@pytest.mark.parametrize(
    ("requests", "error", "match"),
    [
        ([chunk(b"\0" * 16, [4])], InvalidArgument, "starts with a PushHeader"),
        ([header(1, [4]), chunk(b"\0" * 20, [5])], InvalidArgument, r"sent as float32\[5\]"),
        ([header(1, [4]), chunk(b"\0" * 8, [4], "float16")], InvalidArgument, "declares float32"),
        ([header(1, [4]), chunk(b"\0" * 8, [2])], InvalidArgument, r"w \(0/16 bytes\)|sent as"),
        ([header(1, [4])], InvalidArgument, r"push ended before all tensors arrived: w \(0/16"),
        ([header(1, [4]), chunk(b"\0" * 16, [4], crc=1)], Corrupt, "checksum mismatch"),
        ([header(-1, [4])], InvalidArgument, "version must be >= 0"),
        (
            [header(1, [4]), pb.PushRequest(shm=pb.ShmRef(path="/etc/passwd"))],
            InvalidArgument,
            "must be /dev/shm/rlx-ps-",
        ),
        (
            [header(1, [4]), pb.PushRequest(shm=pb.ShmRef(path="/dev/shm/rlx-ps-missing"))],
            FailedPrecondition,
            "not visible here",
        ),
    ],
)
def test_malformed_pushes_are_refused_and_leave_nothing_staged(
    server: Running, requests: list[pb.PushRequest], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        raw_push(server.address, requests)
    with server.client() as client:
        info = client.versions_info()
        assert info.staged == () and info.versions == ()
        client.push(1, {"w": np.ones(4, np.float32)})  # the version number is free again
        assert client.versions() == [1]


def test_stage_commit_and_drop_of_a_staged_version(server: Running) -> None:
    with server.client() as client:
        assert client.stage(1, {"w": np.ones(4, np.float32)}) == 16
        assert client.versions() == [] and client.versions_info().staged == (1,)
        with pytest.raises(NotFound, match="holds no versions"):
            client.pull(1)
        client.commit(1)
        client.commit(1)  # a retried commit is harmless
        assert client.versions() == [1]
        client.stage(2, {"w": np.ones(4, np.float32)})
        client.drop(2)
        assert client.versions_info().staged == ()
        with pytest.raises(NotFound, match="not staged"):
            client.commit(2)
        client.drop(1)
        assert client.versions() == []


def test_a_push_commits_in_its_own_call_and_frees_the_collected_version_aside(
    make_server: Callable[..., Running], transport: str
) -> None:
    server = make_server(max_versions=1)
    with server.client(shared_memory=TRANSPORTS[transport]) as client:
        assert client.push(1, {"w": np.ones(4, np.float32)}) == []
        assert client.versions() == [1] and client.versions_info().staged == ()
        old = server.service.get(1)
        gone = weakref.ref(old)
        del old
        # the commit of version 2 collects version 1 (max_versions=1) and says so
        assert client.push(2, {"w": np.full(4, 2, np.float32)}) == [1]
        assert client.versions() == [2]
        server.service._reaper.drain()  # version 1 was dropped on the reaper's thread
        assert gone() is None
        assert same(client.pull(2)[1]["w"], np.full(4, 2, np.float32))


def test_push_shm_needs_a_header_and_a_segment(server: Running) -> None:
    channel = connect(server.address, token=TOKEN)
    stub = pb_grpc.ParamServerStub(channel)
    spec = pb.TensorSpec(name="w", dtype="float32", shape=[4])
    try:
        for request, match in [
            (pb.PushShmRequest(shm=pb.ShmRef(path="/dev/shm/rlx-ps-x")), "header and a shm"),
            (pb.PushShmRequest(header=pb.PushHeader(version=1, tensors=[spec])), "header and"),
            (
                pb.PushShmRequest(
                    header=pb.PushHeader(version=1, tensors=[spec], commit=True),
                    shm=pb.ShmRef(path="/dev/shm/rlx-ps-missing"),
                ),
                "not visible here",
            ),
        ]:
            with pytest.raises((InvalidArgument, FailedPrecondition), match=match):
                try:
                    stub.PushShm(request, timeout=30)
                except grpc.RpcError as e:
                    raise from_rpc_error(e) from None
    finally:
        channel.close()
    with server.client() as client:  # nothing was staged or committed
        info = client.versions_info()
        assert info.staged == () and info.versions == ()


def test_shared_memory_negotiation(make_server: Callable[..., Running]) -> None:
    enabled = make_server()
    disabled = make_server(shared_memory=False)
    assert enabled.client().fast_path is True
    with disabled.client() as client:
        assert client.fast_path is False  # offered, refused: falls back to gRPC
        client.push(1, weights(1))
        assert client.last_transport == "grpc"
        _, out = client.pull(1)
        assert client.last_transport == "grpc" and same(out["embed"], weights(1)["embed"])
    with pytest.raises(InvalidArgument, match="shared memory disabled"):
        _ = disabled.client(shared_memory=True).fast_path
    # a non-loopback address never offers shared memory
    remote = ParamServerClient("10.255.255.1:1", token=TOKEN)
    assert remote.fast_path is False


def test_replicated_push_commits_everywhere_or_nowhere(make_server: Callable[..., Running]) -> None:
    replicas = [make_server(replica_id=i) for i in range(3)]
    addresses = [r.address for r in replicas]
    with ReplicatedPushClient(addresses, token=TOKEN) as pusher:
        pusher.push(1, weights(1))
        for i, replica in enumerate(replicas):
            with replica.client() as c:
                assert c.versions() == [1] and c.versions_info().replica_id == i
                assert same(c.pull(1)[1]["embed"], weights(1)["embed"])
        with replicas[2].client() as c:
            c.push(2, weights(9))  # replica 2 already has a version 2
        with pytest.raises(AlreadyExists, match=f"push to {addresses[2]} failed"):
            pusher.push(2, weights(2))
        for replica in replicas[:2]:
            with replica.client() as c:
                info = c.versions_info()
                assert [v.version for v in info.versions] == [1] and info.staged == ()
    assert [replica_for(i, 3) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(InvalidArgument):
        replica_for(0, 0)


def test_sixteen_pullers_while_pushing_and_collecting(make_server: Callable[..., Running]) -> None:
    """Acceptance: 16 concurrent pullers of v while v+1 is pushed and v-1 collected."""
    server = make_server(max_versions=2, chunk_kib=64)
    data = {v: weights(v, scale=20) for v in range(3)}  # ~2.7 MB per version
    digests = {
        v: {n: hashlib.sha256(a.tobytes()).hexdigest() for n, a in d.items()}
        for v, d in data.items()
    }
    pullers = 16
    with server.client() as admin:
        admin.push(0, data[0])
        admin.push(1, data[1])
        for i in range(pullers):
            admin.confirm(f"worker-{i}", 0)  # every worker is on v-1 = 0
        assert admin.versions() == [0, 1]
    errors: list[BaseException] = []
    evictions: list[list[int]] = []
    lock = threading.Lock()
    start = threading.Barrier(pullers + 1)

    def puller(i: int) -> None:
        try:
            with server.client(shared_memory=None if i % 2 else False) as client:
                start.wait()
                for round_ in range(3):
                    version, out = client.pull(1 if round_ != 2 else None)
                    assert version in (1, 2)
                    got = {n: hashlib.sha256(a.tobytes()).hexdigest() for n, a in out.items()}
                    assert got == digests[version]
                    if round_ == 0:
                        evicted = client.confirm(f"worker-{i}", 1)
                        with lock:
                            evictions.append(evicted)
        except BaseException as e:
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=puller, args=(i,)) for i in range(pullers)]
    for t in threads:
        t.start()
    with server.client() as pusher:
        start.wait()
        pusher.push(2, data[2], timeout=120)  # waits until every worker has passed 0
        info = pusher.versions_info()
    for t in threads:
        t.join(120)
    assert errors == []
    # exactly one confirmation, the last of the 16, collected version 0
    assert sorted(evictions) == [[]] * (pullers - 1) + [[0]]
    assert [v.version for v in info.versions] == [1, 2]
    assert info.versions[0].confirmed_by == tuple(sorted(f"worker-{i}" for i in range(pullers)))


def test_pull_into_caller_arrays(server: Running, transport: str) -> None:
    before = shm_segments()
    client = server.client(shared_memory=TRANSPORTS[transport])
    client.push(1, weights(1))
    client.push(2, weights(2))
    into = {n: np.empty_like(a) for n, a in weights(0).items()}
    version, got = client.pull(1, out=into)
    assert version == 1 and all(got[n] is into[n] for n in into)
    assert all(same(into[n], a) for n, a in weights(1).items())
    client.pull(2, out=into)
    assert all(same(into[n], a) for n, a in weights(2).items())
    # the fast path copies from the server's mapped chunk files: no segment of the client's
    assert shm_segments() == before
    with pytest.raises(InvalidArgument, match="out array is float32"):
        client.pull(2, names=["embed"], out={"embed": np.empty((200, 64), np.float32)})
    with pytest.raises(InvalidArgument, match="no array for tensor 'step'"):
        client.pull(2, names=["step"], out={})
    client.close()
    assert shm_segments() == before


def mapped_files() -> set[str]:
    """The paramserver chunk files this process has mapped."""
    with open("/proc/self/maps") as maps:
        return {line.split()[-1] for line in maps if "/rlx-psstore-" in line}


def test_fast_path_arrays_are_views_that_outlive_the_version(
    make_server: Callable[..., Running],
) -> None:
    # 64 KiB chunks: embed (4096, 64) f32 is 16 chunks of 256 rows, each 16 pages, mapped back
    # to back as one array; up (64, 1024) f32 split along axis 1 is copied out of its chunks
    server = make_server(chunk_kib=64, max_versions=1)
    rng = np.random.default_rng(0)
    data = {
        "embed": rng.standard_normal((4096, 64)).astype(np.float32),
        "up": rng.standard_normal((64, 1024)).astype(np.float32),
    }
    with server.client() as client:
        client.push(1, data, shard_axes={"up": 1})
        before = mapped_files()
        _, got = client.pull(1)
        embed_dir = os.path.join(server.service.get(1).dir, server.service.get(1).key("embed"))
        assert {f for f in mapped_files() - before if f.startswith(embed_dir)} == {
            os.path.join(embed_dir, f"c/{i}/0") for i in range(16)
        }
        assert not any(f.startswith(embed_dir) for f in before)
        assert all(same(got[n], data[n]) for n in data)
        assert not got["embed"].flags.writeable and not got["up"].flags.writeable
        # the version goes (max_versions=1) and its files are deleted: the arrays stay as pulled
        version_dir = server.service.get(1).dir
        client.push(2, {n: a + 1 for n, a in data.items()}, shard_axes={"up": 1})
        server.service._reaper.drain()  # deleted versions are dropped on the reaper's thread
        assert client.versions() == [2] and not os.path.exists(version_dir)
        assert all(same(got[n], data[n]) for n in data)
        _, newer = client.pull(2)
        assert same(newer["embed"], data["embed"] + 1) and same(got["embed"], data["embed"])
        del got, newer
        assert not any(f.startswith(version_dir) for f in mapped_files())


def test_files_gone_before_the_client_maps_them_is_not_found(server: Running) -> None:
    with server.client() as client:
        client.push(1, weights(1))
        shutil.rmtree(server.service.get(1).dir)  # collected between the header and the mapping
        with pytest.raises(NotFound, match="version 1 was garbage-collected during the pull"):
            client.pull(1)


def test_the_store_directory_goes_with_the_server(make_server: Callable[..., Running]) -> None:
    server = make_server()
    root = server.service.store_root
    assert root is not None and os.stat(root).st_mode & 0o777 == 0o700
    with server.client() as client:
        client.push(1, weights(1))
        _, kept = client.pull(1)
    server.service.close()
    assert not os.path.exists(root)
    assert same(kept["embed"], weights(1)["embed"])  # still mapped, still intact


def test_overflowing_pushes_are_refused_before_staging_and_valid_pushes_still_fit(
    make_server: Callable[..., Running],
) -> None:
    """2^32 x 2^32 float32 elements: INVALID_ARGUMENT naming the tensor, nothing staged, so
    valid pushes still get room."""
    server = make_server(max_versions=2)
    for version in (500, 501, 502, 503):
        with pytest.raises(InvalidArgument, match=r"'w': shape \[4294967296, 4294967296\]"):
            raw_push(server.address, [header(version, [2**32, 2**32])])
    with server.client() as client:
        assert client.versions_info().staged == ()
        client.push(152, {"w": np.ones(4, np.float32)})
        assert client.versions() == [152]


def store_dirs(server: Running) -> list[str]:
    assert server.service.store_root is not None
    return sorted(d for d in os.listdir(server.service.store_root) if d != "pool")  # versions


def test_a_push_cut_mid_stream_is_unstaged_and_its_files_freed_at_once(
    server: Running,
) -> None:
    """The client cancels after some chunks: the server unstages the version and removes what
    it stored itself, not whenever the garbage collector (off here) breaks a reference cycle."""
    with server.client() as client:
        client.push(1, {"w": np.ones(4, np.float32)})
    held = store_dirs(server)
    data = np.arange(1 << 20, dtype=np.float32)  # 4 MiB: 4 messages of 1 MiB
    spec = pb.TensorSpec(name="w", dtype="float32", shape=[data.size])
    sent_some, hold = threading.Event(), threading.Event()

    def requests() -> Any:
        yield pb.PushRequest(header=pb.PushHeader(version=2, tensors=[spec]))
        raw = data.tobytes()
        for offset in range(0, 2 << 20, 1 << 20):
            piece = raw[offset : offset + (1 << 20)]
            msg = TensorChunk(name="w", offset=offset, data=piece, crc32=zlib.crc32(piece))
            if offset == 0:
                msg.dtype, msg.total_bytes = "float32", len(raw)
                msg.shape.extend([data.size])
            yield pb.PushRequest(chunk=msg)
        sent_some.set()
        hold.wait(60)

    channel = connect(server.address, token=TOKEN)
    gc.disable()
    try:
        call = pb_grpc.ParamServerStub(channel).Push.future(requests(), timeout=60)
        assert sent_some.wait(30)
        deadline = time.monotonic() + 30
        while len(store_dirs(server)) == len(held):  # the version's directory is made
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert server.service.versions().staged == (2,)
        call.cancel()
        while server.service.versions().staged:
            assert time.monotonic() < deadline, "the cancelled push stayed staged"
            time.sleep(0.01)
        assert store_dirs(server) == held
    finally:
        gc.enable()
        hold.set()
        channel.close()
    with server.client() as client:
        client.push(2, {"w": data})  # the version number is free again
        assert same(client.pull(2)[1]["w"], data)


def shm_maps() -> list[str]:
    """Mappings of rlx-ps-* segments in this process (server and client both live here)."""
    with open("/proc/self/maps") as f:
        return [line for line in f if f"/dev/shm/{SHM_SEGMENT}" in line]


SHM_SEGMENT = "rlx-ps-"


def test_a_failed_shm_push_leaves_no_segment_mapped_or_on_dev_shm(server: Running) -> None:
    before = shm_segments()
    with server.client(shared_memory=True) as client:
        client.push(1, weights(1))
        gc.disable()
        try:
            with pytest.raises(AlreadyExists) as failed:
                client.push(1, weights(1))
            # the exception (and its traceback, with the push's frame) is still alive here
            assert failed.value is not None
            assert shm_maps() == [] and shm_segments() == before
        finally:
            gc.enable()
