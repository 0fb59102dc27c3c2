"""A remote run's metrics.jsonl in its storage (MetricsUpload): uploaded a piece per snapshot and
merged like a binary counter, read back whole, resumed on another machine, and never a mix of
bytes while a merge is half done or after a failed upload."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlx_controller.metrics import (
    METRICS_FILE,
    METRICS_PARTS,
    MetricsUpload,
    MetricsWriter,
    read_uploaded,
)
from rlx_core.errors import Unavailable
from rlx_core.storage import Storage, open_storage


class _Counting:
    """Wraps a storage's put to count the bytes uploaded (and to fail the next n puts)."""

    def __init__(self, storage: Storage) -> None:
        self.bytes = 0
        self.fail = 0
        self._put = storage.put
        storage.put = self.put  # type: ignore[method-assign]

    def put(self, key: str, data: bytes) -> None:
        if self.fail:
            self.fail -= 1
            raise Unavailable(f"{key}: injected failure")
        self.bytes += len(data)
        self._put(key, data)


def _step(writer: MetricsWriter, step: int) -> None:
    writer.write({"step": step, "reward": step / 7, "prompt_ids": list(range(step % 5))})


def test_each_snapshot_uploads_what_is_new_and_parts_stay_few(
    run_root: str, tmp_path: Path
) -> None:
    storage = open_storage(run_root)
    counting = _Counting(storage)
    local = tmp_path / METRICS_FILE
    upload = MetricsUpload(storage, local)
    upload.reset()
    quadratic = 0
    with MetricsWriter(tmp_path) as writer:
        for step in range(1, 41):
            _step(writer, step)
            upto = upload.take()
            assert upto == local.stat().st_size
            upload.upload(upto)
            quadratic += upto  # what uploading the whole file every time costs
            assert read_uploaded(storage) == local.read_bytes()
            parts = storage.list(METRICS_PARTS)
            assert len(parts) == bin(step).count("1")  # a binary counter of snapshots
            assert upload.take() is None  # nothing new since
    size = local.stat().st_size
    assert counting.bytes <= size * (math.log2(40) + 1)
    assert counting.bytes < quadratic / 3  # 32x fewer at 600, 375x at 10,000
    records = [json.loads(x) for x in read_uploaded(storage).decode().splitlines()]  # type: ignore[union-attr]
    assert [r["step"] for r in records] == list(range(1, 41))


def test_a_failed_upload_is_made_good_by_the_next(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "run"))
    counting = _Counting(storage)
    local = tmp_path / METRICS_FILE
    upload = MetricsUpload(storage, local)
    with MetricsWriter(tmp_path) as writer:
        for step in range(1, 8):
            _step(writer, step)
            upto = upload.take()
            assert upto is not None
            if step == 3:
                counting.fail = 1
                with pytest.raises(Unavailable):
                    upload.upload(upto)
                continue
            upload.upload(upto)
            assert read_uploaded(storage) == local.read_bytes()


def test_a_resume_elsewhere_continues_the_uploaded_file(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "run"))
    first = tmp_path / "machine-a"
    upload = MetricsUpload(storage, first / METRICS_FILE)
    with MetricsWriter(first) as writer:
        for step in range(1, 12):
            _step(writer, step)
            upload.upload(upload.take())  # type: ignore[arg-type]
        _step(writer, 12)  # written after the last snapshot: not uploaded, written again
    second = tmp_path / "machine-b"
    second.mkdir()
    resumed = MetricsUpload(storage, second / METRICS_FILE)
    assert resumed.restore()
    assert (second / METRICS_FILE).read_bytes() == read_uploaded(storage)
    assert storage.list(METRICS_PARTS) == [f"{METRICS_PARTS}{0:016d}.jsonl"]  # one part
    with MetricsWriter(second) as writer:
        for step in range(12, 15):
            _step(writer, step)
            resumed.upload(resumed.take())  # type: ignore[arg-type]
    data = read_uploaded(storage)
    assert data == (second / METRICS_FILE).read_bytes()
    steps = [json.loads(x)["step"] for x in data.decode().splitlines()]  # type: ignore[union-attr]
    assert steps == list(range(1, 15))
    # nothing uploaded yet: restore keeps the local file and reports it
    empty = MetricsUpload(open_storage(str(tmp_path / "other")), second / METRICS_FILE)
    assert not empty.restore()
    assert (second / METRICS_FILE).read_bytes() == data


def _parts(storage: Storage, parts: dict[int, bytes]) -> None:
    for offset, data in parts.items():
        storage.put(f"{METRICS_PARTS}{offset:016d}.jsonl", data)


def test_a_reader_sees_a_prefix_while_a_merge_is_half_done(tmp_path: Path) -> None:
    text = b"".join(json.dumps({"step": s}).encode() + b"\n" for s in range(1, 9))
    storage = open_storage(str(tmp_path / "covered"))
    # merged part written over the first, the covered second part not deleted yet
    _parts(storage, {0: text[:60], 40: text[40:60], 60: text[60:]})
    assert read_uploaded(storage) == text
    storage = open_storage(str(tmp_path / "gap"))
    # a part after a gap (its predecessor's upload failed) is left out: a prefix, never a mix
    _parts(storage, {0: text[:30], 45: text[45:]})
    assert read_uploaded(storage) == text[:30]
    storage.put(f"{METRICS_PARTS}notes.txt", b"x")  # not a part: ignored
    assert read_uploaded(storage) == text[:30]


def test_a_fresh_run_drops_parts_and_old_run_dirs_still_read(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "run"))
    _parts(storage, {0: b'{"step": 1}\n'})
    MetricsUpload(storage, tmp_path / METRICS_FILE).reset()
    assert storage.list(METRICS_PARTS) == []
    assert read_uploaded(storage) is None
    storage.put(METRICS_FILE, b'{"step": 3}\n')  # uploaded whole, before the parts existed
    assert read_uploaded(storage) == b'{"step": 3}\n'
