"""What a dataset may hold is checked when it loads, and reading it is bounded: a code row's or a
manifest's limits (NaN, negative, a string, 1e400, over the verifier's caps) and a manifest's
links (outside its repository) are refused by file, line or problem, field and value; a JSONL
line or manifest nested 100,000 deep, a gzip bomb and a Parquet footer that lies about its rows
are refused without a traceback and without reading them whole. A sample the verifier refuses
at scoring time is an ERROR verdict, logged, never an exception."""

from __future__ import annotations

import gzip
import io
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlx_controller.scoring import score_responses
from rlx_core.clients.verifier import SampleResult, VerifySample
from rlx_core.configs.run import DatasetConfig
from rlx_core.configs.verifier import JudgeConfig
from rlx_core.errors import ConfigError, InvalidArgument
from rlx_data import datasets, load_dataset, read_jsonl, read_parquet
from rlx_verifier.config import VerifierConfig
from rlx_verifier.service import VerifierService

TESTS = [{"input": "1\n", "output": "1\n"}]
BLOB = "/repo/blobs/" + "ab" * 32
DEEP = b"[" * 100_000 + b"]" * 100_000


def _jsonl(tmp_path: Path, rows: list[Any], name: str = "d.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def _refused(cfg: DatasetConfig, **kw: Any) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        load_dataset(cfg, **kw)
    message = str(e.value)
    assert "\n" not in message  # one line
    return e.value


# --- limits -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "raw", "shown"),
    [
        ("mem", "1e30", "1e+30"),  # sample_to_proto could not encode it
        ("mem", "-5", "-5"),
        ("mem", "300.5", "300.5"),
        ("mem", "9000", "9000"),  # over judge.max_memory_mb (8192)
        ("tl", "NaN", "nan"),
        ("tl", "-1", "-1"),
        ("tl", '"abc"', "'abc'"),
        ("tl", "1e400", "inf"),  # JSON's 1e400 is a float infinity
        ("tl", "1e9", "1000000000.0"),  # over judge.max_time_limit_s (60)
    ],
)
def test_a_rows_bad_limit_is_refused_at_load(
    tmp_path: Path, field: str, raw: str, shown: str
) -> None:
    rows = [
        json.dumps({"prompt": "ok", "tests": TESTS}),
        '{"prompt": "bad", "tests": ' + json.dumps(TESTS) + f', "{field}": {raw}}}',
    ]
    path = _jsonl(tmp_path, rows)
    cfg = DatasetConfig(
        name="c", path=path, reward="code", time_limit_field="tl", memory_field="mem"
    )
    e = _refused(cfg, field_path="datasets[2]")
    config_field = "time_limit_field" if field == "tl" else "memory_field"
    assert e.field == f"datasets[2].{config_field}"
    message = str(e)
    assert f"{path}:2:" in message and repr(field) in message and shown in message
    assert ("max_time_limit_s" if field == "tl" else "max_memory_mb") in message


def test_limits_are_checked_against_the_runs_verifier_caps(tmp_path: Path) -> None:
    rows = [{"prompt": "p", "tests": TESTS * 3, "tl": 90}]
    cfg = DatasetConfig(name="c", path=_jsonl(tmp_path, rows), reward="code", time_limit_field="tl")
    e = _refused(cfg)
    assert "<= 60 (verifier.judge.max_time_limit_s)" in str(e)
    # the caps are the run's verifier's: a verifier allowing 120 s takes the row
    roomy = JudgeConfig(max_time_limit_s=120.0)
    task = load_dataset(cfg, judge=roomy).prompt(0).code
    assert task is not None and task.time_limit_s == 90.0
    # and one taking at most 2 tests a sample refuses its 3 tests
    e = _refused(cfg, judge=JudgeConfig(max_time_limit_s=120.0, max_tests=2))
    assert (
        e.field == "datasets.tests_field"
        and "the number of tests in 'tests' = 3" in str(e)
        and "max_tests" in str(e)
    )
    # the dataset's own limit, too
    over = DatasetConfig(name="c", path=cfg.path, reward="code", memory_mb=10_000)
    e = _refused(over)
    assert e.field == "datasets.memory_mb" and "10000" in str(e)


