"""The verifier's gRPC servicers: proto messages <-> VerifierService calls.

RlxErrors raised by the service become gRPC statuses through rlx_core's error interceptor.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from rlx_core.clients.verifier import (
    result_to_proto,
    sample_from_proto,
    status_to_proto,
)
from rlx_core.errors import InvalidArgument
from rlx_core.proto.verifier.v1 import verifier_pb2 as pb
from rlx_core.proto.verifier.v1 import verifier_pb2_grpc as pb_grpc
from rlx_verifier.sandbox import Cancel
from rlx_verifier.service import VerifierService

__all__ = ["VerifierServicer", "registrations"]


class VerifierServicer(pb_grpc.VerifierServicer):
    def __init__(self, service: VerifierService) -> None:
        self._service = service

    def Verify(self, request: pb.VerifyRequest, context: grpc.ServicerContext) -> pb.VerifyReply:
        samples = []
        for i, m in enumerate(request.samples):
            try:
                samples.append(sample_from_proto(m))
            except InvalidArgument as e:
                raise InvalidArgument(f"samples[{i}] ({m.sample_id!r}): {e}") from None
        # A cancelled call, or one past its deadline, kills its runs instead of holding workers.
        cancel = Cancel()
        if not context.add_callback(cancel.set):  # already over
            cancel.set()
        try:
            results = self._service.verify(samples, cancel=cancel)
        finally:
            cancel.close()
        return pb.VerifyReply(results=[result_to_proto(r) for r in results])

    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.StatusReply:
        return status_to_proto(self._service.status())

    def register(self, server: grpc.Server) -> None:
        pb_grpc.add_VerifierServicer_to_server(self, server)


def registrations(service: VerifierService) -> list[Callable[[grpc.Server], None]]:
    """The servicers to add to the server, besides Lifecycle (which every server has)."""
    return [VerifierServicer(service).register]
