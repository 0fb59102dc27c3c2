"""One storage suite, run against a local directory, moto's S3 server and gcp-storage-emulator."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlx_core.errors import (
    AlreadyExists,
    ConfigError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from rlx_core.storage import COMMIT_MARKER, join_uri, open_storage

BIG = os.urandom(9 << 20)  # > 8 MiB: multipart on S3, resumable upload on GCS
ALL_BYTES = bytes(range(256))


def no_object(uri: str) -> str:
    return re.escape(f"no object at {uri}")


# --- objects ----------------------------------------------------------------------------------


def test_put_get_round_trip(storage_root: str) -> None:
    st = open_storage(storage_root)
    st.put("a/b.bin", ALL_BYTES)
    st.put("empty", b"")
    st.put("view", memoryview(b"from a buffer"))
    assert st.get("a/b.bin") == ALL_BYTES
    assert st.get("empty") == b""
    assert st.get("view") == b"from a buffer"
    st.put("a/b.bin", b"replaced")
    assert st.get("a/b.bin") == b"replaced"


def test_big_files_stream_both_ways(storage_root: str, tmp_path: Path) -> None:
    st = open_storage(storage_root)
    src = tmp_path / "src.bin"
    src.write_bytes(BIG)
    st.put_file("big/blob.bin", src)
    assert st.get("big/blob.bin") == BIG
    dest = tmp_path / "out" / "dest.bin"
    dest.parent.mkdir()
    dest.write_bytes(b"an older download")
    st.get_file("big/blob.bin", dest)
    assert dest.read_bytes() == BIG
    assert sorted(p.name for p in dest.parent.iterdir()) == ["dest.bin"]  # no temporaries left
    with st.open_read("big/blob.bin") as f:
        head = f.read(1000)
        middle = f.read(8 << 20)
        rest = f.read()
        assert f.read() == b""
    assert (len(head), len(middle)) == (1000, 8 << 20)
    assert head + middle + rest == BIG


def test_empty_objects_through_files_and_streams(storage_root: str, tmp_path: Path) -> None:
    st = open_storage(storage_root)
    (tmp_path / "empty").write_bytes(b"")
    st.put_file("e/file", tmp_path / "empty")
    st.put("e/bytes", b"")
    for key in ("e/file", "e/bytes"):
        dest = tmp_path / "new-dir" / key.replace("/", "_")
        st.get_file(key, dest)  # creates the missing parent directory
        assert dest.read_bytes() == b""
        with st.open_read(key) as f:
            assert f.read() == b""
    assert st.list("e/") == ["e/bytes", "e/file"]


def test_put_file_needs_a_local_file(storage_root: str, tmp_path: Path) -> None:
    st = open_storage(storage_root)
    with pytest.raises(InvalidArgument, match="not a local file"):
        st.put_file("k", tmp_path / "does-not-exist")
    with pytest.raises(InvalidArgument, match="not a local file"):
        st.put_file("k", tmp_path)
    assert st.list() == []


def test_list_is_sorted_recursive_and_prefix_filtered(storage_root: str) -> None:
    st = open_storage(storage_root)
    for key in ["b/2", "a/1", "a/sub/3", "ab", "c", "a/sub/deeper/4"]:
        st.put(key, key.encode())
    assert st.list() == ["a/1", "a/sub/3", "a/sub/deeper/4", "ab", "b/2", "c"]
    assert st.list("a/") == ["a/1", "a/sub/3", "a/sub/deeper/4"]
    assert st.list("a") == ["a/1", "a/sub/3", "a/sub/deeper/4", "ab"]
    assert st.list("a/sub/d") == ["a/sub/deeper/4"]
    assert st.list("c") == ["c"]
    assert st.list("zzz/") == [] and st.list("zzz") == []


def test_exists_and_delete(storage_root: str) -> None:
    st = open_storage(storage_root)
    st.put("x/y", b"1")
    st.put("x/yy", b"2")
    assert st.exists("x/y") and st.exists("x/yy")
    assert not st.exists("x/z") and not st.exists("x")
    st.delete("x/y")
    assert not st.exists("x/y") and st.list() == ["x/yy"]
    with pytest.raises(NotFound, match=no_object(join_uri(st.uri, "x/y"))):
        st.delete("x/y")
    st.delete("x/y", missing_ok=True)
    st.delete("x/yy", missing_ok=True)
    assert st.list() == []


def test_missing_key_names_the_full_uri(storage_root: str, tmp_path: Path) -> None:
    st = open_storage(storage_root)
    uri = join_uri(st.uri, "nope/missing.bin")
    with pytest.raises(NotFound, match=no_object(uri)):
        st.get("nope/missing.bin")
    with pytest.raises(NotFound, match=no_object(uri)):
        st.get_file("nope/missing.bin", tmp_path / "d")
    with pytest.raises(NotFound, match=no_object(uri)):
        st.open_read("nope/missing.bin")
    with pytest.raises(NotFound, match=no_object(join_uri(st.uri, f"s/{COMMIT_MARKER}"))):
        st.commit_manifest("s")
    assert not (tmp_path / "d").exists()
    assert os.listdir(tmp_path) == []  # and no temporary next to it either


def test_a_reader_gets_old_bytes_or_an_rlx_error(storage_root: str) -> None:
    """Deleting an object under an open reader never surfaces a raw backend exception."""
    st = open_storage(storage_root)
    st.put("r", BIG)
    with st.open_read("r") as f:
        head = f.read(10)
        st.delete("r")
        try:
            rest = f.read()
        except NotFound as e:
            assert "r" in str(e)
        else:
            assert head + rest == BIG


# --- bad input --------------------------------------------------------------------------------

BAD_KEYS = ["", "/abs", "a/../b", "..", "a//b", "./a", "a/.", "dir/", ".rlx-tmp-1-x"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_are_refused_everywhere(storage_root: str, key: str, tmp_path: Path) -> None:
    st = open_storage(storage_root)
    (tmp_path / "f").write_bytes(b"x")
    calls = [
        lambda: st.put(key, b"x"),
        lambda: st.put_file(key, tmp_path / "f"),
        lambda: st.get(key),
        lambda: st.get_file(key, tmp_path / "g"),
        lambda: st.open_read(key),
        lambda: st.exists(key),
        lambda: st.delete(key),
    ]
    for call in calls:
        with pytest.raises(InvalidArgument, match="storage key"):
            call()
    assert st.list() == []


@pytest.mark.parametrize("prefix", ["/a", "a/../b", "../", "a//"])
def test_bad_prefixes_are_refused(storage_root: str, prefix: str) -> None:
    st = open_storage(storage_root)
    for call in (st.list, st.delete_prefix, st.list_committed, st.committed, st.child):
        with pytest.raises(InvalidArgument):
            call(prefix)


@pytest.mark.parametrize(
    ("uri", "match"),
    [
        ("ftp://host/x", "unsupported scheme 'ftp'"),
        ("s3:///prefix", "no bucket"),
        ("gs://", "no bucket"),
        ("s3:/bucket/x", "expected s3://"),
        ("s3://bucket/a/../b", r"bad prefix.*'\.\.'"),
        ("gs://bucket/a//b", "bad prefix"),
        ("s3://bad bucket/x", "not a valid bucket name"),
        ("file://host/x", "name no host"),
        ("", "empty"),
    ],
)
def test_bad_uris_are_refused(uri: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        open_storage(uri)


def test_uris_are_normalised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert open_storage("relative/dir").uri == str(tmp_path / "relative" / "dir")
    assert open_storage(f"{tmp_path}/x/").uri == str(tmp_path / "x")
    assert open_storage("file:///a%20b/c").uri == "/a b/c"
    assert open_storage("file://localhost/srv").uri == "/srv"
    assert open_storage(tmp_path / "p").uri == str(tmp_path / "p")  # os.PathLike too


def test_cloud_uris_are_normalised(s3_env: str, gcs_env: str) -> None:
    assert open_storage("s3://bkt/p/q/").uri == "s3://bkt/p/q"
    assert open_storage("S3://bkt").uri == "s3://bkt"
    assert open_storage("gs://bkt/").uri == "gs://bkt"
    assert open_storage("gs://bkt/runs/r1").child("snap/").uri == "gs://bkt/runs/r1/snap"


def test_join_uri() -> None:
    assert join_uri("s3://b/p", "x/y") == "s3://b/p/x/y"
    assert join_uri("s3://b/p/", "x/y") == "s3://b/p/x/y"
    assert join_uri("s3://b", "x") == "s3://b/x"
    assert join_uri("gs://b/p", "") == "gs://b/p"
    assert join_uri("gs://b/p", "dir/") == "gs://b/p/dir"
    assert join_uri("/tmp/x", "a/b") == "/tmp/x/a/b"
    assert join_uri("relative", "a") == "relative/a"
    assert join_uri("/", "a") == "/a"
    assert join_uri("file:///", "a") == "file:///a"
    assert join_uri("file:///srv/", "a") == "file:///srv/a"
    for key in ("../x", "/x", "a//b"):
        with pytest.raises(InvalidArgument, match="storage key"):
            join_uri("s3://b/p", key)


# --- atomic commits ---------------------------------------------------------------------------


def test_atomic_commit_is_visible_only_after_the_block(storage_root: str, tmp_path: Path) -> None:
    st = open_storage(storage_root)
    (tmp_path / "p.bin").write_bytes(b"params")
    with st.atomic_commit("snap/000001") as tx:
        tx.put("state.json", b"{}")
        tx.put_file("params.bin", tmp_path / "p.bin")
        tx.put("deep/er", b"")
        assert not st.committed("snap/000001")
        assert st.list_committed("snap") == []
    assert st.committed("snap/000001") and st.committed("snap/000001/")
    assert st.get("snap/000001/state.json") == b"{}"
    assert st.get("snap/000001/params.bin") == b"params"
    assert st.commit_manifest("snap/000001") == {
        "deep/er": {"size": 0, "sha256": hashlib.sha256(b"").hexdigest()},
        "params.bin": {"size": 6, "sha256": hashlib.sha256(b"params").hexdigest()},
        "state.json": {"size": 2, "sha256": hashlib.sha256(b"{}").hexdigest()},
    }
    marker = json.loads(st.get(f"snap/000001/{COMMIT_MARKER}"))
    assert sorted(marker["members"]) == ["deep/er", "params.bin", "state.json"]
    # list shows every finished object, the marker included, on every backend
    assert st.list("snap/") == [
        f"snap/000001/{COMMIT_MARKER}",
        "snap/000001/deep/er",
        "snap/000001/params.bin",
        "snap/000001/state.json",
    ]
    with pytest.raises(AlreadyExists, match="already committed"), st.atomic_commit("snap/000001"):
        pass
    assert st.get("snap/000001/state.json") == b"{}"  # the committed snapshot is untouched


def test_failed_commit_leaves_nothing_committed(storage_root: str, tmp_path: Path) -> None:
    st = open_storage(storage_root)
    (tmp_path / "p.bin").write_bytes(b"p")
    with pytest.raises(RuntimeError, match="preempted"), st.atomic_commit("snap/000002") as tx:
        tx.put("state.json", b"{}")
        tx.put_file("params.bin", tmp_path / "p.bin")
        raise RuntimeError("preempted")
    assert not st.committed("snap/000002")
    assert st.list_committed("snap") == []
    assert st.list("snap/") == []  # the parts written before the failure are gone


def test_commit_refuses_the_marker_name_as_a_member(storage_root: str) -> None:
    st = open_storage(storage_root)
    with pytest.raises(InvalidArgument, match="reserved"), st.atomic_commit("s/1") as tx:
        tx.put("ok", b"1")
        tx.put(COMMIT_MARKER, b"forged")
    assert not st.committed("s/1") and st.list() == []


def test_commit_clears_leftovers_of_a_crashed_writer(storage_root: str) -> None:
    st = open_storage(storage_root)
    st.put("snap/000005/stale.bin", b"from a writer that died before its marker")
    assert not st.committed("snap/000005")
    with st.atomic_commit("snap/000005") as tx:
        tx.put("fresh.bin", b"new")
    assert st.list("snap/000005/") == [f"snap/000005/{COMMIT_MARKER}", "snap/000005/fresh.bin"]


def test_list_committed_gives_direct_committed_children(storage_root: str) -> None:
    st = open_storage(storage_root)
    for step in (3, 1, 2):
        with st.atomic_commit(f"snaps/{step:06d}") as tx:
            tx.put("s", b"x")
    with st.atomic_commit("snaps/000002/nested") as tx:  # deeper commits are not children
        tx.put("s", b"x")
    with st.atomic_commit("snapshots-elsewhere/000009") as tx:  # a sibling sharing the prefix
        tx.put("s", b"x")
    st.put("snaps/000004/s", b"half-written, never committed")
    expected = ["snaps/000001", "snaps/000002", "snaps/000003"]
    assert st.list_committed("snaps") == expected
    assert st.list_committed("snaps/") == expected
    assert st.list_committed() == []  # none directly at the top level
    assert st.list_committed("snaps/000002") == ["snaps/000002/nested"]


def test_delete_prefix_removes_a_directory_marker_first(storage_root: str) -> None:
    st = open_storage(storage_root)
    for step in (1, 10):
        with st.atomic_commit(f"snap/{step:06d}") as tx:
            tx.put("a/b", b"x")
            tx.put("c", b"y")
    assert st.list_committed("snap") == ["snap/000001", "snap/000010"]
    st.put("snap/000001x", b"a sibling file sharing the string prefix")
    st.delete_prefix("snap/000001")
    assert not st.committed("snap/000001")
    assert st.list() == [
        "snap/000001x",
        f"snap/000010/{COMMIT_MARKER}",
        "snap/000010/a/b",
        "snap/000010/c",
    ]
    st.delete_prefix("snap/000001")  # nothing left there: fine
    st.delete_prefix("")
    assert st.list() == []


def test_child_is_rooted_below(storage_root: str) -> None:
    st = open_storage(storage_root)
    child = st.child("ckpt/7")
    child.put("w.bin", b"w")
    assert child.uri == join_uri(st.uri, "ckpt/7")
    assert st.get("ckpt/7/w.bin") == b"w" and child.list() == ["w.bin"]
    grandchild = child.child("x/")
    grandchild.put("g", b"g")
    assert grandchild.uri == join_uri(st.uri, "ckpt/7/x")
    assert st.list("ckpt/") == ["ckpt/7/w.bin", "ckpt/7/x/g"]
    with child.atomic_commit("snap") as tx:
        tx.put("s", b"1")
    assert st.list_committed("ckpt/7") == ["ckpt/7/snap"]
    assert open_storage(child.uri).get("w.bin") == b"w"
    with pytest.raises(NotFound, match=no_object(join_uri(st.uri, "ckpt/7/nope"))):
        child.get("nope")


# --- missing buckets, dead endpoints, credentials ---------------------------------------------


def test_missing_bucket_is_not_found_naming_it(storage_root: str, tmp_path: Path) -> None:
    if "://" not in storage_root:
        pytest.skip("local paths have no bucket")
    scheme = storage_root.split("://", maxsplit=1)[0]
    st = open_storage(f"{scheme}://no-such-bucket-rlx/p")
    (tmp_path / "f").write_bytes(b"x")
    calls = [
        lambda: st.get("k"),
        lambda: st.put("k", b"v"),
        lambda: st.put_file("k", tmp_path / "f"),
        lambda: st.get_file("k", tmp_path / "g"),
        lambda: st.open_read("k"),
        lambda: st.exists("k"),
        lambda: st.delete("k"),
        st.list,
        lambda: st.committed("snap"),
        lambda: st.delete_prefix("snap"),
    ]
    for call in calls:
        with pytest.raises(NotFound, match="bucket 'no-such-bucket-rlx' does not exist"):
            call()
    assert sorted(os.listdir(tmp_path)) == ["f"]


def _assert_unavailable(uri: str, tmp_path: Path) -> None:
    st = open_storage(uri, timeout_s=0.5, retry_s=0)
    (tmp_path / "f").write_bytes(b"x")
    calls = [
        lambda: st.get("k"),
        lambda: st.put("k", b"v"),
        lambda: st.put_file("k", tmp_path / "f"),
        lambda: st.open_read("k"),
        lambda: st.exists("k"),
        st.list,
    ]
    for call in calls:
        with pytest.raises(Unavailable, match=re.escape(uri)):
            call()


def test_unreachable_s3_is_unavailable(
    s3_env: str, dead_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", dead_endpoint)
    _assert_unavailable("s3://b/p", tmp_path)


def test_s3_endpoint_url_s3_wins(
    s3_env: str, dead_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", dead_endpoint)  # the service-specific variable
    _assert_unavailable("s3://b/p", tmp_path)


def test_unreachable_gcs_is_unavailable(
    dead_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", dead_endpoint)
    _assert_unavailable("gs://b/p", tmp_path)


def test_s3_without_credentials_is_unauthenticated(s3_server: str, no_aws_env: None) -> None:
    st = open_storage("s3://b/p")
    with pytest.raises(Unauthenticated, match=r"s3://b/p/k: no AWS credentials"):
        st.get("k")


def test_gcs_without_credentials_is_unauthenticated(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    with pytest.raises(Unauthenticated, match="gs://b/p: no Google credentials"):
        open_storage("gs://b/p")


def test_denials_map_to_permission_denied(s3_env: str, gcs_env: str) -> None:
    """Neither local server enforces access control, so feed each backend's own exception
    (as the SDK raises it for a 403) through its mapping."""
    from botocore.exceptions import ClientError
    from google.api_core.exceptions import Forbidden

    s3 = open_storage("s3://b/p")
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetObject")
    mapped = s3._map(denied, "k")  # type: ignore[attr-defined]
    assert isinstance(mapped, PermissionDenied) and "s3://b/p/k" in str(mapped)
    gcs = open_storage("gs://b/p")
    mapped = gcs._map(Forbidden("no"), "k")  # type: ignore[attr-defined]
    assert isinstance(mapped, PermissionDenied) and "gs://b/p/k" in str(mapped)
    assert s3._map(ValueError("not ours"), "k") is None  # type: ignore[attr-defined]


# --- local specifics --------------------------------------------------------------------------


def test_plain_path_and_file_uri_are_the_same_storage(tmp_path: Path) -> None:
    open_storage(str(tmp_path)).put("k/v", b"v")
    via_uri = open_storage(f"file://{tmp_path}")
    assert via_uri.get("k/v") == b"v" and via_uri.list() == ["k/v"]
    assert via_uri.uri == open_storage(str(tmp_path)).uri == str(tmp_path)
    assert (tmp_path / "k" / "v").read_bytes() == b"v"  # keys map to plain sub-paths


def test_local_writes_leave_no_temporaries(tmp_path: Path) -> None:
    st = open_storage(tmp_path / "root")
    st.put("d/x", b"1")
    st.put_file("d/y", __file__)
    st.get_file("d/x", tmp_path / "copy")
    with st.atomic_commit("d/snap") as tx:
        tx.put("z", b"z")
    assert sorted(os.listdir(tmp_path / "root" / "d")) == ["snap", "x", "y"]
    assert sorted(os.listdir(tmp_path / "root" / "d" / "snap")) == [COMMIT_MARKER, "z"]
    assert sorted(os.listdir(tmp_path)) == ["copy", "root"]


def test_local_reader_never_sees_a_partial_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bytes go to a hidden temporary; the real name changes only at the rename."""
    st = open_storage(tmp_path)
    st.put("obj", b"old")
    seen = []
    real_replace = os.replace

    def spying_replace(src: str, dst: str) -> None:  # the moment the write finishes
        seen.append((st.get("obj"), Path(src).read_bytes(), st.list()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spying_replace)
    st.put("obj", b"new-and-longer")
    st.put_file("obj", __file__)
    # until each rename, readers and list saw only the previous whole object
    assert seen == [
        (b"old", b"new-and-longer", ["obj"]),
        (b"new-and-longer", Path(__file__).read_bytes(), ["obj"]),
    ]
    assert st.get("obj") == Path(__file__).read_bytes()


def test_local_list_hides_temporaries_and_delete_prefix_removes_them(tmp_path: Path) -> None:
    st = open_storage(tmp_path)
    st.put("snap/1/a", b"a")
    (tmp_path / "snap" / "1" / ".rlx-tmp-0123456789ab-b").write_bytes(b"half")  # a dead writer
    assert st.list() == ["snap/1/a"]
    assert not st.exists("snap/1/b")
    st.delete_prefix("snap/1")
    assert not (tmp_path / "snap" / "1").exists()


def test_importing_storage_loads_no_cloud_sdk() -> None:
    code = (
        "import sys, rlx_core.storage\n"
        "heavy = ('boto3', 'botocore', 'google.cloud.storage', 'jax')\n"
        "bad = [m for m in heavy if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- retries: riding through an outage --------------------------------------------------------


def _retry_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("rlx_core.storage")]


@pytest.mark.parametrize("backend", ["s3", "gcs"])
def test_a_write_rides_through_a_5_s_outage(
    backend: str, new_root: Any, outage_proxy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    root = new_root(backend, "runs/r1")
    proxy = outage_proxy(backend)
    st = open_storage(root, timeout_s=5)
    st.put("before.bin", b"0")
    key = "rollouts/b00000005.r0.u0000.rec"
    with caplog.at_level("WARNING", logger="rlx_core.storage"):
        back = proxy.down_for(5.0)
        st.put(key, b"logged during the outage")
        back.join()
    assert st.get(key) == b"logged during the outage"
    assert st.list() == ["before.bin", key]
    lines = _retry_lines(caplog)
    assert lines, "the outage was never seen"
    assert all(st.key_uri(key) in line and "\n" not in line for line in lines), lines


def test_a_commit_of_files_rides_through_an_outage(
    new_root: Any, outage_proxy: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What a checkpoint upload does: files committed under one marker, then read back."""
    root = new_root("s3", "ckpt")
    proxy = outage_proxy("s3")
    st = open_storage(root, timeout_s=5)
    (tmp_path / "a").write_bytes(b"a" * 1000)
    (tmp_path / "b").write_bytes(b"b" * 10)
    with caplog.at_level("WARNING", logger="rlx_core.storage"):
        with st.atomic_commit("7") as tx:
            tx.put_file("state/a", tmp_path / "a")
            back = proxy.down_for(2.0)
            tx.put_file("meta/b", tmp_path / "b")
        back.join()
        back = proxy.down_for(2.0)
        st.get_file("7/state/a", tmp_path / "a2")
        back.join()
    assert st.list_committed("") == ["7"]
    assert sorted(st.commit_manifest("7")) == ["meta/b", "state/a"]
    assert (tmp_path / "a2").read_bytes() == b"a" * 1000
    assert len(_retry_lines(caplog)) >= 2


def test_a_write_that_landed_but_was_reported_lost_commits_once(
    new_root: Any, outage_proxy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The retried write repeats the same bytes under the same key, so the commit protocol
    holds: the marker is written (again) last, and names exactly the members."""
    root = new_root("s3", "runs/r1")
    proxy = outage_proxy("s3")
    st = open_storage(root, timeout_s=5)
    proxy.drop_responses(b"PUT ", b"/snapshot.json")
    proxy.drop_responses(b"PUT ", COMMIT_MARKER.encode())
    with caplog.at_level("WARNING", logger="rlx_core.storage"):
        with st.atomic_commit("snapshots/s0000000003") as tx:
            tx.put("snapshot.json", b'{"step": 3}')
    assert len(_retry_lines(caplog)) == 2
    assert st.list() == [
        f"snapshots/s0000000003/{COMMIT_MARKER}",
        "snapshots/s0000000003/snapshot.json",
    ]
    manifest = st.commit_manifest("snapshots/s0000000003")
    assert manifest == {
        "snapshot.json": {"size": 11, "sha256": hashlib.sha256(b'{"step": 3}').hexdigest()}
    }


def test_a_commit_that_fails_after_its_marker_landed_is_not_left_committed(
    new_root: Any, outage_proxy: Any
) -> None:
    """With no retries left, a marker whose answer was lost makes the commit fail; the cleanup
    removes the marker first, so the prefix never counts as committed with its members gone."""
    root = new_root("s3", "runs/r1")
    proxy = outage_proxy("s3")
    st = open_storage(root, timeout_s=5, retry_s=0)
    proxy.drop_responses(b"PUT ", COMMIT_MARKER.encode())
    with pytest.raises(Unavailable), st.atomic_commit("snap/1") as tx:
        tx.put("m", b"x")
    assert not st.committed("snap/1")
    assert st.list() == []


def test_retries_give_up_after_the_configured_time_naming_the_uri(
    s3_env: str,
    dead_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", dead_endpoint)
    with caplog.at_level("WARNING", logger="rlx_core.storage"):
        with pytest.raises(Unavailable, match=r"s3://b/p/k: cannot reach S3.*gave up after"):
            open_storage("s3://b/p", timeout_s=0.5, retry_s=1.0).put("k", b"v")
    lines = _retry_lines(caplog)
    assert lines and all("s3://b/p/k" in line for line in lines)
    monkeypatch.setenv("RLX_STORAGE_RETRY_S", "0.5")  # the default of every open_storage
    with pytest.raises(Unavailable, match="gave up after"):
        open_storage("s3://b/p", timeout_s=0.5).get("k")


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_bad_retry_setting_is_a_config_error_naming_it(
    value: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RLX_STORAGE_RETRY_S", value)
    with pytest.raises(ConfigError, match=rf"RLX_STORAGE_RETRY_S.*{re.escape(value)}"):
        open_storage(tmp_path)
    with pytest.raises(InvalidArgument, match="retry_s"):
        open_storage(tmp_path, retry_s=-1)