def _manifest(tmp_path: Path, problem: dict[str, Any], **top: Any) -> tuple[str, str]:
    entry = {"id": "p1", "tests": [{"input": BLOB, "answer": BLOB}], **problem}
    manifest = {"format": "rlx-verifier-manifest/1", "repo": "/repo", "problems": [entry], **top}
    mpath = tmp_path / "manifest.json"
    mpath.write_text(json.dumps(manifest))
    return str(mpath), _jsonl(tmp_path, [{"prompt": "x", "id": "p1"}])


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("time_limit_s", float("nan"), "nan"),
        ("time_limit_s", -2, "-2"),
        ("time_limit_s", "abc", "'abc'"),
        ("time_limit_s", float("inf"), "inf"),  # written as JSON's 1e400 below
        ("time_limit_s", 1e9, "1000000000.0"),
        ("memory_mb", 1e30, "1e+30"),
        pytest.param("memory_mb", 10**400, "must be", id="memory_mb-10**400"),  # no float
    ],
)
def test_a_manifest_problems_bad_limit_is_refused_at_load(
    tmp_path: Path, field: str, value: Any, shown: str
) -> None:
    mpath, data = _manifest(tmp_path, {field: value})
    if value == float("inf"):
        Path(mpath).write_text(Path(mpath).read_text().replace("Infinity", "1e400"))
    cfg = DatasetConfig(name="m", path=data, reward="code", tests_manifest=mpath)
    e = _refused(cfg, field_path="datasets[1]")
    assert e.field == "datasets[1].tests_manifest"
    message = str(e)
    assert mpath in message and "problem 'p1'" in message and field in message
    assert shown in message


@pytest.mark.parametrize(
    "link",
    [
        "/etc/passwd",
        "../x",
        "/repo/blobs/../../etc/passwd",
        "/other/blobs/" + "ab" * 32,  # another repository
        "/repo/blobs/" + "AB" * 32,  # not a sha256 as the uploader writes it
        "/repo/transient/123-ab/0",
        17,
    ],
)
def test_a_manifest_link_outside_its_repository_is_refused(tmp_path: Path, link: Any) -> None:
    for problem in (
        {"tests": [{"input": BLOB, "answer": BLOB}, {"input": link, "answer": BLOB}]},
        {"checker": link},
    ):
        mpath, data = _manifest(tmp_path, problem)
        e = _refused(DatasetConfig(name="m", path=data, reward="code", tests_manifest=mpath))
        message = str(e)
        assert "problem 'p1'" in message and "not a content link" in message
        assert repr(link) in message or str(link) in message
        assert ("tests[1].input" if "tests" in problem else "checker") in message
    # a problem named twice is refused (a row naming it would get either's tests)
    mpath, data = _manifest(tmp_path, {})
    manifest = json.loads(Path(mpath).read_text())
    manifest["problems"] *= 2
    Path(mpath).write_text(json.dumps(manifest))
    e = _refused(DatasetConfig(name="m", path=data, reward="code", tests_manifest=mpath))
    assert "problem id 'p1' appears twice" in str(e)
    # a manifest without its repository is no manifest of the uploader's
    mpath, data = _manifest(tmp_path, {}, repo="../elsewhere")
    e = _refused(DatasetConfig(name="m", path=data, reward="code", tests_manifest=mpath))
    assert "repo = '../elsewhere'" in str(e)


def test_test_text_must_be_unicode(tmp_path: Path) -> None:
    # JSON can spell a lone surrogate, which no Verify request can carry
    path = _jsonl(tmp_path, ['{"prompt": "p", "tests": [{"input": "\\ud800", "output": "1"}]}'])
    e = _refused(DatasetConfig(name="c", path=path, reward="code"))
    assert e.field == "datasets.tests_field" and "not Unicode text" in str(e)


# --- bounded reading ----------------------------------------------------------------------------


