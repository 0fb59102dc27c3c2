"""Local directories: atomic writes by temporary name + fsync + rename."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from typing import IO

from rlx_core.errors import NotFound
from rlx_core.storage._base import Storage

_TMP = ".rlx-tmp-"


class LocalStorage(Storage):
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.uri = self.root

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def _missing(self, key: str) -> NotFound:
        return NotFound(f"no object at {self.key_uri(key)}")

    @contextlib.contextmanager
    def _atomic_target(self, path: str):  # type: ignore[no-untyped-def]
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f"{_TMP}{secrets.token_hex(6)}-{os.path.basename(path)}")
        try:
            yield tmp
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _put(self, key: str, data: bytes) -> None:
        with self._atomic_target(self._path(key)) as tmp, open(tmp, "wb") as f:
            f.write(data)

    def _put_file(self, key: str, path: str) -> None:
        with self._atomic_target(self._path(key)) as tmp:
            shutil.copyfile(path, tmp)

    def _get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise self._missing(key) from None

    def _get_file(self, key: str, path: str) -> None:
        src = self._path(key)
        if not os.path.isfile(src):
            raise self._missing(key)
        dest = LocalStorage(os.path.dirname(os.path.abspath(path)))
        dest._put_file(os.path.basename(path), src)

    def _open_read(self, key: str) -> IO[bytes]:
        try:
            return open(self._path(key), "rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise self._missing(key) from None

    def _exists(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    def _list(self, prefix: str) -> list[str]:
        # walk the deepest directory the prefix names, then filter by the full prefix
        base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        top = self._path(base_dir) if base_dir else self.root
        keys = []
        for dirpath, _dirs, files in os.walk(top):
            rel_dir = os.path.relpath(dirpath, self.root)
            for name in files:
                if name.startswith(_TMP):
                    continue
                key = name if rel_dir == "." else f"{rel_dir.replace(os.sep, '/')}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        return keys

    def _delete(self, key: str) -> bool:
        try:
            os.unlink(self._path(key))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return False
        return True

    def child(self, prefix: str) -> Storage:
        return LocalStorage(self._path(prefix.rstrip("/")))
