"""The paramserver service's logic, as plain Python (no grpc here).

Versioned weights in host memory (TensorStore): push (staged), commit (visible all at once),
pull, confirm, drop, and garbage collection.

Rules:
- At most `max_versions` committed versions are kept. With registered consumers (anyone who ever
  called `confirm`), a version v is deleted once every consumer has confirmed a version > v,
  always keeping the newest. Without consumers, committing a version evicts the oldest ones
  beyond `max_versions`.
- A push is admitted only if, once committed, the server could still keep at most
  `max_versions`: versions every consumer has passed count as freeable, staged ones count as
  kept. Otherwise it waits for confirmations or drops up to its deadline, then fails with
  `ResourceExhausted` naming the versions held and the consumers that have not confirmed.
  So while N versions are held, at most one more is being received: peak memory is about
  (N + 1) versions.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import math
import os
import queue
import shutil
import threading
import time
import unicodedata
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rlx_core.errors import (
    AlreadyExists,
    Cancelled,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from rlx_core.lifecycle import Lifecycle
from rlx_paramserver._version import __version__
from rlx_paramserver.config import ParamServerConfig
from rlx_paramserver.pool import FilePool
from rlx_paramserver.store import (
    TensorMeta,
    TensorWriter,
    Version,
    chunk_shape_for,
    dtype_of,
    parse_box,
)

__all__ = [
    "ParamServerService",
    "PullPlan",
    "PushSession",
    "TensorDecl",
    "VersionSummary",
    "VersionsSummary",
]

log = logging.getLogger(__name__)

SHM_DIR = "/dev/shm"
SHM_PREFIX = "rlx-ps-"


@dataclass(frozen=True)
class TensorDecl:
    """What a pusher declares about one tensor before sending its bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    shard_axis: int = 0


@dataclass(frozen=True)
class VersionSummary:
    version: int
    nbytes: int
    created: float
    num_tensors: int
    confirmed_by: tuple[str, ...]


@dataclass(frozen=True)
class VersionsSummary:
    versions: tuple[VersionSummary, ...]
    consumers: dict[str, int]
    staged: tuple[int, ...]
    replica_id: int
    max_versions: int
    instance_id: str
    started: float
    bytes_read: int


@dataclass
class PullPlan:
    """What a pull sends: the version, the manifest entries, and a box per tensor."""

    version: Version
    metas: list[TensorMeta]
    boxes: dict[str, tuple[slice, ...] | None] = field(default_factory=dict)

    def out_shape(self, meta: TensorMeta) -> tuple[int, ...]:
        box = self.boxes.get(meta.name)
        return meta.shape if box is None else tuple(s.stop - s.start for s in box)

    def out_nbytes(self, meta: TensorMeta) -> int:
        return int(np.prod(self.out_shape(meta), dtype=np.int64)) * meta.dtype.itemsize

    def slabs(self, meta: TensorMeta) -> Iterator[np.ndarray]:
        return self.version.slabs(meta.name, self.boxes.get(meta.name))


