"""`rlx ps versions` against a real `rlx-paramserver` process."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_core.clients import ParamServerClient
from rlx_testing import (
    TOKEN,
    WRONG_TOKEN,
    ServiceProcess,
    console_script,
    free_port,
    write_token_file,
)


@pytest.fixture
def paramserver(tmp_path: Path, token_file: Path) -> Iterator[tuple[str, Path]]:
    argv = [console_script("rlx-paramserver"), "--port", "0", "--replica-id", "1"]
    argv += ["--max-versions", "3", "--token-file", str(token_file)]
    with ServiceProcess(argv, env={**os.environ, "RLX_HOME": str(tmp_path)}) as server:
        yield server.address, token_file


@pytest.mark.integration
def test_ps_versions_table_and_json(paramserver: tuple[str, Path]) -> None:
    address, token_file = paramserver
    runner = CliRunner()
    empty = runner.invoke(app, ["ps", "versions", address, "--token-file", str(token_file)])
    assert empty.exit_code == 0, empty.output
    assert "replica 1, 0 of max 3 versions" in empty.output and "no versions held" in empty.output
    with ParamServerClient(address, token=TOKEN) as client:
        client.push(7, {"w": np.zeros((1024, 1024), np.float32)})  # 4 MiB
        client.push(8, {"w": np.zeros((1024, 512), np.float32)})
        client.confirm("worker-1", 7)  # registered first, so 7 is kept for it
        client.confirm("worker-0", 8)
    table = runner.invoke(app, ["ps", "versions", address, "--token-file", str(token_file)])
    assert table.exit_code == 0, table.output
    assert "4.0 MiB" in table.output and "2.0 MiB" in table.output
    assert "2/2 (worker-0, worker-1)" in table.output and "1/2 (worker-0)" in table.output
    assert "worker-0=8, worker-1=7" in table.output
    result = runner.invoke(
        app, ["ps", "versions", address, "--token-file", str(token_file), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["replica_id"] == 1 and data["max_versions"] == 3
    assert [v["version"] for v in data["versions"]] == [7, 8]
    assert [v["bytes"] for v in data["versions"]] == [4 << 20, 2 << 20]
    assert data["versions"][1]["confirmed_by"] == ["worker-0"]
    assert data["consumers"] == {"worker-0": 8, "worker-1": 7}


def test_ps_versions_unreachable_or_wrong_token(token_file: Path) -> None:
    port = free_port()
    result = CliRunner().invoke(
        app, ["ps", "versions", f"127.0.0.1:{port}", "--token-file", str(token_file)]
    )
    assert result.exit_code == 1
    assert "Unavailable" in result.output or "DeadlineExceeded" in result.output


@pytest.mark.integration
def test_ps_versions_wrong_token(paramserver: tuple[str, Path], tmp_path: Path) -> None:
    address, _ = paramserver
    bad = write_token_file(tmp_path / "bad", WRONG_TOKEN)
    result = CliRunner().invoke(app, ["ps", "versions", address, "--token-file", str(bad)])
    assert result.exit_code == 1 and "Unauthenticated" in result.output