def test_a_deeply_nested_line_or_manifest_is_refused_by_its_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b'{"prompt": "a", "answer": "1"}\n\n{"prompt": ' + DEEP + b"}\n")
    e = _refused(DatasetConfig(name="d", path=str(path)))
    assert e.field == "datasets.path" and f"{path}:3:" in str(e) and "nested deeper" in str(e)
    with pytest.raises(InvalidArgument, match=r"deep\.jsonl:3: .*nested deeper"):
        read_jsonl(str(path))
    # a manifest, likewise
    mpath = tmp_path / "manifest.json"
    mpath.write_bytes(b'{"problems": ' + DEEP + b"}")
    data = _jsonl(tmp_path, [{"prompt": "x", "id": "p1"}])
    e = _refused(DatasetConfig(name="m", path=data, reward="code", tests_manifest=str(mpath)))
    assert e.field == "datasets.tests_manifest" and "nested deeper" in str(e)
    # brackets inside strings are text, not nesting
    text = "[" * 5000
    path.write_text(json.dumps({"prompt": text, "answer": "1"}) + "\n")
    assert load_dataset(DatasetConfig(name="d", path=str(path))).prompt(0).text == text


def test_a_gzip_bomb_is_refused_while_streaming(tmp_path: Path) -> None:
    path = tmp_path / "bomb.jsonl.gz"
    # 1 GiB of zero bytes, no newline, about 1 MiB compressed: 1024 gzip members (a gzip file
    # may hold several, read one after another) of 1 MiB each
    path.write_bytes(gzip.compress(bytes(1 << 20), compresslevel=9) * 1024)
    assert path.stat().st_size < 2 << 20
    with gzip.open(path) as f:  # what it decompresses to
        assert f.read(3 << 20) == bytes(3 << 20)  # on across members
    e = _refused(DatasetConfig(name="b", path=str(path)))
    assert e.field == "datasets.path"
    assert f"{path}:1: the line is longer than 128 MiB" in str(e)


def test_decompressed_size_and_line_length_are_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [{"prompt": f"what is {i} + 1?", "answer": str(i + 1)} for i in range(20_000)]
    path = tmp_path / "big.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    cfg = DatasetConfig(name="g", path=str(path))
    monkeypatch.setattr(datasets, "_PIECE", 4096)  # lines split across pieces
    ds = load_dataset(cfg)
    assert len(ds) == 20_000 and ds.prompt(19_999).answer == "20000"
    monkeypatch.setattr(datasets, "MAX_DECOMPRESSED_BYTES", 100_000)
    e = _refused(cfg)
    assert f"{path}: decompresses to more than 0.0953674 MiB" in str(e)
    monkeypatch.setattr(datasets, "MAX_DECOMPRESSED_BYTES", 4 << 30)
    monkeypatch.setattr(datasets, "MAX_LINE_BYTES", 100)
    long = _jsonl(tmp_path, [{"prompt": "a", "answer": "1"}, {"prompt": "b" * 200, "answer": "2"}])
    e = _refused(DatasetConfig(name="l", path=long))
    assert f"{long}:2: the line is longer than" in str(e)


