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

SIM = Path(__file__).resolve().parents[1] / "tools" / "bench" / "e2e" / "sim.py"


@pytest.fixture(scope="session")
def sim() -> ModuleType:
    """tools/bench/e2e/sim.py (the real Driver with simulated services), imported by path:
    tools/ is not a package."""
    sys.path.insert(0, str(SIM.parent))
    spec = importlib.util.spec_from_file_location("rlx_bench_e2e_sim", SIM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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
