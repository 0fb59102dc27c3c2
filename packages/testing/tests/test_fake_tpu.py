"""The fake Cloud TPU v2 API, driven through the real `google.cloud.tpu_v2.TpuClient` over gRPC on
127.0.0.1: operations, the queued-resource life cycle, nodes, errors and the test hooks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import google.auth
import grpc
import pytest
from google.api_core import exceptions
from google.cloud import tpu_v2
from google.cloud.tpu_v2.types import cloud_tpu as t
from google.protobuf import empty_pb2

from rlx_testing import fake_tpu
from rlx_testing.fake_tpu import FakeTpuApi

PARENT = "projects/proj/locations/us-central2-b"
QR_STATE = t.QueuedResourceState.State

Connect = Callable[..., tuple[FakeTpuApi, tpu_v2.TpuClient]]


@pytest.fixture
def connect(monkeypatch: pytest.MonkeyPatch) -> Iterator[Connect]:
    """`connect(**FakeTpuApi kwargs)`: a started fake and a real client of it, both closed after
    the test. Any lookup of Google credentials fails the test."""

    def no_credentials(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the client looked up Google credentials")

    monkeypatch.setattr(google.auth, "default", no_credentials)
    with contextlib.ExitStack() as stack:

        def make(**kwargs: Any) -> tuple[FakeTpuApi, tpu_v2.TpuClient]:
            api = stack.enter_context(FakeTpuApi(**kwargs))
            return api, stack.enter_context(fake_tpu.client(api.address))

        yield make


@pytest.fixture
def api_tpu(connect: Connect) -> tuple[FakeTpuApi, tpu_v2.TpuClient]:
    """The default fake (ACTIVE after one GetQueuedResource) and its client."""
    return connect()


def node_spec(node_id: str = "worker", **node: Any) -> t.QueuedResource.Tpu.NodeSpec:
    fields: dict[str, Any] = {"accelerator_type": "v4-8", "runtime_version": "tpu-ubuntu2204-base"}
    fields.update(node)
    return t.QueuedResource.Tpu.NodeSpec(parent=PARENT, node_id=node_id, node=t.Node(**fields))


def queued(*specs: t.QueuedResource.Tpu.NodeSpec, spot: bool = False) -> t.QueuedResource:
    qr = t.QueuedResource(tpu=t.QueuedResource.Tpu(node_spec=list(specs or [node_spec()])))
    if spot:
        qr.spot = t.QueuedResource.Spot()
    return qr


def create(tpu: tpu_v2.TpuClient, qr_id: str, qr: t.QueuedResource | None = None) -> Any:
    return tpu.create_queued_resource(
        parent=PARENT, queued_resource_id=qr_id, queued_resource=qr or queued()
    ).result()


def qr_name(qr_id: str) -> str:
    return f"{PARENT}/queuedResources/{qr_id}"


def node_name(node_id: str) -> str:
    return f"{PARENT}/nodes/{node_id}"


def test_create_returns_the_queued_resource_and_records_the_request(
    api_tpu: tuple[FakeTpuApi, tpu_v2.TpuClient],
) -> None:
    api, tpu = api_tpu
    spec = node_spec(
        "rlx-w0",
        accelerator_type="v5litepod-8",
        runtime_version="v2-alpha-tpuv5-lite",
        labels={"rlx-run": "r1"},
        metadata={"startup-script": "#!/bin/sh\necho hi"},
        scheduling_config=t.SchedulingConfig(spot=True),
    )
    operation = tpu.create_queued_resource(
        parent=PARENT, queued_resource_id="rlx-r1", queued_resource=queued(spec, spot=True)
    )
    assert operation.operation.name == f"{PARENT}/operations/operation-1"
    assert not operation.operation.done

    qr = operation.result()
    assert isinstance(qr, t.QueuedResource)
    assert qr.name == qr_name("rlx-r1")
    assert qr.state.state == QR_STATE.WAITING_FOR_RESOURCES
    assert qr.create_time.year >= 2024
    assert "spot" in qr
    assert qr.tpu.node_spec[0].node.accelerator_type == "v5litepod-8"
    assert operation.metadata.verb == "create"
    assert operation.metadata.target == qr_name("rlx-r1")
    assert [name for name, _ in api.calls] == ["CreateQueuedResource", "GetOperation"]

    (request,) = api.requests("CreateQueuedResource")
    assert request.parent == PARENT
    assert request.queued_resource_id == "rlx-r1"
    sent = request.queued_resource.tpu.node_spec[0].node
    assert sent.accelerator_type == "v5litepod-8"
    assert sent.runtime_version == "v2-alpha-tpuv5-lite"
    assert sent.scheduling_config.spot
    assert sent.metadata["startup-script"] == "#!/bin/sh\necho hi"
    assert dict(sent.labels) == {"rlx-run": "r1"}
    assert [qr.name for qr in api.queued_resources()] == [qr_name("rlx-r1")]


def test_get_waits_for_resources_then_activates(
    api_tpu: tuple[FakeTpuApi, tpu_v2.TpuClient],
) -> None:
    api, tpu = api_tpu
    create(tpu, "q1")
    assert tpu.get_queued_resource(name=qr_name("q1")).state.state == QR_STATE.WAITING_FOR_RESOURCES
    assert api.nodes() == []
    with pytest.raises(exceptions.NotFound, match="worker"):
        tpu.get_node(name=node_name("worker"))

    active = tpu.get_queued_resource(name=qr_name("q1"))
    assert active.state.state == QR_STATE.ACTIVE
    assert tpu.get_node(name=node_name("worker")).state == t.Node.State.READY
    assert tpu.get_queued_resource(name=qr_name("q1")).state.state == QR_STATE.ACTIVE


def test_activate_after_counts_gets_and_none_waits_for_the_test(connect: Connect) -> None:
    _, at_once = connect(activate_after=0)
    assert create(at_once, "q1").state.state == QR_STATE.ACTIVE
    assert at_once.get_node(name=node_name("worker")).state == t.Node.State.READY

    _, after_three = connect(activate_after=3)
    create(after_three, "q1")
    seen = [after_three.get_queued_resource(name=qr_name("q1")).state.state for _ in range(4)]
    assert seen == [QR_STATE.WAITING_FOR_RESOURCES] * 3 + [QR_STATE.ACTIVE]

    api, never = connect(activate_after=None)
    create(never, "q1")
    for _ in range(5):
        assert never.get_queued_resource(name=qr_name("q1")).state.state == (
            QR_STATE.WAITING_FOR_RESOURCES
        )
    api.set_state("q1", "PROVISIONING")
    assert never.get_queued_resource(name=qr_name("q1")).state.state == QR_STATE.PROVISIONING
    api.set_state("q1", "ACTIVE")
    assert never.get_queued_resource(name=qr_name("q1")).state.state == QR_STATE.ACTIVE


def test_node_of_an_active_queued_resource(connect: Connect) -> None:
    api, tpu = connect(activate_after=0, hosts={"v4-16": 2})
    create(
        tpu,
        "q1",
        queued(
            node_spec(
                "big",
                accelerator_type="v4-16",
                labels={"rlx-run": "r1"},
                metadata={"startup-script": "run"},
                network_config=t.NetworkConfig(network="default", enable_external_ips=True),
                scheduling_config=t.SchedulingConfig(preemptible=True),
            ),
            node_spec("small"),
        ),
    )
    big = tpu.get_node(name=node_name("big"))
    assert big.name == node_name("big")
    assert big.state == t.Node.State.READY
    assert big.accelerator_type == "v4-16"
    assert big.runtime_version == "tpu-ubuntu2204-base"
    assert dict(big.labels) == {"rlx-run": "r1"}
    assert dict(big.metadata) == {"startup-script": "run"}
    assert big.network_config.network == "default"
    assert big.scheduling_config.preemptible
    assert not big.scheduling_config.spot
    assert big.queued_resource == qr_name("q1")
    assert [(e.ip_address, e.port, e.access_config.external_ip) for e in big.network_endpoints] == [
        ("127.0.0.1", 8470, "127.0.0.1")
    ] * 2

    small = tpu.get_node(name=node_name("small"))
    assert [
        (e.ip_address, e.port, e.access_config.external_ip) for e in small.network_endpoints
    ] == [("127.0.0.1", 8470, "")]
    assert [n.name for n in tpu.list_nodes(parent=PARENT)] == [node_name("big"), node_name("small")]
    assert [n.name for n in api.nodes()] == [node_name("big"), node_name("small")]


def test_list_pages_by_parent(api_tpu: tuple[FakeTpuApi, tpu_v2.TpuClient]) -> None:
    api, tpu = api_tpu
    for i in range(3):
        create(tpu, f"q{i}", queued(node_spec(f"w{i}")))
    request = t.ListQueuedResourcesRequest(parent=PARENT, page_size=2)
    pages = list(tpu.list_queued_resources(request=request).pages)
    assert [[qr.name for qr in page.queued_resources] for page in pages] == [
        [qr_name("q0"), qr_name("q1")],
        [qr_name("q2")],
    ]
    assert [r.page_token for r in api.requests("ListQueuedResources")] == ["", "2"]
    assert list(tpu.list_queued_resources(parent="projects/proj/locations/europe-west4-a")) == []
    with pytest.raises(exceptions.InvalidArgument, match="page_token"):
        tpu.list_queued_resources(request={"parent": PARENT, "page_token": "x"})


def test_failed_carries_the_error_message(api_tpu: tuple[FakeTpuApi, tpu_v2.TpuClient]) -> None:
    api, tpu = api_tpu
    create(tpu, "q1")
    api.set_state("q1", "FAILED", error="no v4-8 capacity in us-central2-b")
    qr = tpu.get_queued_resource(name=qr_name("q1"))
    assert qr.state.state == QR_STATE.FAILED
    assert qr.state.failed_data.error.message == "no v4-8 capacity in us-central2-b"
    # A test's state sticks: more gets do not activate it.
    assert tpu.get_queued_resource(name=qr_name("q1")).state.state == QR_STATE.FAILED
    assert api.nodes() == []


def test_suspended_preempts_the_nodes(api_tpu: tuple[FakeTpuApi, tpu_v2.TpuClient]) -> None:
    api, tpu = api_tpu
    create(tpu, "q1")
    tpu.get_queued_resource(name=qr_name("q1"))
    assert tpu.get_queued_resource(name=qr_name("q1")).state.state == QR_STATE.ACTIVE

    api.set_state("q1", "SUSPENDED")
    qr = tpu.get_queued_resource(name=qr_name("q1"))
    assert qr.state.state == QR_STATE.SUSPENDED
    assert qr.state.state_initiator == t.QueuedResourceState.StateInitiator.SERVICE
    assert tpu.get_node(name=node_name("worker")).state == t.Node.State.PREEMPTED
    # The API deletes a SUSPENDED queued resource with its nodes without `force`.
    tpu.delete_queued_resource(name=qr_name("q1")).result()
    assert api.queued_resources() == []
    assert api.nodes() == []


def test_delete(connect: Connect) -> None:
    api, tpu = connect(activate_after=0)
    create(tpu, "q1")
    with pytest.raises(exceptions.FailedPrecondition, match="still has nodes"):
        tpu.delete_queued_resource(name=qr_name("q1"))
    assert tpu.get_node(name=node_name("worker")).state == t.Node.State.READY

    request = t.DeleteQueuedResourceRequest(name=qr_name("q1"), force=True)
    operation = tpu.delete_queued_resource(request=request)
    assert isinstance(operation.result(), empty_pb2.Empty)
    assert operation.metadata.verb == "delete"
    with pytest.raises(exceptions.NotFound, match="q1"):
        tpu.get_queued_resource(name=qr_name("q1"))
    with pytest.raises(exceptions.NotFound):
        tpu.get_node(name=node_name("worker"))
    with pytest.raises(exceptions.NotFound, match="q1"):
        tpu.delete_queued_resource(name=qr_name("q1"))
    assert api.requests("DeleteQueuedResource")[1].force

    # A waiting queued resource has no nodes: deleted without force; its id is free again.
    api.activate_after = None
    create(tpu, "q1")
    tpu.delete_queued_resource(name=qr_name("q1")).result()
    assert create(tpu, "q1").name == qr_name("q1")


def test_already_exists(api_tpu: tuple[FakeTpuApi, tpu_v2.TpuClient]) -> None:
    api, tpu = api_tpu
    create(tpu, "q1")
    with pytest.raises(exceptions.AlreadyExists, match="queuedResources/q1 already exists"):
        create(tpu, "q1", queued(node_spec("other")))
    # A node name is taken by the first queued resource that asks for it.
    with pytest.raises(exceptions.AlreadyExists, match="nodes/worker already exists"):
        create(tpu, "q2")
    with pytest.raises(exceptions.AlreadyExists, match="nodes/twin already exists"):
        create(tpu, "q3", queued(node_spec("twin"), node_spec("twin")))
    assert [qr.name for qr in api.queued_resources()] == [qr_name("q1")]


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"queued_resource_id": "Bad_Id"}, "queued_resource_id"),
        ({"queued_resource_id": "-q"}, "queued_resource_id"),
        ({"queued_resource_id": "q-"}, "queued_resource_id"),
        ({"queued_resource_id": "q" * 64}, "queued_resource_id"),
        ({"queued_resource_id": ""}, "queued_resource_id"),
        ({"parent": "projects/proj/zones/us-central2-b"}, "parent"),
        ({"queued_resource": t.QueuedResource()}, "queued_resource.tpu.node_spec"),
        ({"queued_resource": queued(node_spec(""))}, "queued_resource.tpu.node_spec[0].node_id"),
        (
            {"queued_resource": queued(node_spec(), node_spec("w1", accelerator_type=""))},
            "queued_resource.tpu.node_spec[1].node.accelerator_type",
        ),
        (
            {"queued_resource": queued(node_spec(runtime_version=""))},
            "queued_resource.tpu.node_spec[0].node.runtime_version",
        ),
        (
            {"queued_resource": queued(t.QueuedResource.Tpu.NodeSpec(node_id="w", node=t.Node()))},
            "queued_resource.tpu.node_spec[0].parent",
        ),
    ],
)
def test_invalid_argument_names_the_field(
    api_tpu: tuple[FakeTpuApi, tpu_v2.TpuClient], request_fields: dict[str, Any], field: str
) -> None:
    api, tpu = api_tpu
    fields: dict[str, Any] = {"parent": PARENT, "queued_resource_id": "q1"}
    fields["queued_resource"] = queued()
    fields.update(request_fields)
    with pytest.raises(exceptions.InvalidArgument) as caught:
        tpu.create_queued_resource(**fields)
    assert caught.value.message.startswith(f"{field}: ")
    assert api.queued_resources() == []


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (grpc.StatusCode.RESOURCE_EXHAUSTED, exceptions.ResourceExhausted),
        (grpc.StatusCode.PERMISSION_DENIED, exceptions.PermissionDenied),
        (grpc.StatusCode.UNAVAILABLE, exceptions.ServiceUnavailable),
    ],
)
def test_injected_error_reaches_the_client(
    api_tpu: tuple[FakeTpuApi, tpu_v2.TpuClient],
    code: grpc.StatusCode,
    error: type[exceptions.GoogleAPICallError],
) -> None:
    api, tpu = api_tpu
    api.fail_next("CreateQueuedResource", code, "quota 'TPUV4sPodPerProjectPerZone' exceeded")
    with pytest.raises(error, match="TPUV4sPodPerProjectPerZone"):
        create(tpu, "q1")
    assert api.queued_resources() == []  # the failed call did nothing
    assert [name for name, _ in api.calls] == ["CreateQueuedResource"]  # but was recorded
    assert create(tpu, "q1").name == qr_name("q1")  # one error only


def test_test_hooks_refuse_what_they_do_not_know(
    api_tpu: tuple[FakeTpuApi, tpu_v2.TpuClient],
) -> None:
    api, tpu = api_tpu
    with pytest.raises(ValueError, match="GetQueuedResources"):
        api.fail_next("GetQueuedResources", grpc.StatusCode.INTERNAL, "typo")
    create(tpu, "q1")
    with pytest.raises(KeyError, match="q2"):
        api.set_state("q2", "ACTIVE")
    with pytest.raises(ValueError, match="RUNNING"):
        api.set_state("q1", "RUNNING")
    with pytest.raises(ValueError, match="FAILED"):
        api.set_state(qr_name("q1"), "ACTIVE", error="only with FAILED")
    with pytest.raises(ValueError, match="loopback"):
        fake_tpu.client("tpu.googleapis.com:443")


def test_the_client_talks_only_to_the_fake(connect: Connect) -> None:
    api, tpu = connect()
    create(tpu, "q1")
    api.stop()
    with pytest.raises(exceptions.ServiceUnavailable):
        tpu.get_queued_resource(name=qr_name("q1"))
    assert [qr.name for qr in api.queued_resources()] == [qr_name("q1")]
