"""The client of the paramserver: push versions, pull them (whole, by name, or sliced), confirm
progress, list and drop versions; plus a push client for R replicas.

Same-host fast path: when the server is on a loopback address and both sides see /dev/shm, no
bytes go through gRPC. The client proposes it once (a probe file the server must read back, and
the server's store directory the client must be able to open); if either side cannot, everything
goes over gRPC streaming. A push writes the tensors straight into the server's own chunk files
(`PushInPlace`: the server makes them, from files of deleted versions when it has them, so the
pages are already there; the client pwrites its arrays into them, checksumming and hashing each
piece while it is in the cache; the server checks that nobody still has a file open before it
stages the version): one copy, no segment, no fresh pages in the steady state. A pull maps the
server's chunk files read-only:
a tensor whose chunks are runs of its C-order bytes (one chunk, or chunks split along a leading
axis, each a whole number of pages) is returned as a view of its files mapped back to back, with
no copy at all; any other tensor, a slice or a pull into `out` arrays is copied once from the
mapped chunks. The server never writes a committed chunk file again and removes files only by
unlinking them, so a mapping stays valid and unchanged after the version is garbage-collected:
the pages live until the last array viewing them goes.

Integrity: every chunk the client maps is checked against the CRC32C the server recorded for it
at push; over gRPC, every message carries a CRC32 and every whole tensor is checked against the
XXH3-128 digest recorded at push (the server checks each stored chunk it reads, so slices too). A
mismatch raises `Corrupt`, never returns wrong data. CRC32C (google-crc32c, SSE4.2) and XXH3 run
at memory speed.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import math
import mmap
import os
import queue
import re
import secrets
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import google_crc32c
import grpc
import numpy as np
import xxhash

from rlx_core.clients._base import ServiceClient
from rlx_core.errors import Corrupt, FailedPrecondition, InvalidArgument, NotFound, RlxError
from rlx_core.proto.paramserver.v1 import paramserver_pb2 as pb
from rlx_core.proto.paramserver.v1 import paramserver_pb2_grpc as pb_grpc
from rlx_core.rpc.client import call
from rlx_core.rpc.status import from_rpc_error
from rlx_core.rpc.tensors import (
    TensorAssembler,
    dtype_from_name,
    dtype_name,
    tensor_to_chunks,
)

__all__ = [
    "ParamServerClient",
    "ReplicaVersions",
    "ReplicatedPushClient",
    "TensorSpec",
    "VersionInfo",
    "replica_for",
]

SHM_DIR = "/dev/shm"
SHM_PREFIX = "rlx-ps-"
STORE_PREFIX = "rlx-psstore-"  # the server's directory of chunk files under SHM_DIR
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
_ALIGN = 64
_PAGE = mmap.PAGESIZE
_STORE_KEY = re.compile(r"[0-9]+/")
_VERSION_DIR = re.compile(r"v[0-9]+-[0-9a-f]+")
PUSH_CHUNK_BYTES = 8 << 20  # a gRPC push's message size

Slice = tuple[slice, ...] | tuple[Sequence[int], Sequence[int]]


@dataclass(frozen=True)
class TensorSpec:
    """A manifest entry: what the server holds for one tensor."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    shard_axis: int
    chunk_shape: tuple[int, ...]
    nbytes: int
    digest: str  # XXH3-128 hex of the C-order bytes


@dataclass(frozen=True)
class VersionInfo:
    version: int
    nbytes: int
    created: float  # unix seconds
    num_tensors: int
    confirmed_by: tuple[str, ...]  # consumers whose confirmed version is >= this one


@dataclass(frozen=True)
class ReplicaVersions:
    """Everything `Versions()` says about one replica."""

    versions: tuple[VersionInfo, ...]
    consumers: dict[str, int]
    staged: tuple[int, ...]
    replica_id: int
    max_versions: int
    instance_id: str  # new on every start: a restarted replica is empty
    started: float
    bytes_read: int  # bytes read from the server's store since start


def replica_for(worker_index: int, num_replicas: int) -> int:
    """The replica inference worker `worker_index` pulls from: i mod R."""
    if num_replicas < 1:
        raise InvalidArgument(f"num_replicas must be >= 1, got {num_replicas}")
    if worker_index < 0:
        raise InvalidArgument(f"worker_index must be >= 0, got {worker_index}")
    return worker_index % num_replicas


def _spec(msg: pb.TensorSpec) -> TensorSpec:
    return TensorSpec(
        name=msg.name,
        dtype=dtype_from_name(msg.dtype),
        shape=tuple(int(d) for d in msg.shape),
        shard_axis=msg.shard_axis,
        chunk_shape=tuple(int(d) for d in msg.chunk_shape),
        nbytes=msg.nbytes,
        digest=msg.digest,
    )


