"""Fixtures of the workspace-level tests."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

# the tests share up_helpers.py (import mode is importlib, so the directory is not on sys.path)
sys.path.insert(0, str(Path(__file__).parent))

TOOLS = Path(__file__).resolve().parents[1] / "tools"
SIM = TOOLS / "bench" / "e2e" / "sim.py"
CHAOS = TOOLS / "chaos" / "chaos.py"


def _tool(path: Path, name: str) -> ModuleType:
    """A script under tools/, imported by path (tools/ is not a package)."""
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def sim() -> ModuleType:
    """tools/bench/e2e/sim.py: the real Driver with simulated services."""
    return _tool(SIM, "rlx_bench_e2e_sim")


@pytest.fixture(scope="session")
def chaos() -> ModuleType:
    """tools/chaos/chaos.py: fault schedules against a real run."""
    return _tool(CHAOS, "rlx_tools_chaos")


@pytest.fixture(scope="session")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[tuple[str, ...]], Path]:
    """`clean_run(extra)`: the run directory of an uninterrupted `rlx up` of the small demo
    (up_helpers.SMALL) with the `--set` values `extra`, run once per session for each `extra`:
    the reference the resume tests compare with."""
    from up_helpers import CLI, small_sets

    done: dict[tuple[str, ...], Path] = {}

    def run(extra: tuple[str, ...]) -> Path:
        if extra not in done:
            run_dir = tmp_path_factory.mktemp("clean") / "run"
            sets = [x for s in extra for x in ("--set", s)]
            proc = subprocess.run(
                [*CLI, "up", "--run-dir", str(run_dir), *small_sets(), *sets],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=300,
                check=False,
            )
            text = proc.stdout.decode(errors="replace")
            assert proc.returncode == 0 and "finished at step" in text, text
            done[extra] = run_dir
        return done[extra]

    return run
