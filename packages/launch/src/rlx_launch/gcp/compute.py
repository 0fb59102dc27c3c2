"""The gcp-tpu provider's CPU VMs: the nodes of machine_type pools as Compute Engine instances
(google-cloud-compute; the callers use `gcp.GcpApi`, which sends a plan's TPU slices to
`gcp_tpu.TpuApi` instead).

    with ComputeApi.connect(plan.project, plan.zone) as api:  # REST, ADC
        api.apply(plan)            # (a plan of VMs only) create what is missing, re-create what
                                   # was preempted or stopped, wait until every VM is RUNNING
        api.states(plan)           # node id -> state name ("ACTIVE", "SUSPENDED", "MISSING", ...)
        api.hosts(node)            # [the VM's internal IP]
        api.delete([...])

An instance's status is reported as the queued resources' state of the same meaning, which
`apply` and the controller act on: RUNNING is ACTIVE; PROVISIONING and STAGING are CREATING;
STOPPING, SUSPENDING, STOPPED, TERMINATED and SUSPENDED (a spot VM preempted stops: it is
TERMINATED) are SUSPENDING / SUSPENDED, which `apply` deletes and creates again from the plan
(not started: the plan, its startup script or machine type may have changed since); an instance
that does not exist is MISSING, or FAILED when this process asked for it and the insert
operation failed (no capacity, quota), with the operation's error as the reason.

`RLX_COMPUTE_API_ENDPOINT=http://127.0.0.1:PORT` points the client at a local server over plain
HTTP without credentials instead of Google (the fake of `rlx_testing.fake_compute`,
for tests and offline trials); nothing else changes.
"""

from __future__ import annotations

import builtins
import os
import re
from typing import TYPE_CHECKING, Any

from rlx_core.errors import NotFound, RlxError
from rlx_launch.gcp.base import (
    MISSING,
    NodeApi,
    NodeState,
    calling,
    no_credentials,
)

if TYPE_CHECKING:
    from google.cloud import compute_v1

    from rlx_launch.provision import NodePlan

__all__ = ["ENDPOINT_ENV", "ComputeApi"]

ENDPOINT_ENV = "RLX_COMPUTE_API_ENDPOINT"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# machine families whose boot disk must be a Hyperdisk; the others get pd-balanced (the API's
# default, pd-standard, is refused by C3 and the newer families)
_HYPERDISK_ONLY = ("c4", "c4a", "c4d", "n4", "n4a", "n4d", "m4", "x4", "h4d")

# An instance's status -> the state name apply and the controller act on (gcp_base).
_STATES = {
    "PENDING": "WAITING_FOR_RESOURCES",
    "PROVISIONING": "CREATING",
    "STAGING": "CREATING",
    "RUNNING": "ACTIVE",
    "REPAIRING": "REPAIRING",
    "PENDING_STOP": "SUSPENDING",
    "STOPPING": "SUSPENDING",
    "SUSPENDING": "SUSPENDING",
    "STOPPED": "SUSPENDED",
    "TERMINATED": "SUSPENDED",
    "SUSPENDED": "SUSPENDED",
    "DEPROVISIONING": "DELETING",
}


