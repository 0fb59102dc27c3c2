"""Google Cloud Storage through google-cloud-storage. `STORAGE_EMULATOR_HOST` points it at an
emulator (gcp-storage-emulator in tests), with anonymous credentials. A single upload is atomic."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import IO, Any

from rlx_core.errors import NotFound, PermissionDenied, RlxError, Unavailable
from rlx_core.storage._base import Storage, atomic_download, join_uri


class GCSStorage(Storage):
    def __init__(self, bucket: str, prefix: str, *, timeout_s: float, client: Any = None) -> None:
        self.bucket_name = bucket
        self.prefix = prefix.strip("/")
        self.uri = join_uri(f"gs://{bucket}", self.prefix)
        self._timeout_s = timeout_s
        self._client = client or self._make_client()
        self._bucket = self._client.bucket(bucket)
        from google.api_core.retry import Retry
        from google.cloud.storage.retry import DEFAULT_RETRY

        self._retry: Retry = DEFAULT_RETRY.with_timeout(timeout_s)

    @staticmethod
    def _make_client() -> Any:
        from google.cloud import storage

        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            project = os.environ.get("GOOGLE_CLOUD_PROJECT", "rlx-emulator")
            return storage.Client(project=project, credentials=AnonymousCredentials())
        return storage.Client()

    def _blob(self, key: str) -> Any:
        return self._bucket.blob(f"{self.prefix}/{key}" if self.prefix else key)

    @contextlib.contextmanager
    def _errors(self, key: str) -> Iterator[None]:
        import requests
        from google.api_core import exceptions as gexc
        from google.auth.exceptions import TransportError

        try:
            yield
        except RlxError:
            raise
        except gexc.NotFound:
            if not self._bucket_exists():
                raise NotFound(
                    f"bucket {self.bucket_name!r} does not exist ({self.key_uri(key)})"
                ) from None
            raise NotFound(f"no object at {self.key_uri(key)}") from None
        except (gexc.Forbidden, gexc.Unauthorized) as e:
            raise PermissionDenied(f"{self.key_uri(key)}: {e.message}") from None
        except (gexc.RetryError, gexc.ServiceUnavailable, gexc.GatewayTimeout) as e:
            raise Unavailable(f"{self.key_uri(key)}: {e}") from None
        except (requests.exceptions.RequestException, TransportError) as e:
            raise Unavailable(f"{self.key_uri(key)}: cannot reach GCS: {e}") from None
        except gexc.GoogleAPIError as e:
            raise Unavailable(f"{self.key_uri(key)}: GCS error: {e}") from None

    def _bucket_exists(self) -> bool:
        with contextlib.suppress(Exception):
            return bool(self._bucket.exists(timeout=self._timeout_s, retry=None))
        return False

    def _put(self, key: str, data: bytes) -> None:
        with self._errors(key):
            self._blob(key).upload_from_string(data, timeout=self._timeout_s, retry=self._retry)

    def _put_file(self, key: str, path: str) -> None:
        with self._errors(key):
            self._blob(key).upload_from_filename(path, timeout=self._timeout_s, retry=self._retry)

    def _get(self, key: str) -> bytes:
        with self._errors(key):
            return bytes(
                self._blob(key).download_as_bytes(timeout=self._timeout_s, retry=self._retry)
            )

    def _get_file(self, key: str, path: str) -> None:
        with atomic_download(path) as tmp, self._errors(key):
            self._blob(key).download_to_filename(tmp, timeout=self._timeout_s, retry=self._retry)

    def _open_read(self, key: str) -> IO[bytes]:
        with self._errors(key):
            if not self._blob(key).exists(timeout=self._timeout_s, retry=self._retry):
                raise NotFound(f"no object at {self.key_uri(key)}")
            return self._blob(key).open("rb")

    def _exists(self, key: str) -> bool:
        with self._errors(key):
            found = bool(self._blob(key).exists(timeout=self._timeout_s, retry=self._retry))
        if not found and not self._bucket_exists():
            raise NotFound(f"bucket {self.bucket_name!r} does not exist ({self.key_uri(key)})")
        return found

    def _list(self, prefix: str) -> list[str]:
        full = (
            (f"{self.prefix}/{prefix}" if self.prefix else prefix)
            if prefix
            else (f"{self.prefix}/" if self.prefix else "")
        )
        strip = len(self.prefix) + 1 if self.prefix else 0
        with self._errors(prefix):
            blobs = self._client.list_blobs(
                self.bucket_name, prefix=full, timeout=self._timeout_s, retry=self._retry
            )
            return [b.name[strip:] for b in blobs]

    def _delete(self, key: str) -> bool:
        from google.api_core import exceptions as gexc

        with self._errors(key):
            try:
                self._blob(key).delete(timeout=self._timeout_s, retry=self._retry)
            except gexc.NotFound:
                if not self._bucket_exists():
                    raise
                return False
        return True

    def child(self, prefix: str) -> Storage:
        inner = f"{self.prefix}/{prefix.rstrip('/')}" if self.prefix else prefix.rstrip("/")
        return GCSStorage(self.bucket_name, inner, timeout_s=self._timeout_s, client=self._client)
