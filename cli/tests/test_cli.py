"""The `rlx` command as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from rlx_cli.main import PACKAGES, app

RLX = Path(sys.executable).parent / "rlx"


def test_version_lists_all_nine_packages() -> None:
    result = CliRunner().invoke(app, ["version", "--json"])
    assert result.exit_code == 0, result.output
    packages = json.loads(result.output)["packages"]
    assert list(packages) == list(PACKAGES) and len(packages) == 9
    assert "rlx-launch" in packages
    assert all(v == "0.1.0" for v in packages.values())


def test_version_table_through_the_console_script() -> None:
    result = subprocess.run(
        [str(RLX), "version"], capture_output=True, text=True, check=True, timeout=60
    )
    for dist in PACKAGES:
        assert dist in result.stdout
    assert "not installed" not in result.stdout


def test_help_lists_only_working_commands_and_loads_no_jax() -> None:
    code = (
        "import sys; from rlx_cli.main import app; from typer.testing import CliRunner; "
        "r = CliRunner().invoke(app, ['--help']); print(r.output); "
        "print('JAX LOADED' if 'jax' in sys.modules else 'no jax')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "version" in out and "no jax" in out
    for command in (
        " up ",
        " resume ",
        " status ",
        " down ",
        " snapshot ",
        " rollouts ",
        " verifier ",
        " prefilter ",
        " provision ",
        " export ",
    ):
        assert command in out


def test_unknown_command_fails_with_usage() -> None:
    result = CliRunner().invoke(app, ["frobnicate"])
    assert result.exit_code == 2
    assert "No such command" in result.output
