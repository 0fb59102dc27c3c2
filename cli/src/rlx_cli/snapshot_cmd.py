"""`rlx snapshot list RUN`, `rlx snapshot inspect RUN [STEP]` and `rlx snapshot take RUN`: a run's
controller snapshots.

RUN is the run directory (a path, file://, s3://bucket/prefix or gs://bucket/prefix). Snapshots
that do not verify are listed with their problem; `inspect` shows the newest one that verifies
(or the one at STEP), every field. `take` asks the run's controller, running on this machine, for
a committed snapshot at the end of the step in progress and prints its step.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rlx_cli.terminal import cell, escape
from rlx_core.errors import RlxError

__all__ = ["snapshot_app"]

snapshot_app = typer.Typer(
    help="List, inspect and take a run's controller snapshots.", no_args_is_help=True
)


def _store(run: str) -> Any:
    from rlx_controller import RunPaths, SnapshotStore

    return SnapshotStore(RunPaths.of(run).storage)


def _fail(message: str) -> None:
    typer.echo(f"rlx snapshot: {message}", err=True)
    raise typer.Exit(1)


def _when(unix: float) -> str:
    if not unix:
        return "-"
    return dt.datetime.fromtimestamp(unix, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@snapshot_app.command("list")
def list_(
    run: str = typer.Argument(..., help="Run directory: path, file://, s3:// or gs:// URI."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the snapshots of RUN, oldest first, with whether each one verifies."""
    try:
        entries = _store(run).entries()
    except RlxError as err:
        _fail(f"{run}: {type(err).__name__}: {err}")
    if json_output:
        rows = []
        for e in entries:
            s = e.snapshot
            rows.append(
                {
                    "key": e.key,
                    "step": e.step,
                    "ok": e.ok,
                    "problem": e.problem or None,
                    "version": s.version if s else None,
                    "checkpoint_step": s.checkpoint_step if s else None,
                    "reason": s.reason if s else None,
                    "created_unix": s.created_unix if s else None,
                }
            )
        typer.echo(json.dumps({"run": run, "snapshots": rows}))
        return
    console = Console()
    if not entries:
        console.print(cell(f"no snapshots under {run}"))
        return
    table = Table(title=cell(f"snapshots of {run}"))
    for column in ("step", "version", "checkpoint", "reason", "written", "status"):
        table.add_column(column, justify="right" if column in ("step", "version") else "left")
    for e in entries:
        s = e.snapshot
        if s is None:
            status = Text("CORRUPT ", style="red").append(escape(str(e.problem)))
            table.add_row(str(e.step), "-", "-", "-", "-", status)
            continue
        ckpt = "initial" if s.checkpoint_step is None else str(s.checkpoint_step)
        table.add_row(
            str(e.step),
            str(s.version),
            ckpt,
            cell(s.reason),
            _when(s.created_unix),
            "[green]ok[/green]",
        )
    console.print(table)


@snapshot_app.command()
def inspect(
    run: str = typer.Argument(..., help="Run directory: path, file://, s3:// or gs:// URI."),
    step: int | None = typer.Argument(None, help="Step of the snapshot; default: the newest."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON (every field)."),
) -> None:
    """Show every field of the newest snapshot of RUN that verifies (or the one at STEP)."""
    skipped: list[str] = []
    try:
        store = _store(run)
        if step is None:
            snap = store.latest(on_skip=skipped.append)
            if snap is None:
                _fail(f"no snapshot under {run} verifies" if skipped else f"no snapshots in {run}")
        else:
            snap = store.load(step)
    except RlxError as err:
        _fail(f"{run}: {type(err).__name__}: {err}")
    for message in skipped:
        typer.echo("rlx snapshot: " + escape(message), err=True)
    data = snap.to_dict()
    if json_output:
        typer.echo(json.dumps(data))
        return
    console = Console()
    console.print(cell(f"snapshot of {run} at step {snap.step} ({snap.reason})"), soft_wrap=True)
    table = Table(show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for name, value in data.items():
        if name == "outstanding":
            shown = f"{len(value)} work units" + "".join(
                f"\n  {u['unit_id']}: version {u['version']}, "
                f"{len(u['prompts'])} prompts × {len(u['seeds'][0]) if u['seeds'] else 0}"
                for u in value
            )
        elif name == "created_unix":
            shown = _when(value)
        elif name == "checkpoint_step" and value is None:
            shown = "none (initial weights)"
        elif isinstance(value, (dict, list)):
            shown = json.dumps(value)
        else:
            shown = str(value)
        table.add_row(name, cell(shown, newlines=True))
    console.print(table)


@snapshot_app.command()
def take(
    run: str = typer.Argument(..., help="Run directory: path, file://, s3:// or gs:// URI."),
    work_dir: Path | None = typer.Option(
        None, "--work-dir", help="This machine's files of a remote run (as for `rlx up`)."
    ),
    timeout_s: float = typer.Option(
        600.0, "--timeout", help="Seconds to wait for the snapshot (the step in progress ends)."
    ),
) -> None:
    """Take a committed snapshot of the running RUN now and print its step.

    The snapshot is of the step in progress, written at its end; the run goes on. Needs the
    run's controller running on this machine (`rlx up` / `rlx resume`, `--detach` or not).
    """
    from rlx_cli.run_cmd import take_snapshot
    from rlx_controller import RunPaths

    try:
        step = take_snapshot(RunPaths.of(run, work_dir), timeout_s)
    except RlxError as err:
        _fail(f"{run}: {type(err).__name__}: {err}")
    typer.echo(f"rlx snapshot: took a snapshot of {escape(run)} at step {step}")
