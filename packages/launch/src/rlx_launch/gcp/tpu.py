"""The gcp-tpu provider's TPU slices: nodes as queued resources of the Cloud TPU v2 API (the
callers use `gcp.GcpApi`, which sends a plan's VMs to `gcp_compute.ComputeApi` instead).

    with TpuApi.connect(plan.project, plan.zone) as api:  # google-cloud-tpu, ADC
        api.apply(plan)            # create what is missing, re-create what was preempted or
                                   # failed, wait until every node is ACTIVE
        api.states(plan)           # node id -> state name ("ACTIVE", "SUSPENDED", "MISSING", ...)
        api.hosts(plan.nodes[0])   # the node's host IPs, worker 0 first
        api.delete([n.node_id for n in plan.nodes])

`RLX_TPU_API_ENDPOINT=127.0.0.1:PORT` points the client at a local server over an insecure
channel instead of Google (the fake of `rlx_testing.fake_tpu`, for tests and offline
trials); nothing else changes.
"""

from __future__ import annotations

import builtins
import contextlib
import os
from typing import TYPE_CHECKING, Any

from rlx_core.errors import NotFound
from rlx_launch.gcp.base import (
    GONE_STATES,
    MISSING,
    NodeApi,
    NodeState,
    ProvisionFailed,
    calling,
    no_credentials,
    state_lines,
)

if TYPE_CHECKING:
    from google.cloud import tpu_v2

    from rlx_launch.provision import NodePlan

__all__ = [
    "ENDPOINT_ENV",
    "GONE_STATES",
    "NodeState",
    "ProvisionFailed",
    "TpuApi",
    "state_lines",
]

ENDPOINT_ENV = "RLX_TPU_API_ENDPOINT"


