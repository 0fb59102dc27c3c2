"""The directories of deleted versions, kept whole for the next version: tmpfs pages already in
place, and one rename instead of hundreds of files and directories made.

A new page on /dev/shm costs a fault and a clear: on this kind of VM 1 GiB of fresh pages takes
0.4-1.2 s to fill, the same GiB in pages already allocated 0.2 s. Every version of a model has
the same chunk files (the same names and sizes: its `layout`), so the directory of a deleted
version is exactly what the next push needs: it is renamed into the pool instead of removed, and
a push of the same layout renames it back as its own directory (its old bytes still in it: the
push overwrites every one of them).

A file is kept only when no other process has it open or mapped: a same-host client may still
hold a zero-copy view of a deleted version (`pull()` maps the chunk files), and that view must
never change. The check is the kernel's: a write lease (`F_SETLEASE`, `F_WRLCK`) is granted only
while no other open file description of the file exists, and a mapping keeps its own. The
directory is renamed out of the store first, so no client can open a file by name after the
check. A file someone holds is unlinked (its pages live as long as that view) and made anew by
the next push. Where leases are not granted nothing is kept.

The pool holds at most `cap` bytes (the largest version seen) and no more than `room()` allows
(the server's N + 1 versions less those it holds and receives), and a push that finds no
directory of its layout gives back every pooled one before it makes new files, so a server
holding N versions and receiving one more has at most N + 1 versions of pages on /dev/shm.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["FilePool", "Layout", "unshared"]

Layout = tuple[tuple[str, int], ...]  # (path relative to the version's directory, bytes), sorted


def unshared(path: str) -> bool | None:
    """True when no other process has the file at `path` open or mapped, False when one has,
    None when this kernel cannot tell (leases off or unsupported here)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    except BlockingIOError:
        return False
    except OSError:
        return None
    else:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return True
    finally:
        os.close(fd)


@dataclass
class _Kept:
    layout: Layout
    path: str
    missing: set[str] = field(default_factory=set)  # files unlinked: another process held them
    nbytes: int = 0


class FilePool:
    """Kept directories of deleted versions in `<root>/pool/`; thread-safe."""

    def __init__(self, root: str, room: Callable[[], int] | None = None) -> None:
        """`room()`: how many bytes the pool may hold now besides the versions alive (the
        server's (N + 1) versions less those it holds and receives); unbounded if None."""
        self._room = room
        self.dir = os.path.join(root, "pool")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self._kept: list[_Kept] = []
        self._lock = threading.Lock()
        self.pooled_bytes = 0
        self.cap = 0
        self.reused_bytes = 0  # bytes of files a push got from the pool, since start
        self.new_bytes = 0  # bytes of files made new

    def note_version(self, nbytes: int) -> None:
        """A version of `nbytes` exists: the pool may hold that much."""
        with self._lock:
            self.cap = max(self.cap, nbytes)

    def take(self, layout: Layout, directory: str) -> set[str] | None:
        """Rename a kept directory of `layout` to `directory` (absent, or an empty directory)
        and return the files of it that are missing; None when the pool has no such directory
        (then every kept one is given back: new pages replace them)."""
        with self._lock:
            index = next((i for i, k in enumerate(self._kept) if k.layout == layout), None)
            if index is None:
                gone, self._kept = self._kept, []
                self.pooled_bytes = 0
            else:
                kept = self._kept.pop(index)
                self.pooled_bytes -= kept.nbytes
                gone = []
        for old in gone:
            shutil.rmtree(old.path, ignore_errors=True)
        if index is None:
            return None
        try:
            os.rename(kept.path, directory)
        except OSError:
            shutil.rmtree(kept.path, ignore_errors=True)
            return None
        with self._lock:
            self.reused_bytes += kept.nbytes
        return kept.missing

    def made(self, nbytes: int) -> None:
        """`nbytes` of new files were made (for the counters)."""
        with self._lock:
            self.new_bytes += nbytes

    def recycle(self, directory: str, layout: Sequence[tuple[str, int]]) -> None:
        """Keep a deleted version's `directory` (whose chunk files are `layout`) for the next
        push, without the files another process holds; remove it if it does not fit the cap or
        the kernel cannot tell who holds a file."""
        layout = tuple(layout)
        size = sum(n for _, n in layout)
        room = self._room() if self._room is not None else size
        with self._lock:
            fits = self.pooled_bytes + size <= min(self.cap, room)
            if fits:
                self.pooled_bytes += size  # reserved while checked
        if not fits:
            shutil.rmtree(directory, ignore_errors=True)
            return
        dst = os.path.join(self.dir, uuid.uuid4().hex)
        kept = _Kept(layout, dst, nbytes=size)
        try:
            os.rename(directory, dst)  # out of the store: no one opens a file of it by name now
            for rel, nbytes in layout:
                path = os.path.join(dst, rel)
                verdict = unshared(path)
                if verdict is None and os.path.exists(path):
                    raise OSError("no file leases here")
                if verdict is not True:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                    kept.missing.add(rel)
                    kept.nbytes -= nbytes
        except OSError:
            with self._lock:
                self.pooled_bytes -= size
            shutil.rmtree(dst, ignore_errors=True)
            shutil.rmtree(directory, ignore_errors=True)
            return
        with self._lock:
            self.pooled_bytes -= size - kept.nbytes
            self._kept.append(kept)

    def clear(self) -> None:
        """Remove every kept directory."""
        with self._lock:
            gone, self._kept = self._kept, []
            self.pooled_bytes = 0
        for old in gone:
            shutil.rmtree(old.path, ignore_errors=True)
