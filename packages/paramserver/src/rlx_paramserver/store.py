"""One weight version in TensorStore: zarr3 arrays on an in-memory kvstore, written as bytes
arrive and read back chunk by chunk.

The kvstore is in RAM either way: TensorStore's `file` driver on a private tmpfs directory under
/dev/shm (the default: a same-host client then maps the chunk files read-only instead of having
the bytes copied to it), or TensorStore's `memory` driver (shared memory disabled). Each version
has its own directory (or context), freed when the last reference to the version goes, so a pull
still streaming a garbage-collected version keeps it until it ends; committed chunk files are
never written again (TensorStore replaces a file by renaming a new one over it), so a client's
mapping of them never changes. Each tensor is chunked along the axis the pusher declared as
sharded, with chunks of about `chunk_bytes` (DESIGN §10: ~8 MiB chunks read at 3-4 GB/s, one huge
chunk is slow). Every chunk's CRC32C is recorded when its tensor is complete and checked on every
read. Reads go through the kvstore one chunk key at a time, so the bytes read are counted exactly
and a slice reads only the chunks it overlaps.

A tensor chunked along axis 0 (the usual case, and every scalar) has chunks that are runs of its
C-order bytes, which is exactly what the zarr3 `bytes` codec stores. In files, every chunk file
is made at its full size by the version (from the pool of deleted versions' files,
rlx_paramserver.pool, when it has one of that size) and written there: runs with `pwrite`,
chunks split along a later axis through a mapping held while their tensor arrives, or by a
same-host client writing in place (`adopt_files` takes them); each chunk's CRC32C is taken
from the bytes in hand. In memory,
runs go straight to the kvstore under their chunk keys, other tensors through their TensorStore
array (read back once for the CRC). Reads always go through TensorStore's kvstore, one chunk key at
a time. Each tensor's digest is XXH3-128 over its C-order bytes as they arrive (17 GB/s here; a
sha256 ran at 1.6).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import math
import mmap
import os
import shutil
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import google_crc32c
import numpy as np
import tensorstore as ts
import xxhash

from rlx_core.errors import Corrupt, FailedPrecondition, InvalidArgument
from rlx_core.rpc import dtype_from_name
from rlx_paramserver.pool import FilePool, Layout, unshared

__all__ = ["PAGE", "TensorMeta", "TensorWriter", "Version", "chunk_key", "chunk_shape_for"]

MAX_PENDING_BYTES = 64 << 20  # chunk writes in flight per version being pushed
PAGE = 4096  # row-run chunks of 1 MiB or more are a whole number of pages (see chunk_shape_for)
_ROUND_FROM = 1 << 20


@dataclass(frozen=True)
class TensorMeta:
    """The manifest entry of one tensor."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    shard_axis: int
    chunk_shape: tuple[int, ...]
    nbytes: int
    digest: str = ""  # XXH3-128 hex of the C-order bytes
    chunk_crc32c: tuple[int, ...] = ()  # of each stored chunk (edge chunks padded), C order

    @property
    def grid(self) -> tuple[int, ...]:
        """Chunks along each axis."""
        return tuple(-(-d // c) for d, c in zip(self.shape, self.chunk_shape, strict=True))

    @property
    def chunk_nbytes(self) -> int:
        return math.prod(self.chunk_shape) * self.dtype.itemsize


def chunk_shape_for(
    shape: tuple[int, ...], itemsize: int, shard_axis: int, chunk_bytes: int
) -> tuple[int, ...]:
    """Whole along every axis but `shard_axis`, which is split into equal pieces of at most
    ~`chunk_bytes` each. Equal pieces, because zarr stores an edge chunk at full size: 4864
    columns in pieces of 4681 would store 9362.

    When the chunks are runs of the C-order bytes (every axis before `shard_axis` has size 1) and
    at least 1 MiB, the piece is rounded up to a whole number of pages if that adds at most 1/8:
    a same-host client then maps the chunk files back to back as one array, with no copy."""
    if not shape:
        return ()
    chunk = [max(1, d) for d in shape]
    unit = itemsize * math.prod(chunk) // chunk[shard_axis]  # bytes of one index along the axis
    dim = chunk[shard_axis]
    pieces = min(dim, max(1, -(-dim * unit // max(1, chunk_bytes))))
    piece = -(-dim // pieces)
    if pieces > 1 and math.prod(shape[:shard_axis]) == 1 and piece * unit >= _ROUND_FROM:
        step = PAGE // math.gcd(unit, PAGE)  # indices per whole number of pages
        rounded = -(-piece // step) * step
        if rounded * 8 <= piece * 9:
            piece = rounded
    chunk[shard_axis] = piece
    return tuple(chunk)


def chunk_key(index: Sequence[int]) -> str:
    """The zarr3 key of a chunk inside its array ("c/0/3"; "c" for a scalar)."""
    return "c/" + "/".join(map(str, index)) if len(index) else "c"


def _spec(meta: TensorMeta, kvstore: dict[str, str]) -> dict[str, object]:
    return {
        "driver": "zarr3",
        "kvstore": kvstore,
        "metadata": {
            "shape": list(meta.shape),
            "data_type": meta.dtype.name,
            "chunk_grid": {
                "name": "regular",
                "configuration": {"chunk_shape": list(meta.chunk_shape)},
            },
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        },
        # every chunk exists in the kvstore, so a missing key means lost data, not zeros
        "store_data_equal_to_fill_value": True,
    }


class Version:
    """The tensors of one version and its manifest. Written once (staged), then read-only.

    `root`: a directory on tmpfs to keep the chunk files in (a same-host client maps them), or
    None for TensorStore's memory kvstore. `pool`: where chunk files come from and go back to
    (see rlx_paramserver.pool); without one they are made new and removed."""

    def __init__(
        self,
        version: int,
        metas: Sequence[TensorMeta],
        root: str | None = None,
        pool: FilePool | None = None,
    ) -> None:
        self.version = version
        self.created = time.time()
        self._context = ts.Context({"file_io_sync": False})
        self.dir: str | None = None
        self.file_bytes = 0  # of its chunk files (padded edge chunks), in files only
        self._paths = {m.name: f"{i}/" for i, m in enumerate(metas)}
        self.metas: dict[str, TensorMeta] = {m.name: m for m in metas}
        if root is None:
            kvstore = {"driver": "memory"}
        else:
            self.dir = os.path.join(root, f"v{version}-{uuid.uuid4().hex[:8]}")
            os.mkdir(self.dir, 0o700)
            layout = tuple(
                sorted(
                    (self._paths[m.name] + chunk_key(index), m.chunk_nbytes)
                    for m in metas
                    for index in self.chunks_of(m.name)
                )
            )
            self.file_bytes = sum(size for _, size in layout)
            # the files go with the last reference to this version (or at interpreter exit)
            self._cleanup = weakref.finalize(self, _release_dir, self.dir, pool, layout)
            self._make_files(layout, pool)
            kvstore = {"driver": "file", "path": self.dir + "/"}
        self._kv: ts.KvStore | None = ts.KvStore.open(kvstore, context=self._context).result()
        self._kvstore = kvstore
        self._arrays: dict[str, ts.TensorStore] = {}
        self._pending: collections.deque[tuple[ts.Future[Any], int]] = collections.deque()
        self._pending_bytes = 0
        self.nbytes = sum(m.nbytes for m in metas)
        self._lock = threading.Lock()
        self.bytes_read = 0

    def key(self, name: str) -> str:
        """Where tensor `name`'s chunks are, relative to the version's directory."""
        return self._paths[name]

    def chunk_path(self, name: str, index: tuple[int, ...]) -> str:
        """The file of one chunk (a version kept in files only)."""
        if self.dir is None:
            raise FailedPrecondition(f"version {self.version} is not kept in files")
        return os.path.join(self.dir, self._paths[name] + chunk_key(index))

    def _make_files(self, layout: Layout, pool: FilePool | None) -> None:
        """Every chunk file at its full size: a deleted version's directory of the same layout
        from the pool (one rename; its old bytes are overwritten by the push), else new files
        (which take pages only as they are written)."""
        if pool is not None:
            pool.note_version(sum(size for _, size in layout))
        missing = None if pool is None else pool.take(layout, self.dir or "")
        made, dirs = 0, set()
        for rel, size in layout:
            if missing is not None and rel not in missing:
                continue
            path = os.path.join(self.dir or "", rel)
            parent = os.path.dirname(path)
            if parent not in dirs:
                os.makedirs(parent, mode=0o700, exist_ok=True)
                dirs.add(parent)
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
            made += size
        if pool is not None:
            pool.made(made)

    @property
    def kv(self) -> ts.KvStore:
        if self._kv is None:
            raise FailedPrecondition(f"version {self.version} was discarded")
        return self._kv

    def discard(self) -> None:
        """Free the storage now, not with the last reference to this object (a failed push's
        traceback can hold one until the garbage collector runs): wait for the writes in
        flight (so none lands after), then remove the chunk files, or let go of the memory
        kvstore. The version is unusable after."""
        while self._pending:
            future, _ = self._pending.popleft()
            with contextlib.suppress(Exception):
                future.result()
        self._pending_bytes = 0
        self._kv = None
        self._arrays.clear()
        self._context = ts.Context()  # the old one owned the memory kvstore's contents
        if self.dir is not None:
            self._cleanup()

    def array(self, name: str) -> ts.TensorStore:
        """Tensor `name` as a TensorStore zarr3 array (opened, with its metadata written, on
        first use; chunks already written straight to the kvstore are its chunks)."""
        with self._lock:
            array = self._arrays.get(name)
        if array is None:
            kvstore = {**self._kvstore, "path": self._kvstore.get("path", "") + self._paths[name]}
            array = ts.open(
                _spec(self.metas[name], kvstore), create=True, context=self._context
            ).result()
            with self._lock:
                array = self._arrays.setdefault(name, array)
        return array

    def write_chunk(self, name: str, index: tuple[int, ...], data: np.ndarray) -> None:
        """Store one chunk's encoded bytes (C order, little endian, edge chunks padded). In
        files: written into a chunk file from the pool, now. In memory: the write goes on in
        the background, with at most MAX_PENDING_BYTES of them in flight; a failed one raises
        here or in `settle`."""
        if self.dir is not None:
            fd = os.open(self.chunk_path(name, index), os.O_WRONLY)
            try:
                view, done = data.data, 0
                while done < len(view):
                    done += os.pwrite(fd, view[done:], done)
            finally:
                os.close(fd)
            return
        future = self.kv.write((self._paths[name] + chunk_key(index)).encode(), data.tobytes())
        self._pending.append((future, data.size))
        self._pending_bytes += data.size
        while self._pending_bytes > MAX_PENDING_BYTES:
            self._settle_one()

    def _settle_one(self) -> None:
        future, nbytes = self._pending.popleft()
        self._pending_bytes -= nbytes
        future.result()

    def settle(self) -> None:
        """Wait for every chunk write in flight; raise the first failure."""
        while self._pending:
            self._settle_one()

    def finish(self, name: str, digest: str, chunk_crc32c: Sequence[int] | None = None) -> None:
        """Record the checksums of a fully written tensor in the manifest, and each chunk's
        (`chunk_crc32c` when the writer has them, else read back from the store)."""
        meta = self.metas[name]
        if chunk_crc32c is not None:
            chunks = list(chunk_crc32c)
        else:
            chunks = [
                google_crc32c.value(self._read_raw(name, index))
                for index in itertools.product(*(range(g) for g in meta.grid))
            ]
        self.metas[name] = TensorMeta(
            **{
                **meta.__dict__,
                "digest": digest,
                "chunk_crc32c": tuple(chunks),
            }
        )

    def adopt_files(self, sums: Mapping[str, tuple[str, Sequence[int]]]) -> None:
        """Take the chunk files a same-host client wrote in place, given each
        tensor's digest and its chunks' CRC32C as the client computed them. Every file must
        still have its size and be open or mapped in no other process: nothing can change it
        after this. The bytes are not read back here (that costs as much as the copy): every
        read of a chunk checks it against its CRC32C, so a client that sent checksums its
        files do not match makes the pulls of that version fail with `Corrupt`, never return
        its bytes."""
        for name, meta in self.metas.items():
            if name not in sums:
                raise InvalidArgument(
                    f"version {self.version}: no checksums for tensor {name!r} (in the header)"
                )
            digest, crcs = sums[name]
            indices = self.chunks_of(name)
            if len(crcs) != len(indices):
                raise InvalidArgument(
                    f"version {self.version} tensor {name!r}: {len(crcs)} chunk checksums for "
                    f"{len(indices)} chunks"
                )
            for index in indices:
                self._check_written(meta, index)
            self.finish(name, digest, [int(c) for c in crcs])

    def _check_written(self, meta: TensorMeta, index: tuple[int, ...]) -> None:
        path = self.chunk_path(meta.name, index)
        where = f"version {self.version} tensor {meta.name!r} chunk {index}"
        if unshared(path) is False:
            raise FailedPrecondition(
                f"{where}: its file is still open or mapped by another process after the "
                "client said it was written"
            )
        try:
            size = os.stat(path, follow_symlinks=False).st_size
        except OSError as e:
            raise Corrupt(f"{where}: its file is gone ({e})") from None
        if size != meta.chunk_nbytes:
            raise Corrupt(f"{where}: its file has {size} bytes, not {meta.chunk_nbytes}")

    def _read_raw(self, name: str, index: tuple[int, ...]) -> bytes:
        meta = self.metas[name]
        result = self.kv.read((self._paths[name] + chunk_key(index)).encode()).result()
        if result.state != "value" or len(result.value) != meta.chunk_nbytes:
            raise Corrupt(
                f"version {self.version} tensor {name!r}: chunk {index} is missing or has "
                f"{len(result.value)} bytes instead of {meta.chunk_nbytes}"
            )
        return bytes(result.value)

    def count_read(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_read += nbytes

    def chunks_of(self, name: str, box: tuple[slice, ...] | None = None) -> list[tuple[int, ...]]:
        """The indices of the chunks `box` (default: the whole tensor) overlaps, in C order."""
        meta = self.metas[name]
        if box is None:
            return list(itertools.product(*(range(g) for g in meta.grid)))
        if any(s.stop <= s.start for s in box):
            return []
        ranges = [
            range(s.start // c, (s.stop - 1) // c + 1)
            for s, c in zip(box, meta.chunk_shape, strict=True)
        ]
        return list(itertools.product(*ranges))

    def _read_chunk(self, name: str, index: tuple[int, ...]) -> np.ndarray:
        meta = self.metas[name]
        raw = self._read_raw(name, index)
        if meta.chunk_crc32c:
            linear = int(np.ravel_multi_index(index, meta.grid)) if index else 0
            if google_crc32c.value(raw) != meta.chunk_crc32c[linear]:
                raise Corrupt(
                    f"version {self.version} tensor {name!r}: checksum differs from the one "
                    f"recorded at push (stored chunk {index})"
                )
        self.count_read(meta.chunk_nbytes)
        le = meta.dtype.newbyteorder("<") if meta.dtype.itemsize > 1 else meta.dtype
        chunk = np.frombuffer(raw, dtype=le).reshape(meta.chunk_shape)
        return chunk if le == meta.dtype else chunk.astype(meta.dtype)

    def slabs(self, name: str, box: tuple[slice, ...] | None = None) -> Iterator[np.ndarray]:
        """The C-order contents of `box` (default: the whole tensor) as consecutive slabs along
        axis 0, each built from the chunks it overlaps and no others."""
        meta = self.metas[name]
        shape, chunk = meta.shape, meta.chunk_shape
        if box is None:
            box = tuple(slice(0, d) for d in shape)
        if not shape:
            yield self._read_chunk(name, ()).reshape(())
            return
        if any(s.stop <= s.start for s in box):
            return
        rows = box[0]
        first, last = rows.start // chunk[0], (rows.stop - 1) // chunk[0]
        # chunk indices overlapping the box along the other axes
        others = [
            range(s.start // c, (s.stop - 1) // c + 1)
            for s, c in zip(box[1:], chunk[1:], strict=True)
        ]
        for ci in range(first, last + 1):
            r0 = max(rows.start, ci * chunk[0])
            r1 = min(rows.stop, (ci + 1) * chunk[0])
            out_shape = (r1 - r0, *(s.stop - s.start for s in box[1:]))
            pieces: list[tuple[tuple[slice, ...], np.ndarray]] = []
            for rest in np.ndindex(*(len(o) for o in others)) if others else [()]:
                index = (ci, *(o[k] for o, k in zip(others, rest, strict=True)))
                data = self._read_chunk(name, index)
                src: list[slice] = [slice(r0 - ci * chunk[0], r1 - ci * chunk[0])]
                dst: list[slice] = [slice(0, r1 - r0)]
                for axis in range(1, len(shape)):
                    c0 = index[axis] * chunk[axis]
                    lo = max(box[axis].start, c0)
                    hi = min(box[axis].stop, c0 + chunk[axis])
                    src.append(slice(lo - c0, hi - c0))
                    dst.append(slice(lo - box[axis].start, hi - box[axis].start))
                pieces.append((tuple(dst), data[tuple(src)]))
            if len(pieces) == 1 and pieces[0][1].shape == out_shape:
                yield np.ascontiguousarray(pieces[0][1])
                continue
            slab = np.empty(out_shape, dtype=meta.dtype)
            for dst_box, piece in pieces:
                slab[dst_box] = piece
            yield slab


def parse_box(meta: TensorMeta, start: Sequence[int], stop: Sequence[int]) -> tuple[slice, ...]:
    """A validated box [start, stop) per dimension of `meta`'s tensor."""
    if len(start) != len(meta.shape) or len(stop) != len(meta.shape):
        raise InvalidArgument(
            f"tensor {meta.name!r} has rank {len(meta.shape)}; the slice gives "
            f"{len(start)} starts and {len(stop)} stops"
        )
    for axis, (lo, hi, dim) in enumerate(zip(start, stop, meta.shape, strict=True)):
        if not 0 <= lo <= hi <= dim:
            raise InvalidArgument(
                f"tensor {meta.name!r}: slice [{lo}, {hi}) out of range on axis {axis} (size {dim})"
            )
    return tuple(slice(lo, hi) for lo, hi in zip(start, stop, strict=True))


def _runs_of_bytes(meta: TensorMeta) -> bool:
    """True when every chunk of `meta`'s tensor is a run of its C-order little-endian bytes:
    chunked along axis 0 only (or a scalar), stored in the byte order it arrives in."""
    order = meta.dtype.byteorder
    little = order in {"|", "<"} or (order == "=" and sys.byteorder == "little")
    return little and all(c == d for c, d in zip(meta.chunk_shape[1:], meta.shape[1:], strict=True))


class TensorWriter:
    """Receives one tensor's C-order bytes in order and writes them in slabs of whole rows
    (axis 0), hashing as it goes. Holds at most one slab of ~chunk size; chunks that are runs of
    bytes go straight to the kvstore (see the module doc), in the background, and the version's
    `settle()` waits for them."""

    def __init__(self, version: Version, name: str, block_bytes: int) -> None:
        self.version = version
        self.meta = version.metas[name]
        self.direct = _runs_of_bytes(self.meta)
        self._chunk_crcs: list[int] = []
        shape = self.meta.shape
        self.row_bytes = self.meta.nbytes // shape[0] if shape and shape[0] else self.meta.nbytes
        rows = max(1, block_bytes // max(1, self.row_bytes))
        # whole chunks: no read-modify-write in the array, and direct chunks start on a boundary
        if shape and (self.meta.shard_axis == 0 or self.direct):
            per_chunk = self.meta.chunk_shape[0]
            rows = max(per_chunk, rows // per_chunk * per_chunk)
        self.block_rows = rows if shape else 1
        self.block_bytes = self.block_rows * self.row_bytes
        self.received = 0
        self._buffer: np.ndarray | None = None  # made on first partial block, freed when done
        self._fill = 0
        self._rows_written = 0
        self._hash = xxhash.xxh3_128()
        self._maps: list[tuple[tuple[int, ...], np.ndarray]] | None = None
        self._mapped: list[mmap.mmap] = []
        if self.meta.nbytes == 0:
            version.finish(name, self._hash.hexdigest())

    @property
    def done(self) -> bool:
        return self.received == self.meta.nbytes

    def feed(self, offset: int, data: memoryview) -> None:
        """Add the bytes at `offset` (must be where the previous ones ended)."""
        if offset != self.received:
            raise InvalidArgument(
                f"tensor {self.meta.name!r}: expected bytes at offset {self.received}, got {offset}"
            )
        if self.received + len(data) > self.meta.nbytes:
            raise InvalidArgument(
                f"tensor {self.meta.name!r}: {self.received + len(data)} bytes sent, more than "
                f"the {self.meta.nbytes} its shape and dtype hold"
            )
        self._hash.update(data)
        pos = 0
        while pos < len(data):
            if self._fill == 0 and len(data) - pos >= self.block_bytes:
                self._write(np.frombuffer(data[pos : pos + self.block_bytes], dtype=np.uint8))
                pos += self.block_bytes
                continue
            if self._buffer is None:
                self._buffer = np.empty(min(self.block_bytes, self.meta.nbytes), dtype=np.uint8)
            take = min(len(data) - pos, self._buffer.size - self._fill)
            self._buffer[self._fill : self._fill + take] = np.frombuffer(
                data[pos : pos + take], dtype=np.uint8
            )
            self._fill += take
            pos += take
            if self._fill == self._buffer.size or self.received + pos == self.meta.nbytes:
                self._write(self._buffer[: self._fill])
                self._fill = 0
        self.received += len(data)
        if self.done:
            self._buffer = None
            if self._maps is not None:
                self._chunk_crcs = [
                    google_crc32c.value(np.frombuffer(m, np.uint8)) for m in self._mapped
                ]
                self.close()
            chunks = self._chunk_crcs if self.direct or self._chunk_crcs else None
            self.version.finish(self.meta.name, self._hash.hexdigest(), chunks)

    def close(self) -> None:
        """Unmap the chunk files this writer fills (a version in files, chunks split along a
        later axis)."""
        if self._maps is not None:
            files, self._maps = self._mapped, None
            self._mapped = []
            for mapped in files:
                with contextlib.suppress(BufferError):
                    mapped.close()

    def _write(self, raw: np.ndarray) -> None:
        if self.direct:
            self._write_chunks(raw)
            return
        meta = self.meta
        if self.version.dir is not None and meta.shape:
            self._write_mapped(raw.view(meta.dtype).reshape((-1, *meta.shape[1:])))
            return
        array = self.version.array(meta.name)
        if not meta.shape:
            array.write(raw.view(meta.dtype).reshape(())).result()
            return
        nrows = raw.size // self.row_bytes
        block = raw.view(meta.dtype).reshape((nrows, *meta.shape[1:]))
        array[self._rows_written : self._rows_written + nrows].write(block).result()
        self._rows_written += nrows

    def _write_mapped(self, block: np.ndarray) -> None:
        """Copy whole rows into the chunk files they overlap, mapped for the time this tensor
        is received (files from the pool: no new pages once a version has been deleted)."""
        meta = self.meta
        if self._maps is None:
            self._maps = []
            for index in self.version.chunks_of(meta.name):
                path = self.version.chunk_path(meta.name, index)
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
                try:
                    # pages now, not on the first write into the mapping: a full /dev/shm is
                    # an error here rather than a SIGBUS there
                    os.posix_fallocate(fd, 0, meta.chunk_nbytes)
                    mapped = mmap.mmap(fd, meta.chunk_nbytes)
                finally:
                    os.close(fd)
                self._mapped.append(mapped)
                view = np.frombuffer(mapped, dtype=meta.dtype).reshape(meta.chunk_shape)
                edges = zip(index, meta.chunk_shape, meta.shape, strict=True)
                if any((i + 1) * c > d for i, c, d in edges):
                    view[...] = 0  # an edge chunk: its padding is zeros, not a pooled file's
                self._maps.append((index, view))
        r0, r1 = self._rows_written, self._rows_written + block.shape[0]
        for index, view in self._maps:
            c0 = index[0] * meta.chunk_shape[0]
            lo, hi = max(r0, c0), min(r1, c0 + meta.chunk_shape[0])
            if lo >= hi:
                continue
            src, dst = [slice(lo - r0, hi - r0)], [slice(lo - c0, hi - c0)]
            for axis in range(1, len(meta.shape)):
                a = index[axis] * meta.chunk_shape[axis]
                b = min(a + meta.chunk_shape[axis], meta.shape[axis])
                src.append(slice(a, b))
                dst.append(slice(0, b - a))
            view[tuple(dst)] = block[tuple(src)]
        self._rows_written = r1

    def _write_chunks(self, raw: np.ndarray) -> None:
        """Store whole rows as chunk keys (the slab starts at a chunk boundary: blocks are whole
        chunks, and only the last one may end inside a chunk, the edge one, padded with zeros)."""
        meta = self.meta
        size = meta.chunk_nbytes
        rest = (0,) * max(0, len(meta.shape) - 1)
        first = self._rows_written // meta.chunk_shape[0] if meta.shape else 0
        for i, start in enumerate(range(0, raw.size, size)):
            piece = raw[start : start + size]
            if piece.size < size:
                piece = np.concatenate([piece, np.zeros(size - piece.size, np.uint8)])
            index = (first + i, *rest) if meta.shape else ()
            self.version.write_chunk(meta.name, index, piece)
            self._chunk_crcs.append(google_crc32c.value(piece))
        self._rows_written += raw.size // self.row_bytes if meta.shape else 0


def _release_dir(directory: str, pool: FilePool | None, layout: Layout) -> None:
    if pool is None:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        pool.recycle(directory, layout)


def dtype_of(name: str) -> np.dtype:
    """The dtype for a wire name; InvalidArgument naming it otherwise."""
    return dtype_from_name(name)
