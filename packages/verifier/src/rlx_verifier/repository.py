"""Test repositories for the Oubliette flow: content-addressed test data on rlx_core.storage.

Layout under a repository root (a local path, s3://bucket/prefix or gs://bucket/prefix):

    blobs/<sha256>                         inputs, answers, compiled checkers (immutable)
    manifests/<dataset>-<sha12>.json       what `rlx verifier upload` wrote: links per problem
    transient/<expires_unix>-<hex>/<n>     phase-1 outputs of one run, deleted after their TTL

A link is the full URI of an object (`s3://b/p/blobs/ab12...`): a blob's ends in its sha256, a
phase-1 output's in `transient/<expires_unix>-<hex>/<n>`, and no other form (no `..` anywhere) is
a link. Blobs fetched by the verifier
are checked against their digest and cached locally by digest, so a test is read from storage
once per verifier, and a cached blob can never be a stale or altered copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections import OrderedDict

from rlx_core.errors import Corrupt, InvalidArgument
from rlx_core.storage import Storage, join_uri, open_storage
from rlx_verifier.config import RepositoryConfig

__all__ = ["BLOBS", "MANIFESTS", "TRANSIENT", "Repositories", "blob_link", "digest", "split_link"]

BLOBS = "blobs"
MANIFESTS = "manifests"
TRANSIENT = "transient"
_TRANSIENT_RUN = re.compile(r"^(\d+)-[0-9a-f]+$")
# The keys a link may end in, by the folder they start with: what put_blob and put_output write.
_LINK_KEYS = {
    BLOBS: re.compile(rf"^{BLOBS}/[0-9a-f]{{64}}$"),
    TRANSIENT: re.compile(rf"^{TRANSIENT}/\d+-[0-9a-f]+/\d+$"),
}


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_link(root: str, sha256: str) -> str:
    return join_uri(root, f"{BLOBS}/{sha256}")


def split_link(link: str) -> tuple[str, str]:
    """(repository root URI, key) of a link to `.../blobs/<sha256>` or a phase-1 output
    `.../transient/<expires>-<hex>/<n>`; InvalidArgument for anything else (a `..` in it)."""
    for folder, key_form in _LINK_KEYS.items():
        i = link.rfind(f"/{folder}/")
        if i > 0:
            root, key = link[:i], link[i + 1 :]
            if key_form.match(key) and ".." not in root.split("/"):
                return root, key
            break
    raise InvalidArgument(
        f"{link!r} is not a test-repository link (expected ROOT/{BLOBS}/<sha256> or "
        f"ROOT/{TRANSIENT}/<expires>-<hex>/<n>)",
        field="test_links",
    )


class Repositories:
    """Opens test repositories by URI on demand; fetches blobs through a local digest cache,
    writes and sweeps phase-1 outputs."""

    def __init__(self, config: RepositoryConfig | None = None) -> None:
        self.config = config or RepositoryConfig()
        self._own_cache = not self.config.cache_dir
        self.cache_dir = self.config.cache_dir or tempfile.mkdtemp(prefix="rlx-verifier-blobs-")
        os.makedirs(self.cache_dir, exist_ok=True)
        os.chmod(self.cache_dir, 0o700)
        self._stores: dict[str, Storage] = {}
        self._lock = threading.Lock()
        self._sizes: OrderedDict[str, int] = OrderedDict()  # digest -> bytes, least recent first
        self._last_clean: dict[str, float] = {}

    def storage(self, root: str) -> Storage:
        with self._lock:
            store = self._stores.get(root)
            if store is None:
                store = self._stores[root] = open_storage(root)
            return store

    # --- blobs ------------------------------------------------------------------------------
    def put_blob(self, root: str, data: bytes) -> str:
        """Store `data` under its digest (once) and return its link."""
        sha = digest(data)
        store = self.storage(root)
        key = f"{BLOBS}/{sha}"
        if not store.exists(key):
            store.put(key, data)
        return blob_link(store.uri, sha)

    def fetch(self, link: str, *, executable: bool = False) -> str:
        """A local path holding the blob `link` points to, checked against its digest."""
        root, key = split_link(link)
        if not key.startswith(BLOBS + "/"):
            raise InvalidArgument(f"{link!r} is not a blob link", field="test_links")
        sha = key[len(BLOBS) + 1 :]
        path = os.path.join(self.cache_dir, sha)
        if os.path.exists(path):
            with self._lock:
                if sha in self._sizes:
                    self._sizes.move_to_end(sha)
        else:
            data = self.storage(root).get(key)
            if digest(data) != sha:
                raise Corrupt(f"{link}: content does not match its digest")
            tmp = f"{path}.{secrets.token_hex(6)}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
            with self._lock:
                self._sizes[sha] = len(data)
            self._evict()
        if executable:
            exe = path + ".x"
            if not os.path.exists(exe):
                tmp = f"{exe}.{secrets.token_hex(6)}.tmp"
                shutil.copyfile(path, tmp)
                os.chmod(tmp, 0o755)
                os.replace(tmp, exe)
            return exe
        return path

    def read(self, link: str) -> bytes:
        """The bytes of any link (blob or transient)."""
        root, key = split_link(link)
        if key.startswith(BLOBS + "/"):
            with open(self.fetch(link), "rb") as f:
                return f.read()
        return self.storage(root).get(key)

    def _evict(self) -> None:
        limit = self.config.cache_mb << 20
        with self._lock:
            total = sum(self._sizes.values())
            while total > limit and len(self._sizes) > 1:
                sha, size = self._sizes.popitem(last=False)
                total -= size
                for suffix in ("", ".x"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.cache_dir, sha + suffix))

    # --- transient outputs ------------------------------------------------------------------
    def new_run(self, root: str) -> str:
        """A fresh transient prefix (key) for one run's outputs, expiring after the TTL."""
        self.maybe_clean(root)
        expires = int(time.time() + self.config.transient_ttl_s)
        return f"{TRANSIENT}/{expires}-{secrets.token_hex(8)}"

    def put_output(self, root: str, run: str, name: str, data: bytes) -> str:
        store = self.storage(root)
        key = f"{run}/{name}"
        store.put(key, data)
        return join_uri(store.uri, key)

    def clean(self, root: str, *, now: float | None = None) -> int:
        """Delete the transient runs of `root` whose TTL has passed; how many were deleted."""
        store = self.storage(root)
        now = time.time() if now is None else now
        runs = {k.split("/")[1] for k in store.list(TRANSIENT + "/") if k.count("/") >= 2}
        gone = 0
        for run in sorted(runs):
            match = _TRANSIENT_RUN.match(run)
            if match and int(match.group(1)) < now:
                store.delete_prefix(f"{TRANSIENT}/{run}")
                gone += 1
        self._last_clean[root] = time.monotonic()
        return gone

    def maybe_clean(self, root: str) -> None:
        last = self._last_clean.get(root)
        if last is None or time.monotonic() - last >= self.config.clean_interval_s:
            self._last_clean[root] = time.monotonic()
            self.clean(root)

    def close(self) -> None:
        if self._own_cache:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
