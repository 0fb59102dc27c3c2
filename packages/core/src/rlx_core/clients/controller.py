"""The client of the controller service: the run an `rlx up` / `rlx resume` process drives.

from rlx_core.clients import ControllerClient
with ControllerClient(address, token_file=str(work / "token")) as c:
    s = c.status()                  # step, loaded versions, staleness, newest snapshot, ETA
    step = c.snapshot()             # a committed snapshot at the end of the step in progress
    for line in c.metrics(from_step=0):   # metrics.jsonl lines (JSON text), as written
        ...
    c.stop(wait=True)               # snapshot, then stop the run's services
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc

from rlx_core.clients._base import ServiceClient
from rlx_core.errors import InvalidArgument
from rlx_core.proto.controller.v1 import controller_pb2 as pb
from rlx_core.proto.controller.v1 import controller_pb2_grpc as pb_grpc
from rlx_core.rpc.client import DEFAULT_TIMEOUT_S, call, call_stream

__all__ = [
    "DEFAULT_SNAPSHOT_DEADLINE_S",
    "MAX_DEADLINE_S",
    "MAX_REASON_CHARS",
    "ControllerClient",
    "ControllerStatus",
    "check_deadline",
    "check_reason",
    "status_from_proto",
    "status_to_proto",
]

DEFAULT_SNAPSHOT_DEADLINE_S = 600.0  # a deadline_s of 0 waits this long for a snapshot
MAX_DEADLINE_S = 86400.0
MAX_REASON_CHARS = 200
_SLACK_S = 10.0  # the gRPC deadline of a waiting call: its own deadline_s plus this


def check_deadline(deadline_s: float) -> float:
    """The seconds to wait for a snapshot: `deadline_s`, or the default for 0. InvalidArgument
    naming the field unless it is a finite number in [0, MAX_DEADLINE_S]."""
    if not (math.isfinite(deadline_s) and 0 <= deadline_s <= MAX_DEADLINE_S):
        raise InvalidArgument(
            f"deadline_s = {deadline_s!r} must be a number of seconds > 0 and <= "
            f"{MAX_DEADLINE_S:.0f} (0: {DEFAULT_SNAPSHOT_DEADLINE_S:.0f})",
            field="deadline_s",
        )
    return deadline_s or DEFAULT_SNAPSHOT_DEADLINE_S


def check_reason(reason: str) -> str:
    """A stop reason for the log: at most MAX_REASON_CHARS printable characters; "" gives
    "stop requested"."""
    if len(reason) > MAX_REASON_CHARS or not reason.isprintable():
        shown = reason[:40] + ("..." if len(reason) > 40 else "")
        raise InvalidArgument(
            f"reason {shown!r} must be at most {MAX_REASON_CHARS} printable characters "
            f"(it is {len(reason)})",
            field="reason",
        )
    return reason or "stop requested"


@dataclass(frozen=True, kw_only=True)
class ControllerStatus:
    """Where a run stands, as its controller sees it."""

    step: int  # the last step trained (0 before the first)
    steps: int  # the run's total
    phase: str
    reward: float | None  # the newest step's mean reward; None before the first
    steps_per_s: float
    tokens_per_s: float
    heldout: dict[int, float] = field(default_factory=dict)  # step -> held-out accuracy
    staleness: dict[int, int] = field(default_factory=dict)  # versions -> steps trained at it
    loaded: dict[str, int] = field(default_factory=dict)  # inference worker -> its version
    last_snapshot: tuple[int, str] | None = None  # (step, reason) this process wrote last
    eta_s: float | None = None  # seconds left at the current pace; None: no pace yet
    components: dict[str, str] = field(default_factory=dict)  # service -> state text
    run_id: str = ""
    run_dir: str = ""
    pid: int = 0
    messages: tuple[str, ...] = ()  # the loop's newest log lines


def status_to_proto(s: ControllerStatus) -> pb.StatusReply:
    m = pb.StatusReply(
        step=s.step,
        steps=s.steps,
        phase=s.phase,
        steps_per_s=s.steps_per_s,
        tokens_per_s=s.tokens_per_s,
        heldout=s.heldout,
        staleness=s.staleness,
        loaded=s.loaded,
        components=s.components,
        run_id=s.run_id,
        run_dir=s.run_dir,
        pid=s.pid,
        messages=s.messages,
    )
    if s.reward is not None:
        m.reward = s.reward
    if s.eta_s is not None:
        m.eta_s = s.eta_s
    if s.last_snapshot is not None:
        m.last_snapshot.step, m.last_snapshot.reason = s.last_snapshot
    return m


def status_from_proto(m: pb.StatusReply) -> ControllerStatus:
    return ControllerStatus(
        step=m.step,
        steps=m.steps,
        phase=m.phase,
        reward=m.reward if m.HasField("reward") else None,
        steps_per_s=m.steps_per_s,
        tokens_per_s=m.tokens_per_s,
        heldout=dict(m.heldout),
        staleness=dict(m.staleness),
        loaded=dict(m.loaded),
        last_snapshot=(m.last_snapshot.step, m.last_snapshot.reason)
        if m.HasField("last_snapshot")
        else None,
        eta_s=m.eta_s if m.HasField("eta_s") else None,
        components=dict(m.components),
        run_id=m.run_id,
        run_dir=m.run_dir,
        pid=m.pid,
        messages=tuple(m.messages),
    )


class ControllerClient(ServiceClient):
    """Typed access to the controller service of a running `rlx up` / `rlx resume`."""

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        token_file: str | None = None,
        channel: grpc.Channel | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        """`timeout` bounds Status and a Stop that does not wait; Snapshot and a waiting Stop
        are bounded by their own `deadline_s`."""
        super().__init__(
            address, token=token, token_file=token_file, channel=channel, timeout=timeout
        )
        self._stub = pb_grpc.ControllerStub(self._channel)

    def status(self, *, timeout: float | None = None) -> ControllerStatus:
        reply = call(
            self._stub.Status,
            pb.StatusRequest(),
            timeout=timeout or self._timeout,
            idempotent=True,
            target=self.address,
        )
        return status_from_proto(reply)

    def snapshot(self, *, deadline_s: float = 0.0) -> int:
        """Take a committed snapshot at the end of the step in progress; its step. Waits up to
        `deadline_s` (0: DEFAULT_SNAPSHOT_DEADLINE_S), then DeadlineExceeded."""
        wait = check_deadline(deadline_s)
        reply = call(
            self._stub.Snapshot,
            pb.SnapshotRequest(deadline_s=deadline_s),
            timeout=wait + _SLACK_S,
            target=self.address,
        )
        return int(reply.step)

    def stop(self, reason: str = "", *, wait: bool = True, deadline_s: float = 0.0) -> int | None:
        """Snapshot, then stop the run's services. With `wait`, returns the stop snapshot's step
        once it is written (None when the run stopped without one); without, None at once."""
        patience = check_deadline(deadline_s) + _SLACK_S if wait else self._timeout
        reply = call(
            self._stub.Stop,
            pb.StopRequest(reason=check_reason(reason), wait=wait, deadline_s=deadline_s),
            timeout=patience,
            target=self.address,
        )
        return int(reply.step) if reply.written else None

    def metrics(self, *, from_step: int | None = None, timeout: float = 86400.0) -> Iterator[str]:
        """The run's metrics lines (JSON text) as they are written, until the run ends (the
        stream then closes) or `timeout` seconds pass; first the ones this process already
        wrote from `from_step` on, when given."""
        request = pb.StreamMetricsRequest()
        if from_step is not None:
            request.from_step = from_step
        for line in call_stream(
            self._stub.StreamMetrics, request, timeout=timeout, target=self.address
        ):
            yield line.json
