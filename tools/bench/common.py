"""What several benchmarks share (tools/ is not a package: a bench puts this directory on
sys.path and imports `common`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def uptime() -> str:
    """`uptime`'s line: every bench prints it before and after, so the load is on record."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def best(fn: Callable[[], object], repeats: int) -> float:
    """The fastest of `repeats` timed calls, after one warm-up (compilation) call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def torch_python() -> str:
    """The interpreter of the torch venv (`RLX_TORCH_PYTHON`, or the one tools/make_goldens
    creates): torch never enters the uv workspace."""
    explicit = os.environ.get("RLX_TORCH_PYTHON")
    if explicit:
        return explicit
    venv = Path.home() / ".cache" / "rlx" / "goldens-venv" / "bin" / "python"
    if not venv.exists():
        sys.exit(
            f"no torch venv at {venv}: run `python3 tools/make_goldens/make_goldens.py` once "
            "(it creates it), or set RLX_TORCH_PYTHON"
        )
    return str(venv)
