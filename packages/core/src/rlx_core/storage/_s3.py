"""S3 (and S3-compatible servers) through boto3. `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`
points it elsewhere (moto's server in tests). A single PUT, and a completed multipart upload, is
atomic on S3, so no temporaries are needed."""

from __future__ import annotations

import os
import threading
from typing import Any, BinaryIO

from rlx_core.errors import (
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RlxError,
    Unauthenticated,
    Unavailable,
)
from rlx_core.storage._base import Storage, atomic_download, error_mapping_reader, join_uri

_MISSING_BUCKET = {"NoSuchBucket"}
_MISSING_KEY = {"NoSuchKey", "404", "NotFound"}  # "404": HEAD has no body to say which
_DENIED = {"AccessDenied", "403", "Forbidden", "AllAccessDisabled", "AccountProblem"}
_UNAUTHENTICATED = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
_TRANSIENT = {"SlowDown", "ServiceUnavailable", "RequestTimeout", "InternalError", "Throttling"}
_CODES: list[tuple[set[str], type[RlxError], str]] = [
    (_DENIED, PermissionDenied, "access denied by S3"),
    (_UNAUTHENTICATED, Unauthenticated, "S3 rejected the credentials"),
    (_TRANSIENT, Unavailable, "S3 is unavailable"),
]
_DELETE_BATCH = 1000  # the most keys one DeleteObjects call takes


_shared: dict[str, Any] = {}  # botocore's service-model loader, shared by every client
_session_lock = threading.Lock()


class S3Storage(Storage):
    """Objects are S3 objects named `<prefix>/<key>` in `bucket`."""

    def __init__(self, bucket: str, prefix: str, *, timeout_s: float, client: Any = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.uri = join_uri(f"s3://{bucket}", self.prefix)
        self._timeout_s = timeout_s
        self._client = client or self._make_client(timeout_s)

    @staticmethod
    def _make_client(timeout_s: float) -> Any:
        import boto3
        import botocore.session
        from botocore.config import Config

        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        config = Config(
            connect_timeout=min(timeout_s, 10.0),
            read_timeout=timeout_s,
            # one try per request: rlx_core.storage._retry is the one retry layer
            retries={"total_max_attempts": 1, "mode": "standard"},
        )
        # A fresh session per client, so credentials and settings come from the environment
        # of the moment, but one shared model loader, so opening a storage costs ~20 ms, not
        # ~100. Client creation is not thread-safe, hence the lock (the clients themselves are).
        with _session_lock:
            botocore_session = botocore.session.Session()
            loader = _shared.setdefault("loader", botocore_session.get_component("data_loader"))
            botocore_session.register_component("data_loader", loader)
            session = boto3.session.Session(botocore_session=botocore_session)
            return session.client("s3", endpoint_url=endpoint or None, config=config)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _bucket_missing(self, key: str) -> NotFound:
        return NotFound(f"bucket {self.bucket!r} does not exist ({self.key_uri(key)})")

    def _bucket_exists(self) -> bool:
        """False only when S3 says so; on any other failure assume the bucket is there."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError as e:
            return _code(e) not in _MISSING_BUCKET | _MISSING_KEY
        except BotoCoreError:
            return True
        return True

    def _map(self, exc: Exception, key: str) -> RlxError | None:
        """The RlxError for a boto3/botocore/s3transfer exception; None for anything else."""
        from botocore import exceptions as bexc

        cause = _root_cause(exc)
        if isinstance(cause, bexc.ClientError):
            return self._from_client_error(cause, key)
        table: list[tuple[Any, type[RlxError], str]] = [
            (
                (bexc.NoCredentialsError, bexc.PartialCredentialsError),
                Unauthenticated,
                "no AWS credentials",
            ),
            (bexc.ParamValidationError, InvalidArgument, "invalid S3 request"),
            ((bexc.ConnectionError, bexc.HTTPClientError), Unavailable, "cannot reach S3"),
            (bexc.BotoCoreError, Internal, "S3 client failure"),
        ]
        for types, cls, what in table:
            if isinstance(cause, types):
                return cls(f"{self.key_uri(key)}: {what}: {type(cause).__name__}: {cause}")
        if type(exc).__module__.split(".")[0] in ("boto3", "s3transfer"):
            return Internal(
                f"{self.key_uri(key)}: S3 transfer failure: {type(exc).__name__}: {exc}"
            )
        return None

    def _from_client_error(self, e: Any, key: str) -> RlxError:
        code = _code(e)
        if code in _MISSING_BUCKET or (
            code in _MISSING_KEY and code != "NoSuchKey" and not self._bucket_exists()
        ):
            return self._bucket_missing(key)
        if code in _MISSING_KEY:
            return NotFound(f"no object at {self.key_uri(key)}")
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        cls, what = next(
            ((c, w) for codes, c, w in _CODES if code in codes),
            (Unavailable, "S3 is unavailable") if status >= 500 else (Internal, "S3 error"),
        )
        return cls(f"{self.key_uri(key)}: {what} ({code}): {e}")

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
            with body:
                return bytes(body.read())

    def _get_file(self, key: str, path: str) -> None:
        with atomic_download(path) as tmp, self._errors(key):
            self._client.download_file(self.bucket, self._key(key), tmp)

    def _open_read(self, key: str) -> BinaryIO:
        with self._errors(key):
            body = self._client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
        return error_mapping_reader(body, lambda e: self._map(e, key))

    def _exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        with self._errors(key):
            try:
                self._client.head_object(Bucket=self.bucket, Key=self._key(key))
            except ClientError as e:
                if _code(e) not in _MISSING_KEY:
                    raise
                if not self._bucket_exists():
                    raise self._bucket_missing(key) from None
                return False
        return True

    def _list(self, prefix: str) -> list[str]:
        strip = len(self.prefix) + 1 if self.prefix else 0
        keys = []
        with self._errors(prefix):
            pages = self._client.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
                keys += [item["Key"][strip:] for item in page.get("Contents", [])]
        return keys

    def _delete(self, key: str) -> bool:
        # S3 deletes a missing key without complaint, so ask first to be able to say NotFound
        if not self._exists(key):
            return False
        with self._errors(key):
            self._client.delete_object(Bucket=self.bucket, Key=self._key(key))
        return True

    def _delete_keys(self, keys: list[str]) -> None:
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = keys[start : start + _DELETE_BATCH]
            with self._errors(batch[0]):
                result = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self._key(k)} for k in batch], "Quiet": True},
                )
            for error in result.get("Errors", []):
                if error.get("Code") not in _MISSING_KEY:
                    key = error.get("Key", "")[len(self._key("")) :]
                    raise self._map(_client_error(error, "DeleteObjects"), key) or Internal(
                        f"{self.key_uri(key)}: cannot delete: {error}"
                    )

    def _child(self, prefix: str) -> Storage:
        return S3Storage(
            self.bucket, self._key(prefix), timeout_s=self._timeout_s, client=self._client
        )


def _code(e: Any) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _root_cause(exc: BaseException) -> BaseException:
    """The botocore error behind boto3's transfer wrappers (S3UploadFailedError keeps the
    ClientError only as its context; RetriesExceededError as `last_exception`)."""
    from botocore.exceptions import BotoCoreError, ClientError

    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None or isinstance(seen, BotoCoreError | ClientError):
            break
        seen = getattr(seen, "last_exception", None) or seen.__cause__ or seen.__context__
    return seen if seen is not None else exc


def _client_error(error: dict[str, Any], operation: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": error.get("Code"), "Message": error.get("Message")}}, operation
    )
