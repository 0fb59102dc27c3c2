"""What a run needs on Cloud TPU: its nodes, the services on each, their ports and start-up.

    plan = make_plan(cfg)          # pure: no API call; `rlx provision plan` prints it
    plan.nodes[0].node_id          # "math7b-3f2a-trainer-0"
    startup_script(plan, node)     # the script every host of that node runs at boot

One queued resource per node, with the same id; names derive from the run (`provision.name`, or
the run directory's last part and a hash of its URI), so `apply` twice finds what the first made.
Every service has a fixed port (`base_port` + its index in the run), so its address is the host's
IP and that port, known as soon as the node is ACTIVE. A pool that colocates runs its services on
the hosts of another pool: replica i on node i mod n.

The startup script installs rlx at this version (unless that version is there), reads the run
token from Secret Manager (`gcloud secrets versions access`; the token is never in metadata) and
hands over to the node agent (`python -m rlx_controller.node`), which waits for each service's
config in the run directory (written by the controller once every address is known), starts the
services and reports a SIGTERM (preemption, maintenance) to the controller through the run
directory.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import shlex
from dataclasses import dataclass

from rlx_controller._version import __version__
from rlx_controller.run_config import POOLS, ProvisionConfig, RunConfig
from rlx_core import DISTRIBUTIONS
from rlx_core.errors import ConfigError

__all__ = [
    "NodePlan",
    "Plan",
    "ServicePlacement",
    "make_plan",
    "run_name",
    "startup_script",
]

# Where a node keeps rlx's files (token, logs, service configs).
NODE_HOME = "/var/lib/rlx"
# resource ids: lowercase letters, digits, '-'; a letter first; at most 63 characters
_ID_MAX = 63


@dataclass(frozen=True)
class ServicePlacement:
    """One service of the run on one node."""

    name: str  # "trainer", "inference-3", "paramserver-0", "verifier-1"
    kind: str  # trainer, inference, paramserver, verifier
    port: int


@dataclass(frozen=True)
class NodePlan:
    """One TPU node (one slice), created as a queued resource of the same id."""

    node_id: str
    pool: str
    index: int  # within the pool
    accelerator_type: str
    runtime_version: str
    capacity: str  # on-demand, spot, reserved
    reservation: str
    network: str
    subnetwork: str
    labels: dict[str, str]
    services: tuple[ServicePlacement, ...]


@dataclass(frozen=True)
class Plan:
    """Every node of a run, in creation order (trainer, inference, then the other pools)."""

    name: str  # the run's resource-name prefix
    project: str
    zone: str
    run_dir: str
    provision: ProvisionConfig
    nodes: tuple[NodePlan, ...]

    def services(self) -> dict[str, tuple[NodePlan, ServicePlacement]]:
        """Every service by name, with the node it runs on."""
        return {s.name: (n, s) for n in self.nodes for s in n.services}

    def node(self, node_id: str) -> NodePlan:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(node_id)


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    s = re.sub(r"^[^a-z]+", "", s)
    return s or "run"


def run_name(cfg: RunConfig) -> str:
    """The resource-name prefix of a run: `provision.name`, or the last part of the run
    directory (at most 16 characters) and 4 hex digits of its URI's hash."""
    assert cfg.provision is not None
    if cfg.provision.name:
        return cfg.provision.name
    tail = cfg.run_dir.rstrip("/").rsplit("/", 1)[-1]
    digest = hashlib.sha256(cfg.run_dir.rstrip("/").encode()).hexdigest()[:4]
    return f"{_slug(tail)[:16].rstrip('-')}-{digest}"


