"""Fixtures of the workspace-level tests."""

from __future__ import annotations

import importlib.util
import sys
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
