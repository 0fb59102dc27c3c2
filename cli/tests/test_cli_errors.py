"""Every `rlx` error on bad input: exactly one line on stderr naming the input (never a
traceback), a non-zero exit code, and nothing in or around the run directory changed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_core.config import to_toml
from rlx_data import DEMO_TASK, base_model_dir, demo_config, write_addition_jsonl
from rlx_testing import tree

runner = CliRunner()
BINARY = bytes(range(256)) * 4  # not UTF-8, not JSON, not TOML, not a directory


def fails_cleanly(args: Sequence[str], named: str, root: Path) -> str:
    """Run `rlx ARGS`; check the one-line error naming `named` and that `root` is untouched."""
    before = tree(root)
    result = runner.invoke(app, list(args))
    assert isinstance(result.exception, SystemExit), (
        f"rlx {' '.join(args)} raised {result.exception!r}\n{result.output}"
    )
    assert result.exit_code != 0, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert named in lines[0], lines[0]
    assert tree(root) == before
    return lines[0]


@pytest.fixture
def binary_file(tmp_path: Path) -> Path:
    path = tmp_path / "blob.bin"
    path.write_bytes(BINARY)
    return path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run directory as `rlx up` leaves it before its first step: its config.toml, run.json."""
    data = tmp_path / "data"
    write_addition_jsonl(data, DEMO_TASK)
    run = tmp_path / "run"
    run.mkdir()
    cfg = demo_config(str(run), str(data), base_model_dir())
    (run / "config.toml").write_text(to_toml(cfg, comments=False))
    (run / "run.json").write_text(json.dumps({"run_id": "abc", "config_hash": "0" * 64}))
    return run


# --- the run directory itself -----------------------------------------------------------------


def test_up_with_a_run_dir_under_a_regular_file(tmp_path: Path, binary_file: Path) -> None:
    line = fails_cleanly(["up", "--run-dir", str(binary_file / "run")], str(binary_file), tmp_path)
    assert "not a directory" in line


def test_up_with_a_run_dir_in_proc(tmp_path: Path) -> None:
    fails_cleanly(["up", "--run-dir", "/proc/rlx-run"], "/proc/rlx-run", tmp_path)


def test_up_with_a_bad_config_creates_no_run_dir(tmp_path: Path, binary_file: Path) -> None:
    run = tmp_path / "fresh-run"
    fails_cleanly(["up", str(binary_file), "--run-dir", str(run)], str(binary_file), tmp_path)
    missing = tmp_path / "missing.toml"
    fails_cleanly(["up", str(missing), "--run-dir", str(run)], str(missing), tmp_path)


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["down"],
        ["resume"],
        ["plot"],
        ["snapshot", "list"],
        ["snapshot", "inspect"],
    ],
    ids=" ".join,
)
def test_a_regular_file_as_run_dir(command: list[str], tmp_path: Path, binary_file: Path) -> None:
    fails_cleanly([*command, str(binary_file)], str(binary_file), tmp_path)


def test_plot_of_a_run_under_a_regular_file(tmp_path: Path, binary_file: Path) -> None:
    fails_cleanly(["plot", str(binary_file / "run")], str(binary_file), tmp_path)


# --- files in the run directory ---------------------------------------------------------------


@pytest.mark.parametrize(
    "content", [b'{"run_id": "abc", "config_h', b"\xff\xfe{}\n", b"[1, 2]"], ids=str
)
def test_resume_with_a_truncated_non_utf8_or_foreign_run_json(
    content: bytes, run_dir: Path, tmp_path: Path
) -> None:
    (run_dir / "run.json").write_bytes(content)
    fails_cleanly(["resume", str(run_dir)], str(run_dir / "run.json"), tmp_path)


def test_resume_with_a_non_utf8_config(run_dir: Path, tmp_path: Path) -> None:
    (run_dir / "config.toml").write_bytes(BINARY)
    fails_cleanly(["resume", str(run_dir)], str(run_dir / "config.toml"), tmp_path)


@pytest.mark.parametrize("name", ["metrics.jsonl", "services.json"])
def test_status_with_a_non_utf8_file(name: str, run_dir: Path, tmp_path: Path) -> None:
    (run_dir / name).write_bytes(BINARY)
    fails_cleanly(["status", str(run_dir)], str(run_dir / name), tmp_path)


def test_down_with_a_garbage_services_json(run_dir: Path, tmp_path: Path) -> None:
    (run_dir / "services.json").write_bytes(b'{"paramserver": 7}')
    fails_cleanly(["down", str(run_dir)], str(run_dir / "services.json"), tmp_path)


def test_plot_with_a_non_utf8_metrics_file(run_dir: Path, tmp_path: Path) -> None:
    (run_dir / "metrics.jsonl").write_bytes(BINARY)
    fails_cleanly(["plot", str(run_dir)], str(run_dir / "metrics.jsonl"), tmp_path)


def test_plot_to_a_place_it_cannot_write(run_dir: Path, tmp_path: Path) -> None:
    records = [{"step": s, "reward": s / 4} for s in range(1, 4)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    fails_cleanly(["plot", str(run_dir), "--out", "/proc/rlx.png"], "/proc/rlx.png", tmp_path)


def test_snapshot_inspect_of_garbage_snapshots(run_dir: Path, tmp_path: Path) -> None:
    snap = run_dir / "snapshots" / "s0000000003"
    snap.mkdir(parents=True)
    (snap / "snapshot.json").write_bytes(BINARY)
    (snap / "_COMMITTED").write_bytes(BINARY)
    fails_cleanly(["snapshot", "inspect", str(run_dir)], str(run_dir), tmp_path)
    fails_cleanly(["snapshot", "inspect", str(run_dir), "3"], str(snap), tmp_path)


# --- addresses --------------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["nonsense::addr", "[zz", "127.0.0.1:99999999"])
@pytest.mark.parametrize("command", [["ps", "versions"], ["verifier", "status"]], ids=" ".join)
def test_a_bad_address(
    command: list[str], address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLX_TOKEN", "a-token-of-enough-length")
    fails_cleanly([*command, address], address, tmp_path)


@pytest.mark.parametrize("content", [b"\xff\xfe" + BINARY, BINARY], ids=["not-utf8", "not-json"])
def test_verifier_upload_of_a_binary_dataset(content: bytes, tmp_path: Path) -> None:
    dataset = tmp_path / "problems.jsonl"
    dataset.write_bytes(content)
    args = ["verifier", "upload", str(dataset), str(tmp_path / "repo"), "--unsafe-no-sandbox"]
    fails_cleanly(args, f"{dataset}:1: not", tmp_path)
