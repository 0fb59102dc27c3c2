"""`[provision]` of a run config: where a gcp-tpu run's nodes are created (Cloud TPU slices,
Compute Engine VMs), pool by pool. rlx_launch.provision makes the plan from it; the run config
(rlx_core.configs.run) composes it as `provision` and checks it against `[services]`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from rlx_core.configs.checks import at_least, suggest
from rlx_core.errors import ConfigError

__all__ = ["DEFAULT_DISK_GB", "DEFAULT_IMAGE", "POOLS", "PoolConfig", "ProvisionConfig"]

# The pools of `[provision]`, one per service kind.
POOLS = ("trainer", "inference", "paramserver", "verifier")
_RESOURCE_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# the boot image and disk of machine-type pools that set none (Debian 12 has python3.11 and gcloud)
DEFAULT_IMAGE = "projects/debian-cloud/global/images/family/debian-12"
DEFAULT_DISK_GB = 100
_TPU_TYPE = re.compile(r"^[a-z0-9]+-\d+$")
_MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*-[a-z0-9-]*[a-z0-9]$")


@dataclass(frozen=True, kw_only=True)
class PoolConfig:
    """The machines of one kind of service: TPU slices of its own (`accelerator_type`, Cloud TPU
    queued resources), CPU VMs of its own (`machine_type`, Compute Engine instances), or the
    hosts of another pool (`colocate`)."""

    accelerator_type: str = ""  # TPU type of each slice, e.g. "v5p-8", "v5litepod-16", "v6e-8"
    # Compute Engine machine type of each VM, e.g. "n2-standard-32", "c3-standard-8" (CPU only)
    machine_type: str = ""
    colocate: str = ""  # run on the hosts of this pool (one with nodes of its own) instead
    count: int = 0  # slices or VMs; 0 = as many as [services] asks (1 for the trainer)
    capacity: Literal["on-demand", "spot", "reserved"] = "on-demand"
    # capacity = "reserved": the reservation's full resource name (machine_type: or its name)
    reservation: str = ""
    runtime_version: str = ""  # TPU VM image; "" = provision.runtime_version
    # machine_type: the VMs' boot image; "" = projects/debian-cloud/global/images/family/debian-12
    image: str = ""
    disk_gb: int = 0  # machine_type: boot disk size in GB, >= 10; 0 = 100
    network: str = ""  # VPC network; "" = provision.network
    subnetwork: str = ""  # "" = provision.subnetwork

    def __post_init__(self) -> None:
        at_least(self, 0, "count", "disk_gb")
        for name in ("image", "disk_gb"):
            if getattr(self, name) and not self.machine_type:
                raise ConfigError(
                    "is the boot disk of machine_type VMs: give machine_type, or leave it out",
                    field=name,
                    value=getattr(self, name),
                )
        given = [f for f in ("accelerator_type", "machine_type", "colocate") if getattr(self, f)]
        if len(given) != 1:
            raise ConfigError(
                "give exactly one of accelerator_type (TPU slices of its own), machine_type "
                "(Compute Engine VMs of its own) and colocate",
                field=given[1] if given else "accelerator_type",
                value=getattr(self, given[1]) if given else "",
            )
        if self.colocate and self.colocate not in POOLS:
            raise ConfigError(
                f"must name a pool with nodes of its own: one of {', '.join(POOLS)}"
                + (f" ({hint})" if (hint := suggest(self.colocate, POOLS)) else ""),
                field="colocate",
                value=self.colocate,
            )
        if self.accelerator_type and not _TPU_TYPE.match(self.accelerator_type):
            raise ConfigError(
                "must be a Cloud TPU accelerator type such as v5p-8, v5litepod-16, v6e-8",
                field="accelerator_type",
                value=self.accelerator_type,
            )
        if self.machine_type and (
            _TPU_TYPE.match(self.machine_type) or not _MACHINE_TYPE.match(self.machine_type)
        ):
            raise ConfigError(
                "must be a Compute Engine machine type such as n2-standard-32, c3-standard-8 "
                "(a TPU type goes in accelerator_type)",
                field="machine_type",
                value=self.machine_type,
            )
        if self.machine_type and self.runtime_version:
            raise ConfigError(
                "is the TPU VM image of accelerator_type slices; machine_type VMs boot `image`",
                field="runtime_version",
                value=self.runtime_version,
            )
        if 0 < self.disk_gb < 10:
            raise ConfigError(
                "must be >= 10 (GB), or 0 for 100", field="disk_gb", value=self.disk_gb
            )
        if (self.capacity == "reserved") != bool(self.reservation):
            raise ConfigError(
                'reservation is needed with capacity = "reserved", and only then',
                field="reservation",
                value=self.reservation,
            )

    @property
    def has_nodes(self) -> bool:
        """Whether the pool has nodes of its own (TPU slices or VMs), not another's hosts."""
        return bool(self.accelerator_type or self.machine_type)