class ComputeApi(NodeApi):
    """The few Compute Engine calls rlx makes, for one project and zone (`apply`,
    `wait_active` and `states` are NodeApi's)."""

    noun = "instances"

    def __init__(
        self,
        instances: compute_v1.InstancesClient,
        operations: compute_v1.ZoneOperationsClient,
        project: str,
        zone: str,
    ) -> None:
        self.instances = instances
        self.operations = operations
        self.project = project
        self.zone = zone
        self.region = zone.rsplit("-", 1)[0]
        # node id -> the name of the insert operation this process started; an instance that
        # does not exist (yet) is FAILED when that operation failed
        self.inserting: dict[str, str] = {}

    @classmethod
    def connect(cls, project: str, zone: str) -> ComputeApi:
        """The real clients (Application Default Credentials), or, with RLX_COMPUTE_API_ENDPOINT
        set, ones that call that local URL over plain HTTP without credentials."""
        from google.cloud import compute_v1

        endpoint = os.environ.get(ENDPOINT_ENV, "")
        if endpoint:
            from google.api_core.client_options import ClientOptions
            from google.auth.credentials import AnonymousCredentials

            # the REST transport takes the scheme from the endpoint: http:// for a local fake
            url = endpoint if "://" in endpoint else f"http://{endpoint}"
            local: dict[str, Any] = {
                "credentials": AnonymousCredentials(),
                "transport": "rest",
                "client_options": ClientOptions(api_endpoint=url),
            }
            return cls(
                compute_v1.InstancesClient(**local),
                compute_v1.ZoneOperationsClient(**local),
                project,
                zone,
            )
        try:
            return cls(
                compute_v1.InstancesClient(), compute_v1.ZoneOperationsClient(), project, zone
            )
        except Exception as e:  # google.auth.exceptions.DefaultCredentialsError and kin
            raise no_credentials("Compute Engine API", e) from e

    def close(self) -> None:
        self.instances.transport.close()
        self.operations.transport.close()

    # --- requests ----------------------------------------------------------------------------
    def instance(self, node: NodePlan, startup: str, service_account: str) -> Any:
        """The Instance message that creates `node`."""
        from google.cloud import compute_v1

        scheduling = compute_v1.Scheduling(provisioning_model="STANDARD")
        if node.capacity == "spot":
            # a preempted spot VM stops (its disk stays until apply deletes it); spot VMs
            # neither restart nor migrate
            scheduling = compute_v1.Scheduling(
                provisioning_model="SPOT",
                instance_termination_action="STOP",
                automatic_restart=False,
                on_host_maintenance="TERMINATE",
            )
        nic = compute_v1.NetworkInterface(
            network=self._network(node.network),
            # an external IP: the VM pip-installs rlx (README: a route to your package index)
            access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")],
        )
        if node.subnetwork:
            nic.subnetwork = self._subnetwork(node.subnetwork)
        vm = compute_v1.Instance(
            name=node.node_id,
            description=f"rlx {node.labels.get('rlx-run', '')} {node.pool} {node.index}",
            machine_type=f"zones/{self.zone}/machineTypes/{node.machine_type}",
            labels=dict(node.labels),
            metadata=compute_v1.Metadata(
                items=[compute_v1.Items(key="startup-script", value=startup)]
            ),
            disks=[
                compute_v1.AttachedDisk(
                    boot=True,
                    auto_delete=True,
                    type_="PERSISTENT",
                    initialize_params=compute_v1.AttachedDiskInitializeParams(
                        source_image=node.image,
                        disk_size_gb=node.disk_gb,
                        disk_type=f"zones/{self.zone}/diskTypes/{_disk_type(node.machine_type)}",
                        labels=dict(node.labels),
                    ),
                )
            ],
            network_interfaces=[nic],
            scheduling=scheduling,
            # without one the VM has no identity at all (unlike gcloud, the API attaches none):
            # "default" is the project's Compute Engine default service account
            service_accounts=[
                compute_v1.ServiceAccount(email=service_account or "default", scopes=[SCOPE])
            ],
        )
        if node.capacity == "reserved":
            vm.reservation_affinity = compute_v1.ReservationAffinity(
                consume_reservation_type="SPECIFIC_RESERVATION",
                key="compute.googleapis.com/reservation-name",
                values=[self._reservation(node.reservation)],
            )
        return vm

    def _network(self, network: str) -> str:
        return network if "/" in network else f"projects/{self.project}/global/networks/{network}"

    def _subnetwork(self, subnetwork: str) -> str:
        if "/" in subnetwork:
            return subnetwork
        return f"projects/{self.project}/regions/{self.region}/subnetworks/{subnetwork}"

    def _reservation(self, reservation: str) -> str:
        """The reservation as an instance names it: its name (this project's), or
        projects/P/reservations/NAME (another project's, shared), from either form."""
        m = re.fullmatch(r"projects/([^/]+)/.*reservations/([^/]+)", reservation)
        if m is None:
            return reservation
        project, name = m.groups()
        return name if project == self.project else f"projects/{project}/reservations/{name}"

    def create(self, node: NodePlan, startup: str, service_account: str) -> None:
        """Insert the instance of `node` (returns once the API accepted it; `get` reports the
        insert's failure, if it fails)."""
        from google.api_core import exceptions as gexc

        # *_unary: the Operation itself, which `get` and `_wait` read through our own client;
        # insert()'s ExtendedOperation would poll through a client the transport makes, on
        # Google's endpoint whatever ours is, and would block
        with calling(f"creating {node.node_id}"):
            try:
                op = self.instances.insert_unary(
                    project=self.project,
                    zone=self.zone,
                    instance_resource=self.instance(node, startup, service_account),
                )
            except gexc.Conflict:
                return  # created meanwhile (a concurrent apply): the same name, the same plan
        self.inserting[node.node_id] = op.name

    def get(self, node_id: str) -> NodeState:
        from google.api_core import exceptions as gexc

        with calling(f"reading {node_id}"):
            try:
                vm = self.instances.get(project=self.project, zone=self.zone, instance=node_id)
            except gexc.NotFound:
                return self._not_there(node_id)
        return _state_of(vm)

    def _not_there(self, node_id: str) -> NodeState:
        """MISSING; or, while this process's insert of it runs, CREATING, and FAILED with its
        error once it failed."""
        op_name = self.inserting.get(node_id)
        if op_name is None:
            return NodeState(node_id, MISSING)
        from google.cloud import compute_v1

        with calling(f"reading the insert operation of {node_id}"):
            op = self.operations.get(project=self.project, zone=self.zone, operation=op_name)
        error = _error_of(op)
        if error:
            return NodeState(node_id, "FAILED", error)
        if op.status != compute_v1.Operation.Status.DONE:
            return NodeState(node_id, "CREATING", "(inserting)")
        del self.inserting[node_id]  # made, and deleted since
        return NodeState(node_id, MISSING)

    def list_run(self, run: str = "") -> builtins.list[NodeState]:
        """The instances rlx made in this zone (label rlx-run), of one run if named."""
        out = []
        with calling(f"listing the instances of projects/{self.project}/zones/{self.zone}"):
            for vm in self.instances.list(project=self.project, zone=self.zone):
                labels = vm.labels
                if "rlx-run" not in labels or (run and labels["rlx-run"] != run):
                    continue
                out.append(_state_of(vm))
        return sorted(out, key=lambda s: s.node_id)

    def hosts(self, node: NodePlan | str) -> builtins.list[str]:
        """[the VM's internal IP] (one host, worker 0)."""
        from google.api_core import exceptions as gexc

        node_id = node if isinstance(node, str) else node.node_id
        with calling(f"reading instance {node_id}"):
            try:
                vm = self.instances.get(project=self.project, zone=self.zone, instance=node_id)
            except gexc.NotFound as e:
                raise NotFound(f"instance {node_id} does not exist") from e
        return [nic.network_i_p for nic in vm.network_interfaces[:1] if nic.network_i_p]

    # --- deleting ----------------------------------------------------------------------------
    def _start_delete(self, node_id: str) -> str | None:
        """Ask for the instance's deletion: the operation's name, None when there is none."""
        from google.api_core import exceptions as gexc

        self.inserting.pop(node_id, None)
        with calling(f"deleting {node_id}"):
            try:
                op = self.instances.delete_unary(
                    project=self.project, zone=self.zone, instance=node_id
                )
            except gexc.NotFound:
                return None
        return str(op.name)

    def _wait(self, op_name: str, what: str) -> None:
        """Wait until the operation is DONE; RlxError naming `what` when it failed."""
        from google.cloud import compute_v1

        done = compute_v1.Operation.Status.DONE
        with calling(what):
            while True:
                # returns when it is done, or after about two minutes
                op = self.operations.wait(project=self.project, zone=self.zone, operation=op_name)
                if op.status == done:
                    break
        error = _error_of(op)
        if error:
            raise RlxError(f"{what}: {error}")

    def delete_one(self, node_id: str) -> bool:
        op = self._start_delete(node_id)
        if op is None:
            return False
        self._wait(op, f"deleting {node_id}")
        return True

    def delete(self, node_ids: builtins.list[str]) -> builtins.list[str]:
        """Delete these instances (all asked for first, then waited on); return those that
        existed."""
        ops = {n: self._start_delete(n) for n in node_ids}
        for node_id, op in ops.items():
            if op is not None:
                self._wait(op, f"deleting {node_id}")
        return [n for n, op in ops.items() if op is not None]


def _disk_type(machine_type: str) -> str:
    family = machine_type.split("-", 1)[0]
    return "hyperdisk-balanced" if family in _HYPERDISK_ONLY else "pd-balanced"


def _error_of(op: Any) -> str:
    """The error of a finished operation ("" when none)."""
    if op.error and op.error.errors:
        return "; ".join(e.message or e.code for e in op.error.errors)
    return str(op.http_error_message) if op.http_error_status_code else ""


def _state_of(vm: Any) -> NodeState:
    status = vm.status
    state = _STATES.get(status, status or "UNKNOWN")
    reason = ""
    if state != "ACTIVE" and status:
        reason = f"({status.lower()}{': ' + vm.status_message if vm.status_message else ''})"
    return NodeState(
        vm.name,
        state,
        reason,
        dict(vm.labels),
        machine_type=vm.machine_type.rsplit("/", 1)[-1],
    )
