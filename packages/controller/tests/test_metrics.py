"""MetricsWriter: the JSONL lines as the driver wrote them, and TensorBoard event files read back
through their TFRecord framing (length, masked CRC32C, payload, masked CRC32C) and TensorFlow's
Event proto."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import google_crc32c
import numpy as np
import pytest

from rlx_controller.metrics import MetricsWriter
from rlx_core.errors import InvalidArgument


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _records(path: Path) -> list[bytes]:
    """The payloads of one TFRecord file; fails on a bad checksum or a torn record."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        header = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        assert length_crc == _masked_crc(header), f"{path}: bad length CRC at byte {pos}"
        payload = data[pos + 12 : pos + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[pos + 12 + length : pos + 16 + length])
        assert payload_crc == _masked_crc(payload), f"{path}: bad payload CRC at byte {pos}"
        out.append(payload)
        pos += 16 + length
    return out


def _events(run: Path) -> tuple[dict[str, dict[int, float]], list[int]]:
    """{tag: {step: value}} over every event file of the run (later files win), and the steps of
    the session-start (purge) events."""
    from tensorboardX.proto.event_pb2 import Event, SessionLog

    files = sorted((run / "tensorboard").glob("events.out.tfevents.*"))  # TensorBoard's order
    assert files, "no event file"
    scalars: dict[str, dict[int, float]] = {}
    starts: list[int] = []
    for path in files:
        for payload in _records(path):
            event = Event.FromString(payload)
            if event.HasField("session_log") and event.session_log.status == SessionLog.START:
                starts.append(event.step)
            for value in event.summary.value:
                scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return scalars, starts


RECORDS = [
    {"step": 0, "heldout": 0.46},
    {
        "step": 1,
        "reward": 0.25,
        "staleness": 0,
        "excluded": 2,
        "prompt_ids": ["b0.u0:0", "b0.u0:1"],
        "trainer/loss": -0.125,
        "trainer/mismatch_mean": 0.0063,
        "stopped": False,
        "note": None,
    },
    {"step": 2, "reward": 0.5, "staleness": 1, "excluded": 0, "trainer/loss": 0.75},
]


def test_jsonl_lines_are_the_sorted_json_of_each_record(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path) as metrics:
        for rec in RECORDS:
            metrics.write(rec)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert lines == [json.dumps(r, sort_keys=True) for r in RECORDS]


def test_event_files_hold_every_numeric_scalar_at_its_step(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path) as metrics:
        for rec in RECORDS:
            metrics.write(rec)
    scalars, _ = _events(tmp_path)
    f32 = lambda x: float(np.float32(x))  # noqa: E731 - simple_value is a float32
    assert scalars == {
        "heldout": {0: f32(0.46)},
        "reward": {1: 0.25, 2: 0.5},
        "staleness": {1: 0.0, 2: 1.0},
        "excluded": {1: 2.0, 2: 0.0},
        "trainer/loss": {1: -0.125, 2: 0.75},
        "trainer/mismatch_mean": {1: f32(0.0063)},
    }  # no step, prompt_ids, stopped (bool) or note (None)


def test_a_resumed_writer_purges_from_its_first_step(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path) as metrics:
        for step in range(1, 6):
            metrics.write({"step": step, "reward": float(step)})
    # killed after step 5, resumed from a snapshot at step 3: steps 4 and 5 are written again
    with MetricsWriter(tmp_path) as metrics:
        for step in (4, 5, 6):
            metrics.write({"step": step, "reward": 10.0 * step})
    scalars, starts = _events(tmp_path)
    assert starts[-1] == 4  # TensorBoard drops the first run's points from step 4 on
    assert scalars["reward"] == {1: 1.0, 2: 2.0, 3: 3.0, 4: 40.0, 5: 50.0, 6: 60.0}
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 4, 5, 6]


def test_each_write_is_on_disk_before_close(tmp_path: Path) -> None:
    metrics = MetricsWriter(tmp_path)
    metrics.write({"step": 7, "reward": 0.5})
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 7, "reward": 0.5}
    scalars, _ = _events(tmp_path)
    assert scalars["reward"] == {7: 0.5}
    metrics.close()
    metrics.close()  # twice is fine


@pytest.mark.parametrize("step", [None, -1, 1.5, True, "3"])
def test_a_record_without_a_valid_step_is_refused(tmp_path: Path, step: object) -> None:
    rec = {"reward": 0.5} if step is None else {"step": step, "reward": 0.5}
    with MetricsWriter(tmp_path) as metrics, pytest.raises(InvalidArgument, match="'step'"):
        metrics.write(rec)
    assert not (tmp_path / "metrics.jsonl").exists()


def test_writing_after_close_fails(tmp_path: Path) -> None:
    metrics = MetricsWriter(tmp_path)
    metrics.close()
    with pytest.raises(InvalidArgument, match="closed"):
        metrics.write({"step": 1, "reward": 0.0})
