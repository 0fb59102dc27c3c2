"""The storage API and what every backend shares: key checks, atomic multi-object commits,
prefix deletion. Backends implement a handful of primitives (`_put`, `_get`, ...)."""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from typing import IO, Any

from rlx_core.errors import InvalidArgument

__all__ = ["COMMIT_MARKER", "Storage", "Transaction", "atomic_download", "check_key", "join_uri"]

COMMIT_MARKER = "_COMMITTED"
_STREAM_CHUNK = 8 << 20


def join_uri(base: str, key: str) -> str:
    """`join_uri("s3://b/p", "x/y") == "s3://b/p/x/y"`; an empty key gives base."""
    if not key:
        return base
    return base.rstrip("/") + "/" + key.lstrip("/")


@contextlib.contextmanager
def atomic_download(path: str) -> Iterator[str]:
    """A temporary name next to `path` to download into; renamed to `path` only on success."""
    import secrets

    tmp = f"{path}.rlx-tmp-{secrets.token_hex(6)}"
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def check_key(key: str, *, allow_empty: bool = False) -> str:
    """A relative '/'-separated key without '..', '.' or empty parts; InvalidArgument otherwise."""
    if not isinstance(key, str):
        raise InvalidArgument(f"storage key must be a string, got {type(key).__name__}")
    if not key:
        if allow_empty:
            return key
        raise InvalidArgument("storage key is empty")
    if key.startswith("/"):
        raise InvalidArgument(f"storage key {key!r} must be relative (no leading '/')")
    parts = key.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidArgument(f"storage key {key!r} has an empty, '.' or '..' part")
    return key


class Storage:
    """Objects under one root URI, addressed by relative keys ('a/b.bin').

    Writes of one object are atomic on every backend: a reader sees the old object, the new
    one, or none, never a part. `atomic_commit` extends that to a set of objects under a prefix:
    they count as present only once the commit marker `<prefix>/_COMMITTED` exists, and the
    marker is written last. `list` returns every finished object, markers included, and never a
    temporary.
    """

    uri: str

    # --- primitives each backend implements -------------------------------------------------
    def _put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def _put_file(self, key: str, path: str) -> None:
        raise NotImplementedError

    def _get(self, key: str) -> bytes:
        raise NotImplementedError

    def _get_file(self, key: str, path: str) -> None:
        raise NotImplementedError

    def _open_read(self, key: str) -> IO[bytes]:
        raise NotImplementedError

    def _exists(self, key: str) -> bool:
        raise NotImplementedError

    def _list(self, prefix: str) -> list[str]:
        raise NotImplementedError

    def _delete(self, key: str) -> bool:
        """Delete; False if there was nothing to delete."""
        raise NotImplementedError

    def child(self, prefix: str) -> Storage:
        raise NotImplementedError

    # --- the public API ---------------------------------------------------------------------
    def key_uri(self, key: str) -> str:
        """The full URI of a key, for messages and for other tools."""
        return join_uri(self.uri, key)

    def put(self, key: str, data: bytes) -> None:
        """Write a whole object atomically."""
        self._put(check_key(key), bytes(data))

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Upload a local file, streaming (never read whole into memory)."""
        if not os.path.isfile(path):
            raise InvalidArgument(f"{path} is not a file")
        self._put_file(check_key(key), os.fspath(path))

    def get(self, key: str) -> bytes:
        """The whole object; NotFound naming its URI if missing."""
        return self._get(check_key(key))

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Download to a local file, streaming; the destination appears only when complete."""
        self._get_file(check_key(key), os.fspath(path))

    def open_read(self, key: str) -> IO[bytes]:
        """A binary file object for streaming reads (use it as a context manager)."""
        return self._open_read(check_key(key))

    def exists(self, key: str) -> bool:
        return self._exists(check_key(key))

    def list(self, prefix: str = "") -> list[str]:
        """Every object key under `prefix` (recursive), sorted."""
        check_key(prefix, allow_empty=True)
        return sorted(self._list(prefix))

    def delete(self, key: str, *, missing_ok: bool = False) -> None:
        """Remove one object; NotFound if it is missing, unless `missing_ok`."""
        from rlx_core.errors import NotFound

        if not self._delete(check_key(key)) and not missing_ok:
            raise NotFound(f"no object at {self.key_uri(key)}")

    def delete_prefix(self, prefix: str) -> int:
        """Remove everything under `prefix`, the commit marker first; return how many objects."""
        check_key(prefix)
        base = prefix.rstrip("/") + "/"
        keys = self._list(base)
        marker = base + COMMIT_MARKER
        ordered = ([marker] if marker in keys else []) + [k for k in keys if k != marker]
        for key in ordered:
            self._delete(key)
        return len(ordered)

    @contextlib.contextmanager
    def atomic_commit(self, prefix: str) -> Iterator[Transaction]:
        """Write several objects under `prefix` that become visible together.

        On a clean exit the marker `<prefix>/_COMMITTED` is written last, holding each member's
        size and sha256; if the block raises, the members written so far are removed and nothing
        counts as committed.
        """
        check_key(prefix)
        tx = Transaction(self, prefix.rstrip("/"))
        if self.committed(tx.prefix):
            raise InvalidArgument(f"{self.key_uri(tx.prefix)} is already committed")
        try:
            yield tx
        except BaseException:
            for key in tx.members:
                with contextlib.suppress(Exception):
                    self._delete(f"{tx.prefix}/{key}")
            raise
        manifest = json.dumps({"members": tx.members}, sort_keys=True, indent=1).encode()
        self._put(f"{tx.prefix}/{COMMIT_MARKER}", manifest)

    def committed(self, prefix: str) -> bool:
        """True once `atomic_commit(prefix)` has finished."""
        return self._exists(f"{check_key(prefix).rstrip('/')}/{COMMIT_MARKER}")

    def commit_manifest(self, prefix: str) -> dict[str, Any]:
        """{member key: {"size": n, "sha256": hex}} of a committed prefix."""
        raw = self.get(f"{prefix.rstrip('/')}/{COMMIT_MARKER}")
        members: dict[str, Any] = json.loads(raw)["members"]
        return members

    def list_committed(self, parent: str = "") -> builtins.list[str]:
        """The committed prefixes directly or deeper under `parent`, sorted."""
        check_key(parent, allow_empty=True)
        suffix = "/" + COMMIT_MARKER
        return sorted(k[: -len(suffix)] for k in self._list(parent) if k.endswith(suffix))


class Transaction:
    """The writer handed out by `Storage.atomic_commit`."""

    def __init__(self, storage: Storage, prefix: str) -> None:
        self.storage = storage
        self.prefix = prefix
        self.members: dict[str, dict[str, Any]] = {}

    def put(self, key: str, data: bytes) -> None:
        check_key(key)
        self.storage._put(f"{self.prefix}/{key}", bytes(data))
        self.members[key] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        check_key(key)
        digest = hashlib.sha256()
        size = 0
        with open(path, "rb") as f:
            while chunk := f.read(_STREAM_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        self.storage._put_file(f"{self.prefix}/{key}", os.fspath(path))
        self.members[key] = {"size": size, "sha256": digest.hexdigest()}
