"""S3 (and S3-compatible servers) through boto3. `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3`
point it elsewhere (moto's server in tests). A single PUT is atomic on S3."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import IO, Any, NoReturn

from rlx_core.errors import NotFound, PermissionDenied, RlxError, Unavailable
from rlx_core.storage._base import Storage, atomic_download, join_uri

_MISSING_KEY = {"NoSuchKey", "404", "NotFound"}
_DENIED = {"AccessDenied", "403", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch"}


class S3Storage(Storage):
    def __init__(self, bucket: str, prefix: str, *, timeout_s: float, client: Any = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.uri = join_uri(f"s3://{bucket}", self.prefix)
        self._timeout_s = timeout_s
        self._client = client or self._make_client(timeout_s)

    @staticmethod
    def _make_client(timeout_s: float) -> Any:
        import boto3
        from botocore.config import Config

        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        config = Config(
            connect_timeout=min(timeout_s, 10.0),
            read_timeout=timeout_s,
            retries={"max_attempts": 3, "mode": "standard"},
        )
        return boto3.client("s3", endpoint_url=endpoint or None, config=config)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    @contextlib.contextmanager
    def _errors(self, key: str) -> Iterator[None]:
        from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

        try:
            yield
        except RlxError:
            raise
        except ClientError as e:
            self._raise(e.response.get("Error", {}).get("Code", ""), key, str(e))
        except EndpointConnectionError as e:
            raise Unavailable(f"{self.key_uri(key)}: cannot reach S3: {e}") from None
        except BotoCoreError as e:
            raise Unavailable(f"{self.key_uri(key)}: {type(e).__name__}: {e}") from None

    def _raise(self, code: str, key: str, text: str) -> NoReturn:
        if code == "NoSuchBucket":
            raise NotFound(f"bucket {self.bucket!r} does not exist ({self.key_uri(key)})")
        if code in _MISSING_KEY:
            if code != "NoSuchKey" and not self._bucket_exists():
                raise NotFound(f"bucket {self.bucket!r} does not exist ({self.key_uri(key)})")
            raise NotFound(f"no object at {self.key_uri(key)}")
        if code in _DENIED:
            raise PermissionDenied(f"{self.key_uri(key)}: access denied ({code})")
        raise Unavailable(f"{self.key_uri(key)}: S3 error {code}: {text}")

    def _bucket_exists(self) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError:
            return False
        return True

    def _put(self, key: str, data: bytes) -> None:
        with self._errors(key):
            self._client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def _put_file(self, key: str, path: str) -> None:
        with self._errors(key):
            # multipart above 8 MiB; the object appears only when the upload completes
            self._client.upload_file(path, self.bucket, self._key(key))

    def _get(self, key: str) -> bytes:
        with self._errors(key):
            body = self._client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            return bytes(body.read())

    def _get_file(self, key: str, path: str) -> None:
        with atomic_download(path) as tmp, self._errors(key):
            self._client.download_file(self.bucket, self._key(key), tmp)

    def _open_read(self, key: str) -> IO[bytes]:
        with self._errors(key):
            body = self._client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
        return body

    def _exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        with self._errors(key):
            try:
                self._client.head_object(Bucket=self.bucket, Key=self._key(key))
            except ClientError as e:
                code = e.response.get("Error", {}).get("Code", "")
                if code in _MISSING_KEY:
                    if not self._bucket_exists():
                        self._raise("NoSuchBucket", key, "")
                    return False
                raise
        return True

    def _list(self, prefix: str) -> list[str]:
        full = self._key(prefix) if prefix else (f"{self.prefix}/" if self.prefix else "")
        strip = len(self.prefix) + 1 if self.prefix else 0
        keys = []
        with self._errors(prefix):
            pages = self._client.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=full):
                keys += [item["Key"][strip:] for item in page.get("Contents", [])]
        return keys

    def _delete(self, key: str) -> bool:
        if not self._exists(key):
            return False
        with self._errors(key):
            self._client.delete_object(Bucket=self.bucket, Key=self._key(key))
        return True

    def child(self, prefix: str) -> Storage:
        return S3Storage(
            self.bucket,
            self._key(prefix.rstrip("/")),
            timeout_s=self._timeout_s,
            client=self._client,
        )