def make_plan(cfg: RunConfig) -> Plan:
    """The nodes of `cfg`'s `[provision]` and the services on each (no API call)."""
    p = cfg.provision
    if p is None:
        raise ConfigError(
            "the config has no [provision] table (project, zone, token_secret, pools)",
            field="provision",
        )
    name = run_name(cfg)
    names = cfg.services.service_names()
    port = itertools.count(p.base_port)
    placements = {
        pool: [ServicePlacement(n, pool, next(port)) for n in names[pool]] for pool in POOLS
    }
    # pools with slices of their own: one node per service (the trainer: one node)
    own: dict[str, list[list[ServicePlacement]]] = {}
    for pool in POOLS:
        if p.pool(pool).accelerator_type:
            own[pool] = [[s] for s in placements[pool]]
    for pool in POOLS:
        target = p.pool(pool).colocate
        if target:
            hosts = own[target]
            for i, s in enumerate(placements[pool]):
                hosts[i % len(hosts)].append(s)
    nodes = []
    for pool in POOLS:
        if pool not in own:
            continue
        pc = p.pool(pool)
        for i, services in enumerate(own[pool]):
            node_id = f"{name}-{pool}-{i}"
            if len(node_id) > _ID_MAX:
                raise ConfigError(
                    f"resource name {node_id!r} is longer than {_ID_MAX} characters: shorten it",
                    field="provision.name",
                    value=name,
                )
            nodes.append(
                NodePlan(
                    node_id=node_id,
                    pool=pool,
                    index=i,
                    accelerator_type=pc.accelerator_type,
                    runtime_version=pc.runtime_version or p.runtime_version,
                    capacity=pc.capacity,
                    reservation=pc.reservation,
                    network=pc.network or p.network,
                    subnetwork=pc.subnetwork or p.subnetwork,
                    labels={
                        **p.labels,
                        "rlx-run": name,
                        "rlx-pool": pool,
                        "rlx-index": str(i),
                    },
                    services=tuple(services),
                )
            )
    return Plan(
        name=name,
        project=p.project,
        zone=p.zone,
        run_dir=cfg.run_dir,
        provision=p,
        nodes=tuple(nodes),
    )


def install_args(p: ProvisionConfig) -> str:
    """The pip arguments a node installs rlx with."""
    if p.install:
        return p.install
    return " ".join(f"{d}=={__version__}" for d in DISTRIBUTIONS)


def startup_script(plan: Plan, node: NodePlan) -> str:
    """The `startup-script` of `node`: every host of the slice runs it at boot (and again after
    a restart). It holds no secret: the token comes from Secret Manager."""
    p = plan.provision
    q = shlex.quote
    services = " ".join(f"--service {q(f'{s.name}:{s.kind}:{s.port}')}" for s in node.services)
    multi = ""
    if node.pool == "trainer":
        # every host of the trainer's slice is one process of one JAX mesh; on Cloud TPU JAX
        # finds the coordinator, the process count and its id itself
        # (RLX_COORDINATOR set empty in the environment: one process, no jax.distributed)
        multi = 'export RLX_COORDINATOR="${RLX_COORDINATOR-auto}"\n'
    check = (
        "import importlib.metadata as m, sys; "
        f'sys.exit(m.version("rlx-controller") != "{__version__}")'
    )
    return f"""#!/bin/bash
# rlx {__version__}: node {node.node_id} of run {plan.name} ({plan.run_dir})
# pool {node.pool}; services: {", ".join(s.name for s in node.services)}
set -euo pipefail
RLX_HOME="${{RLX_HOME:-{NODE_HOME}}}"
mkdir -p "$RLX_HOME"
chmod 700 "$RLX_HOME"
exec >>"$RLX_HOME/startup.log" 2>&1
echo "=== rlx startup $(date -u +%FT%TZ)"
PYTHON="${{RLX_PYTHON:-python3}}"
# this host's number in the slice (0 on a single-host slice)
WORKER="${{RLX_WORKER:-$(curl -sf -H 'Metadata-Flavor: Google' \\
  http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number \\
  || echo 0)}}"

# 1. rlx at the run's version (skipped when it is installed already, e.g. on a restart)
if ! "$PYTHON" -c {q(check)} 2>/dev/null; then
  "$PYTHON" -m pip install --quiet {install_args(p)}
fi

# 2. the run token, from Secret Manager (never written into metadata)
umask 077
gcloud secrets versions access latest --secret={q(p.token_secret)} --project={q(p.project)} \\
  >"$RLX_HOME/token.tmp"
mv "$RLX_HOME/token.tmp" "$RLX_HOME/token"

# 3. the services of this node: the agent waits for their configs in the run directory
{multi}exec "$PYTHON" -m rlx_controller.node --run-dir {q(plan.run_dir)} --node {q(node.node_id)} \\
  --worker "$WORKER" --token-file "$RLX_HOME/token" --home "$RLX_HOME" \\
  --bind "${{RLX_BIND:-0.0.0.0}}" {services}
"""