class TpuApi(NodeApi):
    """The few Cloud TPU v2 calls rlx makes, for one project and zone (`apply`, `wait_active`,
    `states` and `delete` are NodeApi's)."""

    def __init__(self, client: tpu_v2.TpuClient, project: str, zone: str) -> None:
        self.client = client
        self.project = project
        self.zone = zone
        self.parent = f"projects/{project}/locations/{zone}"

    @classmethod
    def connect(cls, project: str, zone: str) -> TpuApi:
        """The real client (Application Default Credentials), or, with RLX_TPU_API_ENDPOINT
        set, one on an insecure channel to that local address."""
        from google.cloud import tpu_v2

        endpoint = os.environ.get(ENDPOINT_ENV, "")
        if endpoint:
            import grpc
            from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcTransport

            transport = TpuGrpcTransport(channel=grpc.insecure_channel(endpoint))
            return cls(tpu_v2.TpuClient(transport=transport), project, zone)
        try:
            return cls(tpu_v2.TpuClient(), project, zone)
        except Exception as e:  # google.auth.exceptions.DefaultCredentialsError and kin
            raise no_credentials("Cloud TPU API", e) from e

    def close(self) -> None:
        self.client.transport.close()

    # --- names -------------------------------------------------------------------------------
    def qr_name(self, node_id: str) -> str:
        return f"{self.parent}/queuedResources/{node_id}"

    def node_name(self, node_id: str) -> str:
        return f"{self.parent}/nodes/{node_id}"

    # --- requests ----------------------------------------------------------------------------
    def queued_resource(self, node: NodePlan, startup: str, service_account: str) -> Any:
        """The QueuedResource message that creates `node`."""
        from google.cloud import tpu_v2

        QR = tpu_v2.QueuedResource
        spot = node.capacity == "spot"
        reserved = node.capacity == "reserved"
        tpu_node = tpu_v2.Node(
            accelerator_type=node.accelerator_type,
            runtime_version=node.runtime_version,
            description=f"rlx {node.labels.get('rlx-run', '')} {node.pool} {node.index}",
            network_config=tpu_v2.NetworkConfig(
                network=node.network,
                subnetwork=node.subnetwork,
                enable_external_ips=True,
            ),
            labels=dict(node.labels),
            metadata={"startup-script": startup},
            scheduling_config=tpu_v2.SchedulingConfig(spot=spot, reserved=reserved),
        )
        if service_account:
            tpu_node.service_account = tpu_v2.ServiceAccount(
                email=service_account,
                scope=["https://www.googleapis.com/auth/cloud-platform"],
            )
        qr = QR(
            tpu=QR.Tpu(
                node_spec=[QR.Tpu.NodeSpec(parent=self.parent, node_id=node.node_id, node=tpu_node)]
            )
        )
        if spot:
            qr.spot = QR.Spot()
        if reserved:
            qr.guaranteed = QR.Guaranteed()
            qr.reservation_name = node.reservation
        return qr

    def create(self, node: NodePlan, startup: str, service_account: str) -> None:
        """Create the queued resource of `node` (returns once the API accepted it)."""
        from google.api_core import exceptions as gexc

        # AlreadyExists: created meanwhile (a concurrent apply): the same name, the same plan
        with calling(f"creating {node.node_id}"), contextlib.suppress(gexc.AlreadyExists):
            self.client.create_queued_resource(
                parent=self.parent,
                queued_resource_id=node.node_id,
                queued_resource=self.queued_resource(node, startup, service_account),
            )

    def get(self, node_id: str) -> NodeState:
        from google.api_core import exceptions as gexc

        with calling(f"reading {node_id}"):
            try:
                qr = self.client.get_queued_resource(name=self.qr_name(node_id))
            except gexc.NotFound:
                return NodeState(node_id, MISSING)
        return _state_of(node_id, qr)

    def list_run(self, run: str = "") -> builtins.list[NodeState]:
        """The queued resources rlx made in this zone (label rlx-run), of one run if named."""
        out = []
        with calling(f"listing the queued resources of {self.parent}"):
            for qr in self.client.list_queued_resources(parent=self.parent):
                node_id = qr.name.rsplit("/", 1)[-1]
                st = _state_of(node_id, qr)
                labels = st.labels or {}
                if "rlx-run" not in labels or (run and labels["rlx-run"] != run):
                    continue
                out.append(st)
        return sorted(out, key=lambda s: s.node_id)

    def hosts(self, node: NodePlan | str) -> builtins.list[str]:
        """The IPs of a node's hosts, worker 0 first."""
        from google.api_core import exceptions as gexc

        node_id = node if isinstance(node, str) else node.node_id
        with calling(f"reading node {node_id}"):
            try:
                n = self.client.get_node(name=self.node_name(node_id))
            except gexc.NotFound as e:
                raise NotFound(f"node {node_id} does not exist") from e
        return [ep.ip_address for ep in n.network_endpoints]

    def delete_one(self, node_id: str) -> bool:
        from google.api_core import exceptions as gexc
        from google.cloud import tpu_v2

        request = tpu_v2.DeleteQueuedResourceRequest(name=self.qr_name(node_id), force=True)
        with calling(f"deleting {node_id}"):
            try:
                op = self.client.delete_queued_resource(request=request)
            except gexc.NotFound:
                return False
            op.result()
        return True


def _state_of(node_id: str, qr: Any) -> NodeState:
    from google.cloud import tpu_v2

    state = qr.state
    name = tpu_v2.QueuedResourceState.State(state.state).name
    reason = ""
    if name == "FAILED" and state.failed_data and state.failed_data.error:
        reason = state.failed_data.error.message
    elif name in ("SUSPENDED", "SUSPENDING"):
        initiator = tpu_v2.QueuedResourceState.StateInitiator(state.state_initiator).name
        reason = "(preempted)" if initiator == "SERVICE" else f"({initiator.lower()})"
    labels: dict[str, str] = {}
    accelerator = ""
    if qr.tpu and qr.tpu.node_spec:
        spec = qr.tpu.node_spec[0]
        labels = dict(spec.node.labels)
        accelerator = spec.node.accelerator_type
    return NodeState(node_id, name, reason, labels, accelerator)
