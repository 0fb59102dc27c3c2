"""floor.py's loop with per-step wall and CPU time (for tools/bench/e2e/bench.py).

    uv run python tools/bench/e2e/floor_cpu.py --steps 50 --skip 5

Runs floor.run() unchanged with the demo's settings and held-out evaluation at the end only;
each step calls floor's `sample` once, at its start, so timing those calls gives step
boundaries: wall (perf_counter) and this process's CPU (process_time, every JAX thread) per
step. Prints one JSON line: floor's own median s/step, and the medians of the steps after
`skip` of wall and CPU seconds per step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import floor  # tools/ is not a package


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--skip", type=int, default=5)
    args = ap.parse_args()
    marks: list[tuple[float, float]] = []
    inner = floor.sample

    def sample(*a: Any, **kw: Any) -> Any:
        marks.append((time.perf_counter(), time.process_time()))
        return inner(*a, **kw)

    floor.sample = sample
    result = floor.run(
        base=floor.BASE_MODEL,
        steps=args.steps,
        batch=floor.B,
        group=floor.G,
        lr=floor.LR,
        temperature=floor.TEMPERATURE,
        preset_name=floor.PRESET,
        beta=floor.BETA,
        seed=0,
        minibatches=floor.MINIBATCHES,
        epochs=floor.EPOCHS,
        warmup=floor.WARMUP,
        decay_steps=floor.DECAY_STEPS,
        clip_norm=floor.CLIP_NORM,
        eval_every=10**9,
        target=0.9,
        stop_at_target=False,
        log=lambda _m: None,
    )
    # marks[i] is the start of step i + 1; the last step's end is not marked
    steady = list(zip(marks[args.skip :], marks[args.skip + 1 :], strict=False))
    print(
        json.dumps(
            {
                "s_per_step": result["s_per_step"],
                "wall_per_step": statistics.median(b[0] - a[0] for a, b in steady),
                "cpu_per_step": statistics.median(b[1] - a[1] for a, b in steady),
                "steps": result["steps"],
            }
        )
    )


if __name__ == "__main__":
    main()