def _box(slc: Slice, shape: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """(start, stop) per dimension from a tuple of slices (step 1) or explicit bounds."""
    if (
        len(slc) == 2
        and not any(isinstance(s, slice) for s in slc)
        and all(isinstance(s, Sequence) for s in slc)
    ):
        start, stop = slc
        return [int(v) for v in start], [int(v) for v in stop]  # type: ignore[union-attr]
    slices = list(slc) + [slice(None)] * (len(shape) - len(slc))
    if len(slices) != len(shape):
        raise InvalidArgument(f"{len(slc)} slices for a tensor of rank {len(shape)}")
    start, stop = [], []
    for s, dim in zip(slices, shape, strict=True):
        if not isinstance(s, slice):
            raise InvalidArgument(f"slices must be slice objects, got {s!r}")
        lo, hi, step = s.indices(dim)
        if step != 1:
            raise InvalidArgument("strided slices are not supported")
        start.append(lo)
        stop.append(max(lo, hi))
    return start, stop


def _host_of(address: str) -> str:
    host = address.rsplit(":", 1)[0] if ":" in address else address
    return host.removeprefix("ipv4:")


class _Segment:
    """A file in /dev/shm made by this client, mapped read-write; unlinked and unmapped by
    `close()`."""

    def __init__(self, nbytes: int) -> None:
        self.path = os.path.join(SHM_DIR, f"{SHM_PREFIX}{uuid.uuid4().hex}")
        self.size = max(nbytes, 1)
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, self.size)
            self.map = mmap.mmap(fd, self.size)
        except BaseException:
            os.close(fd)
            self.unlink()
            raise
        os.close(fd)
        self.buffer = np.frombuffer(self.map, dtype=np.uint8)

    def unlink(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def close(self) -> None:
        """Unlink and unmap now, not with the last reference: a failed push's exception keeps
        this frame, and so the mapping and the file's pages on /dev/shm, alive."""
        self.unlink()
        self.buffer = np.empty(0, np.uint8)
        with contextlib.suppress(BufferError):  # a view still out: it goes with that view
            self.map.close()


class _Libc:
    """mmap/munmap through ctypes: Python's mmap module cannot place a mapping at an address,
    which mapping chunk files back to back needs."""

    PROT_NONE, PROT_READ = 0, 1
    MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_NORESERVE = 0x1, 0x2, 0x10, 0x20, 0x4000
    FAILED = ctypes.c_void_p(-1).value

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.mmap = libc.mmap
        self.mmap.restype = ctypes.c_void_p
        self.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        self.munmap = libc.munmap
        self.munmap.restype = ctypes.c_int
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

    def map(self, addr: int | None, length: int, prot: int, flags: int, fd: int) -> int:
        got = self.mmap(addr, length, prot, flags, fd, 0)
        if got in (None, self.FAILED):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {length} bytes failed: {os.strerror(err)}")
        return int(got)


@functools.cache
def _libc() -> _Libc:
    return _Libc()


def _page_up(n: int) -> int:
    return -(-n // _PAGE) * _PAGE


class _Mapping:
    """Files mapped read-only at consecutive multiples of `stride` in one address range, as a
    numpy buffer (`np.asarray(mapping)`: uint8, read-only, the mapping as its base). Unmapped when
    the last array viewing it goes; the files' pages live as long as the mapping does, whatever
    happens to the files."""

    def __init__(self, paths: Sequence[str], stride: int, length: int) -> None:
        self._libc = _libc()
        self.size = stride * (len(paths) - 1) + _page_up(length)
        self.addr = 0
        lib = self._libc
        if len(paths) > 1:  # reserve the range, then place each file in it
            self.addr = lib.map(
                None,
                self.size,
                lib.PROT_NONE,
                lib.MAP_PRIVATE | lib.MAP_ANONYMOUS | lib.MAP_NORESERVE,
                -1,
            )
        try:
            for i, path in enumerate(paths):
                fd = os.open(path, os.O_RDONLY)
                try:
                    size = os.fstat(fd).st_size
                    if size != length:
                        raise Corrupt(f"chunk file {path} has {size} bytes instead of {length}")
                    if self.addr:
                        lib.map(
                            self.addr + i * stride,
                            length,
                            lib.PROT_READ,
                            lib.MAP_SHARED | lib.MAP_FIXED,
                            fd,
                        )
                    else:
                        self.addr = lib.map(None, length, lib.PROT_READ, lib.MAP_SHARED, fd)
                finally:
                    os.close(fd)
        except BaseException:
            self.close()
            raise

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.addr, True), "version": 3}

    def close(self) -> None:
        if self.addr:
            self._libc.munmap(self.addr, self.size)
            self.addr = 0

    def __del__(self) -> None:
        self.close()


