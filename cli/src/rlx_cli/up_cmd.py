"""`rlx up`, `rlx resume`, `rlx status`, `rlx down`: run the whole system on this machine.

rlx up                                  # the built-in demo (2-digit addition), run dir ./rlx-run
rlx up CONFIG.toml --run-dir DIR --set steps=50
rlx resume DIR                          # continue from the newest snapshot that verifies
rlx status DIR [--json]                 # from another terminal
rlx down DIR                            # stop the run's services
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from rlx_core.errors import RlxError

__all__ = ["register"]

console = Console(stderr=True)


def _fail(message: str) -> None:
    typer.echo(f"rlx: {message}", err=True)
    raise typer.Exit(1)


def _load_config(config: str | None, run_dir: Path, overrides: list[str]) -> Any:
    from rlx_controller.demo import DEMO_TASK, demo_config, write_addition_jsonl
    from rlx_controller.run_config import load_run_config, loads_run_config
    from rlx_controller.services import base_model_dir
    from rlx_core.config import to_toml

    sets = [f"run_dir={run_dir}", *overrides]
    if config is None:
        data = run_dir / "data"
        write_addition_jsonl(data, DEMO_TASK)
        base = demo_config(str(run_dir), data, base_model_dir())
        return loads_run_config(to_toml(base, comments=False), overrides=sets)
    return load_run_config(config, overrides=tuple(sets))


def _view(progress: Any) -> Table:
    table = Table(title="rlx run", show_header=False, expand=False)
    table.add_column("k", style="bold")
    table.add_column("v")
    table.add_row("phase", progress.phase)
    table.add_row("step", f"{progress.step} / {progress.steps}")
    table.add_row("reward", f"{progress.reward:.3f}")
    if progress.heldout:
        first = min(progress.heldout)
        last = max(progress.heldout)
        table.add_row(
            "held-out acc",
            f"{progress.heldout[first]:.3f} (step {first}) -> "
            f"{progress.heldout[last]:.3f} (step {last})",
        )
    table.add_row("gen tokens/s", f"{progress.tokens_per_s:.0f}")
    table.add_row("steps/s", f"{progress.steps_per_s:.2f}")
    table.add_row(
        "staleness", ", ".join(f"{k}: {v}" for k, v in sorted(progress.staleness.items())) or "-"
    )
    for name, state in sorted(progress.components.items()):
        table.add_row(name, state)
    for m in progress.messages[-3:]:
        table.add_row("", m)
    return table


def _drive(cfg: Any, run_dir: Path, resume: bool) -> None:
    from rlx_controller.driver import Driver, Progress

    progress = Progress(steps=cfg.steps)
    live_ok = sys.stderr.isatty()
    log_file = open(run_dir / "controller.log", "a")  # noqa: SIM115

    def log(message: str) -> None:
        log_file.write(f"{time.strftime('%H:%M:%S')} {message}\n")
        log_file.flush()
        if not live_ok:
            console.print(message)

    (run_dir / "controller.pid").write_text(str(os.getpid()))
    try:
        driver = Driver(cfg, run_dir, progress=progress, log=log)
        if live_ok:
            with Live(_view(progress), console=console, refresh_per_second=2) as live:
                import threading

                done = threading.Event()

                def refresh() -> None:
                    while not done.wait(0.5):
                        live.update(_view(progress))

                t = threading.Thread(target=refresh, daemon=True)
                t.start()
                try:
                    summary = driver.run(resume=resume)
                finally:
                    done.set()
                    t.join()
                    live.update(_view(progress))
        else:
            summary = driver.run(resume=resume)
    except RlxError as e:
        _fail(f"{type(e).__name__}: {e}")
    finally:
        log_file.close()
    before, after = summary.heldout_before, summary.heldout_after
    fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    state = "stopped" if summary.stopped else "finished"
    typer.echo(
        f"rlx: {state} at step {summary.steps}; held-out accuracy {fmt(before)} -> {fmt(after)}; "
        f"{summary.train_s_per_step:.3f} s per train step (median), wall {summary.wall_s:.0f} s; "
        f"params {summary.params_hash[:16]}; run dir {run_dir}"
    )


def up(
    config: str | None = typer.Argument(None, help="Run config TOML; none = the built-in demo."),
    run_dir: Path = typer.Option(Path("rlx-run"), "--run-dir", help="Where the run keeps state."),
    overrides: list[str] = typer.Option([], "--set", help="KEY=VALUE override of the config."),
) -> None:
    """Start every service locally and train (the built-in demo without CONFIG)."""
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        cfg = _load_config(config, run_dir, overrides)
    except RlxError as e:
        _fail(f"{type(e).__name__}: {e}")
    from rlx_core.config import to_toml

    (run_dir / "config.toml").write_text(to_toml(cfg, comments=False))
    _drive(cfg, run_dir, resume=False)


def resume(run: Path = typer.Argument(..., help="The run directory.")) -> None:
    """Continue RUN from its newest snapshot that verifies."""
    from rlx_controller.run_config import load_run_config

    run = run.resolve()
    path = run / "config.toml"
    if not path.exists():
        _fail(f"{run}: no config.toml (not a run directory of `rlx up`)")
    try:
        cfg = load_run_config(path)
    except RlxError as e:
        _fail(f"{type(e).__name__}: {e}")
    _drive(cfg, run, resume=True)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().split()
    except OSError:
        return False
    return stat[2] != "Z"


def status(
    run: Path = typer.Argument(..., help="The run directory."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Components, step, last snapshot and held-out accuracy of RUN (from any terminal)."""
    from rlx_controller.providers.local import read_services
    from rlx_controller.snapshot import SnapshotStore
    from rlx_core.storage import open_storage

    run = run.resolve()
    services = {
        n: {"pid": h.pid, "address": h.address, "alive": _alive(h.pid), "restarts": h.restarts}
        for n, h in read_services(run).items()
    }
    pid_file = run / "controller.pid"
    controller = int(pid_file.read_text()) if pid_file.exists() else None
    last: dict[str, Any] = {}
    heldout: dict[int, float] = {}
    staleness: dict[int, int] = {}
    metrics = run / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            rec = json.loads(line)
            last = rec
            if rec.get("heldout") is not None:
                heldout[rec["step"]] = rec["heldout"]
            if "staleness" in rec:
                staleness[rec["staleness"]] = staleness.get(rec["staleness"], 0) + 1
    snap = SnapshotStore(open_storage(str(run))).latest()
    out: dict[str, Any] = {
        "controller": {"pid": controller, "alive": controller is not None and _alive(controller)},
        "services": services,
        "step": last.get("step"),
        "reward": last.get("reward"),
        "heldout": heldout,
        "staleness": staleness,
        "last_snapshot": None if snap is None else {"step": snap.step, "reason": snap.reason},
    }
    if json_output:
        typer.echo(json.dumps(out, sort_keys=True))
        return
    table = Table(title=f"rlx run {run}")
    table.add_column("component")
    table.add_column("state")
    c: dict[str, Any] = out["controller"]
    table.add_row("controller", f"pid {c['pid']} {'alive' if c['alive'] else 'not running'}")
    for name, s in sorted(services.items()):
        state = "alive" if s["alive"] else "dead"
        table.add_row(name, f"{state} {s['address']} (restarts {s['restarts']})")
    table.add_row("step", str(out["step"]))
    table.add_row("held-out", ", ".join(f"{k}: {v:.3f}" for k, v in sorted(heldout.items())))
    table.add_row("staleness", ", ".join(f"{k}: {v}" for k, v in sorted(staleness.items())))
    table.add_row("last snapshot", json.dumps(out["last_snapshot"]))
    Console().print(table)


def down(run: Path = typer.Argument(..., help="The run directory.")) -> None:
    """Stop RUN: SIGTERM the controller (it snapshots), then stop any service left running."""
    from rlx_controller.services import kill_stale_services

    run = run.resolve()
    pid_file = run / "controller.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
    killed = kill_stale_services(run, log=typer.echo)
    typer.echo(f"rlx: {run} is down ({len(killed)} services stopped)")


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(resume)
    app.command()(status)
    app.command()(down)
