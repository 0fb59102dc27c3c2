"""What a manifest may say is checked where it is written and where a link is read: the
uploader refuses a problem's limits that the verifier would refuse at judging time (NaN,
negative, a string, 1e400, over the caps, too many tests) and a line nested 100,000 deep, each
naming the file, the line, the problem, the field and the value; a test link is a blob's content
link or a phase-1 output's, never a path elsewhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlx_core.errors import InvalidArgument
from rlx_verifier import Repositories, Verifier
from rlx_verifier.repository import split_link
from rlx_verifier.upload import read_dataset, upload_dataset

SHA = "ab" * 32


@pytest.fixture
def repos() -> Iterator[Repositories]:
    r = Repositories()
    yield r
    r.close()


@pytest.mark.parametrize(
    "link",
    [
        "/etc/passwd",
        "../x",
        "/repo/blobs/../../etc/passwd",
        "/repo/transient/../../etc/passwd",
        "/repo/transient/123-ab/../../../etc/passwd",
        "/home/me/transient/secret",  # any file under a directory named transient
        f"/repo/../etc/blobs/{SHA}",
        f"s3://b/../../p/blobs/{SHA}",
    ],
)
def test_a_link_outside_the_repository_forms_is_refused(link: str) -> None:
    with pytest.raises(InvalidArgument, match="is not a test-repository link") as e:
        split_link(link)
    assert repr(link) in str(e.value) and e.value.details["field"] == "test_links"


def test_the_links_the_verifier_writes_are_links(tmp_path: Path, repos: Repositories) -> None:
    root = str(tmp_path / "repo")
    blob = repos.put_blob(root, b"1 2\n")
    output = repos.put_output(root, repos.new_run(root), "0", b"3\n")
    assert split_link(blob)[1].startswith("blobs/")
    assert split_link(output)[1].startswith("transient/")
    assert repos.read(blob) == b"1 2\n" and repos.read(output) == b"3\n"
    assert split_link(f"s3://bucket/p/blobs/{SHA}") == ("s3://bucket/p", f"blobs/{SHA}")


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


TESTS = '"tests": [{"stdin": "1\\n", "answer": "1\\n"}]'


@pytest.mark.parametrize(
    ("field", "raw", "shown"),
    [
        ("time_limit_s", "NaN", "nan"),
        ("time_limit_s", "-1", "-1"),
        ("time_limit_s", '"abc"', "'abc'"),
        ("time_limit_s", "1e400", "inf"),
        ("time_limit_s", "1e9", "1000000000.0"),
        ("memory_mb", "1e30", "1e+30"),
        ("memory_mb", "0", "0"),
    ],
)
def test_upload_refuses_limits_the_verifier_would_refuse(
    verifier: Verifier, repos: Repositories, tmp_path: Path, field: str, raw: str, shown: str
) -> None:
    path = _write(
        tmp_path,
        [
            '{"id": "ok", ' + TESTS + ', "time_limit_s": 2}',
            '{"id": "bad", ' + TESTS + f', "{field}": {raw}}}',
        ],
    )
    with pytest.raises(InvalidArgument) as e:
        upload_dataset(path, str(tmp_path / "repo"), verifier, repos)
    message = str(e.value)
    assert message.startswith(f"{path}:2: problem 'bad': {field} = {shown}: must be")
    assert f"verifier.judge.max_{field}" in message and "\n" not in message
    assert not (tmp_path / "repo").exists()  # checked before anything is stored


def test_upload_refuses_more_tests_than_the_verifier_takes(
    verifier: Verifier, repos: Repositories, tmp_path: Path
) -> None:
    many = json.dumps([{"stdin": f"{i}\n", "answer": f"{i}\n"} for i in range(1001)])
    path = _write(tmp_path, ['{"id": 7, "tests": ' + many + "}"])
    with pytest.raises(InvalidArgument, match="problem '7': the number of tests = 1001: must be"):
        upload_dataset(path, str(tmp_path / "repo"), verifier, repos)


def test_a_deeply_nested_line_is_refused_by_its_line(
    verifier: Verifier, repos: Repositories, tmp_path: Path
) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    path = _write(tmp_path, ['{"id": 1, ' + TESTS + "}", "", '{"id": 2, "tests": ' + deep + "}"])
    with pytest.raises(InvalidArgument, match=r"problems\.jsonl:3: not JSON: nested deeper"):
        list(read_dataset(path))
    # code_contests' layout keeps its tests as a JSON string: bounded too
    path = _write(tmp_path, [json.dumps({"id": 1, "test": deep})])
    with pytest.raises(InvalidArgument, match=r"problems\.jsonl:1: the tests are not a list"):
        upload_dataset(path, str(tmp_path / "repo"), verifier, repos)
    # tests that are not objects are a message too, not an AttributeError
    path = _write(tmp_path, ['{"id": 1, "tests": [1, 2]}'])
    with pytest.raises(InvalidArgument, match=r"problems\.jsonl:1: the tests are not a list"):
        upload_dataset(path, str(tmp_path / "repo"), verifier, repos)