def _lying_parquet(rows: int) -> bytes:
    """A Parquet file of 3 rows whose footer (FileMetaData.num_rows and the row group's)
    claims `rows`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"prompt": ["a", "b", "c"], "answer": ["1", "2", "3"]}), buf)
    data = buf.getvalue()
    size = struct.unpack("<I", data[-8:-4])[0]
    footer = data[-8 - size : -8]
    zigzag, varint = rows << 1, bytearray()
    while True:  # Thrift's compact protocol: an i64 is a zigzag varint
        varint.append((zigzag & 0x7F) | (0x80 if zigzag > 0x7F else 0))
        zigzag >>= 7
        if not zigzag:
            break
    # field 3 (num_rows, i64: header 0x16) = 3 (zigzag 6), before the row groups (0x19 0x1c),
    # and each row group's num_rows (0x16 0x06 before its ordinal field, 0x26)
    lie = b"\x16" + bytes(varint)
    assert footer.count(b"\x16\x06\x19\x1c") == 1
    footer = footer.replace(b"\x16\x06\x19\x1c", lie + b"\x19\x1c").replace(
        b"\x16\x06\x26", lie + b"\x26"
    )
    return data[: -8 - size] + footer + struct.pack("<I", len(footer)) + b"PAR1"


def test_a_parquet_footer_claiming_more_rows_than_the_file_holds_is_refused(
    tmp_path: Path,
) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "lying.parquet"
    path.write_bytes(_lying_parquet(1 << 40))
    assert pq.ParquetFile(str(path)).metadata.num_rows == 1 << 40  # what the footer claims
    e = _refused(DatasetConfig(name="p", path=str(path)))
    assert e.field == "datasets.path"
    assert "the footer claims 1099511627776 rows in" in str(e) and str(path) in str(e)
    with pytest.raises(InvalidArgument, match="footer claims"):
        read_parquet(str(path), columns=["nope"])
    # a footer whose claim is within the bound but false is caught while reading in batches
    path.write_bytes(_lying_parquet(200))
    e = _refused(DatasetConfig(name="p", path=str(path)))
    assert "holds 3 rows where its footer claims 200: not a readable Parquet file" in str(e)
    # the honest file loads
    path.write_bytes(_lying_parquet(3))
    assert len(load_dataset(DatasetConfig(name="p", path=str(path)))) == 3


# --- scoring ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def strict_verifier() -> Iterator[VerifierService]:
    """A verifier whose caps are lower than the run assumed: at most 1 CPU second a run (a
    stdin/stdout sample without its own limit asks for the default 2 s)."""
    s = VerifierService(VerifierConfig(judge=JudgeConfig(workers=1, max_time_limit_s=1.0)))
    yield s
    s.close()


def test_a_sample_the_verifier_refuses_is_an_error_verdict_logged(
    tmp_path: Path, strict_verifier: VerifierService
) -> None:
    rows = [{"prompt": "echo", "tests": TESTS}, {"prompt": "echo fast", "tests": TESTS, "tl": 0.5}]
    path = _jsonl(tmp_path, rows)
    ds = load_dataset(DatasetConfig(name="c", path=path, reward="code", time_limit_field="tl"))
    program = "```python\nprint(input())\n```"
    logged: list[str] = []
    got = score_responses(
        "u7",
        [ds.prompt(0), ds.prompt(1)],
        [program, "no code", program, program],
        strict_verifier.verify,
        logged.append,
    )
    assert [(v.sample_id, v.status, v.score) for v in got] == [
        ("u7/0/0", "ERROR", None),  # the default 2 s is over this verifier's 1 s
        ("u7/0/1", "NO_CODE", 0.0),
        ("u7/1/0", "AC", 1.0),
        ("u7/1/1", "AC", 1.0),
    ]
    assert "max_time_limit_s" in got[0].error
    assert len(logged) == 1
    assert logged[0].startswith("c/0 (unit u7): 1 of 2 samples not judged")
    assert "ERROR" in logged[0] and "time_limit_s" in logged[0]


def test_a_batch_refused_as_a_whole_is_judged_sample_by_sample(
    tmp_path: Path, strict_verifier: VerifierService
) -> None:
    path = _jsonl(tmp_path, [{"prompt": "echo", "tests": TESTS, "tl": 0.5}])
    ds = load_dataset(DatasetConfig(name="c", path=path, reward="code", time_limit_field="tl"))
    good = "```python\nprint(input())\n```"
    bad = "```python\nprint('\ud800')\n```"  # a lone surrogate: no request can carry it
    calls: list[int] = []

    def verify(samples: list[VerifySample]) -> list[SampleResult]:
        # the real client's encoding first (sample_to_proto), then the real verifier
        from rlx_core.clients.verifier import sample_to_proto

        calls.append(len(samples))
        for s in samples:
            sample_to_proto(s).SerializeToString()
        return strict_verifier.verify(samples)

    logged: list[str] = []
    got = score_responses("u", [ds.prompt(0)], [good, bad, good], verify, logged.append)
    assert [(v.status, v.score) for v in got] == [("AC", 1.0), ("ERROR", None), ("AC", 1.0)]
    assert calls == [3, 1, 1, 1] and "refused" in got[1].error
    assert logged and "1 of 3 samples not judged" in logged[0]
