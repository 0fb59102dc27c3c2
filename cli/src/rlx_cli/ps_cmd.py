"""`rlx ps versions ADDRESS`: what a paramserver replica holds, as a table or JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from rlx_cli.terminal import cell
from rlx_core.errors import RlxError

__all__ = ["ps_app"]

ps_app = typer.Typer(help="Inspect paramserver replicas.", no_args_is_help=True)


def _size(nbytes: int) -> str:
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


@ps_app.command()
def versions(
    address: str = typer.Argument(..., help="host:port of a paramserver replica."),
    token_file: Path | None = typer.Option(None, "--token-file", help="Bearer token file."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the versions a replica holds: sizes, ages and who confirmed what."""
    from rlx_core.clients import ParamServerClient

    try:
        with ParamServerClient(
            address, token_file=str(token_file) if token_file else None, timeout=10
        ) as client:
            info = client.versions_info()
    except RlxError as e:
        typer.echo(f"rlx ps: {address}: {type(e).__name__}: {e}", err=True)
        raise typer.Exit(1) from None
    now = time.time()
    if json_output:
        typer.echo(
            json.dumps(
                {
                    "address": address,
                    "replica_id": info.replica_id,
                    "max_versions": info.max_versions,
                    "instance_id": info.instance_id,
                    "started_unix": info.started,
                    "staged": list(info.staged),
                    "consumers": info.consumers,
                    "versions": [
                        {
                            "version": v.version,
                            "bytes": v.nbytes,
                            "created_unix": v.created,
                            "age_s": round(now - v.created, 3),
                            "tensors": v.num_tensors,
                            "confirmed_by": list(v.confirmed_by),
                        }
                        for v in info.versions
                    ],
                }
            )
        )
        return
    title = (
        f"paramserver {address}: replica {info.replica_id}, {len(info.versions)} of max "
        f"{info.max_versions} versions, up {_age(now - info.started)}"
    )
    console = Console()
    console.print(title, soft_wrap=True)
    table = Table()
    for column in ("version", "size", "age", "tensors", "confirmed by"):
        table.add_column(column, justify="right" if column != "confirmed by" else "left")
    consumers = sorted(info.consumers)
    for v in info.versions:
        confirmed = f"{len(v.confirmed_by)}/{len(consumers)}" if consumers else "-"
        if v.confirmed_by:
            confirmed += " (" + ", ".join(v.confirmed_by) + ")"
        table.add_row(
            str(v.version),
            _size(v.nbytes),
            _age(now - v.created),
            str(v.num_tensors),
            cell(confirmed),
        )
    console.print(table)
    if not info.versions:
        console.print(
            "no versions held (a restarted replica is empty until the controller refills it)"
        )
    if info.staged:
        console.print(f"staged (not committed): {', '.join(map(str, info.staged))}")
    if consumers:
        line = "consumers: " + ", ".join(f"{c}={info.consumers[c]}" for c in consumers)
        console.print(cell(line), soft_wrap=True)
