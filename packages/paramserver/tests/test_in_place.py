"""Same-host pushes written in place into the server's chunk files, and the pool of files that
deleted versions leave for the next push (rlx_paramserver.pool)."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time
from typing import Any

import google_crc32c
import grpc
import ml_dtypes
import numpy as np
import pytest
import xxhash

from rlx_core.errors import Corrupt, FailedPrecondition, InvalidArgument
from rlx_core.proto.paramserver.v1 import paramserver_pb2 as pb
from rlx_core.proto.paramserver.v1 import paramserver_pb2_grpc as pb_grpc
from rlx_core.rpc import connect, from_rpc_error
from rlx_paramserver.pool import FilePool, unshared
from rlx_testing import TOKEN

Running = Any  # conftest.Running


def weights(seed: int) -> dict[str, np.ndarray]:
    """Every kind of chunking: runs along axis 0 with a padded edge chunk, a split along axis 1
    (strided chunks, a padded edge), a 3-d tensor split on its last axis, a scalar, an empty
    tensor."""
    rng = np.random.default_rng(seed)
    return {
        "embed": rng.standard_normal((4000, 48)).astype(ml_dtypes.bfloat16),  # 3 chunks, 1 edge
        "up": rng.standard_normal((40, 3000)).astype(np.float32),  # 4 chunks split on axis 1
        "conv": rng.standard_normal((3, 5, 7000)).astype(np.float32),  # split on axis 2
        "norm": rng.standard_normal(64).astype(np.float32),
        "step": np.asarray(seed, dtype=np.int64),
        "empty": np.zeros((0, 4), np.float32),
    }


AXES = {"up": 1, "conv": 2}


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def leases_work(directory: str) -> bool:
    path = os.path.join(directory, "lease-probe")
    with open(path, "wb") as f:
        f.write(b"x")
    try:
        return unshared(path) is not None
    finally:
        os.unlink(path)


def store_bytes(server: Running) -> int:
    total = 0
    for dirpath, _, files in os.walk(server.service.store_root):
        for name in files:
            total += os.stat(os.path.join(dirpath, name)).st_size
    return total


def test_pushes_go_in_place_and_reuse_the_files_of_deleted_versions(
    make_server: Any,
) -> None:
    server = make_server(max_versions=2, chunk_kib=128)
    pool = server.service._pool
    with server.client() as client, server.client(shared_memory=False) as remote:
        for v in range(1, 8):
            data = weights(v)
            client.push(v, data, shard_axes=AXES)
            assert client.last_transport == "shm"
            server.service._reaper.drain()
            for puller in (client, remote):
                _, got = puller.pull(v)
                assert all(same(got[n], data[n]) for n in data), v
            _, specs = client.manifest(v)
            for spec in specs:
                raw = np.ascontiguousarray(data[spec.name]).tobytes()
                assert spec.digest == xxhash.xxh3_128(raw).hexdigest()
            version = server.service.get(v)
            for name, meta in version.metas.items():  # every file matches its recorded CRC32C
                for k, index in enumerate(version.chunks_of(name)):
                    with open(version.chunk_path(name, index), "rb") as f:
                        assert google_crc32c.value(f.read()) == meta.chunk_crc32c[k]
        assert client.versions() == [6, 7]
    if pool.reused_bytes == 0 and not leases_work(server.service.store_root):
        pytest.skip("this kernel grants no file leases: nothing is pooled here")
    last = server.service.get(7)
    files = sum(m.chunk_nbytes * len(last.chunks_of(n)) for n, m in last.metas.items())
    # pushes 4 to 7 each took every file from a deleted version (3 new versions' worth of
    # pages first: 2 held and 1 received)
    assert pool.reused_bytes == 4 * files and pool.new_bytes == 3 * files
    # the store holds the 2 versions and at most one more in the pool
    assert store_bytes(server) <= 3 * files


def test_a_stacked_matrix_split_by_columns_streams_in_blocks_of_rows(make_server: Any) -> None:
    """[L, in, out] split along its last axis into 10 chunks (a padded edge): the client streams
    it in several blocks of rows, each cut into the 10 chunks' pieces; what the server stores
    reads back the same on both transports, whole and as a tensor-parallel half."""
    server = make_server(max_versions=2, chunk_kib=1024)
    rng = np.random.default_rng(0)
    data = {"layers/up": rng.standard_normal((16, 256, 605)).astype(np.float32)}  # 9.9 MB
    with server.client() as client, server.client(shared_memory=False) as remote:
        client.push(1, data, shard_axes={"layers/up": 2})
        assert client.last_transport == "shm"
        (spec,) = client.manifest(1)[1]
        assert spec.chunk_shape == (16, 256, 61)  # 10 chunks, the last 56 wide + 5 of padding
        assert spec.digest == xxhash.xxh3_128(data["layers/up"].tobytes()).hexdigest()
        version = server.service.get(1)
        meta = version.metas["layers/up"]
        for k, index in enumerate(version.chunks_of("layers/up")):
            with open(version.chunk_path("layers/up", index), "rb") as f:
                stored = np.frombuffer(f.read(), np.float32).reshape(spec.chunk_shape)
            assert google_crc32c.value(stored.tobytes()) == meta.chunk_crc32c[k]
            width = min(61, 605 - 61 * k)
            assert same(stored[..., :width], data["layers/up"][..., 61 * k : 61 * k + width])
            assert not stored[..., width:].any()  # the padding is zeros
        half = {"layers/up": ([0, 0, 0], [16, 256, 302])}
        for puller in (client, remote):
            assert same(puller.pull(1)[1]["layers/up"], data["layers/up"])
            got = puller.pull(1, slices=half)[1]["layers/up"]
            assert same(got, data["layers/up"][..., :302])


def test_a_pulled_view_keeps_its_bytes_after_its_files_would_be_reused(
    make_server: Any,
) -> None:
    """A zero-copy view of a deleted version must never change: its files are not pooled while
    any process maps them, so the next pushes get other pages."""
    server = make_server(max_versions=1, chunk_kib=128)
    data = {"embed": np.arange(256 * 1024, dtype=np.float32).reshape(256, 1024)}  # 8 chunks
    with server.client() as client:
        client.push(1, data)
        _, got = client.pull(1)
        view = got["embed"]
        assert not view.flags.owndata and not view.flags.writeable  # a view of the files
        for v in range(2, 6):  # v1 deleted; each push would take its files if they were free
            client.push(v, {"embed": np.full((256, 1024), -v, np.float32)})
            server.service._reaper.drain()
        assert same(view, data["embed"])
        reused_with_view = server.service._pool.reused_bytes
        del view, got
        client.push(6, {"embed": np.zeros((256, 1024), np.float32)})
        server.service._reaper.drain()
        client.push(7, {"embed": np.ones((256, 1024), np.float32)})
        # versions 2..5 were mapped by nobody: their files went round
        assert server.service._pool.reused_bytes > reused_with_view


def test_a_file_another_process_has_open_is_not_pooled(tmp_path: Any) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 8192)
    assert unshared(str(path)) in (True, None)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import mmap, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
            "m = mmap.mmap(fd, 8192, prot=mmap.PROT_READ); os.close(fd); print('mapped', "
            "flush=True); time.sleep(30)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "mapped"
        verdict = unshared(str(path))
        if verdict is None:
            pytest.skip("this kernel grants no file leases: nothing is pooled here")
        assert verdict is False  # mapped, its descriptor closed: still held
    finally:
        child.kill()
        child.wait()
    assert unshared(str(path)) is True


def test_the_pool_keeps_whole_directories_within_its_cap(tmp_path: Any) -> None:
    root = tmp_path / "store"
    root.mkdir()
    pool = FilePool(str(root))
    pool.note_version(3 << 20)
    layout = (("0/c/0", 1 << 20), ("0/c/1", 1 << 20), ("1/c", 1 << 20))

    def version(name: str, fill: bytes) -> str:
        for rel, size in layout:
            (root / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / name / rel).write_bytes(fill * size)
        return str(root / name)

    pool.recycle(version("v1", b"\1"), layout)
    assert not (root / "v1").exists()
    if pool.pooled_bytes == 0:
        pytest.skip("this kernel grants no file leases: nothing is pooled here")
    assert pool.pooled_bytes == 3 << 20
    pool.recycle(version("v2", b"\2"), layout)  # over the cap: removed
    assert not (root / "v2").exists() and pool.pooled_bytes == 3 << 20
    (root / "v3").mkdir()
    assert pool.take(layout, str(root / "v3")) == set()  # renamed whole, old bytes in it
    assert (root / "v3" / "1" / "c").read_bytes()[:1] == b"\1" and pool.reused_bytes == 3 << 20
    assert pool.pooled_bytes == 0 and os.listdir(pool.dir) == []
    pool.recycle(str(root / "v3"), layout)
    other = (("0/c", 2 << 20),)
    assert pool.take(other, str(root / "v4")) is None  # another layout: the pool gives it back
    assert pool.pooled_bytes == 0 and os.listdir(pool.dir) == []


def test_a_held_file_is_left_out_of_the_kept_directory(tmp_path: Any) -> None:
    root = tmp_path / "store"
    (root / "v1" / "0").mkdir(parents=True)
    pool = FilePool(str(root))
    pool.note_version(2 << 20)
    layout = (("0/a", 1 << 20), ("0/b", 1 << 20))
    for rel, size in layout:
        (root / "v1" / rel).write_bytes(b"\1" * size)
    held = open(root / "v1" / "0" / "b", "rb")  # noqa: SIM115 (held across the recycle)
    try:
        pool.recycle(str(root / "v1"), layout)
    finally:
        held.close()
    if pool.pooled_bytes == 0:
        pytest.skip("this kernel grants no file leases: nothing is pooled here")
    assert pool.pooled_bytes == 1 << 20
    (root / "v2").mkdir()
    assert pool.take(layout, str(root / "v2")) == {"0/b"}  # made anew by the version


# --- the protocol, driven by hand: clients that fail half-way -----------------------------------


def _stub(server: Running) -> pb_grpc.ParamServerStub:
    return pb_grpc.ParamServerStub(connect(server.address, token=TOKEN))


def _header(version: int, array: np.ndarray) -> pb.PushHeader:
    spec = pb.TensorSpec(name="w", dtype=array.dtype.name, shape=list(array.shape))
    return pb.PushHeader(version=version, tensors=[spec], commit=True)


class _Stream:
    """The request side of a PushInPlace call, fed by hand."""

    def __init__(self, stub: pb_grpc.ParamServerStub, header: pb.PushHeader) -> None:
        self.items: list[pb.PushInPlaceRequest | None] = [pb.PushInPlaceRequest(header=header)]
        self.replies = stub.PushInPlace(self._requests(), timeout=30)

    def _requests(self) -> Any:
        while True:
            while not self.items:
                time.sleep(0.005)
            item = self.items.pop(0)
            if item is None:
                return
            yield item

    def send(self, item: pb.PushInPlaceRequest | None) -> None:
        self.items.append(item)


def _files(targets: pb.PullHeader) -> list[str]:
    t = targets.tensors[0]
    rows = -(-t.shape[0] // t.chunk_shape[0])
    return [os.path.join(targets.store_dir, f"{t.store_key}c/{i}/0") for i in range(rows)]


def _write(paths: list[str], array: np.ndarray) -> list[int]:
    raw = array.reshape(-1).view(np.uint8)
    size = os.stat(paths[0]).st_size
    crcs = []
    for k, path in enumerate(paths):
        chunk = np.zeros(size, np.uint8)
        piece = raw[k * size : (k + 1) * size]
        chunk[: piece.size] = piece
        with open(path, "r+b") as f:
            f.write(chunk.tobytes())
        crcs.append(google_crc32c.value(chunk))
    return crcs


ARRAY = np.arange(16 * 1024, dtype=np.float32).reshape(64, 256)  # 64 KiB: 4 chunks of 16 KiB


def test_a_client_gone_before_it_wrote_leaves_nothing_staged(server: Running) -> None:
    stream = _Stream(_stub(server), _header(1, ARRAY))
    first = next(stream.replies)
    assert first.WhichOneof("item") == "targets" and server.service.versions().staged == (1,)
    stream.replies.cancel()
    deadline = time.monotonic() + 10
    while server.service.versions().staged and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.service.versions().staged == ()
    with server.client() as client:  # the same version pushes afresh
        client.push(1, {"w": ARRAY})
        assert same(client.pull(1)[1]["w"], ARRAY)


def test_a_file_still_mapped_when_the_client_says_written_is_refused(server: Running) -> None:
    stream = _Stream(_stub(server), _header(1, ARRAY))
    targets = next(stream.replies).targets
    paths = _files(targets)
    crcs = _write(paths, ARRAY)
    fd = os.open(paths[1], os.O_RDWR)
    held = mmap.mmap(fd, os.fstat(fd).st_size)  # a writable mapping left behind
    os.close(fd)
    try:
        written = pb.InPlaceWritten(
            tensors=[pb.TensorSums(name="w", digest="d", chunk_crc32c=crcs)]
        )
        stream.send(pb.PushInPlaceRequest(written=written))
        stream.send(None)
        try:
            reply = next(stream.replies)
        except grpc.RpcError as e:
            error = from_rpc_error(e)
        else:
            if unshared(paths[1]) is None:
                pytest.skip("this kernel grants no file leases")
            raise AssertionError(f"accepted: {reply}")
        assert isinstance(error, FailedPrecondition) and "still open or mapped" in str(error)
    finally:
        held.close()
    assert server.service.versions().staged == () and server.service.versions().versions == ()


@pytest.mark.parametrize(
    ("crcs", "error", "words"),
    [
        (lambda good: good[:-1], InvalidArgument, "3 chunk checksums for 4 chunks"),
        (lambda good: None, InvalidArgument, "no checksums for tensor 'w'"),
    ],
)
def test_written_with_malformed_checksums_is_refused(
    server: Running, crcs: Any, error: type, words: str
) -> None:
    stream = _Stream(_stub(server), _header(1, ARRAY))
    good = _write(_files(next(stream.replies).targets), ARRAY)
    sums = crcs(good)
    tensors = [] if sums is None else [pb.TensorSums(name="w", digest="d", chunk_crc32c=sums)]
    stream.send(pb.PushInPlaceRequest(written=pb.InPlaceWritten(tensors=tensors)))
    stream.send(None)
    with pytest.raises(grpc.RpcError) as caught:
        next(stream.replies)
    got = from_rpc_error(caught.value)
    assert isinstance(got, error) and words in str(got)
    assert server.service.versions().staged == ()


def test_checksums_that_differ_from_the_files_fail_every_pull(server: Running) -> None:
    """The server does not read the bytes back (that would cost as much as the copy); every
    read checks them, so wrong checksums can never yield the bytes."""
    stream = _Stream(_stub(server), _header(1, ARRAY))
    good = _write(_files(next(stream.replies).targets), ARRAY)
    bad = [good[0] ^ 1, *good[1:]]
    written = pb.InPlaceWritten(tensors=[pb.TensorSums(name="w", digest="d", chunk_crc32c=bad)])
    stream.send(pb.PushInPlaceRequest(written=written))
    stream.send(None)
    assert next(stream.replies).result.committed
    for shared in (None, False):
        with server.client(shared_memory=shared) as client, pytest.raises(Corrupt):
            client.pull(1)
