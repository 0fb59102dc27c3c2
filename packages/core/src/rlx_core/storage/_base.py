"""The storage API and what every backend shares: key checks, atomic multi-object commits,
prefix deletion, error-mapping readers. Backends implement a handful of primitives (`_put`,
`_get`, ...) on keys that are already checked and relative to their root."""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import io
import json
import os
import secrets
from collections.abc import Callable, Iterator
from typing import IO, Any, BinaryIO, TypeVar

from rlx_core.errors import AlreadyExists, InvalidArgument, NotFound, RlxError
from rlx_core.storage._retry import Retry

__all__ = [
    "COMMIT_MARKER",
    "TMP_PREFIX",
    "Storage",
    "Transaction",
    "atomic_download",
    "check_key",
    "error_mapping_reader",
    "join_uri",
]

# Written last by `atomic_commit`; a prefix counts as committed exactly when it exists.
COMMIT_MARKER = "_COMMITTED"
# Local in-progress writes are named `.rlx-tmp-<hex>-<name>`; `list` hides them and keys may not
# start with it.
TMP_PREFIX = ".rlx-tmp-"
_STREAM_CHUNK = 8 << 20  # bytes per read when hashing or streaming

T = TypeVar("T")


def join_uri(base: str, key: str) -> str:
    """`join_uri("s3://b/p", "x/y") == "s3://b/p/x/y"`; an empty key gives `base` unchanged.

    `key` must be a relative key (InvalidArgument for '..', a leading '/', empty parts).
    """
    check_key(key, allow_empty=True, allow_dir=True)
    if not key:
        return base
    key = key.rstrip("/")
    stripped = base.rstrip("/")
    if stripped.endswith(":"):  # "file:///" or "s3://": keep the slashes of the scheme
        return base + key
    return f"{stripped}/{key}"


def check_key(key: str, *, allow_empty: bool = False, allow_dir: bool = False) -> str:
    """A relative '/'-separated key without '..', '.' or empty parts; InvalidArgument otherwise.

    `allow_empty` admits '' (the root); `allow_dir` admits one trailing '/' (a prefix).
    """
    if not isinstance(key, str):
        raise InvalidArgument(f"storage key must be a string, got {type(key).__name__}")
    if not key:
        if allow_empty:
            return key
        raise InvalidArgument("storage key is empty")
    if key.startswith("/"):
        raise InvalidArgument(f"storage key {key!r} must be relative (no leading '/')")
    if key.endswith("/") and not allow_dir:
        raise InvalidArgument(f"storage key {key!r} names a directory (trailing '/')")
    parts = (key[:-1] if key.endswith("/") else key).split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidArgument(f"storage key {key!r} has an empty, '.' or '..' part")
    if any(p.startswith(TMP_PREFIX) for p in parts) or "\x00" in key:
        raise InvalidArgument(f"storage key {key!r} uses the reserved temporary name {TMP_PREFIX}")
    return key


def _as_dir(prefix: str) -> str:
    """'' stays ''; 'a' and 'a/' become 'a/'."""
    return prefix.rstrip("/") + "/" if prefix else ""


@contextlib.contextmanager
def atomic_download(path: str) -> Iterator[str]:
    """A temporary name next to `path` to download into; renamed to `path` only on success.

    The parent directory is created if needed; the temporary is removed if the block raises.
    """
    path = os.path.abspath(path)
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f"{TMP_PREFIX}{secrets.token_hex(6)}-{name}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class _MappedReader(io.RawIOBase):
    """A raw stream over a backend body whose read errors come out as RlxErrors."""

    def __init__(self, inner: IO[bytes], mapper: Callable[[Exception], RlxError | None]) -> None:
        super().__init__()
        self._inner = inner
        self._mapper = mapper

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self._inner.read(len(buffer))
        except Exception as e:
            mapped = self._mapper(e)
            if mapped is None:
                raise
            raise mapped from e
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                self._inner.close()
            finally:
                super().close()


def error_mapping_reader(
    inner: IO[bytes], mapper: Callable[[Exception], RlxError | None]
) -> BinaryIO:
    """Wrap a backend body as a buffered binary file; `mapper` turns the backend's exceptions
    into RlxErrors (None: re-raise unchanged)."""
    return io.BufferedReader(_MappedReader(inner, mapper), buffer_size=1 << 20)


