"""The fake Compute Engine API, driven through the real `google.cloud.compute_v1` clients over
HTTP on 127.0.0.1: the instance life cycle, operations, errors and the test hooks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from rlx_testing.fake_compute import FakeComputeApi

ZONE = {"project": "proj", "zone": "us-central1-a"}
DONE = compute_v1.Operation.Status.DONE


class Clients:
    def __init__(self, endpoint: str) -> None:
        local: dict[str, Any] = {
            "credentials": AnonymousCredentials(),
            "transport": "rest",
            "client_options": ClientOptions(api_endpoint=endpoint),
        }
        self.instances = compute_v1.InstancesClient(**local)
        self.operations = compute_v1.ZoneOperationsClient(**local)

    def insert(self, name: str = "vm", **fields: Any) -> compute_v1.Operation:
        return self.instances.insert_unary(**ZONE, instance_resource=instance(name, **fields))

    def get(self, name: str = "vm") -> compute_v1.Instance:
        return self.instances.get(**ZONE, instance=name)

    def wait(self, op: compute_v1.Operation) -> compute_v1.Operation:
        return self.operations.wait(**ZONE, operation=op.name)


def instance(name: str, **fields: Any) -> compute_v1.Instance:
    spec: dict[str, Any] = {
        "name": name,
        "machine_type": "zones/us-central1-a/machineTypes/e2-small",
        "disks": [
            compute_v1.AttachedDisk(
                boot=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image="projects/debian-cloud/global/images/family/debian-12"
                ),
            )
        ],
        "network_interfaces": [compute_v1.NetworkInterface(network="global/networks/default")],
    }
    spec.update(fields)
    return compute_v1.Instance(**spec)


@pytest.fixture
def api() -> Iterator[tuple[FakeComputeApi, Clients]]:
    with FakeComputeApi(running_after=2) as fake:
        yield fake, Clients(fake.endpoint)


def test_an_instance_goes_provisioning_staging_running_and_its_operation_completes(
    api: tuple[FakeComputeApi, Clients],
) -> None:
    fake, clients = api
    op = clients.insert(labels={"rlx-run": "r"})
    assert op.status == compute_v1.Operation.Status.RUNNING and op.operation_type == "insert"
    assert [clients.get().status for _ in range(4)] == [
        "PROVISIONING",
        "STAGING",
        "RUNNING",
        "RUNNING",
    ]
    done = clients.wait(op)
    assert done.status == DONE and done.progress == 100 and not done.error.errors
    vm = clients.get()
    assert vm.machine_type.endswith("/zones/us-central1-a/machineTypes/e2-small")
    assert vm.network_interfaces[0].network_i_p == "127.0.0.1" and vm.labels == {"rlx-run": "r"}
    (call,) = fake.requests("instances.insert")
    assert (call.project, call.zone) == ("proj", "us-central1-a")
    assert call.body is not None and call.body.name == "vm" and call.body.labels == {"rlx-run": "r"}


def test_a_set_status_sticks_and_none_waits_for_it(api: tuple[FakeComputeApi, Clients]) -> None:
    fake, clients = api
    fake.running_after = None
    clients.insert()
    assert {clients.get().status for _ in range(3)} == {"PROVISIONING"}
    fake.set_status("vm", "RUNNING")
    fake.set_status("vm", "TERMINATED")
    assert clients.get().status == "TERMINATED"
    with pytest.raises(ValueError, match="status 'GONE'"):
        fake.set_status("vm", "GONE")
    with pytest.raises(KeyError, match="no instance 'other'"):
        fake.set_status("other", "RUNNING")


def test_delete_list_and_their_errors(api: tuple[FakeComputeApi, Clients]) -> None:
    fake, clients = api
    for name in ("a", "b", "c"):
        clients.insert(name)
    with pytest.raises(exceptions.Conflict, match="'projects/proj/zones/us-central1-a/instances/a"):
        clients.insert("a")
    pages = clients.instances.list(
        request=compute_v1.ListInstancesRequest(**ZONE, max_results=2)
    ).pages
    assert [[vm.name for vm in page.items] for page in pages] == [["a", "b"], ["c"]]
    assert list(clients.instances.list(project="proj", zone="europe-west4-a")) == []
    op = clients.instances.delete_unary(**ZONE, instance="b")
    assert op.operation_type == "delete" and clients.wait(op).status == DONE
    assert [vm.name for vm in fake.instances()] == ["a", "c"]
    with pytest.raises(exceptions.NotFound, match="instances/b' was not found"):
        clients.get("b")
    with pytest.raises(exceptions.NotFound):
        clients.instances.delete_unary(**ZONE, instance="b")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": "Bad_Name"}, "resource.name"),
        ({"machine_type": "e2-small"}, "resource.machineType"),
        ({"disks": []}, "resource.disks"),
        ({"network_interfaces": []}, "resource.networkInterfaces"),
        ({"labels": {"Team": "x"}}, "resource.labels.Team"),
        (
            {"scheduling": compute_v1.Scheduling(provisioning_model="SPOT")},
            "instanceTerminationAction",
        ),
    ],
)
def test_a_bad_insert_is_refused_naming_the_field(
    api: tuple[FakeComputeApi, Clients], fields: dict[str, Any], field: str
) -> None:
    fake, clients = api
    name = fields.pop("name", "vm")
    with pytest.raises(exceptions.BadRequest, match=field):
        clients.insert(name, **fields)
    assert fake.instances() == []


def test_injected_errors_and_a_failing_insert_operation(
    api: tuple[FakeComputeApi, Clients],
) -> None:
    fake, clients = api
    fake.fail_next("instances.get", 403, "Required 'compute.instances.get' permission")
    with pytest.raises(exceptions.Forbidden, match=r"compute\.instances\.get"):
        clients.get()
    fake.fail_next_insert("no capacity")
    op = clients.insert()
    assert op.status != DONE and fake.instances() == []
    done = clients.operations.get(**ZONE, operation=op.name)
    assert done.status == DONE and done.http_error_status_code == 503
    assert [(e.code, e.message) for e in done.error.errors] == [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", "no capacity")
    ]
    clients.insert()  # the next one is made
    assert [vm.name for vm in fake.instances()] == ["vm"]
    with pytest.raises(ValueError, match=r"method 'instances\.stop'"):
        fake.fail_next("instances.stop", 500, "x")
