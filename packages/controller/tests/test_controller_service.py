"""The controller service over real gRPC (serve_run on 127.0.0.1) against a small run-control
object: what Status reports, Snapshot and Stop with their deadlines, the metrics stream (replay,
live lines, a client that goes away), auth, and malformed requests. The same service against a
real demo run is tested in tests/test_controller_service_e2e.py."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from rlx_controller.rundir import CONTROLLER_PID
from rlx_controller.server import CONTROLLER_SERVICE, RunServer, read_controller, serve_run
from rlx_core.clients import ControllerClient
from rlx_core.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    Unauthenticated,
)
from rlx_core.proto.controller.v1 import controller_pb2 as pb
from rlx_core.proto.controller.v1 import controller_pb2_grpc as pb_grpc
from rlx_core.rpc.client import connect
from rlx_testing import WRONG_TOKEN


@dataclass
class FakeProgress:
    step: int = 3
    steps: int = 10
    reward: float = 0.5
    heldout: dict[int, float] = field(default_factory=lambda: {0: 0.25, 2: 0.5})
    tokens_per_s: float = 100.0
    steps_per_s: float = 0.5
    staleness: dict[int, int] = field(default_factory=lambda: {0: 1, 1: 2})
    phase: str = "training"
    components: dict[str, str] = field(default_factory=lambda: {"trainer": "ready"})
    messages: list[str] = field(default_factory=lambda: ["step 3: reward 0.500"])
    loaded: dict[str, int] = field(default_factory=lambda: {"inference-0": 3})
    last_snapshot: tuple[int, str] | None = (2, "reload")


class FakeRun:
    """A run control whose snapshots are answered by the test (`answer`)."""

    def __init__(self) -> None:
        self.progress = FakeProgress()
        self.run_id = "abc123"
        self.stops: list[str] = []
        self.requests: list[Future[int]] = []
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    def request_stop(self, reason: str = "signal") -> None:
        self.stops.append(reason)

    def request_snapshot(self) -> Future[int]:
        future: Future[int] = Future()
        self.requests.append(future)
        return future

    def add_metrics_listener(self, fn: Callable[[dict[str, Any]], None]) -> None:
        self.listeners.append(fn)

    def emit(self, record: dict[str, Any]) -> None:
        for fn in self.listeners:
            fn(record)


def _wait(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[FakeRun, RunServer, dict[str, Any]]]:
    run = FakeRun()
    server = serve_run(run, tmp_path, run_dir=str(tmp_path))
    try:
        # controller.json is written once the run is this process's (its controller.pid)
        time.sleep(0.5)
        assert read_controller(tmp_path) is None
        (tmp_path / CONTROLLER_PID).write_text(str(os.getpid()))
        _wait(lambda: read_controller(tmp_path) is not None, "controller.json")
        record = read_controller(tmp_path)
        assert record is not None
        yield run, server, record
    finally:
        server.close()


def _client(record: dict[str, Any]) -> ControllerClient:
    return ControllerClient(record["address"], token_file=record["token_file"])


def test_controller_json_and_status(
    served: tuple[FakeRun, RunServer, dict[str, Any]], tmp_path: Path
) -> None:
    _run, server, record = served
    assert record["pid"] == os.getpid() and record["address"] == server.address
    token = Path(record["token_file"])
    assert token.parent == tmp_path and (token.stat().st_mode & 0o777) == 0o600
    with _client(record) as c:
        s = c.status()
    assert (s.step, s.steps, s.phase, s.reward) == (3, 10, "training", 0.5)
    assert s.heldout == {0: 0.25, 2: 0.5} and s.staleness == {0: 1, 1: 2}
    assert s.loaded == {"inference-0": 3} and s.last_snapshot == (2, "reload")
    assert s.eta_s == pytest.approx((10 - 3) / 0.5)
    assert s.components == {"trainer": "ready"} and s.messages == ("step 3: reward 0.500",)
    assert (s.run_id, s.run_dir, s.pid) == ("abc123", str(tmp_path), os.getpid())

    server.close()  # the files go with the server
    assert not (tmp_path / CONTROLLER_SERVICE).exists() and not token.exists()


def test_no_pace_and_no_reward_yet(served: tuple[FakeRun, RunServer, dict[str, Any]]) -> None:
    run, _server, record = served
    run.progress.reward, run.progress.steps_per_s, run.progress.last_snapshot = (
        float("nan"),
        0.0,
        None,
    )
    with _client(record) as c:
        s = c.status()
    assert s.reward is None and s.eta_s is None and s.last_snapshot is None


def test_refused_without_the_token(served: tuple[FakeRun, RunServer, dict[str, Any]]) -> None:
    run, _server, record = served
    with ControllerClient(record["address"], token=WRONG_TOKEN) as c:
        with pytest.raises(Unauthenticated):
            c.status()
        with pytest.raises(Unauthenticated):
            c.stop(wait=False)
    channel = grpc.insecure_channel(record["address"])  # no token at all
    with pytest.raises(grpc.RpcError) as err:
        pb_grpc.ControllerStub(channel).Stop(pb.StopRequest(), timeout=10)
    channel.close()
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert run.stops == [] and run.requests == []


def test_snapshot_waits_for_the_step(served: tuple[FakeRun, RunServer, dict[str, Any]]) -> None:
    run, _server, record = served
    got: list[int] = []
    with _client(record) as c:
        t = threading.Thread(target=lambda: got.append(c.snapshot(deadline_s=30)))
        t.start()
        _wait(lambda: len(run.requests) == 1, "the snapshot request")
        assert not got  # it waits for the end of the step
        run.requests[0].set_result(4)
        t.join()
        assert got == [4]
        # the loop's error reaches the caller as its own status
        run_error: list[BaseException] = []

        def take() -> None:
            try:
                c.snapshot(deadline_s=30)
            except FailedPrecondition as e:
                run_error.append(e)

        t = threading.Thread(target=take)
        t.start()
        _wait(lambda: len(run.requests) == 2, "the second request")
        run.requests[1].set_exception(FailedPrecondition("no step trained yet"))
        t.join()
        assert "no step trained yet" in str(run_error[0])
        with pytest.raises(DeadlineExceeded, match="not written within"):
            c.snapshot(deadline_s=0.3)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), 1e9])
def test_malformed_deadline_is_invalid_argument(
    served: tuple[FakeRun, RunServer, dict[str, Any]], bad: float
) -> None:
    run, _server, record = served
    channel = connect(record["address"], token_file=record["token_file"])
    stub = pb_grpc.ControllerStub(channel)
    for call, request in (
        (stub.Snapshot, pb.SnapshotRequest(deadline_s=bad)),
        (stub.Stop, pb.StopRequest(wait=True, deadline_s=bad)),
    ):
        with pytest.raises(grpc.RpcError) as err:
            call(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "deadline_s" in (err.value.details() or "")
    for request in (pb.StopRequest(reason="x" * 201), pb.StopRequest(reason="a\x1b[2Jb")):
        with pytest.raises(grpc.RpcError) as err:
            stub.Stop(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "reason" in (err.value.details() or "")
    with pytest.raises(grpc.RpcError) as err:
        list(stub.StreamMetrics(pb.StreamMetricsRequest(from_step=-2), timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    channel.close()
    assert run.stops == [] and run.requests == []  # the run unharmed
    with _client(record) as c:
        assert c.status().step == 3
    with pytest.raises(InvalidArgument, match="deadline_s"):  # the client checks it first
        _client(record).snapshot(deadline_s=-1)


def test_stop_waits_for_the_stop_snapshot(
    served: tuple[FakeRun, RunServer, dict[str, Any]],
) -> None:
    run, _server, record = served
    got: list[int | None] = []
    with _client(record) as c:
        t = threading.Thread(target=lambda: got.append(c.stop("maintenance", deadline_s=30)))
        t.start()
        _wait(lambda: len(run.requests) == 1, "the stop snapshot request")
        assert run.stops == ["maintenance"]
        run.requests[0].set_result(3)
        t.join()
        assert got == [3]
        assert c.stop(wait=False) is None
        assert run.stops == ["maintenance", "stop requested"]
        t = threading.Thread(target=lambda: got.append(c.stop(deadline_s=30)))
        t.start()
        _wait(lambda: len(run.requests) == 3, "the third request")
        run.requests[2].set_exception(FailedPrecondition("the run stopped before a step"))
        t.join()
        assert got[-1] is None  # nothing trained: stopped without a snapshot


def test_metrics_stream_replays_follows_and_frees(
    served: tuple[FakeRun, RunServer, dict[str, Any]],
) -> None:
    run, server, record = served
    for step in (0, 1, 2):
        run.emit({"step": step, "reward": step / 10})
    lines: list[dict[str, Any]] = []
    with _client(record) as c:
        stream = c.metrics(from_step=1)
        lines.append(json.loads(next(stream)))
        lines.append(json.loads(next(stream)))
        assert [r["step"] for r in lines] == [1, 2]
        run.emit({"step": 3, "b": 1, "a": 2})
        line = next(stream)
        assert line == json.dumps({"step": 3, "b": 1, "a": 2}, sort_keys=True)
        assert server.service.subscribers == 1
        stream.close()  # the client goes away mid-stream: its listener is freed
        _wait(lambda: server.service.subscribers == 0, "the subscription freed")

        only_new = c.metrics()
        got: list[str] = []
        t = threading.Thread(target=lambda: got.extend(only_new))
        t.start()
        _wait(lambda: server.service.subscribers == 1, "the second subscription")
        run.emit({"step": 4})
        server.service.close()  # the run ended: the stream ends cleanly
        t.join(timeout=20)
        assert not t.is_alive()
        assert [json.loads(x)["step"] for x in got] == [4]


def test_a_controller_without_a_run(tmp_path: Path) -> None:
    from rlx_controller.config import ControllerConfig
    from rlx_controller.service import ControllerService

    service = ControllerService(ControllerConfig())
    with pytest.raises(FailedPrecondition, match="drives no run"):
        service.status()
    with pytest.raises(FailedPrecondition, match="drives no run"):
        service.snapshot(10)


def test_read_controller_only_names_a_running_controller(tmp_path: Path) -> None:
    import subprocess

    from rlx_core.processes import start_time

    me = {"address": "127.0.0.1:1", "pid": os.getpid(), "token_file": str(tmp_path / "t")}
    path = tmp_path / CONTROLLER_SERVICE
    path.write_text(json.dumps({**me, "start_time": start_time(os.getpid())}))
    assert read_controller(tmp_path) == {**me, "start_time": start_time(os.getpid())}
    path.write_text(json.dumps({**me, "start_time": 1}))  # the pid reused by another process
    assert read_controller(tmp_path) is None
    dead = subprocess.Popen(["true"])
    dead.wait()
    path.write_text(json.dumps({**me, "pid": dead.pid, "start_time": 1}))  # a killed controller
    assert read_controller(tmp_path) is None
    for torn in ('{"address": "127.0.0.1:1", "pid"', "[]", json.dumps({**me, "pid": "1"})):
        path.write_text(torn)
        assert read_controller(tmp_path) is None
