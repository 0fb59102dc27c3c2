"""`rlx verifier upload DATASET.jsonl REPO_URI` and `rlx verifier status ADDRESS`.

`upload` needs rlx-verifier installed (it compiles checkers in the verifier's sandbox); it is
imported inside the command so `rlx --help` stays light.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rlx_cli.terminal import cell
from rlx_core.errors import RlxError

__all__ = ["verifier_app"]

verifier_app = typer.Typer(help="Test repositories and verifier servers.", no_args_is_help=True)


@verifier_app.command()
def upload(
    dataset: Path = typer.Argument(..., help="JSON lines, one problem per line, with its tests."),
    repo_uri: str = typer.Argument(..., help="Test repository: a path, s3://bucket/p or gs://..."),
    out: Path | None = typer.Option(None, "--out", help="Also write the manifest to this file."),
    unsafe_no_sandbox: bool = typer.Option(
        False, "--unsafe-no-sandbox", help="Compile checkers without bubblewrap."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON line, no progress."),
) -> None:
    """Store a dataset's inputs, answers and compiled checkers by content; write a manifest of
    links (printed) that Verify requests refer to."""
    try:
        from rlx_verifier import Verifier
        from rlx_verifier.config import JudgeConfig
        from rlx_verifier.repository import Repositories
        from rlx_verifier.upload import upload_dataset
    except ImportError:
        typer.echo("rlx verifier upload: rlx-verifier is not installed here", err=True)
        raise typer.Exit(1) from None
    if not dataset.is_file():
        typer.echo(f"rlx verifier upload: {dataset}: no such file", err=True)
        raise typer.Exit(2)
    console = Console(stderr=True)
    try:
        with (
            Verifier(JudgeConfig(workers=1, unsafe_no_sandbox=unsafe_no_sandbox)) as verifier,
            Progress(
                TextColumn("uploading tests"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                disable=json_output or not console.is_terminal,  # no bar in a log
            ) as bar,
        ):
            task = bar.add_task("upload", total=None)
            repos = Repositories()
            try:
                link, manifest = upload_dataset(
                    dataset,
                    repo_uri,
                    verifier,
                    repos,
                    progress=lambda done, total: bar.update(task, completed=done, total=total),
                )
            finally:
                repos.close()
    except RlxError as e:
        typer.echo(f"rlx verifier upload: {type(e).__name__}: {e}", err=True)
        raise typer.Exit(1) from None
    if out is not None:
        out.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    problems = manifest["problems"]
    tests = sum(len(p["tests"]) for p in problems)
    checkers = len({p["checker"] for p in problems if p["checker"]})
    if json_output:
        summary = {"manifest": link, "problems": len(problems), "tests": tests}
        typer.echo(json.dumps({**summary, "checkers": checkers}))
        return
    typer.echo(f"{len(problems)} problems, {tests} tests, {checkers} checkers")
    typer.echo(link)


@verifier_app.command()
def status(
    address: str = typer.Argument(..., help="host:port of a verifier."),
    token_file: Path | None = typer.Option(None, "--token-file", help="Bearer token file."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Toolchains, sandbox, pool size and queue of a verifier server."""
    from dataclasses import asdict

    from rlx_core.clients import VerifierClient

    try:
        with VerifierClient(
            address, token_file=str(token_file) if token_file else None, timeout=10
        ) as client:
            info = client.status()
    except RlxError as e:
        typer.echo(f"rlx verifier: {address}: {type(e).__name__}: {e}", err=True)
        raise typer.Exit(1) from None
    if json_output:
        typer.echo(json.dumps(asdict(info)))
        return
    table = Table(title=f"verifier {address} ({info.backend}, sandbox {info.sandbox})")
    table.add_column("language")
    table.add_column("toolchain")
    for name, version in sorted(info.toolchains.items()):
        table.add_row(cell(name), cell(version))
    Console().print(table)
    typer.echo(
        f"workers {info.workers}, queued {info.queued}, running {info.running}, "
        f"judged {info.judged}, cached {info.cache_entries}, infra retries {info.infra_retries}"
    )
