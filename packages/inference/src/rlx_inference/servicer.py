"""The inference's gRPC servicers: proto messages <-> InferenceService calls.

RlxErrors raised by the service become gRPC statuses through rlx_core's error interceptor.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from rlx_core.clients.inference import (
    result_to_proto,
    status_to_proto,
    unit_from_proto,
)
from rlx_core.errors import InvalidArgument
from rlx_core.proto.inference.v1 import inference_pb2 as pb
from rlx_core.proto.inference.v1 import inference_pb2_grpc as pb_grpc
from rlx_inference.service import InferenceService

__all__ = ["InferenceServicer", "registrations"]


class InferenceServicer(pb_grpc.InferenceServicer):
    def __init__(self, service: InferenceService) -> None:
        self._service = service

    def Generate(
        self, request: pb.GenerateRequest, context: grpc.ServicerContext
    ) -> pb.GenerateReply:
        if not request.HasField("unit"):
            raise InvalidArgument("unit: the request carries no work unit", field="unit")
        # a call cancelled or past its deadline is no longer active: the engine stops the unit
        # at its next boundary instead of computing rollouts nobody will read
        result = self._service.generate(
            unit_from_proto(request.unit), cancelled=lambda: not context.is_active()
        )
        return result_to_proto(result)

    def LoadVersion(
        self, request: pb.LoadVersionRequest, context: grpc.ServicerContext
    ) -> pb.LoadVersionReply:
        result = self._service.load_version(request.version, force=request.force)
        return pb.LoadVersionReply(
            version=result.version,
            previous=-1 if result.previous is None else result.previous,
            pull_s=result.pull_s,
            nbytes=result.nbytes,
        )

    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.StatusReply:
        return status_to_proto(self._service.status())

    def register(self, server: grpc.Server) -> None:
        pb_grpc.add_InferenceServicer_to_server(self, server)


def registrations(service: InferenceService) -> list[Callable[[grpc.Server], None]]:
    """The servicers to add to the server, besides Lifecycle (which every server has)."""
    return [InferenceServicer(service).register]
