import sys
from pathlib import Path

# the tests share trainer_helpers.py (import mode is importlib, so the directory is not on sys.path)
sys.path.insert(0, str(Path(__file__).parent))


import logging
import os
import socket
import uuid
from collections.abc import Iterator

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, with test credentials in the environment."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_uri(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A fresh bucket on the moto server; returns s3://bucket/ckpt."""
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    bucket = f"rlx-{uuid.uuid4().hex[:12]}"
    boto3.session.Session().client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/ckpt"


@pytest.fixture(scope="session")
def gcs_endpoint() -> Iterator[str]:
    """gcp-storage-emulator on 127.0.0.1 (in memory), reachable by google-cloud-storage, gcsfs
    (STORAGE_EMULATOR_HOST) and TensorStore's gcs driver (TENSORSTORE_GCS_HTTP_URL plus
    GOOGLE_AUTH_TOKEN_FOR_TESTING, DESIGN §10)."""
    from gcp_storage_emulator.server import create_server

    for name in ("gcp_storage_emulator", "api.object", "api.bucket"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    port = _free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    url = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in _GCS_VARS}
    os.environ.update(
        STORAGE_EMULATOR_HOST=url, TENSORSTORE_GCS_HTTP_URL=url, GOOGLE_AUTH_TOKEN_FOR_TESTING="x"
    )
    yield url
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


_GCS_VARS = ("STORAGE_EMULATOR_HOST", "TENSORSTORE_GCS_HTTP_URL", "GOOGLE_AUTH_TOKEN_FOR_TESTING")


@pytest.fixture
def gcs_uri(gcs_endpoint: str) -> str:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket = f"rlx-{uuid.uuid4().hex[:12]}"
    storage.Client(project="test", credentials=AnonymousCredentials()).create_bucket(bucket)
    return f"gs://{bucket}/ckpt"
