"""Reading and writing the safetensors format with numpy (bf16 and fp8 through ml_dtypes).

The format: an 8-byte little-endian header length, a JSON header mapping each tensor name to its
dtype, shape and byte range, then the raw bytes. Reading memory-maps the file, so a tensor costs
memory only once it is converted.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Mapping
from pathlib import Path

import ml_dtypes
import numpy as np

from rlx_core.errors import Corrupt, InvalidArgument

__all__ = ["SafetensorsFile", "write_safetensors"]

_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
_NAMES = {v: k for k, v in _DTYPES.items()}
_MAX_HEADER = 100 << 20


class SafetensorsFile:
    """A memory-mapped .safetensors file: `names()`, `shape(name)`, `get(name)`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as f:
            size = self.path.stat().st_size
            if size < 8:
                raise Corrupt(f"{self.path}: {size} bytes is too short for a safetensors file")
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        (header_len,) = struct.unpack("<Q", self._map[:8])
        if header_len > min(_MAX_HEADER, size - 8):
            raise Corrupt(f"{self.path}: header length {header_len} does not fit the file")
        try:
            header = json.loads(self._map[8 : 8 + header_len])
        except ValueError as e:
            raise Corrupt(f"{self.path}: unreadable header: {e}") from None
        self.metadata: dict[str, str] = header.pop("__metadata__", None) or {}
        self._entries: dict[str, dict] = header
        self._data_start = 8 + header_len
        for name, entry in header.items():
            begin, end = entry["data_offsets"]
            if entry["dtype"] not in _DTYPES:
                raise Corrupt(f"{self.path}: tensor {name!r} has unknown dtype {entry['dtype']}")
            need = int(np.prod(entry["shape"], dtype=np.int64)) * _DTYPES[entry["dtype"]].itemsize
            if end - begin != need or self._data_start + end > size:
                raise Corrupt(f"{self.path}: tensor {name!r} has a bad byte range")

    def names(self) -> list[str]:
        return list(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._entries[name]["shape"])

    def get(self, name: str) -> np.ndarray:
        """The tensor as a read-only numpy view of the mapped file."""
        entry = self._entries[name]
        begin, end = entry["data_offsets"]
        dtype = _DTYPES[entry["dtype"]]
        buf = memoryview(self._map)[self._data_start + begin : self._data_start + end]
        return np.frombuffer(buf, dtype=dtype).reshape(entry["shape"])

    def close(self) -> None:
        """Unmap the file; only once no array returned by `get` is alive."""
        self._map.close()


def write_safetensors(
    path: str | Path, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None
) -> None:
    """Write tensors in name order (deterministic bytes for the same input)."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    arrays = []
    for name in sorted(tensors):
        array = np.asarray(tensors[name])
        if array.dtype not in _NAMES:
            raise InvalidArgument(f"tensor {name!r}: dtype {array.dtype} has no safetensors name")
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        header[name] = {
            "dtype": _NAMES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
        arrays.append(array)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # align the data to 8 bytes, as the reference writer does
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for array in arrays:
            f.write(array.reshape(-1).view(np.uint8).data)
    tmp.replace(path)