@dataclass(frozen=True, kw_only=True)
class ProvisionConfig:
    """Where `rlx provision` and `rlx up --provider gcp-tpu` create the run's TPU VMs (and the
    Compute Engine VMs of machine_type pools)."""

    project: str  # Google Cloud project id
    zone: str  # e.g. "us-east5-a": where the queued resources (and VMs) are created
    # Secret Manager secret holding the run token; every node reads it at boot (never inline)
    token_secret: str
    # this machine's copy of the same token (the controller's); "" = ~/.config/rlx/token
    token_file: str = ""
    runtime_version: str = "v2-alpha-tpuv5"  # TPU VM image of the pools that set none
    network: str = "default"  # VPC network of the pools that set none
    subnetwork: str = ""  # "" = the network's default for the zone
    service_account: str = ""  # email the nodes run as; "" = the project's default
    name: str = ""  # prefix of resource names ([a-z0-9-]); "" = derived from run_dir
    install: str = ""  # pip arguments the nodes install rlx with; "" = rlx at this version
    base_port: int = 50100  # services listen on base_port, base_port + 1, ... of their hosts
    poll_s: float = 30.0  # seconds between checks of the nodes' states (apply, preemption)
    # the trainer's mesh over its slice (data, fsdp, tensor); fsdp 0 = every device the others
    # leave
    trainer_mesh: tuple[int, int, int] = (1, 0, 1)
    # the inference engine's tensor-parallel size over its slice (`engine.tensor_parallel`: every
    # host of a slice runs one process of one mesh); 0 = every device of the slice
    inference_tensor_parallel: int = 0
    labels: dict[str, str] = field(default_factory=dict)  # added to every node (QR and VM)
    trainer: PoolConfig = field(default_factory=lambda: PoolConfig(accelerator_type="v5p-8"))
    inference: PoolConfig = field(default_factory=lambda: PoolConfig(accelerator_type="v5p-8"))
    paramserver: PoolConfig = field(default_factory=lambda: PoolConfig(colocate="inference"))
    verifier: PoolConfig = field(default_factory=lambda: PoolConfig(colocate="inference"))

    def __post_init__(self) -> None:
        for name in ("project", "zone", "token_secret", "runtime_version", "network"):
            if not getattr(self, name):
                raise ConfigError("is empty", field=name)
        if self.name and not (_RESOURCE_NAME.match(self.name) and len(self.name) <= 30):
            raise ConfigError(
                "must be lowercase letters, digits and '-', start with a letter, <= 30 chars",
                field="name",
                value=self.name,
            )
        if not self.poll_s > 0:
            raise ConfigError("must be > 0", field="poll_s", value=self.poll_s)
        data, fsdp, tensor = self.trainer_mesh
        if data < 1 or tensor < 1 or fsdp < 0:
            raise ConfigError(
                "(data, fsdp, tensor): data and tensor >= 1, fsdp >= 1 or 0 (the rest)",
                field="trainer_mesh",
                value=self.trainer_mesh,
            )
        if self.inference_tensor_parallel < 0:
            raise ConfigError(
                "must be >= 0 (0: every device of the slice)",
                field="inference_tensor_parallel",
                value=self.inference_tensor_parallel,
            )
        if not 1024 <= self.base_port <= 65000:
            raise ConfigError("must be within 1024-65000", field="base_port", value=self.base_port)
        for key, value in self.labels.items():
            if not (
                re.match(r"^[a-z][a-z0-9_-]{0,62}$", key) and re.match(r"^[a-z0-9_-]{0,63}$", value)
            ):
                raise ConfigError(
                    "label keys and values: lowercase letters, digits, '_' and '-' (keys start "
                    "with a letter), <= 63 chars",
                    field=f"labels.{key}",
                    value=value,
                )
        self._check_pools()

    def _check_pools(self) -> None:
        for other in ("colocate", "machine_type"):
            # its hosts form one JAX mesh over a TPU slice (jax.distributed finds them there)
            if getattr(self.trainer, other):
                raise ConfigError(
                    "the trainer needs a TPU slice of its own: give accelerator_type",
                    field=f"trainer.{other}",
                    value=getattr(self.trainer, other),
                )
        for name in POOLS:
            target = self.pool(name).colocate
            if target and not self.pool(target).has_nodes:
                raise ConfigError(
                    f"pool {target!r} has no nodes of its own (it colocates too): name one with "
                    "accelerator_type or machine_type",
                    field=f"{name}.colocate",
                    value=target,
                )
        if self.trainer.count > 1:
            raise ConfigError(
                "one trainer slice (a bigger accelerator_type makes it bigger)",
                field="trainer.count",
                value=self.trainer.count,
            )

    def pool(self, name: str) -> PoolConfig:
        pool: PoolConfig = getattr(self, name)
        return pool