class Storage:
    """Objects under one root URI, addressed by relative '/'-separated keys ('a/b.bin').

    Writes of one object are atomic on every backend: a reader sees the old object, the new one,
    or none, never a part. `atomic_commit` extends that to a set of objects under a prefix: they
    count as committed only once the marker `<prefix>/_COMMITTED` exists, and it is written last.
    `list` returns every finished object, commit markers included, and never an in-progress
    temporary, identically on every backend.

    Every call that fails with Unavailable is retried by `retry` (rlx_core.storage._retry):
    each backend request, not a whole multi-object operation, so a retry repeats only what may
    not have landed. A stream from `open_read` is retried only while opening.
    """

    uri: str  # the normalised root: an absolute local path, or s3://bucket/prefix, gs://...
    retry: Retry = Retry(total_s=0)  # open_storage sets the configured policy

    # --- primitives each backend implements (keys are checked and relative to the root) -----
    def _put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def _put_file(self, key: str, path: str) -> None:
        raise NotImplementedError

    def _get(self, key: str) -> bytes:
        raise NotImplementedError

    def _get_file(self, key: str, path: str) -> None:
        raise NotImplementedError

    def _open_read(self, key: str) -> BinaryIO:
        raise NotImplementedError

    def _exists(self, key: str) -> bool:
        raise NotImplementedError

    def _list(self, prefix: str) -> builtins.list[str]:
        """Every finished key starting with the string `prefix`, in any order."""
        raise NotImplementedError

    def _delete(self, key: str) -> bool:
        """Delete one object; False if there was nothing to delete."""
        raise NotImplementedError

    def _map(self, exc: Exception, key: str) -> RlxError | None:
        """The RlxError a backend exception means for `key`, or None to let it propagate."""
        return None

    @contextlib.contextmanager
    def _errors(self, key: str) -> Iterator[None]:
        """Turn a backend's exceptions into RlxErrors naming the object's URI (via `_map`)."""
        try:
            yield
        except RlxError:
            raise
        except Exception as e:
            mapped = self._map(e, key)
            if mapped is None:
                raise
            raise mapped from e

    def _delete_keys(self, keys: builtins.list[str]) -> None:
        """Delete many objects in order, ignoring missing ones. Backends may batch."""
        for key in keys:
            self._delete(key)

    def _delete_dir(self, prefix: str) -> None:
        """Delete everything under the directory prefix 'x/' (local: temporaries too)."""
        marker = prefix + COMMIT_MARKER
        keys = self._list(prefix)
        # the marker goes first, on its own (a batch delete has no order), so the prefix stops
        # counting as committed before it thins out
        if marker in keys:
            self._delete_keys([marker])
        self._delete_keys(sorted(k for k in keys if k != marker))

    def _child(self, prefix: str) -> Storage:
        raise NotImplementedError

    def _retried(self, key: str, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) under the retry policy, its retries logged with `key`'s URI."""
        return self.retry.call(lambda: fn(*args), self.key_uri(key))

    # --- the public API ---------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"

    def key_uri(self, key: str) -> str:
        """The full URI of a key, as used in error messages."""
        return join_uri(self.uri, key)

    def put(self, key: str, data: bytes) -> None:
        """Write a whole object atomically, replacing any previous one."""
        self._retried(key, self._put, check_key(key), bytes(data))

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Upload a local file atomically, streaming (never read whole into memory)."""
        check_key(key)
        if not os.path.isfile(path):
            raise InvalidArgument(f"cannot upload {os.fspath(path)!r}: not a local file")
        self._retried(key, self._put_file, key, os.fspath(path))

    def get(self, key: str) -> bytes:
        """The whole object; NotFound naming its full URI if it is missing."""
        return self._retried(key, self._get, check_key(key))

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Download to a local file, streaming; `path` appears only once complete (tmp+rename)."""
        self._retried(key, self._get_file, check_key(key), os.fspath(path))

    def open_read(self, key: str) -> BinaryIO:
        """A binary file object for streaming reads; use it as a context manager.

        NotFound at open time if the object is missing; read errors are RlxErrors too.
        """
        return self._retried(key, self._open_read, check_key(key))

    def exists(self, key: str) -> bool:
        """Whether an object exists at `key` (NotFound if the bucket itself does not)."""
        return self._retried(key, self._exists, check_key(key))

    def list(self, prefix: str = "") -> builtins.list[str]:
        """Every key starting with `prefix` (a plain string prefix, as on S3: 'a' matches 'ab'
        and 'a/x', 'a/' only 'a/x'), recursive, sorted. Commit markers are included;
        in-progress temporaries never are."""
        check_key(prefix, allow_empty=True, allow_dir=True)
        return sorted(self._retried(prefix, self._list, prefix))

    def delete(self, key: str, *, missing_ok: bool = False) -> None:
        """Remove one object; NotFound naming its URI if missing, unless `missing_ok`. After a
        retried attempt, a missing object counts as deleted (the first attempt may have landed)."""
        tries = []

        def once() -> bool:
            tries.append(1)
            return self._delete(key)

        check_key(key)
        if not self._retried(key, once) and not missing_ok and len(tries) == 1:
            raise NotFound(f"no object at {self.key_uri(key)}")

    def delete_prefix(self, prefix: str) -> None:
        """Remove everything under the directory `prefix` ('a' and 'a/' both mean 'a/...'; 'ab'
        is untouched). A commit marker goes first, so a half-deleted snapshot never counts as
        committed. `delete_prefix('')` empties the whole root."""
        prefix = _as_dir(check_key(prefix, allow_empty=True, allow_dir=True))
        self._retried(prefix, self._delete_dir, prefix)

    @contextlib.contextmanager
    def atomic_commit(self, prefix: str) -> Iterator[Transaction]:
        """Write several objects under `prefix` that become visible together.

        On a clean exit the marker `<prefix>/_COMMITTED` is written last, holding each member's
        size and sha256. If the block raises, the marker (in case a write reported as failed
        landed) and then the members written so far are removed (best-effort) and nothing counts
        as committed. Leftovers of an earlier writer that died before committing are removed
        first; AlreadyExists if `prefix` is already committed.
        """
        prefix = check_key(prefix, allow_dir=True).rstrip("/")
        if self.committed(prefix):
            raise AlreadyExists(f"{self.key_uri(prefix)} is already committed")
        self._retried(prefix, self._delete_dir, prefix + "/")
        tx = Transaction(self, prefix)
        marker = f"{prefix}/{COMMIT_MARKER}"
        try:
            yield tx
            manifest = json.dumps({"members": tx.members}, sort_keys=True, indent=1).encode()
            self._retried(marker, self._put, marker, manifest)
        except BaseException:
            with contextlib.suppress(Exception):
                self._delete_keys([marker])  # alone and first: a batch delete has no order
                self._delete_keys([f"{prefix}/{k}" for k in tx.members])
            raise

    def committed(self, prefix: str) -> bool:
        """True once `atomic_commit(prefix)` has finished (the marker exists)."""
        marker = f"{check_key(prefix, allow_dir=True).rstrip('/')}/{COMMIT_MARKER}"
        return self._retried(marker, self._exists, marker)

    def commit_manifest(self, prefix: str) -> dict[str, Any]:
        """{member key: {"size": n, "sha256": hex}} of a committed prefix; NotFound if none."""
        marker = f"{check_key(prefix, allow_dir=True).rstrip('/')}/{COMMIT_MARKER}"
        members: dict[str, Any] = json.loads(self._retried(marker, self._get, marker))["members"]
        return members

    def list_committed(self, parent: str = "") -> builtins.list[str]:
        """The committed direct children of the directory `parent`, as keys, sorted.

        `list_committed("snap")` gives e.g. ["snap/000122", "snap/000123"]; deeper commits and
        uncommitted children are left out.
        """
        base = _as_dir(check_key(parent, allow_empty=True, allow_dir=True))
        found = []
        for key in self._retried(base, self._list, base):
            child, _, rest = key[len(base) :].partition("/")
            if rest == COMMIT_MARKER:
                found.append(base + child)
        return sorted(found)

    def child(self, prefix: str) -> Storage:
        """A Storage rooted at `prefix` below this one (sharing its client and retry policy)."""
        child = self._child(check_key(prefix, allow_dir=True).rstrip("/"))
        child.retry = self.retry
        return child


class Transaction:
    """The writer handed out by `Storage.atomic_commit`; keys are relative to its prefix."""

    def __init__(self, storage: Storage, prefix: str) -> None:
        self.storage = storage
        self.prefix = prefix
        self.members: dict[str, dict[str, Any]] = {}

    def _member(self, key: str) -> str:
        check_key(key)
        if key == COMMIT_MARKER:
            raise InvalidArgument(f"{COMMIT_MARKER!r} is reserved for the commit marker")
        return f"{self.prefix}/{key}"

    def put(self, key: str, data: bytes) -> None:
        """Write one member object."""
        full = self._member(key)
        data = bytes(data)
        self.storage._retried(full, self.storage._put, full, data)
        self.members[key] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Upload one member from a local file, streaming."""
        full = self._member(key)
        if not os.path.isfile(path):
            raise InvalidArgument(f"cannot upload {os.fspath(path)!r}: not a local file")
        digest = hashlib.sha256()
        size = 0
        with open(path, "rb") as f:
            while chunk := f.read(_STREAM_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        self.storage._retried(full, self.storage._put_file, full, os.fspath(path))
        self.members[key] = {"size": size, "sha256": digest.hexdigest()}
