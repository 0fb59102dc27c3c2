"""The services of a local run: their configs (written into the run directory), start-up order,
and cleanup of services a killed controller left behind.

Paramserver replicas start first (the trainer and the workers need their addresses); then the
trainer, the inference workers and the verifier start together. Each service reads a TOML file
`<run>/services/<name>.toml` written here, so a restart uses the same settings.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlx_controller.providers.local import (
    LocalProvider,
    ServiceSpec,
    read_services,
    runs_service,
)
from rlx_controller.run_config import RunConfig
from rlx_controller.rundir import RunPaths
from rlx_core.storage import join_uri

__all__ = [
    "PARAMSERVER_ARGS",
    "RunServices",
    "base_model_dir",
    "engine_context",
    "kill_stale_services",
    "service_toml",
]

# the flags every paramserver replica of a run starts with (versions each keeps)
PARAMSERVER_ARGS = ("--max-versions", "8")
# settings of the trainer's objective that a run config's algorithm.overrides may set
_OBJECTIVE_KEYS = ("eps_low", "eps_high", "beta", "tis_cap")


def base_model_dir() -> Path:
    """The demo's committed SFT base model (tools/demo/base_model in the source tree)."""
    env = os.environ.get("RLX_DEMO_BASE_MODEL")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[4] / "tools" / "demo" / "base_model"


def engine_context(cfg: RunConfig, block: int = 16) -> int:
    """max_context of the workers: prompt + new tokens, rounded up to whole KV blocks."""
    need = cfg.batch.max_prompt_tokens + cfg.batch.max_new_tokens
    return -(-need // block) * block


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def service_toml(tables: dict[str, Any]) -> str:
    """The TOML text of a service config given as tables (what its --config file holds)."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in tables.items() if not isinstance(v, dict)]
    for name, table in tables.items():
        if isinstance(table, dict):
            lines.append(f"\n[{name}]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in table.items())
    return "\n".join(lines) + "\n"


def trainer_checkpoint_keep(cfg: RunConfig) -> int:
    """Checkpoints the trainer keeps: `snapshots.checkpoint_keep` plus those that can be newer
    than the one a snapshot names. A snapshot at step S names the newest checkpoint at or below
    v(S) >= S - (lag + j - 1) (rlx_controller.driver), so up to ceil((lag + j - 1) /
    checkpoint_every) newer ones must not push it out."""
    gap = cfg.staleness.effective_lag + cfg.staleness.reload - 1
    return cfg.snapshots.checkpoint_keep + -(-gap // cfg.snapshots.checkpoint_every)


def kill_stale_services(run_dir: Path, log: Callable[[str], None] = print) -> list[str]:
    """SIGKILL the process groups of services a previous controller of this run recorded (it was
    killed before it could stop them). Only processes whose command line names the service's
    module are touched."""
    killed = []
    for name, handle in read_services(run_dir).items():
        if not runs_service(handle):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(handle.pid, signal.SIGKILL)
            killed.append(name)
    if killed:
        log(f"stopped services left by the previous controller: {', '.join(sorted(killed))}")
    return killed


class RunServices:
    """Starts and restarts the services of one local run."""

    def __init__(self, cfg: RunConfig, paths: RunPaths, token_file: Path) -> None:
        self.cfg = cfg
        self.paths = paths
        self.token_file = token_file
        self.provider = LocalProvider(paths.work, token_file)
        self.conf_dir = paths.work / "services"
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        names = cfg.services.service_names()
        self.paramservers = names["paramserver"]
        self.workers = names["inference"]
        self.verifiers = names["verifier"]

    def address(self, name: str) -> str:
        return self.provider.handles[name].address

    def _conf(self, name: str, tables: dict[str, Any]) -> tuple[str, ...]:
        path = self.conf_dir / f"{name}.toml"
        path.write_text(service_toml(tables))
        return ("--config", str(path))

    def _trainer_tables(self, ps: list[str]) -> dict[str, Any]:
        cfg = self.cfg
        objective: dict[str, Any] = {"preset": cfg.algorithm.preset}
        for key, value in cfg.algorithm.overrides.items():
            if key in _OBJECTIVE_KEYS:
                objective[key] = float(value)
        optimizer = {
            "lr": cfg.optimizer.lr,
            "schedule": cfg.optimizer.schedule,
            "warmup_steps": cfg.optimizer.warmup_steps,
            "decay_steps": cfg.optimizer.decay_steps,
            "final_lr_ratio": cfg.optimizer.final_lr_ratio,
            "weight_decay": cfg.optimizer.weight_decay,
            "clip_norm": cfg.optimizer.clip_norm,
        }
        update: dict[str, Any] = {
            # π_old = the params before the step (ratio 1 on the one update): needs no past
            # version, so a resumed trainer replays steps without the replicas' old versions
            "old_policy": "step_start",
        }
        if float(objective.get("beta", 0.0)) > 0:
            update["reference"] = "init"
        return {
            "keep_versions": 2,
            "model": {
                "param_dtype": cfg.model.param_dtype,
                "compute_dtype": cfg.model.compute_dtype,
            },
            "optimizer": optimizer,
            "objective": objective,
            "update": update,
            "checkpoint": {
                "uri": join_uri(self.paths.uri, "checkpoints"),
                "keep": trainer_checkpoint_keep(cfg),
                # used by s3:// only (Orbax writes there first, then it is uploaded)
                "staging_dir": str(self.paths.work / "checkpoint-staging"),
            },
            "paramserver": {"addresses": ps, "token_file": str(self.token_file)},
        }

    def _worker_tables(self, index: int, ps: list[str]) -> dict[str, Any]:
        cfg = self.cfg
        model: dict[str, Any] = {"dtype": cfg.model.param_dtype}
        if cfg.model.path:
            model["checkpoint"] = cfg.model.path
        else:
            model["builtin"] = cfg.model.tiny
        context = engine_context(cfg)
        slots = min(256, cfg.batch.unit_prompts * cfg.batch.group_size)
        return {
            "worker_index": index,
            "model": model,
            "engine": {
                "slots": slots,
                "block_size": 16,
                "cache_mib": 64,
                "max_context": context,
                "span_bucket": context,
            },
            "paramserver": {"addresses": ps, "token_file": str(self.token_file)},
        }

    def specs(self) -> tuple[list[ServiceSpec], list[ServiceSpec]]:
        """(paramserver specs, the rest); the rest need the paramservers' addresses."""
        first = [
            ServiceSpec(name=n, kind="paramserver", args=PARAMSERVER_ARGS)
            for n in self.paramservers
        ]
        return first, []

    def _rest(self) -> list[ServiceSpec]:
        ps = [self.address(n) for n in self.paramservers]
        specs = [
            ServiceSpec(
                name="trainer", kind="trainer", args=self._conf("trainer", self._trainer_tables(ps))
            )
        ]
        for i, name in enumerate(self.workers):
            specs.append(
                ServiceSpec(
                    name=name, kind="inference", args=self._conf(name, self._worker_tables(i, ps))
                )
            )
        specs.extend(ServiceSpec(name=n, kind="verifier") for n in self.verifiers)
        return specs

    def start(self, on_wait: Callable[[str, float], None] | None = None) -> None:
        first, _ = self.specs()
        self.provider.start_all(first, on_wait=on_wait)
        self.provider.start_all(self._rest(), on_wait=on_wait)

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
