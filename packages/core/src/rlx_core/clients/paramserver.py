"""The client of the paramserver: push versions, pull them (whole, by name, or sliced), confirm
progress, list and drop versions; plus a push client for R replicas.

Same-host fast path: when the server is on a loopback address and both sides see /dev/shm, bytes
move through a shared-memory file instead of gRPC messages. The client proposes it once (a probe
file the server must read back); if the server cannot, everything goes over gRPC streaming. The
client creates every segment and unlinks it before the call returns, so none is ever left behind.

Integrity: every tensor pulled whole is checked against the CRC32 the server recorded when it was
pushed (end to end, whichever path); gRPC chunks also carry their own CRC32; slices pulled through
shared memory are checked against a CRC32 the server computes. A mismatch raises `Corrupt`.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import threading
import time
import uuid
import weakref
import zlib
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc
import numpy as np

from rlx_core.errors import Corrupt, InvalidArgument, NotFound, RlxError
from rlx_core.proto.paramserver.v1 import paramserver_pb2 as pb
from rlx_core.proto.paramserver.v1 import paramserver_pb2_grpc as pb_grpc
from rlx_core.rpc.client import call, connect
from rlx_core.rpc.status import from_rpc_error
from rlx_core.rpc.tensors import (
    DEFAULT_CHUNK_BYTES,
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
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
_ALIGN = 64

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
    sha256: str
    crc32: int


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
        sha256=msg.sha256,
        crc32=msg.crc32,
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
    """A file in /dev/shm made by this client, mapped read-write; unlinked by `unlink()`."""

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


class ParamServerClient:
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
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> None:
        """`shared_memory`: None negotiates the same-host fast path, False never uses it, True
        requires it (raises if the server cannot)."""
        self.address = address
        self._channel = channel or connect(address, token=token, token_file=token_file)
        self._stub = pb_grpc.ParamServerStub(self._channel)
        self._timeout = timeout
        self._want_shm = shared_memory
        self._shm: bool | None = None if shared_memory is not False else False
        self._shm_lock = threading.Lock()
        self._chunk_bytes = chunk_bytes
        self.last_transport = ""  # "shm" or "grpc": how the last push or pull moved its bytes
        self._pull_segment: _Segment | None = None
        self._finalizers: list[weakref.finalize] = []

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
            segment.unlink()
        return reply.ok, reply.reason

    # --- push -----------------------------------------------------------------------------

    def push(
        self,
        version: int,
        tensors: Mapping[str, np.ndarray],
        *,
        shard_axes: Mapping[str, int] | None = None,
        timeout: float | None = None,
    ) -> list[int]:
        """Push and commit `version`; returns the versions the commit evicted."""
        self.stage(version, tensors, shard_axes=shard_axes, timeout=timeout)
        return self.commit(version)

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
        )
        segment = None
        try:
            if self.fast_path:
                segment = _Segment(sum(_padded(a.nbytes) for a in arrays.values()))
                requests = self._shm_push(header, arrays, segment)
            else:
                requests = self._grpc_push(header, arrays)
            try:
                reply = self._stub.Push(requests, timeout=timeout or self._timeout)
            except grpc.RpcError as e:
                raise from_rpc_error(e, target=self.address) from None
        finally:
            if segment is not None:
                segment.unlink()
        self.last_transport = "shm" if reply.used_shm else "grpc"
        return int(reply.bytes)

    def _grpc_push(
        self, header: pb.PushHeader, arrays: Mapping[str, np.ndarray]
    ) -> Iterator[pb.PushRequest]:
        yield pb.PushRequest(header=header)
        for name, array in arrays.items():
            for chunk in tensor_to_chunks(name, array, chunk_bytes=self._chunk_bytes):
                yield pb.PushRequest(chunk=chunk)

    @staticmethod
    def _shm_push(
        header: pb.PushHeader, arrays: Mapping[str, np.ndarray], segment: _Segment
    ) -> Iterator[pb.PushRequest]:
        ref = pb.ShmRef(path=segment.path)
        offset = 0
        for name, array in arrays.items():
            raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            segment.buffer[offset : offset + raw.size] = raw
            ref.entries.append(pb.ShmEntry(name=name, offset=offset, nbytes=raw.size))
            offset += _padded(raw.size)
        yield pb.PushRequest(header=header)
        yield pb.PushRequest(shm=ref)

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

        Without `out`, arrays pulled through shared memory are read-only views of one private
        mapping made for this pull. With `out` (an array of the right shape and dtype for every
        tensor pulled), the bytes land in those arrays, and on the fast path the client reuses one
        segment across pulls: warm pages, the fastest way to reload weights in place.
        """
        slices = dict(slices or {})
        if self.fast_path:
            try:
                result = self._pull_shm(version, names, slices, timeout, out)
            except NotFound:
                # the latest version can change between the manifest and the pull: retry once
                if version is not None:
                    raise
                result = self._pull_shm(version, names, slices, timeout, out)
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

    def _pull_shm(
        self,
        version: int | None,
        names: Sequence[str],
        slices: Mapping[str, Slice],
        timeout: float | None,
        into: Mapping[str, np.ndarray] | None,
    ) -> tuple[int, dict[str, np.ndarray]]:
        wanted = list(dict.fromkeys([*names, *slices])) if names else []
        version, specs = self.manifest(version, wanted)
        shapes = {s.name: s.shape for s in specs}
        boxes = {n: _box(s, shapes[n]) for n, s in slices.items()}
        request = self._request(version, names, boxes)
        need = _segment_bytes(specs, boxes)
        segment = _Segment(need) if into is None else self._reusable_segment(need)
        request.shm_path = segment.path
        header: pb.PullHeader | None = None
        out: dict[str, np.ndarray] = {}
        verified: set[str] = set()
        try:
            try:
                for reply in self._stub.Pull(request, timeout=timeout or self._timeout):
                    kind = reply.WhichOneof("item")
                    if kind == "header":
                        header = reply.header
                    elif kind == "shm":
                        e = reply.shm
                        raw = segment.buffer[e.offset : e.offset + e.nbytes]
                        if e.name in slices and zlib.crc32(raw.data) != e.crc32:
                            raise Corrupt(f"tensor {e.name!r}: slice checksum mismatch")
                        array = raw.view(dtype_from_name(e.dtype)).reshape(tuple(e.shape))
                        if header is not None and e.name not in slices:
                            # checked now, while the server writes the next tensor
                            _check_whole(header, e.name, raw)
                            verified.add(e.name)
                        if into is None:
                            array.flags.writeable = False
                            out[e.name] = array
                        else:
                            out[e.name] = _into(into, {e.name: array})[e.name]
                    else:
                        raise Corrupt(f"{self.address}: unexpected {kind!r} in a shm pull")
            except grpc.RpcError as e:
                raise from_rpc_error(e, target=self.address) from None
        finally:
            if into is None:
                segment.unlink()
        if header is None:
            raise Corrupt(f"{self.address}: pull stream had no header")
        self._check(header, out, skip=set(slices) | verified)
        self.last_transport = "shm"
        return header.version, out

    def _reusable_segment(self, nbytes: int) -> _Segment:
        """The segment this client reuses for pulls into caller arrays, grown as needed; its file
        lives until `close()` (or garbage collection) unlinks it."""
        segment = self._pull_segment
        if segment is None or segment.size < nbytes:
            if segment is not None:
                segment.unlink()
            segment = _Segment(nbytes)
            self._pull_segment = segment
            self._finalizers.append(weakref.finalize(self, segment.unlink))
        return segment

    def _check(self, header: pb.PullHeader, out: dict[str, np.ndarray], skip: set[str]) -> None:
        """Every tensor arrived; those not in `skip` (slices, already checked) match their CRC32."""
        expected = [t.name for t in header.tensors]
        if sorted(out) != sorted(expected):
            missing = sorted(set(expected) - set(out))
            raise Corrupt(f"version {header.version}: tensors missing from the pull: {missing}")
        for spec in header.tensors:
            if spec.name in skip:
                continue
            array = out[spec.name]
            if (
                zlib.crc32(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
                != spec.crc32
            ):
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

    def close(self) -> None:
        for finalizer in self._finalizers:
            finalizer()
        self._pull_segment = None
        self._channel.close()

    def __enter__(self) -> ParamServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_whole(header: pb.PullHeader, name: str, raw: np.ndarray) -> None:
    """Compare a whole tensor's bytes with the CRC32 the server recorded when it was pushed."""
    for spec in header.tensors:
        if spec.name == name:
            if zlib.crc32(raw.data) != spec.crc32:
                raise Corrupt(
                    f"version {header.version} tensor {name!r}: checksum differs from the one "
                    "recorded at push"
                )
            return
    raise Corrupt(f"version {header.version}: tensor {name!r} is not in the pull header")


def _segment_bytes(
    specs: Sequence[TensorSpec], boxes: Mapping[str, tuple[list[int], list[int]]]
) -> int:
    """Segment size for a pull: each tensor (or box) padded to the alignment, back to back."""
    need = 0
    for spec in specs:
        if spec.name in boxes:
            start, stop = boxes[spec.name]
            dims = [max(0, b - a) for a, b in zip(start, stop, strict=True)]
            need += _padded(int(np.prod(dims, dtype=np.int64)) * spec.dtype.itemsize)
        else:
            need += _padded(spec.nbytes)
    return need


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


class ReplicatedPushClient:
    """Pushes each version to all R replicas in parallel and commits it only when every replica
    has it staged; if any push fails, the others' staged copies are dropped."""

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
            message = f"version {version} not committed: push to {address} failed: {first}"
            if isinstance(first, RlxError):
                raise type(first)(message) from first
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
