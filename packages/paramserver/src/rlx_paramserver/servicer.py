"""The paramserver's gRPC servicers: proto messages <-> ParamServerService calls.

RlxErrors raised by the service become gRPC statuses through rlx_core's error interceptor.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
import numpy as np

from rlx_core.errors import Cancelled, Corrupt, InvalidArgument
from rlx_core.proto.common.v1.tensor_pb2 import TensorChunk
from rlx_core.proto.paramserver.v1 import paramserver_pb2 as pb
from rlx_core.proto.paramserver.v1 import paramserver_pb2_grpc as pb_grpc
from rlx_core.rpc import DEFAULT_CHUNK_BYTES
from rlx_paramserver.service import ParamServerService, PullPlan, PushSession, TensorDecl
from rlx_paramserver.store import TensorMeta

__all__ = ["ParamServerServicer", "registrations"]

# Headroom so a push that cannot get room fails with RESOURCE_EXHAUSTED before the client's own
# deadline turns it into DEADLINE_EXCEEDED.
_DEADLINE_MARGIN_S = 0.5

_Msg = TypeVar("_Msg")


def spec_to_proto(meta: TensorMeta, store_key: str = "") -> pb.TensorSpec:
    return pb.TensorSpec(
        name=meta.name,
        dtype=meta.dtype.name,
        shape=list(meta.shape),
        shard_axis=meta.shard_axis,
        chunk_shape=list(meta.chunk_shape),
        digest=meta.digest,
        nbytes=meta.nbytes,
        chunk_crc32c=list(meta.chunk_crc32c),
        store_key=store_key,
    )


def _header(plan: PullPlan, store_dir: str = "") -> pb.PullHeader:
    keys = store_dir != ""
    return pb.PullHeader(
        version=plan.version.version,
        tensors=[spec_to_proto(m, plan.version.key(m.name) if keys else "") for m in plan.metas],
        created_unix=plan.version.created,
        store_dir=store_dir,
    )


class ParamServerServicer(pb_grpc.ParamServerServicer):
    def __init__(self, service: ParamServerService) -> None:
        self._service = service

    def Push(
        self, request_iterator: Iterator[pb.PushRequest], context: grpc.ServicerContext
    ) -> pb.PushReply:
        requests = _until_cut(request_iterator)
        header = _header_first(requests, "a push")
        session = self._begin(header, context)
        used_shm = False
        try:
            for request in requests:
                kind = request.WhichOneof("item")
                if kind == "chunk":
                    self._write_chunk(session, request.chunk)
                elif kind == "shm":
                    self._write_shm(session, request.shm)
                    used_shm = True
                else:
                    raise InvalidArgument(f"unexpected {kind!r} message inside a push")
            nbytes = session.finish()
        except BaseException:
            session.abort()
            raise
        return self._stored(header, nbytes, used_shm)

    def PushShm(self, request: pb.PushShmRequest, context: grpc.ServicerContext) -> pb.PushReply:
        if not request.HasField("header") or not request.HasField("shm"):
            raise InvalidArgument("PushShm needs a header and a shm segment")
        session = self._begin(request.header, context)
        try:
            self._write_shm(session, request.shm)
            nbytes = session.finish()
        except BaseException:
            session.abort()
            raise
        return self._stored(request.header, nbytes, True)

    def PushInPlace(
        self, request_iterator: Iterator[pb.PushInPlaceRequest], context: grpc.ServicerContext
    ) -> Iterator[pb.PushInPlaceReply]:
        requests = _until_cut(request_iterator)
        header = _header_first(requests, "an in-place push")
        session = self._begin(header, context)
        try:
            session.place()
            version = session.version
            yield pb.PushInPlaceReply(
                targets=pb.PullHeader(
                    version=header.version,
                    tensors=[spec_to_proto(m, version.key(m.name)) for m in version.metas.values()],
                    created_unix=version.created,
                    store_dir=version.dir or "",
                )
            )
            second = next(requests, None)
            if second is None or second.WhichOneof("item") != "written":
                raise InvalidArgument(
                    "an in-place push sends InPlaceWritten after the targets, before it ends"
                )
            sums = {}
            for t in second.written.tensors:
                if t.name in sums:
                    raise InvalidArgument(f"tensor {t.name!r}: checksums sent twice")
                sums[t.name] = (t.digest, list(t.chunk_crc32c))
            nbytes = session.finish_in_place(sums)
        except BaseException:
            session.abort()
            raise
        yield pb.PushInPlaceReply(result=self._stored(header, nbytes, True))

    def _begin(self, header: pb.PushHeader, context: grpc.ServicerContext) -> PushSession:
        """Admit the push; a client that goes away (cancel, deadline) ends its wait for room
        and its session (whose failure unstages the version)."""
        decls = [
            TensorDecl(t.name, t.dtype, tuple(int(d) for d in t.shape), t.shard_axis)
            for t in header.tensors
        ]
        remaining = context.time_remaining()
        timeout = None if remaining is None else max(0.0, remaining - _DEADLINE_MARGIN_S)
        context.add_callback(self._service.wake)
        return self._service.begin_push(
            header.version, decls, timeout=timeout, cancelled=lambda: not context.is_active()
        )

    @staticmethod
    def _write_shm(session: PushSession, shm: pb.ShmRef) -> None:
        session.write_shm(shm.path, [(e.name, e.offset, e.nbytes) for e in shm.entries])

    def _stored(self, header: pb.PushHeader, nbytes: int, used_shm: bool) -> pb.PushReply:
        """The reply to a push whose bytes are all staged, committing it first if asked."""
        reply = pb.PushReply(version=header.version, bytes=nbytes, used_shm=used_shm)
        if header.commit:
            reply.evicted.extend(self._service.commit(header.version))
            reply.committed = True
        return reply

    @staticmethod
    def _write_chunk(session: PushSession, chunk: TensorChunk) -> None:
        if zlib.crc32(chunk.data) != chunk.crc32:
            raise Corrupt(
                f"tensor {chunk.name!r}: checksum mismatch in the chunk at byte {chunk.offset}"
            )
        meta = session.meta(chunk.name)
        if chunk.offset == 0:
            shape = tuple(int(d) for d in chunk.shape)
            if chunk.dtype != meta.dtype.name or shape != meta.shape:
                raise InvalidArgument(
                    f"tensor {chunk.name!r}: sent as {chunk.dtype}{list(shape)} but the manifest "
                    f"declares {meta.dtype.name}{list(meta.shape)}"
                )
        session.write(chunk.name, chunk.offset, chunk.data)

    def Commit(self, request: pb.CommitRequest, context: grpc.ServicerContext) -> pb.CommitReply:
        evicted = self._service.commit(request.version)
        return pb.CommitReply(version=request.version, evicted=evicted)

    def _plan(self, request: pb.PullRequest | pb.ManifestRequest) -> PullPlan:
        slices = {}
        if isinstance(request, pb.PullRequest):
            for s in request.slices:
                if s.name in slices:
                    raise InvalidArgument(f"tensor {s.name!r} sliced twice")
                slices[s.name] = (list(s.start), list(s.stop))
        version = None if request.latest else request.version
        return self._service.plan_pull(version, list(request.names), slices)

    def Manifest(self, request: pb.ManifestRequest, context: grpc.ServicerContext) -> pb.PullHeader:
        return _header(self._plan(request))

    def Pull(
        self, request: pb.PullRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.PullReply]:
        plan = self._plan(request)
        if request.map_store:
            yield pb.PullReply(header=_header(plan, self._service.map_pull(plan)))
            return
        yield pb.PullReply(header=_header(plan))
        for meta in plan.metas:
            yield from _stream_tensor(plan, meta)

    def Confirm(self, request: pb.ConfirmRequest, context: grpc.ServicerContext) -> pb.ConfirmReply:
        return pb.ConfirmReply(evicted=self._service.confirm(request.consumer_id, request.version))

    def Versions(
        self, request: pb.VersionsRequest, context: grpc.ServicerContext
    ) -> pb.VersionsReply:
        s = self._service.versions()
        return pb.VersionsReply(
            versions=[
                pb.VersionInfo(
                    version=v.version,
                    bytes=v.nbytes,
                    created_unix=v.created,
                    num_tensors=v.num_tensors,
                    confirmed_by=list(v.confirmed_by),
                )
                for v in s.versions
            ],
            consumers=s.consumers,
            staged=list(s.staged),
            replica_id=s.replica_id,
            max_versions=s.max_versions,
            instance_id=s.instance_id,
            started_unix=s.started,
            bytes_read=s.bytes_read,
        )

    def Drop(self, request: pb.DropRequest, context: grpc.ServicerContext) -> pb.DropReply:
        self._service.drop(request.version)
        return pb.DropReply()

    def ProbeShm(
        self, request: pb.ProbeShmRequest, context: grpc.ServicerContext
    ) -> pb.ProbeShmReply:
        ok, reason = self._service.probe_shm(request.path, request.nonce)
        return pb.ProbeShmReply(ok=ok, reason=reason, store_root=self._service.store_root or "")

    def register(self, server: grpc.Server) -> None:
        pb_grpc.add_ParamServerServicer_to_server(self, server)


def _header_first(requests: Iterator[Any], what: str) -> pb.PushHeader:
    first = next(requests, None)
    if first is None or first.WhichOneof("item") != "header":
        raise InvalidArgument(f"{what} starts with a PushHeader")
    return first.header


def _until_cut(requests: Iterator[_Msg]) -> Iterator[_Msg]:
    """The push's messages; `Cancelled` when its stream is cut (the client cancelled it, its
    deadline passed, or the server is stopping) instead of grpc's bare RpcError."""
    received = 0
    while True:
        try:
            request = next(requests)
        except StopIteration:
            return
        except grpc.RpcError:
            raise Cancelled(
                f"the push stream was cut after {received} messages (its client cancelled it, "
                "its deadline passed, or the server is stopping)"
            ) from None
        received += 1
        yield request


