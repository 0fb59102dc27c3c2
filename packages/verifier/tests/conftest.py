"""One Verifier (real bubblewrap, real compilers) shared by the verifier tests."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlx_verifier import Verifier
from rlx_verifier.config import JudgeConfig

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"


def load_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session")
def verifier() -> Iterator[Verifier]:
    v = Verifier(JudgeConfig(workers=2, math_workers=1, math_timeout_s=3.0))
    yield v
    v.close()


# --- object-storage servers for the test-repository tests (as in packages/core/tests) ----------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto's S3 server in a thread; yields its endpoint URL."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[str]:
    """gcp-storage-emulator in a thread, in-memory; yields its endpoint URL."""
    import logging

    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    logging.getLogger("api.object").setLevel(logging.ERROR)
    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(params=["local", "s3", "gcs"])
def repo_uri(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A fresh, empty test-repository root on each storage backend."""
    import uuid

    bucket = f"rlx-{uuid.uuid4().hex[:12]}"
    if request.param == "local":
        return str(tmp_path / "repo")
    if request.param == "s3":
        import boto3

        endpoint = request.getfixturevalue("s3_server")
        for var in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        boto3.session.Session().client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        return f"s3://{bucket}/tests"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", request.getfixturevalue("gcs_server"))
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    storage.Client(project="test", credentials=AnonymousCredentials()).create_bucket(bucket)
    return f"gs://{bucket}/tests"


# Task used by the service and repository tests: print two non-negative integers summing to N
# (many right answers, so it needs a checker), and a checker that FAILs (exit 3) on every call.
SUM_CHECKER_PY = """import sys
n = int(open(sys.argv[1]).read())
try:
    a, b = map(int, open(sys.argv[2]).read().split())
except ValueError:
    sys.stderr.write("expected two integers"); sys.exit(2)
if a < 0 or b < 0 or a + b != n:
    sys.stderr.write(f"{a} + {b} != {n}"); sys.exit(1)
"""
FAILING_CHECKER_PY = "import sys\nsys.stderr.write('checker broke: bad test data')\nsys.exit(3)\n"
SUM_PROGRAMS = {
    "AC": "n = int(input())\nprint(1, n - 1)",
    "WA": "n = int(input())\nprint(1, n)",
    "PE": "n = int(input())\nprint('one', n - 1)",
}