class ParamServerClient(ServiceClient):
    """Typed access to one paramserver replica."""

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        token_file: str | None = None,
        channel: grpc.Channel | None = None,
        timeout: float = 120.0,
        shared_memory: bool | None = None,
        chunk_bytes: int = PUSH_CHUNK_BYTES,
    ) -> None:
        """`shared_memory`: None negotiates the same-host fast path, False never uses it, True
        requires it (raises if the server cannot). `chunk_bytes`: the size of a gRPC push's
        messages (8 MiB: one message per storage chunk, far below the 64 MiB limit)."""
        super().__init__(
            address, token=token, token_file=token_file, channel=channel, timeout=timeout
        )
        self._stub = pb_grpc.ParamServerStub(self._channel)
        self._want_shm = shared_memory
        self._shm: bool | None = None if shared_memory is not False else False
        self._shm_lock = threading.Lock()
        self._chunk_bytes = chunk_bytes
        self.last_transport = ""  # "shm" or "grpc": how the last push or pull moved its bytes
        self._store_root = ""  # the server's chunk files, once negotiated

    # --- negotiation ----------------------------------------------------------------------

    @property
    def fast_path(self) -> bool:
        """Whether bytes go through shared memory (negotiated with the server on first use)."""
        with self._shm_lock:
            if self._shm is None:
                self._shm, reason = self._negotiate()
                if self._want_shm and not self._shm:
                    raise InvalidArgument(f"{self.address}: shared memory unavailable: {reason}")
            return self._shm

    def _negotiate(self) -> tuple[bool, str]:
        if _host_of(self.address) not in _LOOPBACK:
            return False, "server is not on a loopback address"
        if not os.path.isdir(SHM_DIR):
            return False, f"{SHM_DIR} does not exist here"
        if sys.platform != "linux" or sys.byteorder != "little":
            return False, "the fast path maps little-endian chunk files with Linux mmap flags"
        nonce = secrets.token_bytes(16)
        segment = _Segment(len(nonce))
        try:
            segment.buffer[:] = np.frombuffer(nonce, dtype=np.uint8)
            reply = call(
                self._stub.ProbeShm,
                pb.ProbeShmRequest(path=segment.path, nonce=nonce),
                timeout=self._timeout,
                idempotent=True,
                target=self.address,
            )
        finally:
            segment.close()
        if not reply.ok:
            return False, reply.reason
        root = reply.store_root
        if (
            os.path.dirname(root) != SHM_DIR
            or not os.path.basename(root).startswith(STORE_PREFIX)
            or not os.access(root, os.R_OK | os.X_OK)
        ):
            return False, f"cannot open the server's store {root!r} (another user?)"
        self._store_root = root
        return True, ""

    # --- push -----------------------------------------------------------------------------

    def push(
        self,
        version: int,
        tensors: Mapping[str, np.ndarray],
        *,
        shard_axes: Mapping[str, int] | None = None,
        timeout: float | None = None,
    ) -> list[int]:
        """Push and commit `version` in one call; returns the versions the commit evicted."""
        return self._send(version, tensors, shard_axes, timeout, commit=True).evicted[:]

    def stage(
        self,
        version: int,
        tensors: Mapping[str, np.ndarray],
        *,
        shard_axes: Mapping[str, int] | None = None,
        timeout: float | None = None,
    ) -> int:
        """Send `version` without committing it; returns the bytes the server stored.

        `shard_axes[name]` is the axis the model shards that tensor on (default 0): the server
        chunks its storage along it, so a shard's slice reads few chunks. Waits server-side for
        room up to `timeout`, then raises ResourceExhausted.
        """
        return int(self._send(version, tensors, shard_axes, timeout, commit=False).bytes)

    def _send(
        self,
        version: int,
        tensors: Mapping[str, np.ndarray],
        shard_axes: Mapping[str, int] | None,
        timeout: float | None,
        *,
        commit: bool,
    ) -> pb.PushReply:
        arrays = {name: np.asarray(a) for name, a in tensors.items()}
        for array in arrays.values():
            dtype_from_name(dtype_name(array.dtype))  # refuse strings and objects up front
        axes = dict(shard_axes or {})
        unknown = sorted(set(axes) - set(arrays))
        if unknown:
            raise InvalidArgument(f"shard_axes names tensors not pushed: {unknown}")
        header = pb.PushHeader(
            version=version,
            tensors=[
                pb.TensorSpec(
                    name=name,
                    dtype=dtype_name(a.dtype),
                    shape=list(a.shape),
                    shard_axis=axes.get(name, 0),
                )
                for name, a in arrays.items()
            ],
            commit=commit,
        )
        try:
            reply = None
            if self.fast_path:
                with contextlib.suppress(_StoreMoved):  # then over gRPC
                    reply = self._push_in_place(header, arrays, timeout or self._timeout)
            if reply is None:
                reply = self._stub.Push(
                    self._grpc_push(header, arrays), timeout=timeout or self._timeout
                )
        except grpc.RpcError as e:
            raise from_rpc_error(e, target=self.address) from None
        if commit and not reply.committed:  # a server that predates PushHeader.commit
            raise FailedPrecondition(
                f"{self.address}: version {version} was staged but not committed (the server "
                "ignores PushHeader.commit: upgrade it, or stage() and commit())"
            )
        self.last_transport = "shm" if reply.used_shm else "grpc"
        return reply

    def _grpc_push(
        self, header: pb.PushHeader, arrays: Mapping[str, np.ndarray]
    ) -> Iterator[pb.PushRequest]:
        yield pb.PushRequest(header=header)
        for name, array in arrays.items():
            for chunk in tensor_to_chunks(name, array, chunk_bytes=self._chunk_bytes):
                yield pb.PushRequest(chunk=chunk)

    def _same_store(self, directory: str) -> bool:
        """Whether `directory` is in the store negotiated with the server; a replica restarted
        on the same address has a new store, so negotiate again first. False: the server cannot
        share it with this client (bytes go over gRPC)."""
        if os.path.dirname(directory) == self._store_root:
            return True
        with self._shm_lock:
            ok, _ = self._negotiate()
            self._shm = ok
        return ok

    def _push_in_place(
        self, header: pb.PushHeader, arrays: Mapping[str, np.ndarray], timeout: float
    ) -> pb.PushReply:
        """PushInPlace: the header out, the files to write back, the bytes written into them,
        their checksums out, the result back. Any failure here cancels the call, and the server
        then unstages the version."""
        outbox: queue.SimpleQueue[pb.PushInPlaceRequest | None] = queue.SimpleQueue()
        outbox.put(pb.PushInPlaceRequest(header=header))

        def requests() -> Iterator[pb.PushInPlaceRequest]:
            while (item := outbox.get()) is not None:
                yield item

        replies = self._stub.PushInPlace(requests(), timeout=timeout)
        try:
            first = next(replies, None)
            if first is None or first.WhichOneof("item") != "targets":
                raise Corrupt(f"{self.address}: an in-place push got no files to write")
            if not self._same_store(first.targets.store_dir):
                # end the stream unwritten: the server unstages the version before it answers
                outbox.put(None)
                with contextlib.suppress(grpc.RpcError):
                    for _ in replies:
                        pass
                raise _StoreMoved()
            sums = self._write_in_place(header, first.targets, arrays)
            outbox.put(pb.PushInPlaceRequest(written=pb.InPlaceWritten(tensors=sums)))
            second = next(replies, None)
            if second is None or second.WhichOneof("item") != "result":
                raise Corrupt(f"{self.address}: an in-place push ended without its result")
            return second.result
        except BaseException:
            replies.cancel()
            raise
        finally:
            outbox.put(None)

    def _write_in_place(
        self, header: pb.PushHeader, targets: pb.PullHeader, arrays: Mapping[str, np.ndarray]
    ) -> list[pb.TensorSums]:
        """Copy every tensor into the chunk files `targets` names, on a few threads (a copy
        runs without the GIL); each tensor's digest and each chunk's CRC32C."""
        directory = targets.store_dir
        if os.path.dirname(directory) != self._store_root or not _VERSION_DIR.fullmatch(
            os.path.basename(directory)
        ):
            raise Corrupt(f"{self.address}: push target {directory!r} is outside the store")
        declared = {t.name: (t.dtype, tuple(t.shape)) for t in header.tensors}
        got = {t.name: (t.dtype, tuple(t.shape)) for t in targets.tensors}
        if got != declared:
            raise Corrupt(f"{self.address}: the push targets differ from the header")
        plans = [_InPlaceTensor(directory, msg, arrays[msg.name]) for msg in targets.tensors]
        largest = max((p.scratch_bytes for p in plans), default=0)
        scratch = threading.local()

        def write(plan: _InPlaceTensor) -> tuple[str, list[int]]:
            if getattr(scratch, "buffer", None) is None:
                scratch.buffer = np.empty(largest, np.uint8)
            return plan.write(scratch.buffer)

        # whole tensors per thread, the largest first: a tensor's chunks are hashed and written
        # while they are still in the cache
        order = sorted(range(len(plans)), key=lambda i: -plans[i].raw.size)
        with ThreadPoolExecutor(_PUSH_THREADS, thread_name_prefix="rlx-ps-push") as pool:
            done = dict(zip(order, pool.map(write, [plans[i] for i in order]), strict=True))
        return [
            pb.TensorSums(name=plan.name, digest=done[i][0], chunk_crc32c=done[i][1])
            for i, plan in enumerate(plans)
        ]

    def commit(self, version: int) -> list[int]:
        """Make a staged version visible; returns the versions this evicted."""
        reply = call(
            self._stub.Commit,
            pb.CommitRequest(version=version),
            timeout=self._timeout,
            idempotent=True,  # committing twice is harmless
            target=self.address,
        )
        return list(reply.evicted)

    # --- pull -----------------------------------------------------------------------------

    def manifest(
        self, version: int | None = None, names: Sequence[str] = ()
    ) -> tuple[int, list[TensorSpec]]:
        """The version number and manifest entries (names, shapes, dtypes, chunking, checksums)."""
        reply = call(
            self._stub.Manifest,
            pb.ManifestRequest(latest=version is None, version=version or 0, names=list(names)),
            timeout=self._timeout,
            idempotent=True,
            target=self.address,
        )
        return reply.version, [_spec(t) for t in reply.tensors]

    def pull(
        self,
        version: int | None = None,
        *,
        names: Sequence[str] = (),
        slices: Mapping[str, Slice] | None = None,
        out: Mapping[str, np.ndarray] | None = None,
        timeout: float | None = None,
    ) -> tuple[int, dict[str, np.ndarray]]:
        """Pull `version` (None: the newest). `names` restricts the tensors; `slices[name]` pulls
        only a box of that tensor (a tuple of step-1 slices, or (starts, stops)): the server reads
        only the storage chunks the box overlaps.

        Over gRPC the arrays are the client's own. On the same-host fast path, without `out`,
        they are read-only: views of the server's chunk files mapped into this process where the
        chunk layout allows it (no copy), else fresh copies; either way they stay valid and
        unchanged after the version is garbage-collected. With `out` (an array of the right shape
        and dtype for every tensor pulled), the bytes are copied into those arrays.
        """
        slices = dict(slices or {})
        if self.fast_path:
            try:
                result = self._pull_mapped(version, names, slices, timeout, out)
            except NotFound:
                # the latest version can be collected between the header and the mapping
                if version is not None:
                    raise
                result = self._pull_mapped(version, names, slices, timeout, out)
        else:
            result = self._pull_grpc(version, names, slices, timeout)
            if out is not None:
                result = result[0], _into(out, result[1])
        return result

    @staticmethod
    def _request(
        version: int | None, names: Sequence[str], boxes: Mapping[str, tuple[list[int], list[int]]]
    ) -> pb.PullRequest:
        request = pb.PullRequest(latest=version is None, version=version or 0, names=list(names))
        for name, (start, stop) in boxes.items():
            request.slices.append(pb.TensorSlice(name=name, start=start, stop=stop))
        return request

    def _boxes(
        self, version: int | None, slices: Mapping[str, Slice]
    ) -> tuple[int | None, dict[str, tuple[list[int], list[int]]]]:
        """(start, stop) per sliced tensor; the manifest supplies shapes for slice objects."""
        if all(_is_bounds(s) for s in slices.values()):
            return version, {n: _box(s, ()) for n, s in slices.items()}
        version, specs = self.manifest(version, list(slices))
        shapes = {s.name: s.shape for s in specs}
        return version, {n: _box(s, shapes[n]) for n, s in slices.items()}

    def _pull_grpc(
        self,
        version: int | None,
        names: Sequence[str],
        slices: Mapping[str, Slice],
        timeout: float | None,
    ) -> tuple[int, dict[str, np.ndarray]]:
        version, boxes = self._boxes(version, slices)
        request = self._request(version, names, boxes)
        header: pb.PullHeader | None = None
        assembler = TensorAssembler()
        out: dict[str, np.ndarray] = {}
        try:
            for reply in self._stub.Pull(request, timeout=timeout or self._timeout):
                kind = reply.WhichOneof("item")
                if kind == "header":
                    header = reply.header
                elif kind == "chunk":
                    done = assembler.feed(reply.chunk)
                    if done is not None:
                        out[done[0]] = done[1]
                else:
                    raise Corrupt(f"{self.address}: unexpected {kind!r} in a gRPC pull")
        except grpc.RpcError as e:
            raise from_rpc_error(e, target=self.address) from None
        assembler.finish()
        if header is None:
            raise Corrupt(f"{self.address}: pull stream had no header")
        self._check(header, out, skip=set(slices))
        self.last_transport = "grpc"
        return header.version, out

    def _pull_mapped(
        self,
        version: int | None,
        names: Sequence[str],
        slices: Mapping[str, Slice],
        timeout: float | None,
        into: Mapping[str, np.ndarray] | None,
    ) -> tuple[int, dict[str, np.ndarray]]:
        version, boxes = self._boxes(version, slices)
        request = self._request(version, names, boxes)
        request.map_store = True
        header: pb.PullHeader | None = None
        try:
            for reply in self._stub.Pull(request, timeout=timeout or self._timeout):
                if reply.WhichOneof("item") != "header" or header is not None:
                    raise Corrupt(f"{self.address}: a map_store pull replies with one header only")
                header = reply.header
        except grpc.RpcError as e:
            raise from_rpc_error(e, target=self.address) from None
        if header is None:
            raise Corrupt(f"{self.address}: pull stream had no header")
        directory = header.store_dir
        if not self._same_store(directory):  # the new server cannot share its store with us
            got = self._pull_grpc(version, names, slices, timeout)
            return got if into is None else (got[0], _into(into, got[1]))
        if os.path.dirname(directory) != self._store_root or not _VERSION_DIR.fullmatch(
            os.path.basename(directory)
        ):
            raise Corrupt(f"{self.address}: store directory {directory!r} outside the store")
        parts = [_MappedTensor(header, msg, boxes.get(msg.name)) for msg in header.tensors]
        out: dict[str, np.ndarray] = {}
        copies: list[tuple[_MappedTensor, np.ndarray]] = []
        if into is not None:
            for part in parts:
                out[part.spec.name] = _target(into, part.spec.name, part.spec, boxes)
                copies.append((part, out[part.spec.name]))
            _copy_all(copies)
            self.last_transport = "shm"
            return header.version, out
        # tensors that cannot be views are copied into one fresh block: one big allocation
        # faults in far faster than many (huge pages), at the cost of the block living as long
        # as any of them
        block = np.empty(sum(_padded(p.nbytes) for p in parts if not p.stitchable), np.uint8)
        offset = 0
        for part in parts:
            if part.stitchable:
                out[part.spec.name] = part.view()
                continue
            array = block[offset : offset + part.nbytes].view(part.spec.dtype)
            out[part.spec.name] = array.reshape(part.shape)
            offset += _padded(part.nbytes)
            copies.append((part, out[part.spec.name]))
        _copy_all(copies)
        for _, array in copies:
            array.flags.writeable = False
        self.last_transport = "shm"
        return header.version, out

    def _check(self, header: pb.PullHeader, out: dict[str, np.ndarray], skip: set[str]) -> None:
        """Every tensor arrived; those not in `skip` (slices) match the CRC32C of the push."""
        expected = [t.name for t in header.tensors]
        if sorted(out) != sorted(expected):
            missing = sorted(set(expected) - set(out))
            raise Corrupt(f"version {header.version}: tensors missing from the pull: {missing}")
        for spec in header.tensors:
            if spec.name in skip:
                continue
            if _digest(out[spec.name]) != spec.digest:
                raise Corrupt(
                    f"version {header.version} tensor {spec.name!r}: checksum differs from the "
                    "one recorded at push"
                )

    # --- bookkeeping ----------------------------------------------------------------------

    def versions(self) -> list[int]:
        """The committed versions this replica holds, oldest first."""
        return [v.version for v in self.versions_info().versions]

    def versions_info(self) -> ReplicaVersions:
        reply = call(
            self._stub.Versions,
            pb.VersionsRequest(),
            timeout=self._timeout,
            idempotent=True,
            target=self.address,
        )
        return ReplicaVersions(
            versions=tuple(
                VersionInfo(
                    version=v.version,
                    nbytes=v.bytes,
                    created=v.created_unix,
                    num_tensors=v.num_tensors,
                    confirmed_by=tuple(v.confirmed_by),
                )
                for v in reply.versions
            ),
            consumers=dict(reply.consumers),
            staged=tuple(reply.staged),
            replica_id=reply.replica_id,
            max_versions=reply.max_versions,
            instance_id=reply.instance_id,
            started=reply.started_unix,
            bytes_read=reply.bytes_read,
        )

    def confirm(self, consumer_id: str, version: int) -> list[int]:
        """Record that `consumer_id` has progressed to `version`; returns versions deleted."""
        reply = call(
            self._stub.Confirm,
            pb.ConfirmRequest(consumer_id=consumer_id, version=version),
            timeout=self._timeout,
            idempotent=True,  # confirmations only move forward
            target=self.address,
        )
        return list(reply.evicted)

    def drop(self, version: int) -> None:
        """Delete a committed version or forget a staged one."""
        call(
            self._stub.Drop,
            pb.DropRequest(version=version),
            timeout=self._timeout,
            target=self.address,
        )


