"""One storage API over URIs: a plain path, `file://`, `s3://bucket/prefix`, `gs://bucket/prefix`.

    st = open_storage("s3://bucket/runs/r1")
    st.put("a/b.bin", b"...");  st.get("a/b.bin");  st.list("a/")
    with st.atomic_commit("snapshots/000123") as tx:
        tx.put("state.json", data)
    st.committed("snapshots/000123")  # True only after the block finished

Keys are relative '/'-separated paths. Every failure is an `RlxError`: InvalidArgument for a bad
URI or key, NotFound (naming the full URI, or the bucket) for a missing object or bucket,
Unavailable when the backend cannot be reached, PermissionDenied / Unauthenticated when it says
so. boto3 and google-cloud-storage load only when an s3:// or gs:// URI is opened; `S3` honours
`AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, GCS `STORAGE_EMULATOR_HOST` (anonymous credentials).

A call that fails with Unavailable (the backend unreachable, throttling, a 5xx) is retried with
exponential backoff for up to `retry_s` seconds after its first failure (default 120 s, or
`RLX_STORAGE_RETRY_S`), each retry logged as one warning line naming the object's URI; then the
Unavailable is raised. This is the only retry layer: the SDKs try each request once.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote

from rlx_core.errors import InvalidArgument
from rlx_core.storage._base import (
    COMMIT_MARKER,
    TMP_PREFIX,
    Storage,
    Transaction,
    check_key,
    join_uri,
)
from rlx_core.storage._local import LocalStorage
from rlx_core.storage._retry import DEFAULT_RETRY_S, RETRY_ENV, Retry

__all__ = [
    "COMMIT_MARKER",
    "DEFAULT_RETRY_S",
    "RETRY_ENV",
    "TMP_PREFIX",
    "Retry",
    "Storage",
    "Transaction",
    "join_uri",
    "open_storage",
]

DEFAULT_TIMEOUT_S = 60.0
_SCHEMES = ("file", "s3", "gs")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def open_storage(
    uri: str | os.PathLike[str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    retry_s: float | None = None,
) -> Storage:
    """A Storage rooted at `uri`; InvalidArgument for a URI it cannot use.

    A plain path (relative paths are made absolute) and `file:///abs/path` open the same local
    directory, whose `uri` is the absolute path. `s3://bucket[/prefix]` and `gs://bucket[/prefix]`
    open a bucket, or a prefix inside one; nothing is contacted until the first call.
    `timeout_s` bounds each remote request (S3: connect and read timeouts; GCS: the request
    timeout). `retry_s` is how long a call that fails with Unavailable is retried (0: never;
    None: `RLX_STORAGE_RETRY_S`, else DEFAULT_RETRY_S); ConfigError naming the variable for a
    bad value of it.
    """
    storage = _open(uri, timeout_s)
    storage.retry = Retry.from_env() if retry_s is None else Retry(total_s=retry_s)
    return storage


def _open(uri: str | os.PathLike[str], timeout_s: float) -> Storage:
    text = os.fspath(uri)
    if not isinstance(text, str) or not text:
        raise InvalidArgument("storage URI is empty")
    if not timeout_s > 0:
        raise InvalidArgument(f"timeout_s must be > 0, got {timeout_s!r}")
    match = _SCHEME.match(text)
    scheme = match.group(1).lower() if match else ""
    rest = text[match.end() :] if match else ""
    if not rest.startswith("//"):
        if scheme in _SCHEMES:  # 's3:/bucket' is a typo, not a local file name
            raise InvalidArgument(f"{text}: expected {scheme}://...")
        return LocalStorage(text)
    if scheme not in _SCHEMES:
        raise InvalidArgument(
            f"{text}: unsupported scheme {scheme!r} (use a path, file://, s3:// or gs://)"
        )
    authority, _, path = rest[2:].partition("/")
    if scheme == "file":
        if authority not in ("", "localhost"):
            raise InvalidArgument(f"{text}: file:// URIs name no host (use file:///abs/path)")
        return LocalStorage("/" + unquote(path))
    if not authority:
        raise InvalidArgument(f"{text}: no bucket (expected {scheme}://bucket/prefix)")
    if not _BUCKET.match(authority):
        raise InvalidArgument(f"{text}: {authority!r} is not a valid bucket name")
    prefix = path.rstrip("/")
    try:
        check_key(prefix, allow_empty=True)
    except InvalidArgument as e:
        raise InvalidArgument(f"{text}: bad prefix: {e}") from None
    if scheme == "s3":
        from rlx_core.storage._s3 import S3Storage

        return S3Storage(authority, prefix, timeout_s=timeout_s)
    from rlx_core.storage._gcs import GCSStorage

    return GCSStorage(authority, prefix, timeout_s=timeout_s)
