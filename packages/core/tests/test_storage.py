"""One storage suite, run against a local directory, moto's S3 server and gcp-storage-emulator."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

from rlx_core.errors import InvalidArgument, NotFound, Unavailable
from rlx_core.storage import COMMIT_MARKER, join_uri, open_storage
from rlx_core.storage._local import LocalStorage

BIG = os.urandom(9 << 20)  # > 8 MiB: multipart on S3, resumable upload on GCS


def test_put_get_round_trip(storage_root: str) -> None:
    st = open_storage(storage_root)
    st.put("a/b.bin", b"\x00\x01payload")
    st.put("empty", b"")
    assert st.get("a/b.bin") == b"\x00\x01payload"
    assert st.get("empty") == b""
    st.put("a/b.bin", b"replaced")
    assert st.get("a/b.bin") == b"replaced"


def test_files_stream_both_ways(storage_root: str, tmp_path: Path) -> None:
    st = open_storage(storage_root)
    src = tmp_path / "src.bin"
    src.write_bytes(BIG)
    st.put_file("big/blob.bin", src)
    dest = tmp_path / "out" / "dest.bin"
    dest.parent.mkdir()
    st.get_file("big/blob.bin", dest)
    assert dest.read_bytes() == BIG
    assert sorted(p.name for p in dest.parent.iterdir()) == ["dest.bin"]  # no temporaries left
    with st.open_read("big/blob.bin") as f:
        head = f.read(1000)
        rest = f.read()
    assert head + rest == BIG


def test_list_is_sorted_recursive_and_prefix_filtered(storage_root: str) -> None:
    st = open_storage(storage_root)
    for key in ["b/2", "a/1", "a/sub/3", "ab", "c"]:
        st.put(key, key.encode())
    assert st.list() == ["a/1", "a/sub/3", "ab", "b/2", "c"]
    assert st.list("a/") == ["a/1", "a/sub/3"]
    assert st.list("a") == ["a/1", "a/sub/3", "ab"]
    assert st.list("zzz/") == []


def test_exists_and_delete(storage_root: str) -> None:
    st = open_storage(storage_root)
    st.put("x/y", b"1")
    assert st.exists("x/y") and not st.exists("x/z")
    st.delete("x/y")
    assert not st.exists("x/y") and st.list() == []
    with pytest.raises(NotFound, match=re.escape(f"no object at {join_uri(st.uri, 'x/y')}")):
        st.delete("x/y")
    st.delete("x/y", missing_ok=True)


def test_missing_key_names_the_full_uri(storage_root: str, tmp_path: Path) -> None:
    st = open_storage(storage_root)
    uri = join_uri(st.uri, "nope/missing.bin")
    with pytest.raises(NotFound, match=re.escape(f"no object at {uri}")):
        st.get("nope/missing.bin")
    with pytest.raises(NotFound, match=r"missing\.bin"):
        st.get_file("nope/missing.bin", tmp_path / "d")
    with pytest.raises(NotFound, match=r"missing\.bin"):
        st.open_read("nope/missing.bin")
    assert not (tmp_path / "d").exists()


def test_atomic_commit_is_visible_only_after_the_block(storage_root: str, tmp_path: Path) -> None:
    st = open_storage(storage_root)
    (tmp_path / "p.bin").write_bytes(b"params")
    with st.atomic_commit("snap/000001") as tx:
        tx.put("state.json", b"{}")
        tx.put_file("params.bin", tmp_path / "p.bin")
        assert not st.committed("snap/000001")
    assert st.committed("snap/000001")
    assert st.get("snap/000001/state.json") == b"{}"
    manifest = st.commit_manifest("snap/000001")
    assert manifest["params.bin"] == {"size": 6, "sha256": hashlib.sha256(b"params").hexdigest()}
    assert st.list("snap/") == [
        f"snap/000001/{COMMIT_MARKER}",
        "snap/000001/params.bin",
        "snap/000001/state.json",
    ]
    with pytest.raises(InvalidArgument, match="already committed"), st.atomic_commit("snap/000001"):
        pass


def test_failed_commit_leaves_nothing_committed(storage_root: str) -> None:
    st = open_storage(storage_root)
    with pytest.raises(RuntimeError, match="preempted"), st.atomic_commit("snap/000002") as tx:
        tx.put("state.json", b"{}")
        raise RuntimeError("preempted")
    assert not st.committed("snap/000002")
    assert st.list("snap/") == []


def test_list_committed_and_delete_prefix(storage_root: str) -> None:
    st = open_storage(storage_root)
    for step in (3, 1, 2):
        with st.atomic_commit(f"snaps/{step:06d}") as tx:
            tx.put("s", b"x")
    st.put("snaps/000004/s", b"half-written, never committed")
    assert st.list_committed("snaps/") == ["snaps/000001", "snaps/000002", "snaps/000003"]
    assert st.delete_prefix("snaps/000001") == 2
    assert st.list_committed("snaps/") == ["snaps/000002", "snaps/000003"]


def test_child_is_rooted_below(storage_root: str) -> None:
    st = open_storage(storage_root)
    child = st.child("ckpt/7")
    child.put("w.bin", b"w")
    assert child.uri == join_uri(st.uri, "ckpt/7")
    assert st.get("ckpt/7/w.bin") == b"w" and child.list() == ["w.bin"]


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "./a"])
def test_bad_keys_are_refused(storage_root: str, key: str) -> None:
    with pytest.raises(InvalidArgument):
        open_storage(storage_root).put(key, b"x")


@pytest.mark.parametrize(
    ("uri", "match"),
    [
        ("ftp://host/x", "unsupported scheme 'ftp'"),
        ("s3:///prefix", "no bucket"),
        ("gs://", "no bucket"),
        ("s3://bucket/a/../b", "not allowed"),
        ("file://host/x", "name no host"),
        ("", "empty"),
    ],
)
def test_bad_uris_are_refused(uri: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        open_storage(uri)


def test_plain_path_and_file_uri_are_the_same_storage(tmp_path: Path) -> None:
    open_storage(str(tmp_path)).put("k", b"v")
    assert open_storage(f"file://{tmp_path}").get("k") == b"v"
    assert open_storage(str(tmp_path)).uri == str(tmp_path)


def test_local_put_leaves_no_temporaries(tmp_path: Path) -> None:
    st = open_storage(tmp_path)
    st.put("d/x", b"1")
    st.put_file("d/y", __file__)
    assert sorted(os.listdir(tmp_path / "d")) == ["x", "y"]


def test_local_reader_never_sees_a_partial_object(tmp_path: Path, monkeypatch) -> None:
    """The bytes go to a temporary name; the real name appears only at the rename."""
    st = open_storage(tmp_path)
    st.put("obj", b"old")
    seen = []
    real_replace = os.replace

    def spying_replace(src, dst):  # the moment the write finishes
        seen.append((Path(dst).read_bytes(), Path(src).read_bytes()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spying_replace)
    st.put("obj", b"new-and-longer")
    assert seen == [(b"old", b"new-and-longer")]  # readers saw the old object until the rename
    assert isinstance(st, LocalStorage) and st.get("obj") == b"new-and-longer"


def test_missing_s3_bucket_is_not_found_naming_it(s3_server: str, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    for var, value in [
        ("AWS_ACCESS_KEY_ID", "t"),
        ("AWS_SECRET_ACCESS_KEY", "t"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ]:
        monkeypatch.setenv(var, value)
    st = open_storage("s3://no-such-bucket-rlx/p")
    with pytest.raises(NotFound, match="bucket 'no-such-bucket-rlx' does not exist"):
        st.get("k")
    with pytest.raises(NotFound, match="no-such-bucket-rlx"):
        st.put("k", b"v")
    with pytest.raises(NotFound, match="no-such-bucket-rlx"):
        st.exists("k")


def test_missing_gcs_bucket_is_not_found_naming_it(gcs_server: str, monkeypatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    st = open_storage("gs://no-such-bucket-rlx/p")
    with pytest.raises(NotFound, match="bucket 'no-such-bucket-rlx' does not exist"):
        st.get("k")
    with pytest.raises(NotFound, match="no-such-bucket-rlx"):
        st.put("k", b"v")


def test_unreachable_endpoints_are_unavailable(monkeypatch, dead_endpoint: str) -> None:
    dead = dead_endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL", dead)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "t")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "t")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with pytest.raises(Unavailable, match="s3://b/p/k"):
        open_storage("s3://b/p", timeout_s=2).get("k")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", dead)
    with pytest.raises(Unavailable, match="gs://b/p/k"):
        open_storage("gs://b/p", timeout_s=2).get("k")
