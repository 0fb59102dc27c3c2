"""Local directories: atomic writes by temporary name + fsync + rename."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from collections.abc import Iterator
from typing import BinaryIO

from rlx_core.errors import Internal, NotFound, PermissionDenied, RlxError
from rlx_core.storage._base import COMMIT_MARKER, TMP_PREFIX, Storage, atomic_download

# errno values that mean "there is no object here" (a directory, or a file where a directory
# should be, is not an object either)
_MISSING = {errno.ENOENT, errno.EISDIR, errno.ENOTDIR}


class LocalStorage(Storage):
    """Objects are files under `root`; keys map to sub-paths."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.uri = self.root

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/")) if key else self.root

    def _map(self, exc: Exception, key: str) -> RlxError | None:
        return self._error(exc, key) if isinstance(exc, OSError) else None

    def _error(self, e: OSError, key: str) -> RlxError:
        if e.errno in _MISSING:
            return NotFound(f"no object at {self.key_uri(key)}")
        if isinstance(e, PermissionError):
            return PermissionDenied(f"{self.key_uri(key)}: permission denied ({e.strerror})")
        return Internal(f"{self.key_uri(key)}: {e}")

    @contextlib.contextmanager
    def _atomic_target(self, key: str) -> Iterator[str]:
        """A temporary next to the key's file; fsynced and renamed onto it on success."""
        path = self._path(key)
        directory = os.path.dirname(path)
        tmp = os.path.join(
            directory, f"{TMP_PREFIX}{secrets.token_hex(6)}-{os.path.basename(path)}"
        )
        with self._errors(key):
            os.makedirs(directory, exist_ok=True)
            try:
                yield tmp
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            # make the rename itself durable (it is what a commit marker's existence rests on)
            fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _put(self, key: str, data: bytes) -> None:
        with self._atomic_target(key) as tmp, open(tmp, "wb") as f:
            f.write(data)

    def _put_file(self, key: str, path: str) -> None:
        with self._atomic_target(key) as tmp:
            shutil.copyfile(path, tmp)

    def _get(self, key: str) -> bytes:
        with self._errors(key), open(self._path(key), "rb") as f:
            return f.read()

    def _get_file(self, key: str, path: str) -> None:
        with self._errors(key):
            src = open(self._path(key), "rb")  # noqa: SIM115 - closed just below
        # errors at the destination are the caller's local OSErrors, not storage errors
        with src, atomic_download(path) as tmp, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)

    def _open_read(self, key: str) -> BinaryIO:
        with self._errors(key):
            return open(self._path(key), "rb")

    def _exists(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    def _walk(self, prefix: str, *, temporaries: bool) -> list[str]:
        # walk the deepest directory the prefix names, then filter by the whole prefix
        top = self._path(prefix.rsplit("/", 1)[0] if "/" in prefix else "")
        keys = []

        def failed(e: OSError) -> None:
            if e.errno not in _MISSING:
                raise self._error(e, prefix)

        for dirpath, _dirs, files in os.walk(top, onerror=failed):
            rel = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            for name in files:
                if name.startswith(TMP_PREFIX) and not temporaries:
                    continue
                key = name if rel == "." else f"{rel}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        return keys

    def _list(self, prefix: str) -> list[str]:
        return self._walk(prefix, temporaries=False)

    def _delete(self, key: str) -> bool:
        try:
            os.unlink(self._path(key))
        except OSError as e:
            if e.errno in _MISSING:
                return False
            raise self._error(e, key) from e
        return True

    def _delete_dir(self, prefix: str) -> None:
        # the marker first, then the whole tree: files, leftover temporaries and directories
        self._delete(prefix + COMMIT_MARKER)
        top = self._path(prefix.rstrip("/"))
        if top == self.root:
            for key in self._walk("", temporaries=True):
                self._delete(key)
            return
        with self._errors(prefix):
            try:
                shutil.rmtree(top)
            except NotADirectoryError:
                pass  # a file named like the prefix is not under it
            except FileNotFoundError:
                pass

    def _child(self, prefix: str) -> Storage:
        return LocalStorage(self._path(prefix))
