"""The controller's gRPC servicers: proto messages <-> ControllerService calls.

RlxErrors raised by the service become gRPC statuses through rlx_core's error interceptor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc

from rlx_controller.service import ControllerService
from rlx_core.clients.controller import status_to_proto
from rlx_core.proto.controller.v1 import controller_pb2 as pb
from rlx_core.proto.controller.v1 import controller_pb2_grpc as pb_grpc

__all__ = ["ControllerServicer", "registrations"]


class ControllerServicer(pb_grpc.ControllerServicer):
    def __init__(self, service: ControllerService) -> None:
        self._service = service

    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.StatusReply:
        return status_to_proto(self._service.status())

    def Snapshot(
        self, request: pb.SnapshotRequest, context: grpc.ServicerContext
    ) -> pb.SnapshotReply:
        return pb.SnapshotReply(step=self._service.snapshot(request.deadline_s))

    def Stop(self, request: pb.StopRequest, context: grpc.ServicerContext) -> pb.StopReply:
        step = self._service.stop(request.reason, wait=request.wait, deadline_s=request.deadline_s)
        return pb.StopReply(written=step is not None, step=step or 0)

    def StreamMetrics(
        self, request: pb.StreamMetricsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.MetricsLine]:
        from_step = request.from_step if request.HasField("from_step") else None
        subscription = self._service.subscribe(from_step)
        # a client that goes away (or its deadline) frees the subscription at once
        context.add_callback(subscription.close)
        for line in subscription.lines(alive=context.is_active):
            yield pb.MetricsLine(json=line)

    def register(self, server: grpc.Server) -> None:
        pb_grpc.add_ControllerServicer_to_server(self, server)


def registrations(service: ControllerService) -> list[Callable[[grpc.Server], None]]:
    """The servicers to add to the server, besides Lifecycle (which every server has)."""
    return [ControllerServicer(service).register]
