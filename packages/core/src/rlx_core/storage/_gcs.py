"""Google Cloud Storage through google-cloud-storage. `STORAGE_EMULATOR_HOST` points it at an
emulator (gcp-storage-emulator in tests), with anonymous credentials. A single upload, simple or
resumable, is atomic on GCS, so no temporaries are needed."""

from __future__ import annotations

import os
from typing import Any, BinaryIO

from rlx_core.errors import (
    Corrupt,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RlxError,
    Unauthenticated,
    Unavailable,
)
from rlx_core.storage._base import Storage, atomic_download, error_mapping_reader, join_uri

_READ_CHUNK = 8 << 20  # bytes per ranged download behind open_read


class GCSStorage(Storage):
    """Objects are GCS objects named `<prefix>/<key>` in `bucket`."""

    def __init__(self, bucket: str, prefix: str, *, timeout_s: float, client: Any = None) -> None:
        self.bucket_name = bucket
        self.prefix = prefix.strip("/")
        self.uri = join_uri(f"gs://{bucket}", self.prefix)
        self._timeout_s = timeout_s
        self._client = client or self._make_client()
        self._bucket = self._client.bucket(bucket)
        # one try per request: rlx_core.storage._retry is the one retry layer
        self._kw = {"timeout": timeout_s, "retry": None}

    def _make_client(self) -> Any:
        from google.auth.exceptions import GoogleAuthError
        from google.cloud import storage  # type: ignore[attr-defined, unused-ignore]

        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            project = os.environ.get("GOOGLE_CLOUD_PROJECT", "rlx-emulator")
            return storage.Client(project=project, credentials=AnonymousCredentials())
        try:
            return storage.Client()
        except GoogleAuthError as e:
            raise Unauthenticated(
                f"{self.uri}: no Google credentials ({e}); set GOOGLE_APPLICATION_CREDENTIALS, "
                "or STORAGE_EMULATOR_HOST for an emulator"
            ) from e

    def _name(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _blob(self, key: str) -> Any:
        return self._bucket.blob(self._name(key))

    def _bucket_exists(self) -> bool:
        """False only when GCS says so; on any other failure assume the bucket is there."""
        try:
            return bool(self._bucket.exists(timeout=self._timeout_s, retry=None))
        except Exception:
            return True

    def _missing(self, key: str) -> NotFound:
        if not self._bucket_exists():
            return NotFound(f"bucket {self.bucket_name!r} does not exist ({self.key_uri(key)})")
        return NotFound(f"no object at {self.key_uri(key)}")

    def _map(self, exc: Exception, key: str) -> RlxError | None:
        """The RlxError for a google-cloud/auth/requests exception; None for anything else."""
        import requests
        from google.api_core import exceptions as gexc
        from google.auth.exceptions import GoogleAuthError, TransportError
        from google.cloud.storage.exceptions import DataCorruption, InvalidResponse

        if isinstance(exc, gexc.NotFound):
            return self._missing(key)
        transient = (gexc.RetryError, gexc.ServerError, gexc.TooManyRequests)
        table: list[tuple[Any, type[RlxError], str]] = [
            (gexc.Forbidden, PermissionDenied, "access denied by GCS"),
            (gexc.Unauthorized, Unauthenticated, "GCS rejected the credentials"),
            (gexc.BadRequest, InvalidArgument, "GCS refused the request"),
            (
                (*transient, requests.exceptions.RequestException, TransportError),
                Unavailable,
                "cannot reach GCS",
            ),
            (GoogleAuthError, Unauthenticated, "Google credentials failed"),
            (DataCorruption, Corrupt, "download failed its checksum"),
            ((gexc.GoogleAPIError, InvalidResponse), Internal, "GCS error"),
        ]
        for types, cls, what in table:
            if isinstance(exc, types):
                return cls(f"{self.key_uri(key)}: {what}: {exc}")
        return None

    def _put(self, key: str, data: bytes) -> None:
        with self._errors(key):
            self._blob(key).upload_from_string(
                data, content_type="application/octet-stream", **self._kw
            )

    def _put_file(self, key: str, path: str) -> None:
        with self._errors(key):
            # multipart up to 8 MiB, resumable above; the object appears when the upload ends
            self._blob(key).upload_from_filename(
                path, content_type="application/octet-stream", **self._kw
            )

    def _get(self, key: str) -> bytes:
        with self._errors(key):
            return bytes(self._blob(key).download_as_bytes(**self._kw))

    def _get_file(self, key: str, path: str) -> None:
        with atomic_download(path) as tmp, self._errors(key):
            self._blob(key).download_to_filename(tmp, **self._kw)

    def _open_read(self, key: str) -> BinaryIO:
        with self._errors(key):
            # get_blob pins the generation, so a concurrent overwrite cannot mix two versions
            blob = self._bucket.get_blob(self._name(key), **self._kw)
            if blob is None:
                raise self._missing(key)
            reader = blob.open("rb", chunk_size=_READ_CHUNK, **self._kw)
        return error_mapping_reader(reader, lambda e: self._map(e, key))

    def _exists(self, key: str) -> bool:
        with self._errors(key):
            found = bool(self._blob(key).exists(**self._kw))
        if not found and not self._bucket_exists():
            raise NotFound(f"bucket {self.bucket_name!r} does not exist ({self.key_uri(key)})")
        return found

    def _list(self, prefix: str) -> list[str]:
        strip = len(self.prefix) + 1 if self.prefix else 0
        with self._errors(prefix):
            blobs = self._client.list_blobs(self.bucket_name, prefix=self._name(prefix), **self._kw)
            return [b.name[strip:] for b in blobs]

    def _delete(self, key: str) -> bool:
        from google.api_core import exceptions as gexc

        with self._errors(key):
            try:
                self._blob(key).delete(**self._kw)
            except gexc.NotFound:
                if not self._bucket_exists():
                    raise
                return False
        return True

    def _child(self, prefix: str) -> Storage:
        return GCSStorage(
            self.bucket_name, self._name(prefix), timeout_s=self._timeout_s, client=self._client
        )
