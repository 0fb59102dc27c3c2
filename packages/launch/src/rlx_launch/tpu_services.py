"""The services of a gcp-tpu run: on TPU VMs of queued resources, and the Compute Engine VMs of
machine_type pools (`services.provider = "gcp-tpu"`), driven like the local ones (the Driver sees
the same interface as RunServices).

`start` provisions what is missing (`GcpApi.apply`: creates the missing queued resources and
instances, re-creates preempted ones, waits until all are ACTIVE), reads each node's host IPs,
writes every service's config into the run directory (`nodes/NAME.json`, with the addresses of
the others), where the node agents pick it up, and waits until every service answers READY. A
monitor thread then watches the nodes and the agents' reports: a node that is SUSPENDED
(preempted; a VM stopped or terminated), FAILED or gone, or an agent that got SIGTERM, makes the
controller snapshot and stop (`on_preempted`); `rlx resume RUN` provisions again and continues
from that snapshot. The nodes are left running when the run ends: `rlx provision delete RUN`
deletes them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlx_controller import RunPaths
from rlx_core.clients import LifecycleClient
from rlx_core.config import to_toml
from rlx_core.configs.run import RunConfig
from rlx_core.errors import Cancelled, ConfigError, RlxError
from rlx_core.rpc.auth import default_token_path
from rlx_core.storage import join_uri
from rlx_launch.gcp import GcpApi
from rlx_launch.gcp.base import NodeApi, state_lines
from rlx_launch.local import ServiceHandle, write_services
from rlx_launch.node import EVENTS_PREFIX, EXITS_PREFIX, config_key, exit_key
from rlx_launch.provision import Plan, make_plan
from rlx_launch.service_configs import (
    inference_config,
    paramserver_config,
    trainer_config,
    verifier_config,
)
from rlx_launch.services import RunServices

__all__ = ["Preempted", "TpuRunServices", "tpu_token_file"]

READY_TIMEOUT_S = 3600.0  # install, model load and compilation on a fresh VM


def tpu_token_file(cfg: RunConfig) -> Path:
    """The controller's copy of the run token (`provision.token_file`, default
    ~/.config/rlx/token): the nodes read the same token from Secret Manager."""
    assert cfg.provision is not None
    p = cfg.provision
    path = Path(p.token_file).expanduser() if p.token_file else default_token_path()
    if not path.is_file():
        raise ConfigError(
            f"no token file {path}: the controller needs the token the nodes read from secret "
            f"{p.token_secret!r}; make both with `python3 -c 'import secrets; "
            f"print(secrets.token_urlsafe(32))' > {path}` and `gcloud secrets create "
            f"{p.token_secret} --data-file={path} --project={p.project}`",
            field="provision.token_file",
            value=p.token_file,
        )
    return path


class Preempted(RlxError):
    """A node of the run is gone (preempted, failed, deleted): `rlx resume RUN` re-provisions."""


class _Handles:
    """What the Driver reads of `RunServices.provider`: the handles, and which services are on
    nodes that are not ACTIVE."""

    def __init__(self) -> None:
        self.handles: dict[str, ServiceHandle] = {}
        self.gone: dict[str, str] = {}  # service name -> why its node is gone

    def dead(self) -> list[str]:
        return sorted(self.gone)


class TpuRunServices(RunServices):
    def __init__(
        self,
        cfg: RunConfig,
        paths: RunPaths,
        token_file: Path,
        *,
        log: Callable[[str], None] = print,
        on_preempted: Callable[[str], None] | None = None,
        api: NodeApi | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        super().__init__(cfg, paths, token_file)
        assert cfg.provision is not None
        self.plan: Plan = make_plan(cfg)
        self.api = api or GcpApi.connect(self.plan)
        self.log = log
        self.on_preempted = on_preempted
        self.poll_s = cfg.provision.poll_s
        self.remote = _Handles()
        self.provider = self.remote  # type: ignore[assignment]
        self._monitor: threading.Thread | None = None
        self._stop = threading.Event()
        self._exits_shown: dict[str, tuple[int, float]] = {}
        self.cancel = cancel or threading.Event()  # set: stop waiting (Ctrl-C while starting)

    # --- configs -----------------------------------------------------------------------------
    def _write_configs(self) -> None:
        """Every service's config, for the node agents (`nodes/NAME.json`). On a node the token
        is the node's (RLX_TOKEN_FILE) and Orbax stages s3:// checkpoints in a temporary
        directory there; a slice's inference devices are one mesh of
        `provision.inference_tensor_parallel`."""
        cfg, provision = self.cfg, self.cfg.provision
        assert provision is not None
        ps = [self.address(n) for n in self.paramservers]
        configs: dict[str, Any] = {
            n: paramserver_config(cfg, i) for i, n in enumerate(self.paramservers)
        }
        configs["trainer"] = trainer_config(
            cfg,
            paramservers=ps,
            token_file=None,
            checkpoint_uri=join_uri(self.paths.uri, "checkpoints"),
        )
        placed = self.plan.services()
        for i, n in enumerate(self.workers):
            on_slice = not placed[n][0].is_vm
            tp = provision.inference_tensor_parallel if on_slice else None
            configs[n] = inference_config(
                cfg, i, paramservers=ps, token_file=None, tensor_parallel=tp
            )
        for n in self.verifiers:
            configs[n] = verifier_config(cfg)
        for name, config in configs.items():
            spec = {"args": [], "config": to_toml(config)}
            self.paths.storage.put(config_key(name), json.dumps(spec, sort_keys=True).encode())

    # --- start -------------------------------------------------------------------------------
    def start(self, on_wait: Callable[[str, float], None] | None = None) -> None:
        plan, api = self.plan, self.api
        vms = sum(n.is_vm for n in plan.nodes)
        kinds = f"{len(plan.nodes) - vms} TPU" + (f" and {vms} VM" if vms else "")
        self.log(f"provisioning {kinds} nodes of run {plan.name} in {plan.zone}")
        done = api.apply(
            plan,
            on_progress=state_lines(self.log),
            poll_s=self.poll_s,
            cancel=self.cancel,
        )
        for node_id, what in done.items():
            if what != "exists":
                self.log(f"{node_id}: {what}")
        # reports of an earlier start are answered by this one
        self.paths.storage.delete_prefix(EVENTS_PREFIX)
        self.paths.storage.delete_prefix(EXITS_PREFIX)
        hosts = {n.node_id: api.hosts(n) for n in plan.nodes}
        handles = self.remote.handles
        for name, (node, s) in plan.services().items():
            ips = hosts[node.node_id]
            if not ips:
                raise RlxError(f"node {node.node_id} is ACTIVE but has no network endpoint")
            handles[name] = ServiceHandle(
                name=name,
                kind=s.kind,
                address=f"{ips[0]}:{s.port}",
                pid=0,
                log=f"{node.node_id}:logs/{name}.log",
                port=s.port,
                started_at=time.time(),
            )
        self.remote.gone.clear()
        # for `rlx status` (pid 0: not a process here; alive when it answers)
        write_services(self.paths.work, handles, lambda name: name not in self.remote.gone)
        self._write_configs()
        self.log("service configs written; waiting for every service to answer")
        self._wait_ready(on_wait)
        self._stop.clear()
        self._monitor = threading.Thread(target=self._watch, name="tpu-monitor", daemon=True)
        self._monitor.start()

    def _wait_ready(self, on_wait: Callable[[str, float], None] | None) -> None:
        shown: dict[str, float] = {}

        def progress(name: str, t: float) -> None:
            if self.cancel.is_set():
                raise Cancelled(f"stopped waiting for {name}")
            if on_wait is not None:
                on_wait(name, t)
            if t - shown.get(name, 0.0) >= 10:
                shown[name] = t
                self._show_exit(name)

        def wait(name: str, address: str) -> None:
            with LifecycleClient(address, token_file=str(self.token_file)) as client:
                client.wait_ready(READY_TIMEOUT_S, on_wait=lambda _s, t: progress(name, t))

        handles = self.remote.handles
        with ThreadPoolExecutor(len(handles), thread_name_prefix="ready") as pool:
            # all at once; the first error (in service order) is raised once all have ended
            for future in [pool.submit(wait, n, h.address) for n, h in handles.items()]:
                future.result()

    def _show_exit(self, name: str) -> None:
        """Log a service's last unexpected exit on its node, once per report."""
        try:
            raw = self.paths.storage.get(exit_key(name))
        except RlxError:
            return  # none (yet)
        report = json.loads(raw)
        key = (report["starts"], report["unix"])
        if self._exits_shown.get(name) == key:
            return
        self._exits_shown[name] = key
        self.log(
            f"{name} on node {report['node']} exited with code {report['code']} (start "
            f"{report['starts']}; its agent restarts it); the end of its log:\n{report['tail']}"
        )

    # --- watching ----------------------------------------------------------------------------
    def check(self) -> dict[str, str]:
        """Node id -> why it is gone, for the nodes that are (API states and agents' reports);
        marks their services dead."""
        gone: dict[str, str] = {}
        for node_id, st in self.api.states(self.plan).items():
            if st.state != "ACTIVE":
                gone[node_id] = f"{st.state} {st.reason}".strip()
        for key in self.paths.storage.list(EVENTS_PREFIX):
            try:
                event = json.loads(self.paths.storage.get(key))
            except (RlxError, ValueError):
                continue
            gone.setdefault(event["node"], f"{event['signal']} on worker {event['worker']}")
        dead = self.remote.gone
        for name, (node, _s) in self.plan.services().items():
            if node.node_id in gone:
                dead[name] = gone[node.node_id]
        return gone

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                gone = self.check()
            except RlxError as e:
                self.log(f"cannot read the nodes' states: {e}")
                continue
            if gone:
                why = "; ".join(f"{n} {w}" for n, w in sorted(gone.items()))
                self.log(f"node gone: {why}")
                if self.on_preempted is not None:
                    self.on_preempted(f"preempted: {why}")
                return

    # --- what the Driver calls ---------------------------------------------------------------
    def restart_dead(self, log: Callable[[str], None] = print) -> list[str]:
        """A remote service is restarted by its node's agent; a node that is gone needs a new
        one, which `rlx resume` provisions (the run stops at its newest snapshot)."""
        gone = self.check()
        if gone:
            why = "; ".join(f"{n} {w}" for n, w in sorted(gone.items()))
            raise Preempted(f"{why}: `rlx resume {self.paths.uri}` provisions them again")
        return []

    def restart_hung(self, name: str, log: Callable[[str], None] = print) -> None:
        """A remote service is its node agent's to restart; one that hangs is retried."""
        log(f"service {name} is not answering; its node agent restarts it if it exits")

    def stop(self) -> None:
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(5)
        self.api.close()
