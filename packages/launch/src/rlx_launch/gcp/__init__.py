"""The gcp-tpu provider as its callers (`rlx provision`, `rlx up --provider gcp-tpu`) see it: one
API over a plan's nodes, whatever they are.

    with GcpApi.connect(plan) as api:
        api.apply(plan)            # create what is missing, re-create what was preempted or
                                   # failed, wait until every node is ACTIVE
        api.states(plan)           # node id -> state name ("ACTIVE", "SUSPENDED", "MISSING", ...)
        api.hosts(plan.nodes[0])   # the node's host IPs, worker 0 first
        api.list_run(plan.name)    # the run's nodes in the zone ("": every rlx run's)
        api.delete([n.node_id for n in plan.nodes])

A TPU slice (a pool's accelerator_type) goes to the Cloud TPU API (`gcp_tpu.TpuApi`, queued
resources), a VM (machine_type) to Compute Engine (`gcp_compute.ComputeApi`, instances), which
is connected to only when the plan has VMs: a plan of TPU slices calls exactly what `TpuApi`
calls, and needs no Compute Engine role.
"""

from __future__ import annotations

import builtins

from rlx_launch.gcp.base import NodeApi, NodeState
from rlx_launch.gcp.compute import ComputeApi
from rlx_launch.gcp.tpu import TpuApi
from rlx_launch.provision import NodePlan, Plan

__all__ = ["GcpApi"]


class GcpApi(NodeApi):
    """Each node of a plan through the API that makes it: `vms` (node ids) through `compute`,
    the others through `tpu`."""

    def __init__(self, tpu: NodeApi, compute: NodeApi | None, vms: set[str]) -> None:
        if vms and compute is None:
            raise ValueError(f"VM nodes {sorted(vms)} need a Compute Engine API")
        self.tpu = tpu
        self.compute = compute
        self.vms = vms
        if compute is not None:
            self.noun = f"{tpu.noun} and {compute.noun}"

    @classmethod
    def connect(cls, plan: Plan) -> GcpApi:
        """The Cloud TPU API, and Compute Engine when the plan has VMs (each honours its
        endpoint variable: RLX_TPU_API_ENDPOINT, RLX_COMPUTE_API_ENDPOINT)."""
        vms = {n.node_id for n in plan.nodes if n.is_vm}
        tpu = TpuApi.connect(plan.project, plan.zone)
        try:
            compute = ComputeApi.connect(plan.project, plan.zone) if vms else None
        except BaseException:
            tpu.close()
            raise
        return cls(tpu, compute, vms)

    def _api(self, node_id: str) -> NodeApi:
        if node_id in self.vms:
            assert self.compute is not None
            return self.compute
        return self.tpu

    def close(self) -> None:
        try:
            self.tpu.close()
        finally:
            if self.compute is not None:
                self.compute.close()

    def get(self, node_id: str) -> NodeState:
        return self._api(node_id).get(node_id)

    def create(self, node: NodePlan, startup: str, service_account: str) -> None:
        self._api(node.node_id).create(node, startup, service_account)

    def delete_one(self, node_id: str) -> bool:
        return self._api(node_id).delete_one(node_id)

    def hosts(self, node: NodePlan | str) -> builtins.list[str]:
        return self._api(node if isinstance(node, str) else node.node_id).hosts(node)

    def list_run(self, run: str = "") -> builtins.list[NodeState]:
        """The run's queued resources, and its instances when connected to Compute Engine."""
        out = self.tpu.list_run(run)
        if self.compute is not None:
            out += self.compute.list_run(run)
        return sorted(out, key=lambda s: s.node_id)

    def delete(self, node_ids: builtins.list[str]) -> builtins.list[str]:
        """Delete these nodes, each API's at once; return those that existed, in order."""
        existed = set(self.tpu.delete([n for n in node_ids if n not in self.vms]))
        if self.compute is not None:
            existed |= set(self.compute.delete([n for n in node_ids if n in self.vms]))
        return [n for n in node_ids if n in existed]
