"""What the workspace tests that run `rlx up` share: the CLI as a subprocess, a small demo run,
and the steps a run has done."""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["CLI", "SMALL", "STEPS", "consumed", "small_sets", "steps_done"]

# `rlx` in a new process, from this interpreter's environment
CLI = [sys.executable, "-c", "from rlx_cli.main import app; app()"]

STEPS = 6
# the demo config made small: 6 steps of 8 prompts x 4 samples, a checkpoint every 2 steps
SMALL = [
    f"steps={STEPS}",
    "batch.prompts=8",
    "batch.group_size=4",
    "eval.max_prompts=16",
    "eval.every=100",
    "snapshots.checkpoint_every=2",
]


def small_sets() -> list[str]:
    """SMALL as `--set` arguments."""
    return [x for s in SMALL for x in ("--set", s)]


def steps_done(work: Path) -> int:
    """The last step in `work/metrics.jsonl` (0 before the first; a line being written is
    skipped)."""
    path = work / "metrics.jsonl"
    if not path.exists():
        return 0
    done = 0
    for line in path.read_text().splitlines():
        try:
            done = max(done, json.loads(line)["step"])
        except (ValueError, KeyError):
            continue
    return done


def consumed(run_dir: Path) -> list[list[str]]:
    """The prompt ids each step trained on, per step, from `run_dir/metrics.jsonl` (the last
    record of a step wins: a resumed run trains some steps again)."""
    by_step: dict[int, list[str]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "prompt_ids" in rec:
            by_step[rec["step"]] = rec["prompt_ids"]
    return [by_step[s] for s in sorted(by_step)]
