"""The `rlx` command.

Only commands that work are registered. Commands that need JAX import it inside the command, so
`rlx --help` and `rlx version` start fast and work where JAX is not installed.

Errors: code that reads an input raises an RlxError naming it; `_RlxGroup` turns any that reaches
it, from every command, into one line on stderr (`rlx: Type: message`) and exit code 1. An OSError
(a path the system refused) gets the same treatment, naming the path; so does any other exception,
a native library's BaseException (`pyo3_runtime.PanicException`) included: never a traceback
(`RLX_TRACEBACK=1` re-raises it for one). Ctrl-C, `sys.exit` and click's own usage errors pass
through. The line is escaped (`rlx_cli.terminal`): a message quoting untrusted text cannot steer
the terminal or forge a second line.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup
from typer.exceptions import Abort, Exit, TyperException

from rlx_cli._version import __version__
from rlx_cli.eval_cmd import register as register_eval
from rlx_cli.export_cmd import register as register_export
from rlx_cli.model_cmd import model_app
from rlx_cli.plot_cmd import register as register_plot
from rlx_cli.prefilter_cmd import prefilter
from rlx_cli.provision_cmd import provision_app
from rlx_cli.ps_cmd import ps_app
from rlx_cli.rollouts_cmd import rollouts_app
from rlx_cli.run_cmd import register as register_run
from rlx_cli.snapshot_cmd import snapshot_app
from rlx_cli.terminal import one_line
from rlx_cli.up_cmd import register as register_up
from rlx_cli.verifier_cmd import verifier_app
from rlx_core import DISTRIBUTIONS
from rlx_core.errors import RlxError

__all__ = ["PACKAGES", "app"]

# Every rlx distribution, in the order of the README's tour.
PACKAGES = (*DISTRIBUTIONS, "rlx-cli")


# what passes through `_RlxGroup` untouched: Ctrl-C, sys.exit, click's exit, abort and usage errors
_PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit, Exit, Abort, TyperException)


def error_line(e: BaseException) -> str:
    """The one line `rlx` prints for an error that ends a command, escaped for the terminal."""
    if isinstance(e, OSError) and e.strerror:
        where = f": {e.filename}" if e.filename is not None else ""
        text = f"{e.strerror}{where}"
    else:
        text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return "rlx: " + one_line(text)


class _RlxGroup(TyperGroup):
    """The root command: every subcommand runs inside its `invoke`, so this is the one place
    where an error that reaches the top becomes one line and exit code 1."""

    def invoke(self, ctx: Any) -> Any:  # a click Context (typer vendors click)
        try:
            return super().invoke(ctx)
        except _PASS_THROUGH:
            raise
        except BaseException as e:  # a native library's panic is a BaseException
            if os.environ.get("RLX_TRACEBACK") and not isinstance(e, RlxError):
                raise
            typer.echo(error_line(e), err=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_RlxGroup,
    name="rlx",
    help="rlx: reinforcement-learning post-training of LLMs on JAX, preemption-safe.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.add_typer(model_app, name="model")
app.add_typer(ps_app, name="ps")
app.add_typer(provision_app, name="provision")
app.add_typer(snapshot_app, name="snapshot")
app.add_typer(rollouts_app, name="rollouts")
register_up(app)
register_run(app)
register_plot(app)
register_export(app)
register_eval(app)
app.command()(prefilter)
app.add_typer(verifier_app, name="verifier")


@app.callback()
def _root() -> None:
    """rlx: reinforcement-learning post-training of LLMs on JAX, preemption-safe.

    Run `rlx COMMAND --help` for a command's options.
    """


@app.command()
def version(
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Show the version of every rlx package installed here."""
    found: dict[str, str | None] = {}
    for dist in PACKAGES:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    if json_output:
        import json

        typer.echo(json.dumps({"packages": found, "python": platform.python_version()}))
        return
    table = Table(title=f"rlx {__version__} (Python {platform.python_version()})")
    table.add_column("package")
    table.add_column("version")
    for dist, ver in found.items():
        table.add_row(dist, ver if ver else "[red]not installed[/red]")
    Console().print(table)


def main() -> None:  # pragma: no cover - console script
    app()