def _stream_tensor(plan: PullPlan, meta: TensorMeta) -> Iterator[pb.PullReply]:
    """One tensor (or its slice) as TensorChunk messages of DEFAULT_CHUNK_BYTES, header first."""
    shape = plan.out_shape(meta)
    total = plan.out_nbytes(meta)
    offset = 0
    first = True
    for slab in plan.slabs(meta):
        raw = np.ascontiguousarray(slab).reshape(-1).view(np.uint8).data
        for start in range(0, raw.nbytes, DEFAULT_CHUNK_BYTES):
            data = bytes(raw[start : start + DEFAULT_CHUNK_BYTES])
            chunk = TensorChunk(name=meta.name, offset=offset, data=data, crc32=zlib.crc32(data))
            if first:
                chunk.dtype = meta.dtype.name
                chunk.shape.extend(shape)
                chunk.total_bytes = total
                first = False
            offset += len(data)
            yield pb.PullReply(chunk=chunk)
    if first:  # empty tensor: one header-only chunk
        chunk = TensorChunk(name=meta.name, offset=0, data=b"", crc32=zlib.crc32(b""))
        chunk.dtype = meta.dtype.name
        chunk.shape.extend(shape)
        chunk.total_bytes = 0
        yield pb.PullReply(chunk=chunk)


def registrations(service: ParamServerService) -> list[Callable[[grpc.Server], None]]:
    """The servicers to add to the server, besides Lifecycle (which every server has)."""
    return [ParamServerServicer(service).register]
