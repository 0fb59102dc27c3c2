"""The gcp-tpu provider: a run's nodes as queued resources of the Cloud TPU v2 API.

    with TpuApi.connect(plan.project, plan.zone) as api:  # google-cloud-tpu, ADC
        api.apply(plan)            # create what is missing, re-create what was preempted or
                                   # failed, wait until every node is ACTIVE
        api.states(plan)           # node id -> state name ("ACTIVE", "SUSPENDED", "MISSING", ...)
        api.hosts(plan.nodes[0])   # the node's host IPs, worker 0 first
        api.delete([n.node_id for n in plan.nodes])

`RLX_TPU_API_ENDPOINT=127.0.0.1:PORT` points the client at a local server over an insecure
channel instead of Google (the fake of `rlx_controller.providers.fake_tpu`, for tests and offline
trials); nothing else changes.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlx_core.errors import Cancelled, DeadlineExceeded, NotFound, PermissionDenied, RlxError

if TYPE_CHECKING:
    from google.cloud import tpu_v2

    from rlx_controller.provision import NodePlan, Plan

__all__ = [
    "ENDPOINT_ENV",
    "GONE_STATES",
    "NodeState",
    "ProvisionFailed",
    "TpuApi",
    "state_lines",
]

ENDPOINT_ENV = "RLX_TPU_API_ENDPOINT"
# states of a queued resource whose node is gone or going: `apply` deletes and re-creates them
GONE_STATES = ("FAILED", "SUSPENDED", "SUSPENDING")
MISSING = "MISSING"


class ProvisionFailed(RlxError):
    """A queued resource ended FAILED (the API's reason in the message)."""


@dataclass(frozen=True)
class NodeState:
    """What the API says of one node's queued resource."""

    node_id: str
    state: str  # a QueuedResourceState.State name, or MISSING
    reason: str = ""  # FAILED: the API's error message; SUSPENDED: who suspended it
    labels: Mapping[str, str] | None = None
    accelerator_type: str = ""


class TpuApi:
    """The few Cloud TPU v2 calls rlx makes, for one project and zone."""

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
            raise RlxError(
                f"cannot reach the Cloud TPU API: {e}; run `gcloud auth application-default "
                "login` (or set GOOGLE_APPLICATION_CREDENTIALS)"
            ) from e

    def close(self) -> None:
        self.client.transport.close()

    def __enter__(self) -> TpuApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        with _calling(f"creating {node.node_id}"), contextlib.suppress(gexc.AlreadyExists):
            self.client.create_queued_resource(
                parent=self.parent,
                queued_resource_id=node.node_id,
                queued_resource=self.queued_resource(node, startup, service_account),
            )

    def get(self, node_id: str) -> NodeState:
        from google.api_core import exceptions as gexc

        with _calling(f"reading {node_id}"):
            try:
                qr = self.client.get_queued_resource(name=self.qr_name(node_id))
            except gexc.NotFound:
                return NodeState(node_id, MISSING)
        return _state_of(node_id, qr)

    def states(self, plan: Plan) -> dict[str, NodeState]:
        """Every planned node's state (MISSING when it has no queued resource)."""
        return {n.node_id: self.get(n.node_id) for n in plan.nodes}

    def list_run(self, run: str = "") -> builtins.list[NodeState]:
        """The queued resources rlx made in this zone (label rlx-run), of one run if named."""
        out = []
        with _calling(f"listing the queued resources of {self.parent}"):
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
        with _calling(f"reading node {node_id}"):
            try:
                n = self.client.get_node(name=self.node_name(node_id))
            except gexc.NotFound as e:
                raise NotFound(f"node {node_id} does not exist") from e
        return [ep.ip_address for ep in n.network_endpoints]

    # --- the whole plan ----------------------------------------------------------------------
    def apply(
        self,
        plan: Plan,
        *,
        on_progress: Callable[[dict[str, NodeState], float], None] | None = None,
        poll_s: float = 10.0,
        timeout_s: float | None = None,
        wait: bool = True,
        cancel: threading.Event | None = None,
    ) -> dict[str, str]:
        """Make the plan's nodes exist and wait until all are ACTIVE.

        Creates the missing ones; deletes and re-creates those FAILED or suspended (preempted);
        leaves the rest. Returns node id -> what was done ("created", "re-created (SUSPENDED)",
        "exists"). ProvisionFailed names a node that ends FAILED while waiting, with the API's
        reason; DeadlineExceeded after `timeout_s`; Cancelled when `cancel` is set. Each node
        gets its startup script (`provision.startup_script`)."""
        from rlx_controller.provision import startup_script

        done: dict[str, str] = {}
        sa = plan.provision.service_account
        for node in plan.nodes:
            st = self.get(node.node_id)
            if st.state == MISSING:
                self.create(node, startup_script(plan, node), sa)
                done[node.node_id] = "created"
            elif st.state in GONE_STATES:
                self._delete_one(node.node_id)
                self.create(node, startup_script(plan, node), sa)
                done[node.node_id] = f"re-created ({st.state})"
            else:
                done[node.node_id] = "exists"
        if wait:
            self.wait_active(
                plan, on_progress=on_progress, poll_s=poll_s, timeout_s=timeout_s, cancel=cancel
            )
        return done

    def wait_active(
        self,
        plan: Plan,
        *,
        on_progress: Callable[[dict[str, NodeState], float], None] | None = None,
        poll_s: float = 10.0,
        timeout_s: float | None = None,
        cancel: threading.Event | None = None,
    ) -> dict[str, NodeState]:
        start = time.monotonic()
        cancel = cancel or threading.Event()
        while True:
            states = self.states(plan)
            elapsed = time.monotonic() - start
            if on_progress is not None:
                on_progress(states, elapsed)
            failed = [s for s in states.values() if s.state == "FAILED"]
            if failed:
                raise ProvisionFailed(
                    "; ".join(
                        f"{s.node_id} FAILED: {s.reason or 'no reason given'}" for s in failed
                    )
                )
            gone = [s for s in states.values() if s.state in (*GONE_STATES, MISSING, "DELETING")]
            if gone:
                raise ProvisionFailed(
                    "; ".join(f"{s.node_id} is {s.state} {s.reason}".rstrip() for s in gone)
                    + ": run `rlx provision apply` again"
                )
            if all(s.state == "ACTIVE" for s in states.values()):
                return states
            if timeout_s is not None and elapsed > timeout_s:
                waiting = sorted(f"{s.node_id} {s.state}" for s in states.values())
                raise DeadlineExceeded(
                    f"not ACTIVE after {timeout_s:.0f} s: {', '.join(waiting)}; the queued "
                    "resources stay queued (`rlx provision list`, `rlx provision delete`)"
                )
            if cancel.wait(poll_s):
                raise Cancelled(
                    "stopped waiting for the nodes; their queued resources stay (`rlx provision "
                    "list`, `rlx provision delete`)"
                )

    def _delete_one(self, node_id: str) -> bool:
        from google.api_core import exceptions as gexc
        from google.cloud import tpu_v2

        request = tpu_v2.DeleteQueuedResourceRequest(name=self.qr_name(node_id), force=True)
        with _calling(f"deleting {node_id}"):
            try:
                op = self.client.delete_queued_resource(request=request)
            except gexc.NotFound:
                return False
            op.result()
        return True

    def delete(self, node_ids: builtins.list[str]) -> builtins.list[str]:
        """Delete these queued resources and their nodes (force); return those that existed."""
        return [n for n in node_ids if self._delete_one(n)]


def state_lines(log: Callable[[str], None]) -> Callable[[dict[str, NodeState], float], None]:
    """An `on_progress` for `apply` / `wait_active`: one line to `log` per change of the nodes'
    states, and one a minute while nothing changes."""
    last_text = [""]
    last_at = [-60.0]

    def on_progress(states: dict[str, NodeState], elapsed: float) -> None:
        text = ", ".join(
            f"{s.node_id} {s.state}{' ' + s.reason if s.reason else ''}" for s in states.values()
        )
        if text != last_text[0] or elapsed - last_at[0] >= 60:
            last_text[0], last_at[0] = text, elapsed
            log(f"[{elapsed:5.0f} s] {text}")

    return on_progress


@contextlib.contextmanager
def _calling(what: str) -> Iterator[None]:
    """An error of the API or of its credentials as an RlxError that says what was being done
    (PermissionDenied pointing at the roles the README lists); a caller's own handling of, say,
    NotFound goes inside."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as gauth

    try:
        yield
    except gexc.PermissionDenied as e:
        raise PermissionDenied(
            f"{what}: {e.message or e} (the roles needed: README, Running on TPUs, Permissions)"
        ) from e
    except (gexc.GoogleAPICallError, gexc.RetryError, gauth.GoogleAuthError) as e:
        raise RlxError(f"{what}: {getattr(e, 'message', None) or e}") from e


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
