"""The services of a local run: their configs (written into the run directory), start-up order,
and cleanup of services a killed controller left behind.

Paramserver replicas start first (the trainer and the workers need their addresses); then the
trainer, the inference workers and the verifier start together. Each service reads a TOML file
`<run>/services/<name>.toml` written here (rlx_launch.service_configs, written by
`rlx_core.config.to_toml`), so a restart uses the same settings.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlx_controller import Clients, RunPaths, sweep_temporaries
from rlx_core.clients import InferenceClient, ParamServerClient, TrainerClient, VerifierClient
from rlx_core.config import to_toml
from rlx_core.configs.run import RunConfig
from rlx_core.storage import join_uri
from rlx_launch.local import (
    LocalProvider,
    ServiceSpec,
    read_services,
    service_process,
)
from rlx_launch.service_configs import (
    inference_config,
    paramserver_config,
    trainer_config,
    verifier_config,
)

__all__ = ["RunServices", "clean_up_previous", "kill_stale_services"]


def kill_stale_services(run_dir: Path, log: Callable[[str], None] = print) -> list[str]:
    """SIGKILL the process groups of services a previous controller of this run recorded (it was
    killed before it could stop them). Only a recorded process that is still that service of
    this run (pid, start time and run: `service_process`) is touched, and only through the group
    it leads."""
    killed = []
    for name, handle in read_services(run_dir).items():
        proc = service_process(handle, run_dir)
        if proc is not None and proc.signal_group(signal.SIGKILL):
            killed.append(name)
    if killed:
        log(f"stopped services left by the previous controller: {', '.join(sorted(killed))}")
    return killed


def clean_up_previous(paths: RunPaths, log: Callable[[str], None] = print) -> None:
    """Clear what a previous controller of this run left behind, before this one starts its
    services and writes: its services (`kill_stale_services`), then the temporaries of its
    interrupted writes (`sweep_temporaries`; after the services: a trainer left running may
    still have been writing a checkpoint)."""
    kill_stale_services(paths.work, log)
    swept = sweep_temporaries(paths.uri)
    if swept:
        log(f"removed {len(swept)} temporaries of interrupted writes: {', '.join(swept)}")


class RunServices:
    """Starts and restarts the services of one local run."""

    def __init__(self, cfg: RunConfig, paths: RunPaths, token_file: Path) -> None:
        self.cfg = cfg
        self.paths = paths
        self.token_file: Path | None = token_file  # None never here: the type ServiceSet reads
        self.provider = LocalProvider(paths.work, token_file)
        self.conf_dir = paths.work / "services"
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        names = cfg.services.service_names()
        self.paramservers = names["paramserver"]
        self.workers = names["inference"]
        self.verifiers = names["verifier"]

    def address(self, name: str) -> str:
        return self.provider.handles[name].address

    def addresses(self) -> dict[str, str]:
        """Name -> address of every service started (for liveness pings and the live view)."""
        return {name: h.address for name, h in self.provider.handles.items()}

    def connect(self) -> Clients:
        """Fresh clients of every service, all with the run's token."""
        tf = str(self.token_file)
        return Clients(
            trainer=TrainerClient(self.address("trainer"), token_file=tf),
            workers=[InferenceClient(self.address(n), token_file=tf) for n in self.workers],
            verifiers=[VerifierClient(self.address(n), token_file=tf) for n in self.verifiers],
            paramservers=[
                ParamServerClient(self.address(n), token_file=tf) for n in self.paramservers
            ],
        )

    def dead(self) -> list[str]:
        """Names of the services whose process has exited."""
        return self.provider.dead()

    def _conf(self, name: str, config: Any) -> tuple[str, ...]:
        """Write service `name`'s config dataclass to its TOML file; the flags that pass it."""
        path = self.conf_dir / f"{name}.toml"
        path.write_text(to_toml(config))
        return ("--config", str(path))

    def specs(self) -> tuple[list[ServiceSpec], list[ServiceSpec]]:
        """(paramserver specs, the rest); the rest need the paramservers' addresses."""
        first = [
            ServiceSpec(
                name=n, kind="paramserver", args=self._conf(n, paramserver_config(self.cfg, i))
            )
            for i, n in enumerate(self.paramservers)
        ]
        return first, []

    def rest_specs(self, paramservers: list[str]) -> list[ServiceSpec]:
        """The trainer's, the inference workers' and the verifiers' specs (configs written),
        given the paramservers' addresses."""
        cfg, token = self.cfg, str(self.token_file)
        trainer = trainer_config(
            cfg,
            paramservers=paramservers,
            token_file=token,
            checkpoint_uri=join_uri(self.paths.uri, "checkpoints"),
            # used by s3:// only (Orbax writes there first, then it is uploaded)
            staging_dir=str(self.paths.work / "checkpoint-staging"),
        )
        specs = [ServiceSpec(name="trainer", kind="trainer", args=self._conf("trainer", trainer))]
        for i, name in enumerate(self.workers):
            worker = inference_config(cfg, i, paramservers=paramservers, token_file=token)
            specs.append(ServiceSpec(name=name, kind="inference", args=self._conf(name, worker)))
        verifier = verifier_config(cfg)
        specs.extend(
            ServiceSpec(name=n, kind="verifier", args=self._conf(n, verifier))
            for n in self.verifiers
        )
        return specs

    def start(self, on_wait: Callable[[str, float], None] | None = None) -> None:
        first, _ = self.specs()
        self.provider.start_all(first, on_wait=on_wait)
        rest = self.rest_specs([self.address(n) for n in self.paramservers])
        self.provider.start_all(rest, on_wait=on_wait)

    def restart_dead(self, log: Callable[[str], None] = print) -> list[str]:
        dead = self.provider.dead()
        for name in dead:
            log(f"service {name} is not running: restarting it")
            self.provider.restart(name)
        return dead

    def restart_hung(self, name: str, log: Callable[[str], None] = print) -> None:
        """Restart `name`, alive but not answering (stopped, deadlocked): a service holds nothing
        a resume cannot rebuild."""
        if name not in self.provider.handles:
            return
        log(f"service {name} is not answering: restarting it")
        self.provider.restart(name)

    def stop(self) -> None:
        self.provider.stop_all(grace_s=10)
