"""Pytest fixtures for tests of any rlx package: real object storage on 127.0.0.1.

Loaded for the whole workspace by the root `conftest.py` (`pytest_plugins`); a package's tests
use the fixtures by name:

- `s3_server`, `gcs_server` (session): moto's S3 server and gcp-storage-emulator (in memory) in
  threads, yielding their endpoint URLs;
- `s3_env`, `gcs_env`: the environment pointed at them (AWS settings of the machine isolated,
  test credentials), returning the endpoint; `no_aws_env`: isolated with no credentials at all;
- `new_root`: a factory `new_root(backend, prefix)` of fresh, empty roots: a new local directory,
  or `s3://<new bucket>/<prefix>`, `gs://<new bucket>/<prefix>`;
- `storage_root`: `new_root` over the three backends (parametrised: local, s3, gcs);
- `dead_endpoint`: an http URL on 127.0.0.1 where nothing listens; `free_port()` a free port;
- `outage_proxy(backend)`: an `OutageProxy` in front of moto ("s3") or the emulator ("gcs"), the
  environment pointed at it: `down_for(s)` is a real outage (connections refused, open ones cut)
  of a server whose state lives on, `drop_responses(...)` a request that lands but whose answer
  is lost;
- `serve_in_thread(lifecycle, server_config, register)`: a service in this process (a daemon
  thread, no signal handlers), returning its address once it listens, and the thread;
- `ChildProcesses(directory)`: Python child processes whose output goes to files there, waited
  for (or killed) together, their output shown when one fails.

Nothing here reaches a network beyond loopback.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from rlx_core.lifecycle import Lifecycle
from rlx_core.serving import Register, ServerConfig, run_service

__all__ = ["BACKENDS", "ChildProcesses", "OutageProxy", "free_port", "serve_in_thread"]

BACKENDS = ("local", "s3", "gcs")


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_in_thread(
    lifecycle: Lifecycle,
    config: ServerConfig,
    register: Sequence[Register] = (),
    *,
    timeout_s: float = 30.0,
) -> tuple[str, threading.Thread]:
    """`run_service` in a daemon thread without signal handlers; (address, thread) once the
    server listens. Stop it with a Shutdown call or `lifecycle.request_shutdown`."""
    ready = threading.Event()
    found: list[str] = []

    def on_ready(address: str) -> None:
        found.append(address)
        ready.set()

    thread = threading.Thread(
        target=run_service,
        args=(lifecycle, config, register),
        kwargs={"on_ready": on_ready, "install_signals": False},
        daemon=True,
    )
    thread.start()
    assert ready.wait(timeout_s), f"{lifecycle.service} did not start within {timeout_s:g} s"
    return found[0], thread


class OutageProxy:
    """A TCP proxy on 127.0.0.1 in front of the HTTP server `upstream` ("http://host:port").

    `down()` closes its port (new connections are refused) and cuts every open connection;
    `up()` listens again on the same port. The server behind it keeps running with its state,
    so this is an outage as a client sees one, not a restart. `drop_responses(*needles, count=n)`:
    the next `n` requests whose first bytes contain every needle (b"PUT ", b"/u1.rec") reach the
    server, but their connection is cut before the response comes back (a write that landed,
    reported as failed).
    """

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").rstrip("/").rpartition(":")
        self._upstream = (host, int(port))
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._drop: list[tuple[tuple[bytes, ...], int]] = []
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._timers: list[threading.Timer] = []
        self.port = 0
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        """Listen (again, on the same port)."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._accepting = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._accepting.start()

    def down(self) -> None:
        """Refuse new connections and cut the open ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._accepting is not None:
            self._accepting.join()
        with self._lock:
            doomed, self._open = self._open, set()
        for sock in doomed:
            _cut(sock)

    def down_for(self, seconds: float) -> threading.Thread:
        """`down()` now and `up()` after `seconds`, in a thread (returned, to join)."""
        self.down()
        timer = threading.Timer(seconds, self.up)
        self._timers.append(timer)
        timer.start()
        return timer

    def drop_responses(self, *needles: bytes, count: int = 1) -> None:
        with self._lock:
            self._drop.append((needles, count))

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
            timer.join()
        self.down()

    def _accept(self, listener: socket.socket) -> None:
        listener.settimeout(0.05)
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self._upstream, timeout=10)
            except OSError:
                _cut(client)
                continue
            with self._lock:
                self._open |= {client, server}
            threading.Thread(target=self._pipe, args=(client, server), daemon=True).start()

    def _take_drop(self, data: bytes) -> bool:
        with self._lock:
            for i, (needles, count) in enumerate(self._drop):
                if all(n in data[:4096] for n in needles):
                    self._drop[i] = (needles, count - 1)
                    self._drop = [d for d in self._drop if d[1] > 0]
                    return True
        return False

    def _pipe(self, client: socket.socket, server: socket.socket) -> None:
        """Both directions of one connection, until either side closes."""
        client.settimeout(None)
        server.settimeout(None)
        dropping = False
        try:
            while True:
                ready, _, _ = select.select([client, server], [], [], 1.0)
                for sock in ready:
                    data = sock.recv(1 << 16)
                    if not data:
                        return
                    if sock is client:
                        dropping = dropping or self._take_drop(data)
                        server.sendall(data)
                    elif dropping:
                        return  # the request landed; its answer never arrives
                    else:
                        client.sendall(data)
        except (OSError, ValueError):  # cut by down(), or by the other side
            return
        finally:
            with self._lock:
                self._open -= {client, server}
            _cut(client)
            _cut(server)


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class ChildProcesses:
    """`python ARGS` children of a test, by name, each writing stdout to DIRECTORY/NAME.out and
    stderr to NAME.err. A context manager: leaving it kills those still running. `wait_s` bounds
    how long `address` and `wait` wait."""

    def __init__(self, directory: Path, *, wait_s: float = 240.0) -> None:
        self.directory = directory
        self.wait_s = wait_s
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def __enter__(self) -> ChildProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def start(self, name: str, args: Sequence[str], env: dict[str, str]) -> None:
        with (
            (self.directory / f"{name}.out").open("wb") as out,
            (self.directory / f"{name}.err").open("wb") as err,
        ):  # the child keeps its own handles
            self.procs[name] = subprocess.Popen(
                [sys.executable, *args], stdout=out, stderr=err, env=env
            )

    def stderr(self, name: str) -> str:
        return (self.directory / f"{name}.err").read_text(errors="replace")

    def output(self) -> str:
        """The end of every child's stdout and stderr, with its exit code."""
        return "\n".join(
            f"--- {name} (exit {proc.poll()}):\n"
            + (self.directory / f"{name}.out").read_text(errors="replace")[-2000:]
            + self.stderr(name)[-6000:]
            for name, proc in self.procs.items()
        )

    def address(self, name: str) -> str:
        """The first line the child prints (a server's address)."""
        deadline = time.monotonic() + self.wait_s
        path = self.directory / f"{name}.out"
        while time.monotonic() < deadline and self.procs[name].poll() is None:
            first, newline, _ = path.read_text(errors="replace").partition("\n")
            if newline:
                return first.strip()
            time.sleep(0.2)
        self.kill()
        pytest.fail(f"no address from {name}\n{self.output()}")

    def wait(self) -> None:
        """Every child exits 0 within `wait_s`; else all are killed and the test fails with
        their output."""
        deadline = time.monotonic() + self.wait_s
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(1.0, deadline - time.monotonic()))
        failed = [name for name, proc in self.procs.items() if proc.poll() != 0]
        if failed:
            self.kill()
            pytest.fail(f"{', '.join(failed)} failed or timed out\n{self.output()}")

    def kill(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)


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
