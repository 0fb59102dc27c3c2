"""Fixtures of the controller suite: run-directory roots on each storage backend (a local
directory, moto's S3 server, gcp-storage-emulator, all on 127.0.0.1) and a small run config."""

from __future__ import annotations

import json
import logging
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto's S3 server in a thread; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[str]:
    """gcp-storage-emulator in a thread, in memory; yields its endpoint URL."""
    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    logging.getLogger("api.object").setLevel(logging.ERROR)
    port = _free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(params=["local", "s3", "gcs"])
def run_root(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A fresh, empty run-directory URI on each backend."""
    bucket = f"rlx-{uuid.uuid4().hex[:12]}"
    if request.param == "local":
        return str(tmp_path / "run")
    if request.param == "s3":
        import boto3

        endpoint = request.getfixturevalue("s3_server")
        for var in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        boto3.session.Session().client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        return f"s3://{bucket}/runs/r1"
    endpoint = request.getfixturevalue("gcs_server")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    storage.Client(project="test", credentials=AnonymousCredentials()).create_bucket(bucket)
    return f"gs://{bucket}/runs/r1"


@pytest.fixture
def math_jsonl(tmp_path: Path) -> Path:
    """A 10-record math dataset."""
    path = tmp_path / "math.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(10))
    )
    return path


@pytest.fixture
def code_jsonl(tmp_path: Path) -> Path:
    """A 4-record code dataset with test links."""
    path = tmp_path / "code.jsonl"
    path.write_text(
        "".join(
            json.dumps({"question": f"print {i}", "tests": [f"sha256:{i:064x}"]}) + "\n"
            for i in range(4)
        )
    )
    return path
