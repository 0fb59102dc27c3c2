"""Real object-storage servers on 127.0.0.1 for the storage suite: moto's S3 server and
gcp-storage-emulator, one each per test session."""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[str]:
    from gcp_storage_emulator.server import create_server

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(params=["local", "s3", "gcs"])
def storage_root(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch) -> str:
    """A fresh, empty root URI on each backend (a new bucket per test)."""
    bucket = f"rlx-{uuid.uuid4().hex[:12]}"
    if request.param == "local":
        return str(tmp_path / "root")
    if request.param == "s3":
        endpoint = request.getfixturevalue("s3_server")
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        import boto3

        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        return f"s3://{bucket}/runs/r1"
    endpoint = request.getfixturevalue("gcs_server")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    storage.Client(project="test", credentials=AnonymousCredentials()).create_bucket(bucket)
    return f"gs://{bucket}/runs/r1"


@pytest.fixture
def dead_endpoint() -> str:
    """An http URL on 127.0.0.1 where nothing listens."""
    return f"http://127.0.0.1:{free_port()}"