class _StoreMoved(Exception):
    """The server of this address has a store this client cannot map (it was restarted)."""


def _digest(array: np.ndarray) -> str:
    """XXH3-128 of an array's C-order bytes, as the server records it."""
    return xxhash.xxh3_128(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data).hexdigest()


_PUSH_THREADS = 2  # threads of a same-host push or pull
_PIECE = 1 << 20  # an in-place push's write: fits a core's L2
_SPLIT_BLOCK = 8 << 20  # a block of a tensor split along a later axis: the L3 cache's share


def _chunk_path(directory: str, store_key: str, index: tuple[int, ...]) -> str:
    return os.path.join(directory, store_key + ("c/" + "/".join(map(str, index)) if index else "c"))


class _InPlaceTensor:
    """One tensor of an in-place push: which chunk files to write, and what goes in each.

    The server chunks a tensor along one axis (`shard_axis`), whole along the others. When the
    axes before it have size 1, each chunk is a run of the tensor's C-order bytes (`runs`):
    copied as it is. Otherwise (a stacked [L, in, out] matrix split by its columns) each row of
    the axes before it ([in, out] at one layer, or one input row) holds a piece of every chunk:
    the tensor is streamed in C order, a block of rows at a time, each block hashed and cut
    into its chunks' pieces while it is in the cache (`_write_split`). Other chunk shapes (none
    that this package's server makes) take a chunk at a time, gathered (`_write_gathered`)."""

    def __init__(self, directory: str, msg: pb.TensorSpec, array: np.ndarray) -> None:
        if not _STORE_KEY.fullmatch(msg.store_key):
            raise Corrupt(f"tensor {msg.name!r}: malformed push target")
        self.name = msg.name
        self.array = np.ascontiguousarray(array)
        self.raw = self.array.reshape(-1).view(np.uint8)
        shape, chunk = tuple(msg.shape), tuple(msg.chunk_shape)
        if len(chunk) != len(shape) or any(c < 1 for c in chunk):
            raise Corrupt(f"tensor {msg.name!r}: malformed push target")
        self.shape, self.chunk = shape, chunk
        self.chunk_nbytes = math.prod(chunk) * self.array.dtype.itemsize
        grid = tuple(-(-d // c) for d, c in zip(shape, chunk, strict=True))
        self.indices = list(itertools.product(*(range(g) for g in grid)))
        self.paths = [_chunk_path(directory, msg.store_key, i) for i in self.indices]
        # the one axis the chunks split (0 when none does), if they split only one
        split = [a for a, (c, d) in enumerate(zip(chunk, shape, strict=True)) if c < d]
        self.axis = split[0] if len(split) == 1 else (0 if not split else None)
        # chunks are runs of the C-order bytes: copy bytes, no strides
        self.runs = self.axis is not None and math.prod(shape[: self.axis]) == 1
        self.padded = len(self.indices) * self.chunk_nbytes > self.raw.size

    @property
    def scratch_bytes(self) -> int:
        """The scratch `write` needs."""
        if self.runs:
            return self.chunk_nbytes if self.padded else 0
        if self.axis is None:
            return self.chunk_nbytes
        return self._split_block()[1]

    def write(self, scratch: np.ndarray) -> tuple[str, list[int]]:
        """Write every chunk into its file; the tensor's digest (of its C-order bytes) and each
        chunk's CRC32C. The source is read from memory once where the layout allows."""
        files = [self._open(k) for k in range(len(self.paths))]
        try:
            if self.runs:
                return self._write_runs(files, scratch)
            if self.axis is not None:
                return self._write_split(files, scratch)
            return self._write_gathered(files, scratch)
        finally:
            for fd in files:
                os.close(fd)

    def _open(self, k: int) -> int:
        fd = os.open(self.paths[k], os.O_WRONLY | os.O_NOFOLLOW)
        if os.fstat(fd).st_size != self.chunk_nbytes:
            os.close(fd)
            raise Corrupt(f"tensor {self.name!r}: push target {self.paths[k]} has the wrong size")
        return fd

    def _write_runs(self, files: list[int], scratch: np.ndarray) -> tuple[str, list[int]]:
        """Each chunk in pieces of _PIECE bytes, each checksummed, hashed and written while it
        is in the core's cache."""
        digest = xxhash.xxh3_128()
        crcs = []
        n = self.chunk_nbytes
        for k, fd in enumerate(files):
            piece = self.raw[k * n : (k + 1) * n]
            data = piece
            if piece.size < n:  # the padded edge chunk
                data = scratch[:n]
                data[: piece.size] = piece
                data[piece.size :] = 0
            crc = 0
            for start in range(0, n, _PIECE):
                part = data[start : start + _PIECE]
                crc = google_crc32c.extend(crc, part)
                if start < piece.size:
                    digest.update(piece[start : start + _PIECE].data)
                _pwrite(fd, part, start)
            crcs.append(int(crc))
        return digest.hexdigest(), crcs

    def _split_block(self) -> tuple[int, int]:
        """(rows, scratch bytes) of `_write_split`'s blocks: rows of the axes before the split
        one, ~_PIECE per chunk, at most _SPLIT_BLOCK in all (the L3 cache's share)."""
        assert self.axis is not None
        row = math.prod(self.shape[self.axis :]) * self.array.dtype.itemsize
        target = min(_SPLIT_BLOCK, max(_PIECE, len(self.paths) * _PIECE // 4))
        rows = max(1, min(math.prod(self.shape[: self.axis]), target // max(1, row)))
        # a chunk's piece of a block, its padding included
        piece = math.prod(self.chunk[self.axis :]) * self.array.dtype.itemsize
        return rows, rows * piece

    def _write_split(self, files: list[int], scratch: np.ndarray) -> tuple[str, list[int]]:
        """The tensor as [rows, A, T] (the split axis A between the axes before and after it),
        in blocks of rows: each block hashed, then each chunk's piece of it ([rows, c, T], a
        run of that chunk's file) gathered, checksummed and written, the block still cached."""
        assert self.axis is not None
        a = self.axis
        rows_total = math.prod(self.shape[:a])
        width, tail, c = self.shape[a], math.prod(self.shape[a + 1 :]), self.chunk[a]
        itemsize = self.array.dtype.itemsize
        # moved as unsigned ints of the same size: numpy copies those fastest (bfloat16's own
        # copy is ~15% slower)
        bits = self.array.view(f"u{itemsize}") if itemsize in (1, 2, 4, 8) else self.array
        source = bits.reshape(rows_total, width, tail)
        step, _ = self._split_block()
        digest = xxhash.xxh3_128()
        crcs = [0] * len(files)
        for r0 in range(0, rows_total, step):
            block = source[r0 : r0 + step]
            digest.update(block.reshape(-1).view(np.uint8).data)
            rows = block.shape[0]
            out = scratch[: rows * c * tail * itemsize].view(source.dtype)
            out = out.reshape(rows, c, tail)
            for k, fd in enumerate(files):
                lo, hi = k * c, min((k + 1) * c, width)
                out[:, : hi - lo] = block[:, lo:hi]
                if hi - lo < c:  # the padded edge chunk
                    out[:, hi - lo :] = 0
                data = out.reshape(-1).view(np.uint8)
                crcs[k] = google_crc32c.extend(crcs[k], data)
                _pwrite(fd, data, r0 * c * tail * itemsize)
        return digest.hexdigest(), [int(x) for x in crcs]

    def _write_gathered(self, files: list[int], scratch: np.ndarray) -> tuple[str, list[int]]:
        """A chunk at a time, gathered into `scratch` (padding zeroed)."""
        digest = xxhash.xxh3_128()
        digest.update(self.raw.data)  # chunk order is not C order here
        crcs = []
        view = scratch[: self.chunk_nbytes].view(self.array.dtype).reshape(self.chunk)
        for k, fd in enumerate(files):
            box = tuple(
                slice(i * c, min((i + 1) * c, d))
                for i, c, d in zip(self.indices[k], self.chunk, self.shape, strict=True)
            )
            part = tuple(slice(0, b.stop - b.start) for b in box)
            if any(p.stop < c for p, c in zip(part, self.chunk, strict=True)):
                view[...] = 0
            view[part] = self.array[box]
            data = view.reshape(-1).view(np.uint8)
            crcs.append(int(google_crc32c.value(data)))
            _pwrite(fd, data, 0)
        return digest.hexdigest(), crcs


def _pwrite(fd: int, data: np.ndarray, offset: int) -> None:
    """All of `data` at `offset` of file `fd` (pwrite, not a mapping: nothing of the server's
    pages stays with us)."""
    view, done = data.data, 0
    while done < data.size:
        done += os.pwrite(fd, view[done:], offset + done)


def _target(
    into: Mapping[str, np.ndarray],
    name: str,
    spec: TensorSpec,
    boxes: Mapping[str, tuple[list[int], list[int]]],
) -> np.ndarray:
    """The caller's array for tensor `name`, checked against what the pull returns."""
    target = into.get(name)
    if target is None:
        raise InvalidArgument(f"pull(out=...) has no array for tensor {name!r}")
    shape = spec.shape
    if name in boxes:
        start, stop = boxes[name]
        shape = tuple(b - a for a, b in zip(start, stop, strict=True))
    if target.shape != shape or target.dtype != spec.dtype:
        raise InvalidArgument(
            f"tensor {name!r}: out array is {target.dtype}{list(target.shape)}, the pulled "
            f"tensor is {spec.dtype}{list(shape)}"
        )
    if not target.flags.c_contiguous or not target.flags.writeable:
        raise InvalidArgument(f"tensor {name!r}: out array must be C-contiguous and writeable")
    return target


class _MappedTensor:
    """One tensor (or its box) read from the server's chunk files. `view()` maps the files back
    to back and returns them as the array, with no copy: possible when the tensor is whole and
    its chunks are page-sized runs of its C-order bytes (`stitchable`). `copy_into()` maps one
    chunk at a time and copies its overlap. Every chunk mapped is checked against its CRC32C
    first."""

    def __init__(
        self, header: pb.PullHeader, msg: pb.TensorSpec, box: tuple[list[int], list[int]] | None
    ) -> None:
        self.version = header.version
        self.spec = spec = _spec(msg)
        shape, chunk = spec.shape, spec.chunk_shape
        self.grid = tuple(-(-d // c) for d, c in zip(shape, chunk, strict=True))
        self.chunk_nbytes = math.prod(chunk) * spec.dtype.itemsize
        if not _STORE_KEY.fullmatch(msg.store_key) or len(msg.chunk_crc32c) != math.prod(self.grid):
            raise Corrupt(f"version {self.version} tensor {spec.name!r}: malformed manifest entry")
        self.crcs = msg.chunk_crc32c
        self.lo = [0] * len(shape) if box is None else box[0]
        self.hi = list(shape) if box is None else box[1]
        self.shape = tuple(b - a for a, b in zip(self.lo, self.hi, strict=True))
        self.nbytes = math.prod(self.shape) * spec.dtype.itemsize
        ranges = [
            range(a // c, (b - 1) // c + 1) for a, b, c in zip(self.lo, self.hi, chunk, strict=True)
        ]
        self.indices = list(itertools.product(*ranges)) if self.nbytes else []
        base = os.path.join(header.store_dir, msg.store_key)
        self.paths = [os.path.join(base, "c/" + "/".join(map(str, i))) for i in self.indices]
        if not shape:
            self.paths = [os.path.join(base, "c")]
        runs = math.prod(shape[: spec.shard_axis]) == 1  # chunks are runs of the C-order bytes
        self.stitchable = (
            box is None
            and self.nbytes > 0
            and (len(self.indices) == 1 or (runs and self.chunk_nbytes % _PAGE == 0))
        )

    def _verify(self, raw: np.ndarray, index: tuple[int, ...]) -> None:
        linear = int(np.ravel_multi_index(index, self.grid)) if index else 0
        if google_crc32c.value(raw) != self.crcs[linear]:
            raise Corrupt(
                f"version {self.version} tensor {self.spec.name!r}: checksum differs from the one "
                f"recorded at push (stored chunk {index})"
            )

    def _map(self, paths: list[str]) -> _Mapping:
        try:
            return _Mapping(paths, self.chunk_nbytes, self.chunk_nbytes)
        except FileNotFoundError:
            raise NotFound(
                f"version {self.version} was garbage-collected during the pull"
            ) from None
        except OSError as e:
            raise FailedPrecondition(f"cannot map the server's chunk files: {e}") from None

    def view(self) -> np.ndarray:
        """The whole tensor as a read-only view of its mapped files (`stitchable` only)."""
        raw = np.asarray(self._map(self.paths))
        n = self.chunk_nbytes
        for i, index in enumerate(self.indices):
            self._verify(raw[i * n : (i + 1) * n], index)
        return raw[: self.nbytes].view(self.spec.dtype).reshape(self.shape)

    def copy_into(self, out: np.ndarray) -> None:
        """Copy the tensor (or box) into `out`, of `self.shape` and the tensor's dtype."""
        chunk = self.spec.chunk_shape
        for index, path in zip(self.indices, self.paths, strict=True):
            mapped = self._map([path])
            raw = np.asarray(mapped)[: self.chunk_nbytes]
            self._verify(raw, index)
            src, dst = [], []
            for axis, i in enumerate(index):
                c0 = i * chunk[axis]
                a, b = max(self.lo[axis], c0), min(self.hi[axis], c0 + chunk[axis])
                src.append(slice(a - c0, b - c0))
                dst.append(slice(a - self.lo[axis], b - self.lo[axis]))
            out[tuple(dst)] = raw.view(self.spec.dtype).reshape(chunk)[tuple(src)]
            del raw
            mapped.close()  # no view of it is left


def _copy_all(copies: Sequence[tuple[_MappedTensor, np.ndarray]]) -> None:
    """Each tensor's chunks checked and copied into its array, the largest first on a few
    threads (checksums and copies run without the GIL)."""
    order = sorted(copies, key=lambda c: -c[1].nbytes)
    if len(order) < 2 or order[1][1].nbytes < _PIECE:  # one tensor worth a thread
        for part, array in order:
            part.copy_into(array)
        return
    with ThreadPoolExecutor(_PUSH_THREADS, thread_name_prefix="rlx-ps-pull") as pool:
        for done in [pool.submit(part.copy_into, array) for part, array in order]:
            done.result()


def _into(out: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Copy pulled arrays into the caller's arrays (same shape and dtype, C-contiguous)."""
    result = {}
    for name, array in got.items():
        target = out.get(name)
        if target is None:
            raise InvalidArgument(f"pull(out=...) has no array for tensor {name!r}")
        if target.shape != array.shape or target.dtype != array.dtype:
            raise InvalidArgument(
                f"tensor {name!r}: out array is {target.dtype}{list(target.shape)}, the pulled "
                f"tensor is {array.dtype}{list(array.shape)}"
            )
        if not target.flags.c_contiguous or not target.flags.writeable:
            raise InvalidArgument(f"tensor {name!r}: out array must be C-contiguous and writeable")
        np.copyto(target, array)
        result[name] = target
    return result


def _is_bounds(slc: Slice) -> bool:
    return len(slc) == 2 and not any(isinstance(s, slice) for s in slc)


def _padded(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _push_failed(version: int, address: str, error: RlxError) -> RlxError:
    """`error`, retold as the version it kept from being committed and the replica it came from."""
    return type(error)(f"version {version} not committed: push to {address} failed: {error}")


class ReplicatedPushClient:
    """Pushes each version to all R replicas in parallel and commits it only when every replica
    has it staged; if any push fails, the others' staged copies are dropped. With one replica,
    staging and commit are one call."""

    def __init__(self, addresses: Sequence[str], **client_kwargs: object) -> None:
        if not addresses:
            raise InvalidArgument("ReplicatedPushClient needs at least one address")
        self.clients = [ParamServerClient(a, **client_kwargs) for a in addresses]  # type: ignore[arg-type]
        self._pool = ThreadPoolExecutor(
            max_workers=len(addresses), thread_name_prefix="rlx-ps-push"
        )

    def push(
        self,
        version: int,
        tensors: Mapping[str, np.ndarray],
        *,
        shard_axes: Mapping[str, int] | None = None,
        timeout: float | None = None,
    ) -> None:
        if len(self.clients) == 1:
            # one replica: stage and commit in one call (a failed push leaves nothing staged)
            client = self.clients[0]
            try:
                client.push(version, tensors, shard_axes=shard_axes, timeout=timeout)
            except RlxError as e:
                raise _push_failed(version, client.address, e) from e
            return
        start = time.monotonic()
        staged = [
            self._pool.submit(c.stage, version, tensors, shard_axes=shard_axes, timeout=timeout)
            for c in self.clients
        ]
        errors: list[tuple[str, BaseException]] = []
        for client, future in zip(self.clients, staged, strict=True):
            error = future.exception()
            if error is not None:
                errors.append((client.address, error))
        if errors:
            for client, future in zip(self.clients, staged, strict=True):
                if future.exception() is None:
                    # best effort: a restart of that replica clears it too
                    with contextlib.suppress(RlxError):
                        client.drop(version)
            address, first = errors[0]
            if isinstance(first, RlxError):
                raise _push_failed(version, address, first) from first
            raise first
        commits = [self._pool.submit(c.commit, version) for c in self.clients]
        for client, commit in zip(self.clients, commits, strict=True):
            error = commit.exception()
            if error is not None:
                raise type(error)(
                    f"version {version}: commit on {client.address} failed "
                    f"after {time.monotonic() - start:.1f} s: {error}"
                ) from error

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for c in self.clients:
            c.close()

    def __enter__(self) -> ReplicatedPushClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
