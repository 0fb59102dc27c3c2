"""The pytest plugin of rlx's tests: real object storage on 127.0.0.1, and a token file.

Loaded for the whole workspace by the root `conftest.py` (`pytest_plugins`); a package's tests
use the fixtures by name:

- `s3_server`, `gcs_server` (session): moto's S3 server and gcp-storage-emulator (in memory) in
  threads, yielding their endpoint URLs;
- `s3_env`, `gcs_env`: the environment pointed at them (AWS settings of the machine isolated,
  test credentials), returning the endpoint; `no_aws_env`: isolated with no credentials at all;
- `new_root`: a factory `new_root(backend, prefix)` of fresh, empty roots: a new local directory,
  or `s3://<new bucket>/<prefix>`, `gs://<new bucket>/<prefix>`;
- `storage_root`: `new_root` over the three backends (parametrised: local, s3, gcs);
- `dead_endpoint`: an http URL on 127.0.0.1 where nothing listens;
- `outage_proxy(backend)`: an `OutageProxy` in front of moto ("s3") or the emulator ("gcs"), the
  environment pointed at it: `down_for(s)` is a real outage (connections refused, open ones cut)
  of a server whose state lives on, `drop_responses(...)` a request that lands but whose answer
  is lost;
- `token_file`: a 0600 file in the test's directory holding `rlx_testing.TOKEN`.

Nothing here reaches a network beyond loopback.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlx_testing.auth import write_token_file
from rlx_testing.outage import OutageProxy
from rlx_testing.processes import free_port

__all__ = ["BACKENDS"]

BACKENDS = ("local", "s3", "gcs")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto's S3 server in a thread; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()  # the port the OS gave to port=0
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[str]:
    """gcp-storage-emulator in a thread, in memory; yields its endpoint URL."""
    from gcp_storage_emulator.server import create_server

    for name in ("gcp_storage_emulator", "api.object", "api.bucket"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    port = free_port()  # the emulator does not report the port it bound, so choose one
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def _isolate_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS settings from the machine: no profile, config file, or metadata service."""
    for var in (
        "AWS_ENDPOINT_URL_S3",
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture
def s3_env(s3_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Point boto3 at the moto server with test credentials; returns the endpoint."""
    _isolate_aws(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    return s3_server


@pytest.fixture
def gcs_env(gcs_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point google-cloud-storage and gcsfs at the emulator; returns the endpoint."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    return gcs_server


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """AWS settings isolated from the machine, with no credentials at all."""
    _isolate_aws(monkeypatch, tmp_path)
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def new_root(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str, str], str]:
    """`new_root(backend, prefix)`: a fresh, empty root on "local", "s3" or "gcs"."""

    def make(backend: str, prefix: str) -> str:
        bucket = f"rlx-{uuid.uuid4().hex[:12]}"
        if backend == "local":
            return str(tmp_path / prefix)
        if backend == "s3":
            import boto3

            endpoint = request.getfixturevalue("s3_env")
            s3 = boto3.session.Session().client("s3", endpoint_url=endpoint)
            s3.create_bucket(Bucket=bucket)
            return f"s3://{bucket}/{prefix}"
        if backend == "gcs":
            request.getfixturevalue("gcs_env")
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage  # type: ignore[attr-defined, unused-ignore]

            storage.Client(project="test", credentials=AnonymousCredentials()).create_bucket(bucket)
            return f"gs://{bucket}/{prefix}"
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")

    return make


@pytest.fixture(params=BACKENDS)
def storage_root(request: pytest.FixtureRequest, new_root: Callable[[str, str], str]) -> str:
    """A fresh, empty root URI on each backend: a new directory, or a prefix in a new bucket."""
    return new_root(request.param, "runs/r1")


@pytest.fixture
def outage_proxy(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], OutageProxy]]:
    """`outage_proxy(backend)`: an OutageProxy in front of moto ("s3") or gcp-storage-emulator
    ("gcs"), with the environment pointed at it; storages opened afterwards go through it
    (make buckets with `new_root` first: it talks to the server directly)."""
    proxies: list[OutageProxy] = []

    def make(backend: str) -> OutageProxy:
        if backend == "s3":
            proxy = OutageProxy(request.getfixturevalue("s3_env"))
            monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        elif backend == "gcs":
            proxy = OutageProxy(request.getfixturevalue("gcs_env"))
            monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        else:
            raise ValueError(f"backend must be s3 or gcs, got {backend!r}")
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


@pytest.fixture
def dead_endpoint() -> str:
    """An http URL on 127.0.0.1 where nothing listens."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    """TMP/token (mode 0600) holding `rlx_testing.TOKEN`."""
    return write_token_file(tmp_path / "token")