class PushSession:
    """One version being received. Feed bytes per tensor, then `finish()` to stage it; `abort()`
    (any failure) unstages it and frees what it stored at once."""

    def __init__(
        self,
        service: ParamServerService,
        version: Version,
        block_bytes: int,
        entry: _Staged,
        cancelled: Callable[[], bool] | None = None,
    ) -> None:
        self._service = service
        self.version = version
        self._entry = entry
        self._cancelled = cancelled
        self._writers = {name: TensorWriter(version, name, block_bytes) for name in version.metas}
        self._closed = False
        self._aborted = False

    def meta(self, name: str) -> TensorMeta:
        meta = self.version.metas.get(name)
        if meta is None:
            raise InvalidArgument(
                f"version {self.version.version}: tensor {name!r} is not in the push header"
            )
        return meta

    def _check_open(self) -> None:
        if self._aborted:
            raise FailedPrecondition(f"version {self.version.version}: the push was aborted")
        if self._cancelled is not None and self._cancelled():
            raise Cancelled(
                f"version {self.version.version}: the push was cancelled by its client (or "
                "its deadline passed) before every byte arrived"
            )

    def write(self, name: str, offset: int, data: bytes | memoryview | np.ndarray) -> None:
        """Add bytes of tensor `name` at `offset` (each tensor's bytes arrive in order)."""
        self._check_open()
        self.meta(name)
        if isinstance(data, np.ndarray):
            view = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
        else:
            view = memoryview(data).cast("B")
        self._writers[name].feed(offset, view)

    def write_shm(self, path: str, entries: Sequence[tuple[str, int, int]]) -> None:
        """Read every tensor from a same-host segment the client wrote: (name, offset, nbytes).

        Read with pread into one buffer of this push's own, not mapped: nothing of the segment
        is left for this process to hold when the push fails (a mapping kept alive by a failed
        push's traceback kept the client's whole segment on /dev/shm after its unlink)."""
        if not self._service.config.shared_memory:
            raise FailedPrecondition("this paramserver has shared memory disabled")
        fd = _open_segment(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                raise InvalidArgument(f"shared-memory segment {path!r} is empty")
            metas = [(self.meta(name), offset, nbytes) for name, offset, nbytes in entries]
            for meta, offset, nbytes in metas:
                if nbytes != meta.nbytes or offset < 0 or offset + nbytes > size:
                    raise InvalidArgument(
                        f"tensor {meta.name!r}: segment entry of {nbytes} bytes at {offset} "
                        f"does not match the declared {meta.nbytes} bytes (segment {size} bytes)"
                    )
            largest = max((nbytes for _, _, nbytes in metas), default=0)
            piece = memoryview(bytearray(min(_SHM_PIECE, largest)))
            for meta, offset, nbytes in metas:
                for start in range(0, nbytes, _SHM_PIECE):
                    self._check_open()
                    view = piece[: min(_SHM_PIECE, nbytes - start)]
                    if os.preadv(fd, [view], offset + start) != len(view):
                        raise InvalidArgument(f"shared-memory segment {path!r} shrank while read")
                    self._writers[meta.name].feed(start, view)
        finally:
            os.close(fd)

    def place(self) -> None:
        """Ready for a same-host client to write the chunk files in place (PushInPlace): the
        version made them all when it was created."""
        self._check_open()
        if self.version.dir is None:
            raise FailedPrecondition("this paramserver keeps its versions outside shared memory")

    def finish_in_place(self, sums: Mapping[str, tuple[str, Sequence[int]]]) -> int:
        """Take the files the client wrote (`sums`: name -> (digest, chunk CRC32Cs)) once each
        is checked, then stage the version; its byte count."""
        self._check_open()
        unknown = sorted(set(sums) - set(self.version.metas))
        if unknown:
            raise InvalidArgument(
                f"version {self.version.version}: checksums for tensors not in the push header: "
                f"{unknown[:10]}"
            )
        self.version.adopt_files(sums)
        self._closed = True
        self._writers = {}
        self._service._staged_complete(self._entry, self.version)
        return self.version.nbytes

    def finish(self) -> int:
        """Check every declared tensor arrived in full, then stage the version; its byte count."""
        self._check_open()
        missing = [
            f"{w.meta.name} ({w.received}/{w.meta.nbytes} bytes)"
            for w in self._writers.values()
            if not w.done
        ]
        if missing:
            raise InvalidArgument(
                f"version {self.version.version}: push ended before all tensors arrived: "
                + ", ".join(missing[:10])
                + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
            )
        self.version.settle()  # every chunk stored before the version counts
        self._closed = True
        self._writers = {}
        self._service._staged_complete(self._entry, self.version)
        return self.version.nbytes

    def abort(self) -> None:
        """Forget the version (the push failed or was cancelled) and free its storage now."""
        if not self._closed:
            self._closed = self._aborted = True
            for writer in self._writers.values():
                writer.close()
            self._writers = {}  # their partial blocks
            self.version.discard()
            self._service._abort_push(self.version.version, self._entry)


_SHM_PIECE = 8 << 20
# what a header may declare: TensorStore's largest rank, and a name length no model comes near
MAX_RANK = 32
MAX_NAME_CHARS = 1024


@dataclass
class _Staged:
    """One admitted push, by identity (a later push of the same version after a `drop` is
    another): its Version once every byte is stored, None while receiving."""

    stored: Version | None = None


def _check_name(version: int, name: str) -> None:
    if not name:
        raise InvalidArgument(f"version {version}: a tensor has an empty name")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(
            f"version {version}: tensor {name[:40]!r}... has a name of {len(name)} characters, "
            f"more than {MAX_NAME_CHARS}"
        )
    if any(unicodedata.category(c) == "Cc" for c in name):
        raise InvalidArgument(f"version {version}: tensor {name!r} has a control character")


def _open_segment(path: str, flags: int) -> int:
    """Open a client-made segment, refusing anything but /dev/shm/rlx-ps-*."""
    real = os.path.realpath(path)
    if os.path.dirname(real) != SHM_DIR or not os.path.basename(real).startswith(SHM_PREFIX):
        raise InvalidArgument(f"shared-memory path must be {SHM_DIR}/{SHM_PREFIX}*, got {path!r}")
    try:
        return os.open(real, flags)
    except FileNotFoundError:
        raise FailedPrecondition(
            f"shared-memory segment {path!r} is not visible here (client on another host?)"
        ) from None


STORE_PREFIX = "rlx-psstore-"  # + "<pid>-<instance>": a server's chunk files


def _make_store_root(instance_id: str) -> str | None:
    """A private (0700) directory on /dev/shm for this server's versions, after removing those
    of servers that died without cleaning up (their pid is gone). None if /dev/shm is unusable."""
    if not os.path.isdir(SHM_DIR):
        return None
    for entry in os.scandir(SHM_DIR):
        if not entry.name.startswith(STORE_PREFIX):
            continue
        pid = entry.name[len(STORE_PREFIX) :].split("-", 1)[0]
        with contextlib.suppress(OSError, ValueError):
            if entry.stat().st_uid == os.getuid() and not _alive(int(pid)):
                log.warning("removing %s, left by a paramserver that is gone", entry.path)
                shutil.rmtree(entry.path, ignore_errors=True)
    root = os.path.join(SHM_DIR, f"{STORE_PREFIX}{os.getpid()}-{instance_id[:12]}")
    try:
        os.mkdir(root, 0o700)
    except OSError as e:
        log.warning("shared memory off: cannot make %s: %s", root, e)
        return None
    return root


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Reaper:
    """Drops deleted versions on a thread of its own: freeing one (its TensorStore context, its
    chunk files: a few ms for a small model) then happens beside the commit or confirm that
    deleted it, not inside it. A version a pull still holds goes when that pull lets go."""

    def __init__(self) -> None:
        # a Version to drop, an Event to set once everything before it is dropped, None to stop
        self._queue: queue.SimpleQueue[Version | threading.Event | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def release(self, version: Version) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rlx-ps-reaper", daemon=True)
                self._thread.start()
        self._queue.put(version)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
            del item  # a version's last reference, unless a pull still has it

    def drain(self, timeout: float = 10.0) -> None:
        """Wait until every version released so far has been dropped."""
        done = threading.Event()
        with self._lock:
            running = self._thread is not None
        if running:
            self._queue.put(done)
            done.wait(timeout)

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=10.0)


class ParamServerService:
    """Owns the paramserver's versions, consumers and lifecycle.

    With shared memory on, versions live in chunk files under a private directory on /dev/shm
    (`store_root`), removed by `close()` (or at interpreter exit, or by the next server to start
    if this one is killed)."""

    def __init__(self, config: ParamServerConfig) -> None:
        self.config = config
        self.lifecycle = Lifecycle("paramserver", __version__)
        self.instance_id = uuid.uuid4().hex
        self.started = time.time()
        self.store_root = _make_store_root(self.instance_id) if config.shared_memory else None
        if self.store_root is not None:
            self._cleanup = weakref.finalize(
                self, shutil.rmtree, self.store_root, ignore_errors=True
            )
        self._pool = (
            FilePool(self.store_root, room=self._pool_room) if self.store_root is not None else None
        )
        self._cond = threading.Condition()
        self._committed: dict[int, Version] = {}
        self._staged: dict[int, _Staged] = {}  # admitted pushes, received in full or not
        self._consumers: dict[str, int] = {}
        self._bytes_read_gone = 0  # bytes read from versions since deleted
        self._reaper = _Reaper()

    # --- push -----------------------------------------------------------------------------

    def begin_push(
        self,
        version: int,
        tensors: Sequence[TensorDecl],
        *,
        timeout: float | None,
        cancelled: Callable[[], bool] | None = None,
    ) -> PushSession:
        """Admit a push of `version`, waiting up to `timeout` s for room; a session to feed.

        The header is checked in full before anything is staged. `cancelled()` true (the
        client went away; call `wake()` when it changes) ends a wait for room, and the
        session's writes, with `Cancelled`. Whatever fails after admission unstages the
        version again."""
        metas = self._validate(version, tensors)
        # the versions deleted so far go to the pool first, while it has room for them
        self._reaper.drain()
        wait = self.config.max_push_wait_s if timeout is None else max(0.0, timeout)
        deadline = time.monotonic() + wait
        entry = _Staged()
        with self._cond:
            self._check_new(version)
            while not self._room_for_one():
                if cancelled is not None and cancelled():
                    raise Cancelled(
                        f"version {version}: the push was cancelled while waiting for room "
                        "(its client went away or its deadline passed)"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ResourceExhausted(self._full_message(version))
                self._cond.wait(remaining)
                self._check_new(version)
            self._staged[version] = entry
        stored = None
        try:
            stored = Version(version, metas, self.store_root, self._pool)
            return PushSession(self, stored, self.config.chunk_kib << 10, entry, cancelled)
        except BaseException:
            if stored is not None:
                stored.discard()
            self._abort_push(version, entry)
            raise

    def _pool_room(self) -> int:
        """The bytes the pool may keep now: N + 1 versions of the largest size, less the
        versions held and those being received (each counted at the largest size)."""
        if self._pool is None:
            return 0
        largest = self._pool.cap
        with self._cond:
            alive = sum(v.file_bytes for v in self._committed.values())
            alive += largest * len(self._staged)
        return (self.config.max_versions + 1) * largest - alive

    def wake(self) -> None:
        """Make pushes waiting for room look at their `cancelled()` again."""
        with self._cond:
            self._cond.notify_all()

    @property
    def max_version_bytes(self) -> int:
        """The most bytes one version may declare (`max_version_mib`, or physical memory)."""
        if self.config.max_version_mib:
            return self.config.max_version_mib << 20
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def _validate(self, version: int, tensors: Sequence[TensorDecl]) -> list[TensorMeta]:
        """The manifest entries of a push header, every tensor checked first: a known dtype, a
        name of at most MAX_NAME_CHARS without control characters, at most MAX_RANK
        non-negative dims, and bytes (counted in Python integers, which do not wrap) within
        `max_version_bytes`, for each tensor and all together."""
        if version < 0:
            raise InvalidArgument(f"version must be >= 0, got {version}")
        if not tensors:
            raise InvalidArgument(f"version {version}: a push needs at least one tensor")
        limit = self.max_version_bytes
        seen: set[str] = set()
        metas = []
        for t in tensors:
            _check_name(version, t.name)
            if t.name in seen:
                raise InvalidArgument(f"version {version}: tensor {t.name!r} declared twice")
            seen.add(t.name)
            dtype = dtype_of(t.dtype)
            shape = tuple(t.shape)
            if len(shape) > MAX_RANK:
                raise InvalidArgument(
                    f"tensor {t.name!r}: rank {len(shape)}, more than {MAX_RANK} (TensorStore's "
                    "largest)"
                )
            if any(d < 0 for d in shape):
                raise InvalidArgument(f"tensor {t.name!r}: negative dimension in {shape}")
            # bytes of the tensor, and of one index along every axis (a zero-size tensor
            # still gets a chunk of that shape)
            nbytes = math.prod(shape) * dtype.itemsize
            extent = math.prod(max(1, d) for d in shape) * dtype.itemsize
            if nbytes > limit:
                raise InvalidArgument(
                    f"tensor {t.name!r}: shape {list(shape)} {dtype.name} holds "
                    f"{math.prod(shape)} elements ({nbytes} bytes), more than a version may "
                    f"({limit} bytes: max_version_mib, or this host's memory)"
                )
            if extent > limit:
                raise InvalidArgument(
                    f"tensor {t.name!r}: shape {list(shape)} {dtype.name} is empty but its "
                    f"dimensions span {extent} bytes, more than a version may ({limit} bytes)"
                )
            rank = len(shape)
            axis = t.shard_axis + rank if t.shard_axis < 0 else t.shard_axis
            if rank and not 0 <= axis < rank:
                raise InvalidArgument(
                    f"tensor {t.name!r}: shard_axis {t.shard_axis} out of range for rank {rank}"
                )
            chunk = chunk_shape_for(shape, dtype.itemsize, axis, self.config.chunk_kib << 10)
            metas.append(TensorMeta(t.name, dtype, shape, axis if rank else 0, chunk, nbytes))
        total = sum(m.nbytes for m in metas)
        if total > limit:
            raise InvalidArgument(
                f"version {version}: {len(metas)} tensors of {total} bytes, more than a version "
                f"may ({limit} bytes: max_version_mib, or this host's memory)"
            )
        return metas

    def _check_new(self, version: int) -> None:
        if version in self._committed:
            raise AlreadyExists(f"version {version} is already committed on this replica")
        if version in self._staged:
            raise AlreadyExists(f"version {version} is already being pushed (staged)")

    def _freeable(self) -> list[int]:
        """Committed versions that can go once a newer one is committed."""
        if not self._consumers:
            return sorted(self._committed)
        floor = min(self._consumers.values())
        return sorted(v for v in self._committed if v < floor)

    def _room_for_one(self) -> bool:
        kept = len(self._committed) - len(self._freeable()) + len(self._staged)
        return kept + 1 <= self.config.max_versions

    def _full_message(self, version: int) -> str:
        held = sorted(self._committed)
        oldest = held[0] if held else None
        behind = sorted(
            f"{c} (confirmed {v})"
            for c, v in self._consumers.items()
            if oldest is not None and v <= oldest
        )
        staged = f", staged {sorted(self._staged)}" if self._staged else ""
        return (
            f"cannot keep version {version}: replica {self.config.replica_id} holds versions "
            f"{held}{staged} (max_versions={self.config.max_versions}) and none could be freed "
            f"before the deadline; not confirmed past version {oldest}: "
            + (", ".join(behind) or "nobody")
        )

    def _staged_complete(self, entry: _Staged, version: Version) -> None:
        with self._cond:
            entry.stored = version

    def _abort_push(self, version: int, entry: _Staged) -> None:
        """Unstage `entry` (not a later push of the same version admitted after a drop)."""
        with self._cond:
            if self._staged.get(version) is entry:
                del self._staged[version]
            self._cond.notify_all()

    def commit(self, version: int) -> list[int]:
        """Make a staged version visible; returns the versions this evicted."""
        with self._cond:
            if version in self._committed and version not in self._staged:
                return []  # committing twice is harmless (a retried commit)
            entry = self._staged.get(version)
            stored = None if entry is None else entry.stored
            if stored is None:
                state = "still being received" if version in self._staged else "not staged"
                raise NotFound(
                    f"version {version} is {state}; staged: {sorted(self._staged)}, "
                    f"held: {sorted(self._committed)}"
                )
            del self._staged[version]
            self._committed[version] = stored
            evicted = self._collect()
            while len(self._committed) > self.config.max_versions:
                # only when a consumer appeared after this push was admitted
                oldest = min(self._committed)
                log.warning("evicting version %d before all consumers passed it", oldest)
                self._delete(oldest)
                evicted.append(oldest)
            self._cond.notify_all()
        log.info("committed version %d (%d bytes), evicted %s", version, stored.nbytes, evicted)
        return evicted

    # --- GC, confirm, drop ----------------------------------------------------------------

    def _collect(self) -> list[int]:
        """Delete what the GC rule allows; caller holds the lock."""
        if not self._committed:
            return []
        newest = max(self._committed)
        if self._consumers:
            floor = min(self._consumers.values())
            doomed = [v for v in self._committed if v < floor and v != newest]
        else:
            extra = len(self._committed) - self.config.max_versions
            doomed = sorted(self._committed)[: max(0, extra)]
        for v in doomed:
            self._delete(v)
        return sorted(doomed)

    def _delete(self, version: int) -> None:
        gone = self._committed.pop(version)
        self._bytes_read_gone += gone.bytes_read
        self._reaper.release(gone)

    def confirm(self, consumer_id: str, version: int) -> list[int]:
        """Record that `consumer_id` has progressed to `version`; returns versions deleted."""
        if not consumer_id:
            raise InvalidArgument("confirm needs a non-empty consumer_id")
        if version < 0:
            raise InvalidArgument(f"version must be >= 0, got {version}")
        with self._cond:
            self._consumers[consumer_id] = max(version, self._consumers.get(consumer_id, -1))
            evicted = self._collect()
            self._cond.notify_all()
        return evicted

    def drop(self, version: int) -> None:
        """Delete a committed version, or forget a staged one."""
        with self._cond:
            if version in self._committed:
                self._delete(version)
            elif version in self._staged:
                del self._staged[version]
            else:
                raise NotFound(self._not_found(version))
            self._cond.notify_all()

    # --- read -----------------------------------------------------------------------------

    def _not_found(self, version: int | None) -> str:
        held = sorted(self._committed)
        if not held:
            return (
                f"replica {self.config.replica_id} holds no versions (started "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.started))}, instance "
                f"{self.instance_id[:8]}; a restarted replica is empty until refilled)"
            )
        return f"version {version} is not held by replica {self.config.replica_id}; held: {held}"

    def get(self, version: int | None) -> Version:
        """A committed version (None: the newest); NotFound listing the versions held."""
        with self._cond:
            if version is None:
                if not self._committed:
                    raise NotFound(self._not_found(None))
                return self._committed[max(self._committed)]
            stored = self._committed.get(version)
            if stored is None:
                raise NotFound(self._not_found(version))
            return stored

    def plan_pull(
        self,
        version: int | None,
        names: Sequence[str] = (),
        slices: Mapping[str, tuple[Sequence[int], Sequence[int]]] | None = None,
    ) -> PullPlan:
        """Resolve a pull: which version, which tensors, which boxes."""
        stored = self.get(version)
        slices = dict(slices or {})
        wanted = list(dict.fromkeys(names)) if names else list(stored.metas)
        for name in [*wanted, *slices]:
            if name not in stored.metas:
                raise NotFound(
                    f"version {stored.version} has no tensor {name!r} "
                    f"({len(stored.metas)} tensors, e.g. {sorted(stored.metas)[:5]})"
                )
        for name in slices:
            if name not in wanted:
                wanted.append(name)
        plan = PullPlan(stored, [stored.metas[n] for n in wanted])
        for name, (start, stop) in slices.items():
            plan.boxes[name] = parse_box(stored.metas[name], start, stop)
        return plan

    def map_pull(self, plan: PullPlan) -> str:
        """A same-host pull that maps the chunk files itself: count the chunks it will read as
        read, and return the version's directory."""
        stored = plan.version
        if stored.dir is None:
            raise FailedPrecondition("this paramserver keeps its versions outside shared memory")
        for meta in plan.metas:
            chunks = stored.chunks_of(meta.name, plan.boxes.get(meta.name))
            stored.count_read(len(chunks) * meta.chunk_nbytes)
        return stored.dir

    def probe_shm(self, path: str, nonce: bytes) -> tuple[bool, str]:
        """Same-host negotiation: can this process read the client's probe file?"""
        if not self.config.shared_memory:
            return False, "shared memory disabled by config"
        if self.store_root is None:
            return False, f"shared memory unusable on the server ({SHM_DIR})"
        try:
            fd = _open_segment(path, os.O_RDONLY)
        except (InvalidArgument, FailedPrecondition) as e:
            return False, str(e)
        try:
            content = os.read(fd, len(nonce) + 1)
        finally:
            os.close(fd)
        if not hmac.compare_digest(content, nonce):
            return False, "probe file content differs (another host's file of the same name?)"
        return True, ""

    def close(self) -> None:
        """Forget every version and remove the store directory (clients keep what they mapped)."""
        with self._cond:
            self._committed.clear()
            self._staged.clear()
            self._cond.notify_all()
        self._reaper.close()
        if self._pool is not None:
            self._pool.clear()
        if self.store_root is not None:
            self._cleanup()

    # --- status ---------------------------------------------------------------------------

    @property
    def bytes_read(self) -> int:
        """Bytes read from the store since start, by all pulls."""
        with self._cond:
            return self._bytes_read_gone + sum(v.bytes_read for v in self._committed.values())

    def versions(self) -> VersionsSummary:
        with self._cond:
            return VersionsSummary(
                versions=tuple(
                    VersionSummary(
                        version=v,
                        nbytes=stored.nbytes,
                        created=stored.created,
                        num_tensors=len(stored.metas),
                        confirmed_by=tuple(
                            sorted(c for c, cv in self._consumers.items() if cv >= v)
                        ),
                    )
                    for v, stored in sorted(self._committed.items())
                ),
                consumers=dict(self._consumers),
                staged=tuple(sorted(self._staged)),
                replica_id=self.config.replica_id,
                max_versions=self.config.max_versions,
                instance_id=self.instance_id,
                started=self.started,
                bytes_read=self._bytes_read_gone
                + sum(v.bytes_read for v in self._committed.values()),
            )
