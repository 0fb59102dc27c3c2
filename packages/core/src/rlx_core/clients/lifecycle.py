"""The client of the Lifecycle service every rlx server exposes."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc

from rlx_core.clients._base import ServiceClient
from rlx_core.errors import DeadlineExceeded, Unavailable
from rlx_core.lifecycle import State, StatusInfo
from rlx_core.proto.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from rlx_core.rpc.client import DEFAULT_TIMEOUT_S, call
from rlx_core.serving import status_from_proto

__all__ = ["LifecycleClient"]


class LifecycleClient(ServiceClient):
    """Health, drain and shutdown of any rlx server."""

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        token_file: str | None = None,
        channel: grpc.Channel | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(
            address, token=token, token_file=token_file, channel=channel, timeout=timeout
        )
        self._stub = lifecycle_pb2_grpc.LifecycleStub(self._channel)

    def status(self, *, timeout: float | None = None) -> StatusInfo:
        """The server's state, version and facts (idempotent: retried while UNAVAILABLE)."""
        reply = call(
            self._stub.GetStatus,
            lifecycle_pb2.GetStatusRequest(),
            timeout=timeout or self._timeout,
            idempotent=True,
            target=self.address,
        )
        return status_from_proto(reply)

    def drain(self, reason: str = "") -> StatusInfo:
        reply = call(
            self._stub.Drain,
            lifecycle_pb2.DrainRequest(reason=reason),
            timeout=self._timeout,
            idempotent=True,
            target=self.address,
        )
        return status_from_proto(reply)

    def shutdown(self, reason: str = "", grace_s: float = 0.0) -> StatusInfo:
        reply = call(
            self._stub.Shutdown,
            lifecycle_pb2.ShutdownRequest(reason=reason, grace_s=grace_s),
            timeout=self._timeout,
            idempotent=True,
            target=self.address,
        )
        return status_from_proto(reply)

    def wait_ready(
        self,
        timeout: float = 60.0,
        *,
        poll_s: float = 0.1,
        on_wait: Callable[[StatusInfo | None, float], None] | None = None,
    ) -> StatusInfo:
        """Poll until READY; `on_wait(last_status, elapsed_s)` runs between polls (progress)."""
        start = time.monotonic()
        last: StatusInfo | None = None
        while True:
            elapsed = time.monotonic() - start
            try:
                last = self.status(timeout=max(0.5, min(5.0, timeout - elapsed)))
            except (Unavailable, DeadlineExceeded):
                last = None
            if last is not None and last.state is State.READY:
                return last
            if last is not None and last.state in (State.ERROR, State.STOPPED):
                raise Unavailable(
                    f"{self.address}: {last.service} is {last.state.name}: {last.message}"
                )
            if time.monotonic() - start >= timeout:
                seen = last.state.name if last else "no answer"
                raise DeadlineExceeded(f"{self.address}: not READY within {timeout:.0f} s ({seen})")
            if on_wait is not None:
                on_wait(last, time.monotonic() - start)
            time.sleep(poll_s)
