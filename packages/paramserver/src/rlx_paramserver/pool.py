"""Chunk files kept for the next version: tmpfs pages already in place, not new ones.

A new page on /dev/shm costs a fault and a clear: on this kind of VM 1 GiB of fresh pages takes
0.4-1.2 s to fill, the same GiB in pages already allocated 0.2 s. Every version of a model has
the same chunk sizes, so the files of a deleted version are exactly the files the next push
needs. A deleted version's files are moved (renamed) into the pool instead of being unlinked,
and a push takes a file of the size it needs from there before making a new one.

A file goes into the pool only when no other process has it open or mapped: a same-host client
may still hold a zero-copy view of a deleted version (`pull()` maps the chunk files), and that
view must never change. The check is the kernel's: a write lease (`F_SETLEASE`, `F_WRLCK`) is
granted only while no other open file description of the file exists, and a mapping keeps its
own; the file is renamed out of the version's directory first, so no client can open it by
name after the check. A file someone holds is unlinked as before (its pages live as long as
that view). Where leases are unavailable nothing is pooled.

The pool holds at most `cap` bytes (the largest version seen), so a server holding N versions
and receiving one more still has at most N + 1 versions of pages on /dev/shm.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import threading
import uuid

__all__ = ["MIN_POOLED", "FilePool", "unshared"]

log = logging.getLogger(__name__)

MIN_POOLED = 64 << 10  # smaller files (zarr.json, biases, norms) are cheaper made new


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


class FilePool:
    """Files of deleted versions, by size, in `<root>/pool/`; thread-safe."""

    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, "pool")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self._free: dict[int, list[str]] = {}
        self._lock = threading.Lock()
        self.pooled_bytes = 0
        self.cap = 0
        self.reused_bytes = 0  # bytes of files handed out again, since start
        self.new_bytes = 0  # bytes of files made new

    def note_version(self, nbytes: int) -> None:
        """A version of `nbytes` exists: the pool may hold that much."""
        with self._lock:
            self.cap = max(self.cap, nbytes)

    def take(self, path: str, size: int) -> None:
        """Put a file of `size` bytes at `path` (which must not exist): a pooled one when there
        is one of that size (its old bytes still in it), else a new, empty one."""
        src, evicted = None, []
        if size >= MIN_POOLED:
            with self._lock:
                free = self._free.get(size)
                if free:
                    src = free.pop()
                    self.pooled_bytes -= size
                    self.reused_bytes += size
                else:  # new pages instead: give back as many pooled ones (of other sizes)
                    evicted = self._evict(size)
        for old in evicted:
            with contextlib.suppress(OSError):
                os.unlink(old)
        if src is not None:
            try:
                os.rename(src, path)
                return
            except OSError as e:  # the pool's file vanished: make a new one
                log.warning("pooled file %s unusable: %s", src, e)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        with self._lock:
            self.new_bytes += size

    def _evict(self, nbytes: int) -> list[str]:
        """Take at least `nbytes` of pooled files out of the pool (caller holds the lock and
        unlinks them): the pool and the new files together stay within the cap."""
        out: list[str] = []
        freed = 0
        for size in sorted(self._free, reverse=True):
            free = self._free[size]
            while free and freed < nbytes:
                out.append(free.pop())
                freed += size
                self.pooled_bytes -= size
            if not free:
                del self._free[size]
            if freed >= nbytes:
                break
        return out

    def recycle(self, directory: str) -> None:
        """Pool the files of a deleted version's `directory` that no other process holds, up
        to the cap, and remove the rest with the directory."""
        with contextlib.suppress(FileNotFoundError):
            for dirpath, _, files in os.walk(directory):
                for name in files:
                    self._offer(os.path.join(dirpath, name))
        shutil.rmtree(directory, ignore_errors=True)

    def _offer(self, path: str) -> None:
        try:
            size = os.stat(path, follow_symlinks=False).st_size
        except OSError:
            return
        if size < MIN_POOLED:
            return
        with self._lock:
            if self.pooled_bytes + size > self.cap:
                return
            self.pooled_bytes += size  # reserved while checked
        kept = False
        dst = os.path.join(self.dir, uuid.uuid4().hex)
        try:
            os.rename(path, dst)  # out of the version's directory: no one opens it by name now
            kept = unshared(dst) is True
        except OSError:
            pass
        with self._lock:
            if kept:
                self._free.setdefault(size, []).append(dst)
            else:
                self.pooled_bytes -= size
        if not kept:
            with contextlib.suppress(OSError):
                os.unlink(dst)

    def clear(self) -> None:
        """Remove every pooled file."""
        with self._lock:
            paths = [p for free in self._free.values() for p in free]
            self._free.clear()
            self.pooled_bytes = 0
        for path in paths:
            with contextlib.suppress(OSError):
                os.unlink(path)
