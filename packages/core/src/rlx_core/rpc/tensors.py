"""numpy arrays <-> streams of TensorChunk messages.

Any dtype numpy or ml_dtypes knows travels exactly (bfloat16, float8 and bool included): the bytes
are the array's C-order buffer, split into chunks of at most `chunk_bytes` (1 MiB by default, which
measured fastest on loopback: DESIGN §10). Each chunk carries a CRC32 of its bytes and its offset;
the receiver checks both, and the total length, and raises `Corrupt` naming the tensor rather than
ever returning wrong data.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Mapping

import ml_dtypes
import numpy as np

from rlx_core.errors import Corrupt, InvalidArgument
from rlx_core.proto.common.v1.tensor_pb2 import TensorChunk

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "TensorAssembler",
    "chunks_to_tensors",
    "dtype_from_name",
    "dtype_name",
    "tensor_to_chunks",
    "tensors_to_chunks",
]

DEFAULT_CHUNK_BYTES = 1 << 20


def dtype_name(dtype: np.dtype | type) -> str:
    """The wire name of a dtype: numpy's own name (`float32`, `bfloat16`, `bool`)."""
    return np.dtype(dtype).name


def dtype_from_name(name: str) -> np.dtype:
    """The dtype for a wire name; `InvalidArgument` for a name neither numpy nor ml_dtypes has."""
    ml = getattr(ml_dtypes, name, None)
    if ml is not None:
        return np.dtype(ml)
    try:
        dtype = np.dtype(name)
    except TypeError:
        raise InvalidArgument(f"unknown dtype {name!r}") from None
    if dtype.kind in "OUSVMm":  # objects, strings, voids and datetimes are not tensors
        raise InvalidArgument(f"dtype {name!r} cannot be sent as a tensor")
    return dtype


def tensor_to_chunks(
    name: str, array: np.ndarray, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[TensorChunk]:
    """Split one array into chunks; the first carries dtype, shape and total size."""
    if chunk_bytes <= 0:
        raise InvalidArgument(f"chunk_bytes must be > 0, got {chunk_bytes}")
    # not np.ascontiguousarray: it turns a 0-d array into a 1-d one
    array = np.asarray(array)
    if not array.flags.c_contiguous:
        array = array.copy(order="C")
    dtype = dtype_name(array.dtype)
    dtype_from_name(dtype)  # refuse object/string arrays before sending anything
    flat = memoryview(array.reshape(-1).view(np.uint8).data)
    total = flat.nbytes
    offset = 0
    while True:
        data = bytes(flat[offset : offset + chunk_bytes])
        chunk = TensorChunk(name=name, offset=offset, data=data, crc32=zlib.crc32(data))
        if offset == 0:
            chunk.dtype = dtype
            chunk.shape.extend(array.shape)
            chunk.total_bytes = total
        yield chunk
        offset += len(data)
        if offset >= total:
            return


def tensors_to_chunks(
    tensors: Mapping[str, np.ndarray] | Iterable[tuple[str, np.ndarray]],
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Iterator[TensorChunk]:
    """Chunks of several arrays, one after the other, in the given order."""
    items = tensors.items() if isinstance(tensors, Mapping) else tensors
    for name, array in items:
        yield from tensor_to_chunks(name, array, chunk_bytes=chunk_bytes)


class TensorAssembler:
    """Receives chunks in order and returns each tensor when its last byte arrives."""

    def __init__(self) -> None:
        self._name: str | None = None
        self._dtype: np.dtype | None = None
        self._shape: tuple[int, ...] = ()
        self._buffer: np.ndarray | None = None
        self._filled = 0

    @property
    def pending(self) -> str | None:
        """The name of the tensor being assembled, or None between tensors."""
        return self._name

    def feed(self, chunk: TensorChunk) -> tuple[str, np.ndarray] | None:
        """Add one chunk; return (name, array) when it completes a tensor, else None."""
        if zlib.crc32(chunk.data) != chunk.crc32:
            raise Corrupt(
                f"tensor {chunk.name!r}: checksum mismatch in the chunk at byte {chunk.offset}"
            )
        if self._name is None:
            self._start(chunk)
        elif chunk.name != self._name:
            raise Corrupt(
                f"tensor {self._name!r} ended after {self._filled} of "
                f"{self._buffer.size if self._buffer is not None else 0} bytes; "
                f"next chunk belongs to {chunk.name!r}"
            )
        assert self._buffer is not None and self._dtype is not None
        if chunk.offset != self._filled:
            raise Corrupt(
                f"tensor {self._name!r}: expected the chunk at byte {self._filled}, "
                f"got byte {chunk.offset} (a chunk was lost or reordered)"
            )
        end = self._filled + len(chunk.data)
        if end > self._buffer.size:
            raise Corrupt(
                f"tensor {self._name!r}: {end} bytes received, more than the "
                f"{self._buffer.size} announced"
            )
        self._buffer[self._filled : end] = np.frombuffer(chunk.data, dtype=np.uint8)
        self._filled = end
        if self._filled < self._buffer.size:
            return None
        result = self._buffer.view(self._dtype).reshape(self._shape)
        name = chunk.name
        self._name, self._buffer, self._filled = None, None, 0
        return name, result

    def _start(self, chunk: TensorChunk) -> None:
        if chunk.offset != 0:
            raise Corrupt(
                f"tensor {chunk.name!r}: first chunk starts at byte {chunk.offset}, not 0"
            )
        try:
            dtype = dtype_from_name(chunk.dtype)
        except InvalidArgument as e:
            raise Corrupt(f"tensor {chunk.name!r}: {e}") from None
        shape = tuple(int(d) for d in chunk.shape)
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if expected != chunk.total_bytes:
            raise Corrupt(
                f"tensor {chunk.name!r}: header says {chunk.total_bytes} bytes but shape "
                f"{shape} of {dtype.name} needs {expected}"
            )
        self._name, self._dtype, self._shape = chunk.name, dtype, shape
        self._buffer = np.empty(expected, dtype=np.uint8)
        self._filled = 0

    def finish(self) -> None:
        """Call at the end of the stream: a half-received tensor is `Corrupt`."""
        if self._name is not None:
            total = self._buffer.size if self._buffer is not None else 0
            raise Corrupt(
                f"stream ended inside tensor {self._name!r} after {self._filled} of {total} bytes"
            )


def chunks_to_tensors(chunks: Iterable[TensorChunk]) -> Iterator[tuple[str, np.ndarray]]:
    """Reassemble a stream of chunks into (name, array) pairs, checking every chunk."""
    assembler = TensorAssembler()
    for chunk in chunks:
        done = assembler.feed(chunk)
        if done is not None:
            yield done
    assembler.finish()
