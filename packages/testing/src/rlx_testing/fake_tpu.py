"""A local fake of the Cloud TPU v2 API for tests and offline trials of `rlx provision`; never a
stand-in in production.

`FakeTpuApi` is a real gRPC server on 127.0.0.1 that answers the RPCs of queued-resource
provisioning with the messages of `google.cloud.tpu_v2`, so tests drive the real client library
(`client(address)`) end to end: request encoding, long-running operations, error mapping.

It serves `CreateQueuedResource`, `GetQueuedResource`, `ListQueuedResources`,
`DeleteQueuedResource`, `GetNode`, `ListNodes` and `google.longrunning.Operations/GetOperation`.
Any other RPC is UNIMPLEMENTED.

The life of a queued resource (QR) here:

- created in WAITING_FOR_RESOURCES; it becomes ACTIVE after `activate_after` GetQueuedResource
  calls on it (0: ACTIVE at once; None: it waits until a test calls `set_state`);
- while ACTIVE its nodes exist, READY, one per node spec, with one 127.0.0.1:8470 network
  endpoint per host; SUSPENDED (a preemption, initiated by the service) keeps them as
  PREEMPTED; any other state has no nodes;
- a state set by a test sticks: the activation policy no longer touches that QR;
- deleting removes the QR and its nodes at once; as the API documents, a QR with nodes is only
  deleted with `force` or in the ACCEPTED, FAILED or SUSPENDED state.

Create and delete return an operation that is not done; its first GetOperation completes it, with
the QR as it is then (create) or `google.protobuf.Empty` (delete) as the response.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import threading
from collections.abc import Callable, Mapping
from concurrent import futures
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc
from google.cloud import tpu_v2
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcTransport
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2, timestamp_pb2
from google.rpc import code_pb2, status_pb2

__all__ = ["METHODS", "SETTABLE_STATES", "FakeTpuApi", "client"]

_TPU_SERVICE = "google.cloud.tpu.v2.Tpu"
_OPERATIONS_SERVICE = "google.longrunning.Operations"

# The RPCs the fake serves, by short name (the names of `calls` and `fail_next`).
METHODS = (
    "CreateQueuedResource",
    "GetQueuedResource",
    "ListQueuedResources",
    "DeleteQueuedResource",
    "GetNode",
    "ListNodes",
    "GetOperation",
)

_PARENT = re.compile(r"projects/[^/]+/locations/[^/]+")
_QR_NAME = re.compile(r"projects/[^/]+/locations/[^/]+/queuedResources/[^/]+")
_NODE_NAME = re.compile(r"projects/[^/]+/locations/[^/]+/nodes/[^/]+")
# Resource ids as Compute Engine takes them (RFC 1035 labels), for QRs and the nodes they make.
_ID = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_ID_MAX = 63

_ENDPOINT_IP = "127.0.0.1"
_ENDPOINT_PORT = 8470  # the TPU runtime's port on each host of a real node

_QrState = cloud_tpu.QueuedResourceState.State
# The states a test may put a QR in with `set_state`.
SETTABLE_STATES = ("WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE", "FAILED", "SUSPENDED")
# States in which the API deletes a QR that still has nodes without `force`.
_DELETABLE_WITH_NODES = (_QrState.ACCEPTED, _QrState.FAILED, _QrState.SUSPENDED)
# proto-plus enums are IntEnums at runtime, but mypy sees their members as plain ints (proto has
# no type information); calling the enum class gives the same member with its enum type.
_WAITING = _QrState(_QrState.WAITING_FOR_RESOURCES)
_ACTIVE = _QrState(_QrState.ACTIVE)
_NODE_READY = cloud_tpu.Node.State(cloud_tpu.Node.State.READY)
_NODE_PREEMPTED = cloud_tpu.Node.State(cloud_tpu.Node.State.PREEMPTED)


class _Refusal(Exception):
    """An RPC answered with an error status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclasses.dataclass(kw_only=True)
