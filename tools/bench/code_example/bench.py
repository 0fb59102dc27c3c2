"""The verifier's share of step time on the built-in code example (`rlx up --example code`).

Trains the code example from its base model for `--steps` steps, as `rlx up` does (real local
services, the sandboxed verifier judging every program), three ways in one run:

1. the baseline: the verifier with 1 worker (one sandboxed run at a time);
2. rlx's default: as many workers as cores (`verifier.judge.workers = 0`);
3. the default without the verifier's verdict cache (`verifier.judge.cache_size = 0`): what
   judging costs when no program repeats.

For each: the median step time, the seconds the controller waited on the verifier per step (the
sum over the batch's units, `verifier/wait_s`) and its share of the step, the verifier's mean
wall seconds per code sample compiling, running and checking (`verifier/compile_s`, `run_s`,
`check_s`, 0 for a cached verdict), the share of verdicts served from the cache, and the reward
at the end; then the default's figures as ratios to the baseline's. Steps before `--skip` (the
services' start and JAX compilation) are left out of the medians. `uptime` before and after.

    uv run python tools/bench/code_example/bench.py [--steps 30] [--skip 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import uptime

CLI = [sys.executable, "-c", "from rlx_cli.main import app; app()"]
CONFIGS = {
    "workers 1 (baseline)": ["verifier.judge.workers=1"],
    "workers = cores": ["verifier.judge.workers=0"],
    "workers = cores, no cache": ["verifier.judge.workers=0", "verifier.judge.cache_size=0"],
}


def _run(run_dir: Path, steps: int, sets: list[str]) -> tuple[float, list[dict[str, Any]]]:
    """Wall seconds of `rlx up --example code` for `steps` steps, and its metrics lines."""
    args = [*CLI, "up", "--example", "code", "--run-dir", str(run_dir)]
    for s in [f"steps={steps}", f"eval.every={10 * steps}", "eval.max_prompts=8", *sets]:
        args += ["--set", s]
    t0 = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(
            f"rlx up failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return wall, [json.loads(line) for line in lines]


def _cached_share(run_dir: Path) -> float:
    """The share of judged code samples (not NO_CODE) whose verdict came from the cache."""
    from rlx_controller import RolloutLog
    from rlx_core.storage import open_storage

    log = RolloutLog(open_storage(str(run_dir)))
    judged = cached = 0
    for unit_id in log.unit_ids():
        record = log.get(unit_id)
        for group in record.groups if record is not None else ():
            for s in group.samples:
                if s.status in ("NO_CODE", "INFRA", "ERROR"):
                    continue
                judged += 1
                cached += s.judgement.judge_s == 0.0
    return cached / judged if judged else float("nan")


def _figures(wall: float, records: list[dict[str, Any]], skip: int, run: Path) -> dict[str, float]:
    steps = [r for r in records if "step_s" in r and r["step"] > skip]

    def med(key: str) -> float:
        values = [r[key] for r in steps if key in r]
        return statistics.median(values) if values else float("nan")

    step_s, wait_s = med("step_s"), med("verifier/wait_s")
    return {
        "wall s": wall,
        "step s (median)": step_s,
        "verifier wait s/step": wait_s,
        "verifier share of step": wait_s / step_s,
        "compile s/sample": med("verifier/compile_s"),
        "run s/sample": med("verifier/run_s"),
        "check s/sample": med("verifier/check_s"),
        "cached verdicts": _cached_share(run),
        "reward, last 5 steps": statistics.fmean(r["reward"] for r in steps[-5:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip", type=int, default=3, help="first steps left out of medians")
    args = parser.parse_args()
    print(f"uptime before: {uptime()}")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="rlx-bench-code-") as tmp:
        for k, (name, sets) in enumerate(CONFIGS.items()):
            run = Path(tmp) / f"run{k}"
            wall, records = _run(run, args.steps, sets)
            results[name] = _figures(wall, records, args.skip, run)
            print(f"{name}: {args.steps} steps in {wall:.0f} s", flush=True)
    names = list(results)
    base = results[names[0]]
    width = max(len(m) for m in base) + 2
    print(f"\n{'':{width}}" + "".join(f"{n:>28}" for n in names) + f"{'ratio (2 / 1)':>16}")
    for metric, b in base.items():
        cells = "".join(f"{results[n][metric]:>28.4f}" for n in names)
        other = results[names[1]][metric]
        ratio = other / b if b else float("nan")
        print(f"{metric:{width}}{cells}{ratio:>16.2f}")
    print(f"\nuptime after: {uptime()}")


if __name__ == "__main__":
    main()
