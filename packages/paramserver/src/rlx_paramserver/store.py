"""One weight version in TensorStore: zarr3 arrays on an in-memory kvstore, written as bytes
arrive and read back chunk by chunk.

Each version has its own TensorStore context, so its memory kvstore is freed when the last
reference to the version goes (a pull still streaming a garbage-collected version keeps it alive
until it ends). Each tensor is chunked along the axis the pusher declared as sharded, with chunks
of about `chunk_bytes` (DESIGN §10: ~8 MiB chunks read at 3-4 GB/s, one huge chunk is slow).
Reads go through the kvstore one chunk key at a time, so the bytes read are counted exactly and a
slice reads only the chunks it overlaps.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import tensorstore as ts

from rlx_core.errors import Corrupt, InvalidArgument
from rlx_core.rpc import dtype_from_name

__all__ = ["TensorMeta", "TensorWriter", "Version", "chunk_shape_for"]


@dataclass(frozen=True)
class TensorMeta:
    """The manifest entry of one tensor."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    shard_axis: int
    chunk_shape: tuple[int, ...]
    nbytes: int
    sha256: str = ""
    crc32: int = 0


def chunk_shape_for(
    shape: tuple[int, ...], itemsize: int, shard_axis: int, chunk_bytes: int
) -> tuple[int, ...]:
    """Whole along every axis but `shard_axis`, which is split into equal pieces of at most
    ~`chunk_bytes` each. Equal pieces, because zarr stores an edge chunk at full size: 4864
    columns in pieces of 4681 would store 9362."""
    if not shape:
        return ()
    chunk = [max(1, d) for d in shape]
    unit = itemsize * math.prod(chunk) // chunk[shard_axis]  # bytes of one index along the axis
    dim = chunk[shard_axis]
    pieces = min(dim, max(1, -(-dim * unit // max(1, chunk_bytes))))
    chunk[shard_axis] = -(-dim // pieces)
    return tuple(chunk)


def _spec(meta: TensorMeta, path: str) -> dict[str, object]:
    return {
        "driver": "zarr3",
        "kvstore": {"driver": "memory", "path": path},
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
    """The tensors of one version and its manifest. Written once (staged), then read-only."""

    def __init__(self, version: int, metas: Sequence[TensorMeta]) -> None:
        self.version = version
        self.created = time.time()
        self._context = ts.Context()
        self._kv = ts.KvStore.open({"driver": "memory"}, context=self._context).result()
        self._paths = {m.name: f"{i}/" for i, m in enumerate(metas)}
        self.metas: dict[str, TensorMeta] = {m.name: m for m in metas}
        opening = {
            m.name: ts.open(_spec(m, self._paths[m.name]), create=True, context=self._context)
            for m in metas
        }
        self.arrays: dict[str, ts.TensorStore] = {n: f.result() for n, f in opening.items()}
        self.nbytes = sum(m.nbytes for m in metas)
        self._lock = threading.Lock()
        self.bytes_read = 0

    def finish(self, name: str, sha256: str, crc32: int) -> None:
        """Record the checksums of a fully written tensor in the manifest."""
        meta = self.metas[name]
        self.metas[name] = TensorMeta(**{**meta.__dict__, "sha256": sha256, "crc32": crc32})

    def _read_chunk(self, name: str, index: tuple[int, ...]) -> np.ndarray:
        meta = self.metas[name]
        key = self._paths[name] + ("c/" + "/".join(map(str, index)) if index else "c")
        result = self._kv.read(key.encode()).result()
        expected = math.prod(meta.chunk_shape) * meta.dtype.itemsize
        if result.state != "value" or len(result.value) != expected:
            raise Corrupt(
                f"version {self.version} tensor {name!r}: chunk {index} is missing or has "
                f"{len(result.value)} bytes instead of {expected}"
            )
        with self._lock:
            self.bytes_read += expected
        le = meta.dtype.newbyteorder("<") if meta.dtype.itemsize > 1 else meta.dtype
        chunk = np.frombuffer(result.value, dtype=le).reshape(meta.chunk_shape)
        return chunk if le == meta.dtype else chunk.astype(meta.dtype)

    def copy_into(self, name: str, out: np.ndarray) -> None:
        """Copy a whole tensor into `out` (C-order, its shape and dtype) with TensorStore's own
        multi-threaded reader: no intermediate buffers, so no fresh pages to fault in."""
        meta = self.metas[name]
        if meta.nbytes:
            target = ts.array(out, copy=False, write=True)
            target.write(self.arrays[name]).result()
        chunks = math.prod(-(-d // c) for d, c in zip(meta.shape, meta.chunk_shape, strict=True))
        with self._lock:
            self.bytes_read += chunks * math.prod(meta.chunk_shape) * meta.dtype.itemsize

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


class TensorWriter:
    """Receives one tensor's C-order bytes in order and writes them to its array in slabs of
    whole rows (axis 0), hashing as it goes. Holds at most one slab of ~chunk size."""

    def __init__(self, version: Version, name: str, block_bytes: int) -> None:
        self.version = version
        self.meta = version.metas[name]
        self.array = version.arrays[name]
        shape = self.meta.shape
        self.row_bytes = self.meta.nbytes // shape[0] if shape and shape[0] else self.meta.nbytes
        rows = max(1, block_bytes // max(1, self.row_bytes))
        if shape and self.meta.shard_axis == 0:  # whole chunks: no read-modify-write
            per_chunk = self.meta.chunk_shape[0]
            rows = max(per_chunk, rows // per_chunk * per_chunk)
        self.block_rows = rows if shape else 1
        self.block_bytes = self.block_rows * self.row_bytes
        self.received = 0
        self._buffer: np.ndarray | None = None  # made on first partial block, freed when done
        self._fill = 0
        self._rows_written = 0
        self._sha = hashlib.sha256()
        self._crc = 0
        if self.meta.nbytes == 0:
            version.finish(name, self._sha.hexdigest(), 0)

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
        self._sha.update(data)
        self._crc = zlib.crc32(data, self._crc)
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
            self.version.finish(self.meta.name, self._sha.hexdigest(), self._crc)

    def _write(self, raw: np.ndarray) -> None:
        meta = self.meta
        if not meta.shape:
            self.array.write(raw.view(meta.dtype).reshape(())).result()
            return
        nrows = raw.size // self.row_bytes
        block = raw.view(meta.dtype).reshape((nrows, *meta.shape[1:]))
        self.array[self._rows_written : self._rows_written + nrows].write(block).result()
        self._rows_written += nrows


def dtype_of(name: str) -> np.dtype:
    """The dtype for a wire name; InvalidArgument naming it otherwise."""
    return dtype_from_name(name)
