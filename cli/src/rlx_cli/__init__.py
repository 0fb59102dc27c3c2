"""The `rlx` command line (Typer + Rich); never imports JAX at start."""

from rlx_cli._version import __version__
from rlx_cli.main import app

__all__ = ["__version__", "app"]
