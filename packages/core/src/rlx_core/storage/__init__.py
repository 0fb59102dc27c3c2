"""One storage API over URIs: a plain path, `file://`, `s3://bucket/prefix`, `gs://bucket/prefix`.

    st = open_storage("s3://bucket/runs/r1")
    st.put("a/b.bin", b"...");  st.get("a/b.bin");  st.list("a/")
    with st.atomic_commit("snapshots/000123") as tx:
        tx.put("state.json", data)
    st.committed("snapshots/000123")  # True only after the block finished

boto3 and google-cloud-storage load only when an s3:// or gs:// URI is opened.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

from rlx_core.errors import InvalidArgument
from rlx_core.storage._base import COMMIT_MARKER, Storage, Transaction, join_uri
from rlx_core.storage._local import LocalStorage

__all__ = ["COMMIT_MARKER", "Storage", "Transaction", "join_uri", "open_storage"]

DEFAULT_TIMEOUT_S = 60.0


def open_storage(uri: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Storage:
    """A Storage rooted at `uri`; InvalidArgument for a URI it cannot use.

    `timeout_s` bounds each remote call, retries included.
    """
    text = os.fspath(uri)
    if not text:
        raise InvalidArgument("storage URI is empty")
    if "://" not in text:
        return LocalStorage(text)
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidArgument(f"{text}: file:// URIs name no host (use file:///abs/path)")
        return LocalStorage(unquote(parsed.path))
    if scheme in ("s3", "gs"):
        bucket = parsed.netloc
        if not bucket:
            raise InvalidArgument(f"{text}: no bucket (expected {scheme}://bucket/prefix)")
        prefix = parsed.path.strip("/")
        if any(p in (".", "..") for p in prefix.split("/")):
            raise InvalidArgument(f"{text}: '.' and '..' are not allowed in the prefix")
        if scheme == "s3":
            from rlx_core.storage._s3 import S3Storage

            return S3Storage(bucket, prefix, timeout_s=timeout_s)
        from rlx_core.storage._gcs import GCSStorage

        return GCSStorage(bucket, prefix, timeout_s=timeout_s)
    raise InvalidArgument(
        f"{text}: unsupported scheme {parsed.scheme!r} (use a path, file://, s3:// or gs://)"
    )