class _Queued:
    qr: cloud_tpu.QueuedResource
    gets: int = 0  # GetQueuedResource calls answered while the activation policy waited
    pinned: bool = False  # a test set the state; the activation policy leaves this QR alone


@dataclasses.dataclass(kw_only=True)
class _Operation:
    op: operations_pb2.Operation
    metadata: cloud_tpu.OperationMetadata
    qr_name: str  # the QR the operation acts on
    created: cloud_tpu.QueuedResource | None  # create: the QR as created; delete: None


def _now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(datetime.now(UTC))
    return stamp


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def _invalid(field: str, message: str) -> _Refusal:
    return _Refusal(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {message}")


def _check_id(field: str, value: str) -> None:
    if not value:
        raise _invalid(field, "required")
    if not _ID.fullmatch(value) or len(value) > _ID_MAX:
        raise _invalid(
            field,
            f"{value!r} is not a valid id: 1-{_ID_MAX} characters matching "
            "[a-z]([-a-z0-9]*[a-z0-9])?",
        )


def _check_parent(field: str, value: str) -> None:
    if not _PARENT.fullmatch(value):
        raise _invalid(
            field, f"{value!r} is not of the form projects/{{project}}/locations/{{zone}}"
        )


def _state_message(state: _QrState, error: str) -> cloud_tpu.QueuedResourceState:
    """The state of a QR in `state`, with that state's data."""
    message = cloud_tpu.QueuedResourceState
    if state == _QrState.FAILED:
        # The fake's choice of code: a QR mostly fails for want of capacity.
        reason = status_pb2.Status(
            code=code_pb2.RESOURCE_EXHAUSTED, message=error or "the queued resource failed"
        )
        return message(state=state, failed_data=message.FailedData(error=reason))
    if state == _QrState.SUSPENDED:
        return message(
            state=state,
            suspended_data=message.SuspendedData(),
            state_initiator=message.StateInitiator.SERVICE,
        )
    if state == _QrState.ACTIVE:
        return message(state=state, active_data=message.ActiveData())
    if state == _QrState.PROVISIONING:
        return message(state=state, provisioning_data=message.ProvisioningData())
    return message(state=state)


_T = TypeVar("_T")


def _page(items: list[_T], page_size: int, page_token: str) -> tuple[list[_T], str]:
    """One page of `items` and the token of the next ("" after the last); a token is the offset
    of its page, and a page size of 0 or less means everything."""
    start = 0
    if page_token:
        if not page_token.isdigit() or int(page_token) > len(items):
            raise _invalid("page_token", f"{page_token!r} was not issued by this server")
        start = int(page_token)
    end = len(items) if page_size <= 0 else min(len(items), start + page_size)
    return items[start:end], str(end) if end < len(items) else ""


class FakeTpuApi:
    """The fake Cloud TPU v2 API: state, test hooks and the gRPC server that serves them.

    `activate_after`: GetQueuedResource calls on a new QR before it turns ACTIVE (0: at once;
    None: never by itself). `hosts`: hosts per node by accelerator type ({"v4-16": 2}), 1 for any
    other; each host is one network endpoint of the node. Both are plain attributes a test may
    change later; they apply to QRs (`activate_after`) and nodes (`hosts`) from then on.
    """

    def __init__(
        self, activate_after: int | None = 1, *, hosts: Mapping[str, int] | None = None
    ) -> None:
        if activate_after is not None and activate_after < 0:
            raise ValueError(f"activate_after must be >= 0 or None, got {activate_after}")
        if hosts and min(hosts.values()) < 1:
            raise ValueError(f"hosts per node must be >= 1, got {dict(hosts)}")
        self.activate_after = activate_after
        self.hosts = dict(hosts or {})
        # Every request received, in order: (method short name, request message). TPU requests
        # are the proto-plus types of google.cloud.tpu_v2; GetOperation's is operations_pb2's.
        self.calls: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self._queued: dict[str, _Queued] = {}  # by QR name, in creation order
        self._nodes: dict[str, cloud_tpu.Node] = {}  # by node name, in creation order
        self._operations: dict[str, _Operation] = {}
        self._faults: dict[str, collections.deque[_Refusal]] = collections.defaultdict(
            collections.deque
        )
        self._op_count = 0
        self._node_count = 0
        self._server: grpc.Server | None = None
        self._address = ""

    # --- the server ---

    def start(self) -> str:
        """Serve on a free port of 127.0.0.1; returns the address ("127.0.0.1:PORT")."""
        if self._server is not None:
            raise RuntimeError(f"the fake TPU API already serves on {self._address}")
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(_TPU_SERVICE, self._tpu_handlers()),
                grpc.method_handlers_generic_handler(
                    _OPERATIONS_SERVICE, self._operations_handlers()
                ),
            )
        )
        port = server.add_insecure_port(f"{_ENDPOINT_IP}:0")
        server.start()
        self._server = server
        self._address = f"{_ENDPOINT_IP}:{port}"
        return self._address

    def stop(self) -> None:
        """Stop serving (at once; calls in flight are cancelled). The state stays readable."""
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None

    @property
    def address(self) -> str:
        """Where the fake serves; only while started."""
        if self._server is None:
            raise RuntimeError("the fake TPU API is not started")
        return self._address

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- test hooks ---

    def set_state(self, qr_id: str, state_name: str, *, error: str = "") -> None:
        """Move a QR (its id, or its full name) to one of `SETTABLE_STATES`. FAILED carries
        `error` as `state.failed_data.error.message`; SUSPENDED is initiated by the service and
        preempts the nodes. The activation policy no longer applies to this QR."""
        if state_name not in SETTABLE_STATES:
            raise ValueError(f"state {state_name!r}: one of {SETTABLE_STATES}")
        if error and state_name != "FAILED":
            raise ValueError(f"an error message only goes with FAILED, not {state_name}")
        with self._lock:
            entry = self._find(qr_id)
            entry.pinned = True
            self._enter(entry, _QrState(_QrState.__members__[state_name]), error=error)

    def fail_next(self, method: str, code: grpc.StatusCode, message: str) -> None:
        """Answer the next call of `method` (a short name in `METHODS`) with `code` and
        `message`, without acting on it. Several calls queue up, one error per RPC."""
        if method not in METHODS:
            raise ValueError(f"method {method!r}: one of {METHODS}")
        if code == grpc.StatusCode.OK:
            raise ValueError("an injected error needs a code other than OK")
        with self._lock:
            self._faults[method].append(_Refusal(code, message))

    def requests(self, method: str) -> list[Any]:
        """The requests received by `method` (a short name in `METHODS`), in order."""
        if method not in METHODS:
            raise ValueError(f"method {method!r}: one of {METHODS}")
        with self._lock:
            return [request for name, request in self.calls if name == method]

    def queued_resources(self) -> list[cloud_tpu.QueuedResource]:
        """Copies of the QRs that exist, in creation order."""
        with self._lock:
            return [cloud_tpu.QueuedResource(entry.qr) for entry in self._queued.values()]

    def nodes(self) -> list[cloud_tpu.Node]:
        """Copies of the nodes that exist, in creation order."""
        with self._lock:
            return [cloud_tpu.Node(node) for node in self._nodes.values()]

    # --- state ---

    def _find(self, qr_id: str) -> _Queued:
        if qr_id in self._queued:
            return self._queued[qr_id]
        found = [
            e for name, e in self._queued.items() if name.endswith(f"/queuedResources/{qr_id}")
        ]
        if len(found) != 1:
            known = [name.rsplit("/", 1)[-1] for name in self._queued]
            what = "no" if not found else "more than one"
            raise KeyError(f"{what} queued resource {qr_id!r}; known: {known}")
        return found[0]

    def _enter(self, entry: _Queued, state: _QrState, *, error: str = "") -> None:
        """Put `entry` in `state`, with the nodes that state has."""
        entry.qr.state = _state_message(state, error)
        mine = self._nodes_of(entry.qr.name)
        if state == _QrState.ACTIVE:
            for spec in entry.qr.tpu.node_spec:
                name = f"{spec.parent}/nodes/{spec.node_id}"
                if name in self._nodes:
                    self._nodes[name].state = _NODE_READY
                else:
                    self._nodes[name] = self._new_node(name, spec.node, entry.qr.name)
        elif state == _QrState.SUSPENDED:
            for name in mine:
                self._nodes[name].state = _NODE_PREEMPTED
        else:
            for name in mine:
                del self._nodes[name]

    def _new_node(self, name: str, spec: cloud_tpu.Node, qr_name: str) -> cloud_tpu.Node:
        """The node a QR makes from its spec: the spec's fields, and the output-only ones."""
        self._node_count += 1
        node = cloud_tpu.Node(spec)
        node.name = name
        node.id = self._node_count
        node.state = _NODE_READY
        node.health = cloud_tpu.Node.Health(cloud_tpu.Node.Health.HEALTHY)
        node.api_version = cloud_tpu.Node.ApiVersion(cloud_tpu.Node.ApiVersion.V2)
        node.create_time = _now()
        node.queued_resource = qr_name
        endpoint = cloud_tpu.NetworkEndpoint(ip_address=_ENDPOINT_IP, port=_ENDPOINT_PORT)
        if node.network_config.enable_external_ips:
            endpoint.access_config = cloud_tpu.AccessConfig(external_ip=_ENDPOINT_IP)
        node.network_endpoints = [endpoint] * self.hosts.get(node.accelerator_type, 1)
        return node

    def _new_operation(
        self, parent: str, verb: str, qr_name: str, created: cloud_tpu.QueuedResource | None
    ) -> operations_pb2.Operation:
        self._op_count += 1
        metadata = cloud_tpu.OperationMetadata(
            create_time=_now(), target=qr_name, verb=verb, api_version="v2"
        )
        op = operations_pb2.Operation(
            name=f"{parent}/operations/operation-{self._op_count}",
            done=False,
            metadata=_pack(cloud_tpu.OperationMetadata.pb(metadata)),
        )
        self._operations[op.name] = _Operation(
            op=op, metadata=metadata, qr_name=qr_name, created=created
        )
        answer = operations_pb2.Operation()
        answer.CopyFrom(op)
        return answer

    def _nodes_of(self, qr_name: str) -> list[str]:
        return [name for name, node in self._nodes.items() if node.queued_resource == qr_name]

    # --- the RPCs ---

    def _create_queued_resource(
        self, request: cloud_tpu.CreateQueuedResourceRequest
    ) -> operations_pb2.Operation:
        parent = request.parent
        _check_parent("parent", parent)
        _check_id("queued_resource_id", request.queued_resource_id)
        specs = request.queued_resource.tpu.node_spec
        if not specs:
            raise _invalid("queued_resource.tpu.node_spec", "at least one node spec is required")
        wanted: list[str] = []
        for i, spec in enumerate(specs):
            field = f"queued_resource.tpu.node_spec[{i}]"
            if not spec.parent:
                raise _invalid(f"{field}.parent", "required")
            _check_parent(f"{field}.parent", spec.parent)
            if spec.parent != parent:
                raise _invalid(f"{field}.parent", f"{spec.parent!r} differs from parent {parent!r}")
            if "multislice_params" in spec:
                raise _invalid(f"{field}.multislice_params", "multislice is not served by the fake")
            _check_id(f"{field}.node_id", spec.node_id)
            if not spec.node.accelerator_type:
                raise _invalid(f"{field}.node.accelerator_type", "required")
            if not spec.node.runtime_version:
                raise _invalid(f"{field}.node.runtime_version", "required")
            wanted.append(f"{parent}/nodes/{spec.node_id}")

        name = f"{parent}/queuedResources/{request.queued_resource_id}"
        if name in self._queued:
            raise _Refusal(grpc.StatusCode.ALREADY_EXISTS, f"queued resource {name} already exists")
        # A node name is taken once any QR asks for it, not only once the node exists.
        taken = {
            f"{spec.parent}/nodes/{spec.node_id}"
            for entry in self._queued.values()
            for spec in entry.qr.tpu.node_spec
        } | set(self._nodes)
        for node_name in wanted:
            if node_name in taken or wanted.count(node_name) > 1:
                raise _Refusal(grpc.StatusCode.ALREADY_EXISTS, f"node {node_name} already exists")

        qr = cloud_tpu.QueuedResource(request.queued_resource)
        qr.name = name
        qr.create_time = _now()
        entry = _Queued(qr=qr)
        self._queued[name] = entry
        self._enter(entry, _ACTIVE if self.activate_after == 0 else _WAITING)
        return self._new_operation(parent, "create", name, cloud_tpu.QueuedResource(qr))

    def _queued_entry(self, name: str) -> _Queued:
        if not _QR_NAME.fullmatch(name):
            raise _invalid(
                "name",
                f"{name!r} is not of the form projects/{{project}}/locations/{{zone}}/"
                "queuedResources/{queued_resource_id}",
            )
        if name not in self._queued:
            raise _Refusal(grpc.StatusCode.NOT_FOUND, f"queued resource {name} not found")
        return self._queued[name]

    def _get_queued_resource(
        self, request: cloud_tpu.GetQueuedResourceRequest
    ) -> cloud_tpu.QueuedResource:
        entry = self._queued_entry(request.name)
        waiting = entry.qr.state.state == _QrState.WAITING_FOR_RESOURCES
        if waiting and not entry.pinned and self.activate_after is not None:
            if entry.gets >= self.activate_after:
                self._enter(entry, _ACTIVE)
            else:
                entry.gets += 1
        return cloud_tpu.QueuedResource(entry.qr)

    def _list_queued_resources(
        self, request: cloud_tpu.ListQueuedResourcesRequest
    ) -> cloud_tpu.ListQueuedResourcesResponse:
        _check_parent("parent", request.parent)
        prefix = f"{request.parent}/queuedResources/"
        mine = [e.qr for name, e in self._queued.items() if name.startswith(prefix)]
        page, token = _page(mine, request.page_size, request.page_token)
        return cloud_tpu.ListQueuedResourcesResponse(queued_resources=page, next_page_token=token)

    def _delete_queued_resource(
        self, request: cloud_tpu.DeleteQueuedResourceRequest
    ) -> operations_pb2.Operation:
        entry = self._queued_entry(request.name)
        nodes = self._nodes_of(entry.qr.name)
        state = entry.qr.state.state
        if nodes and not request.force and state not in _DELETABLE_WITH_NODES:
            raise _Refusal(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"queued resource {entry.qr.name} is {state.name} and still has nodes "
                f"{[n.rsplit('/', 1)[-1] for n in nodes]}; delete them first or set force",
            )
        for name in nodes:
            del self._nodes[name]
        del self._queued[entry.qr.name]
        parent = entry.qr.name.split("/queuedResources/")[0]
        return self._new_operation(parent, "delete", entry.qr.name, None)

    def _get_node(self, request: cloud_tpu.GetNodeRequest) -> cloud_tpu.Node:
        if not _NODE_NAME.fullmatch(request.name):
            raise _invalid(
                "name",
                f"{request.name!r} is not of the form projects/{{project}}/locations/{{zone}}/"
                "nodes/{node_id}",
            )
        if request.name not in self._nodes:
            raise _Refusal(grpc.StatusCode.NOT_FOUND, f"node {request.name} not found")
        return cloud_tpu.Node(self._nodes[request.name])

    def _list_nodes(self, request: cloud_tpu.ListNodesRequest) -> cloud_tpu.ListNodesResponse:
        _check_parent("parent", request.parent)
        prefix = f"{request.parent}/nodes/"
        mine = [node for name, node in self._nodes.items() if name.startswith(prefix)]
        page, token = _page(mine, request.page_size, request.page_token)
        return cloud_tpu.ListNodesResponse(nodes=page, next_page_token=token)

    def _get_operation(
        self, request: operations_pb2.GetOperationRequest
    ) -> operations_pb2.Operation:
        if request.name not in self._operations:
            raise _Refusal(grpc.StatusCode.NOT_FOUND, f"operation {request.name} not found")
        record = self._operations[request.name]
        op = record.op
        if not op.done:
            if record.created is None:
                response: Any = empty_pb2.Empty()
            else:
                # The QR as it is now, or as it was created when it is gone since.
                entry = self._queued.get(record.qr_name)
                response = cloud_tpu.QueuedResource.pb(entry.qr if entry else record.created)
            op.response.CopyFrom(_pack(response))
            record.metadata.end_time = _now()
            op.metadata.CopyFrom(_pack(cloud_tpu.OperationMetadata.pb(record.metadata)))
            op.done = True
        answer = operations_pb2.Operation()
        answer.CopyFrom(op)
        return answer

    # --- gRPC plumbing ---

    def _serve(self, method: str, handler: Callable[[Any], Any]) -> Callable[..., Any]:
        """A gRPC behaviour: record the request, then answer it (or the injected error)."""

        def behaviour(request: Any, context: grpc.ServicerContext) -> Any:
            with self._lock:
                self.calls.append((method, request))
                try:
                    if self._faults[method]:
                        raise self._faults[method].popleft()
                    return handler(request)
                except _Refusal as refusal:
                    error = refusal
            context.abort(error.code, error.message)

        return behaviour

    def _tpu_handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        table: list[tuple[str, Callable[[Any], Any], Any, Any]] = [
            (
                "CreateQueuedResource",
                self._create_queued_resource,
                cloud_tpu.CreateQueuedResourceRequest.deserialize,
                operations_pb2.Operation.SerializeToString,
            ),
            (
                "GetQueuedResource",
                self._get_queued_resource,
                cloud_tpu.GetQueuedResourceRequest.deserialize,
                cloud_tpu.QueuedResource.serialize,
            ),
            (
                "ListQueuedResources",
                self._list_queued_resources,
                cloud_tpu.ListQueuedResourcesRequest.deserialize,
                cloud_tpu.ListQueuedResourcesResponse.serialize,
            ),
            (
                "DeleteQueuedResource",
                self._delete_queued_resource,
                cloud_tpu.DeleteQueuedResourceRequest.deserialize,
                operations_pb2.Operation.SerializeToString,
            ),
            (
                "GetNode",
                self._get_node,
                cloud_tpu.GetNodeRequest.deserialize,
                cloud_tpu.Node.serialize,
            ),
            (
                "ListNodes",
                self._list_nodes,
                cloud_tpu.ListNodesRequest.deserialize,
                cloud_tpu.ListNodesResponse.serialize,
            ),
        ]
        return {
            method: grpc.unary_unary_rpc_method_handler(
                self._serve(method, handler),
                request_deserializer=decode,
                response_serializer=encode,
            )
            for method, handler, decode, encode in table
        }

    def _operations_handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        return {
            "GetOperation": grpc.unary_unary_rpc_method_handler(
                self._serve("GetOperation", self._get_operation),
                request_deserializer=operations_pb2.GetOperationRequest.FromString,
                response_serializer=operations_pb2.Operation.SerializeToString,
            )
        }


def client(address: str) -> tpu_v2.TpuClient:
    """The real Cloud TPU v2 client on a plain gRPC channel to the fake at `address` (loopback
    only). Given a channel, the transport skips credentials altogether (no google.auth lookup,
    no token), and every call, operation polls included, goes over that channel. The client is a
    context manager that closes the channel: `with client(address) as tpu: ...`."""
    host = address.rsplit(":", 1)[0]
    if host not in ("127.0.0.1", "localhost", "[::1]"):
        raise ValueError(f"the fake TPU API serves on loopback only, not {address!r}")
    channel = grpc.insecure_channel(address)
    return tpu_v2.TpuClient(transport=TpuGrpcTransport(channel=channel))
