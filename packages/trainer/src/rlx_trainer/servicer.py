"""The trainer's gRPC servicer: proto messages <-> TrainerService calls.

RlxErrors raised by the service become gRPC statuses through rlx_core's error interceptor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc

from rlx_core.clients.trainer import batch_from_requests, step_result_to_proto
from rlx_core.proto.trainer.v1 import trainer_pb2 as pb
from rlx_core.proto.trainer.v1 import trainer_pb2_grpc as pb_grpc
from rlx_trainer.service import TrainerService

__all__ = ["TrainerServicer", "registrations"]


class TrainerServicer(pb_grpc.TrainerServicer):
    def __init__(self, service: TrainerService) -> None:
        self._service = service

    def Init(self, request: pb.InitRequest, context: grpc.ServicerContext) -> pb.InitReply:
        source = request.WhichOneof("source")
        kwargs: dict[str, object] = {"seed": request.seed}
        if source == "checkpoint":
            kwargs["checkpoint"] = request.checkpoint.uri
            if request.checkpoint.HasField("step"):
                kwargs["step"] = request.checkpoint.step
        elif source is not None:
            kwargs[source] = getattr(request, source)
        result = self._service.init(**kwargs)  # type: ignore[arg-type]
        return pb.InitReply(
            step=result.step,
            version=result.version,
            num_params=result.num_params,
            model=result.model,
        )

    def TrainStep(
        self, request_iterator: Iterator[pb.TrainStepRequest], context: grpc.ServicerContext
    ) -> pb.TrainStepReply:
        batch, expected_step = batch_from_requests(request_iterator)
        return step_result_to_proto(self._service.train_step(batch, expected_step))

    def SaveCheckpoint(
        self, request: pb.SaveCheckpointRequest, context: grpc.ServicerContext
    ) -> pb.SaveCheckpointReply:
        step, uri = self._service.save_checkpoint()
        return pb.SaveCheckpointReply(step=step, uri=uri)

    def Restore(self, request: pb.RestoreRequest, context: grpc.ServicerContext) -> pb.RestoreReply:
        step, version = self._service.restore(request.step if request.HasField("step") else None)
        return pb.RestoreReply(step=step, version=version)

    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.StatusReply:
        s = self._service.status()
        return pb.StatusReply(
            initialized=s.initialized,
            step=s.step,
            model=s.model,
            num_params=s.num_params,
            kept_versions=list(s.kept_versions),
            checkpoint_steps=list(s.checkpoint_steps),
            last_metrics=s.last_metrics,
            mesh_shape=list(s.mesh_shape),
            checkpoint_uri=s.checkpoint_uri,
        )

    def register(self, server: grpc.Server) -> None:
        pb_grpc.add_TrainerServicer_to_server(self, server)


def registrations(service: TrainerService) -> list[Callable[[grpc.Server], None]]:
    """The servicers to add to the server, besides Lifecycle (which every server has)."""
    return [TrainerServicer(service).register]
