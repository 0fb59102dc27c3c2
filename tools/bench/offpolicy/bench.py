"""Off-policy training on the built-in demo: three definitions of π_old side by side, same seeds.

Trains the demo (`rlx up` without a config: 2-digit addition, the tiny SFT base model, GRPO
without KL, B 32, G 8, seed 0, its 600-step learning-rate schedule) for `--steps` steps, one
fresh `rlx up` process after another (never two at once: the figures include timings), each in
its own run directory under `--out`:

- the on-policy reference (`on` in `--configs`): the demo as it is, (j, k) = (1, 1), lag 0;
- for each (j, k) of `--configs`: `staleness.reload = j`, `staleness.accept = k` and
  `staleness.lag = k - j + 1`, the largest lag the bound allows (batches up to k versions
  behind the params they train), trained each way of `--modes`:
  - `step_start` (the baseline): `trainer.update.old_policy = "step_start"`, π_old = the params
    at the step's start; the ratio starts at 1, so PPO's clip never sees the staleness;
  - `generation`: π_old = the version that generated the rollouts, recomputed by the trainer
    (seeds/000): the ratio and its clip act on the staleness;
  - `decoupled_ppo`: `trainer.objective.preset = "decoupled_ppo"`, `old_policy = "auto"` (its
    proximal policy π_prox = step_start): the clip on π_θ/π_prox times the behaviour weight
    sg[π_prox/π_behav] (seeds/003). Its other settings are the demo GRPO's: eps 0.2/0.2, the
    group-normalised advantage, the per-sample token mean, beta 0 (the demo's override).

Per run: held-out greedy accuracy (`heldout`, evaluated every `--eval-every` steps) at fixed
steps, and at fixed training seconds (the last evaluation done by then); a step's time is the
sum of the controller's `step_s` up to it: seconds from the training loop's start, compilation,
checkpoints and earlier evaluations included, the services' start-up not. Then the median step
time (steps after `--skip`), the run's training seconds, and the means over steps of
`trainer/mismatch_p95`, the policy lag (`trainer/lag_kl_k3`, `lag_ratio_min`, `lag_ratio_max`:
π at the step's start vs the generating version), `trainer/clip_frac` and
`trainer/is_weight_max` (decoupled PPO's behaviour weight, 1 for the others); "-" where the
trainer reports no such key. Last, per (j, k): each mode's final accuracy, training seconds and
median step time as ratios to step_start's.

Then the numerical fidelity (`--numerics-steps` steps, lag 0, in float32 and in bfloat16
compute, `model.compute_dtype`): |log π_sampler − log π_trainer| on the same version
(`trainer/mismatch_mean`, `_p95`, `_max`: nats over a step's response tokens), each summarised
over steps by its mean, p95 and max, and RLAX's figure (seeds/000: the p95 over steps of the
per-step mean, 0.0199 with its recomputation) against the target p95 <= 0.002 nats, with the
ratios. `--numerics-only` runs only this part. `uptime` before and after.

The runs share the JAX compile cache (~/.cache/rlx/jax-compile): a graph not in it costs the
first run that needs it seconds of compilation (generation's update, not fused with π_old's
forward, is a graph of its own). So first, unless `--no-warmup`, a 3-step run of each mode fills
the cache, and every timed run finds its graphs there. The default 200 steps keep the whole
bench (10 runs, the warm-up, the numerics) near 20 minutes on 2 cores; at 300 steps the demo's
held-out accuracy is higher and the bench takes about half as long again.

    uv run python tools/bench/offpolicy/bench.py [--steps 200] [--configs on 1,1 1,2 4,8]
        [--modes step_start generation decoupled_ppo] [--out DIR] [--numerics-only]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import uptime

CLI = [sys.executable, "-c", "from rlx_cli.main import app; app()"]
MODES: dict[str, list[str]] = {
    "step_start": ["trainer.update.old_policy=step_start"],
    "generation": ["trainer.update.old_policy=generation"],
    "decoupled_ppo": ["trainer.objective.preset=decoupled_ppo", "trainer.update.old_policy=auto"],
}
BASELINE = "step_start"
DTYPES = ("float32", "bfloat16")
TARGET_P95 = 0.002  # nats: the goal for sampler vs trainer on the same version
RLAX_P95 = 0.0199  # nats: seeds/000, p95 over 512 steps of the per-step mean, with recomputation
# (column, metrics key): means over a run's steps
PER_STEP = [
    ("mismatch p95", "trainer/mismatch_p95"),
    ("lag kl k3", "trainer/lag_kl_k3"),
    ("lag r min", "trainer/lag_ratio_min"),
    ("lag r max", "trainer/lag_ratio_max"),
    ("clip frac", "trainer/clip_frac"),
    ("IS w max", "trainer/is_weight_max"),
]


@dataclass
class Run:
    """One `rlx up`: what it sets, and what it left in its metrics.jsonl."""

    name: str  # its run directory under --out
    label: str
    sets: list[str]
    jk: tuple[int, int] | None = None  # None: on-policy (lag 0) or a numerics run
    mode: str = ""
    records: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = math.nan  # the whole process, start-up included
    error: str = ""

    @property
    def trained(self) -> list[dict[str, Any]]:
        """The records of training steps (step 0's is the evaluation before training)."""
        return [r for r in self.records if "step_s" in r]

    def evals(self) -> list[tuple[int, float, float]]:
        """(step, training seconds by then, held-out accuracy) of each evaluation."""
        out, t = [], 0.0
        for r in sorted(self.records, key=lambda r: r["step"]):
            t += r.get("step_s", 0.0)
            if r.get("heldout") is not None:
                out.append((r["step"], t, r["heldout"]))
        return out

    def train_s(self) -> float:
        return sum(r["step_s"] for r in self.trained) if self.trained else math.nan

    def median_step_s(self, skip: int) -> float:
        steps = [r["step_s"] for r in self.trained if r["step"] > skip]
        return statistics.median(steps) if steps else math.nan

    def mean(self, key: str) -> float | None:
        """The mean of `key` over the steps that report it; None when none does."""
        values = [r[key] for r in self.trained if key in r]
        return statistics.fmean(values) if values else None

    def final(self) -> float:
        evals = self.evals()
        return evals[-1][2] if evals else math.nan


def parse_config(text: str) -> tuple[int, int] | None:
    """`on` -> None (the on-policy reference); `J,K` -> (J, K) with 1 <= J <= K."""
    if text == "on":
        return None
    try:
        j, k = (int(x) for x in text.split(","))
    except ValueError:
        msg = f"a config is 'on' or J,K (e.g. 4,8), got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not 1 <= j <= k:
        raise argparse.ArgumentTypeError(f"a config J,K needs 1 <= J <= K, got {text!r}")
    return j, k


def plan(configs: list[tuple[int, int] | None], modes: list[str]) -> list[Run]:
    runs = []
    for jk in configs:
        if jk is None:
            runs.append(Run("on-policy", "on-policy, lag 0", []))
            continue
        j, k = jk
        stale = [f"staleness.reload={j}", f"staleness.accept={k}", f"staleness.lag={k - j + 1}"]
        for mode in modes:
            label = f"({j},{k}) lag {k - j + 1} {mode}"
            runs.append(Run(f"j{j}k{k}-{mode}", label, stale + MODES[mode], jk, mode))
    return runs


def run_up(run: Run, out: Path, sets: list[str]) -> None:
    """`rlx up` (the demo) in a new process with `sets` and the run's own; fills `run`."""
    run_dir = out / run.name
    args = [*CLI, "up", "--run-dir", str(run_dir)]
    for s in [*sets, *run.sets]:
        args += ["--set", s]
    log = out / f"{run.name}.log"
    t0 = time.monotonic()
    with log.open("w") as f:
        proc = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, check=False)
    run.wall_s = time.monotonic() - t0
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        run.records = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        run.error = f"rlx up exited {proc.returncode} (log {log}):\n{tail}"


def cell(value: float | None, width: int, spec: str = ".3f") -> str:
    """`value` right-aligned in `width`, "-" when there is none."""
    text = "-" if value is None or math.isnan(value) else format(value, spec)
    return f"{text:>{width}}"


def warm_up(runs: list[Run], out: Path) -> None:
    """A 3-step run of each mode among `runs` (lag >= 1 reaches its stale-batch update at step
    2), so that every timed run finds its graphs in the compile cache. The on-policy reference's
    are step_start's (one fused update) when step_start runs too."""
    first: dict[str, Run] = {}
    for r in sorted(runs, key=lambda r: r.jk is None):  # the reference last
        if r.jk is not None or BASELINE not in first:
            first.setdefault(r.mode, r)
    for r in first.values():
        w = Run(f"warmup-{r.name}", f"warm-up {r.label}", r.sets)
        run_up(w, out, ["steps=3", "eval.every=100"])
        done = f"FAILED: {w.error}" if w.error else f"{w.wall_s:.0f} s"
        print(f"{w.label}: {done}", flush=True)


def main_runs(runs: list[Run], args: argparse.Namespace, out: Path) -> None:
    if args.warmup:
        warm_up(runs, out)
    sets = [f"steps={args.steps}", f"eval.every={args.eval_every}"]
    for n, run in enumerate(runs, 1):
        print(f"[{n}/{len(runs)}] {run.label} ({args.steps} steps) ...", flush=True)
        run_up(run, out, sets)
        if run.error:
            print(f"  FAILED: {run.error}", flush=True)
            continue
        evals = run.evals()
        print(
            f"  {run.label}: {len(run.trained)} steps, {run.train_s():.0f} s training, "
            f"{run.wall_s:.0f} s process, median step {run.median_step_s(args.skip):.3f} s, "
            f"held-out {evals[0][2]:.3f} -> {run.final():.3f}; {uptime()}",
            flush=True,
        )


def print_main(runs: list[Run], args: argparse.Namespace) -> None:
    ok = [r for r in runs if r.records]
    if not ok:
        return
    width = max(len(r.label) for r in runs) + 2
    steps = sorted({s for r in ok for s, _, _ in r.evals()})
    stride = math.ceil(len(steps) / 7)  # about 7 columns, the last step always among them
    shown = [s for i, s in enumerate(steps) if i % stride == 0 or s == steps[-1]]
    print(f"\nheld-out accuracy by step (evaluated every {args.eval_every} steps)")
    print(f"{'':{width}}" + "".join(f"{s:>8}" for s in shown))
    for r in runs:
        acc = {s: a for s, _, a in r.evals()}
        print(f"{r.label:{width}}" + "".join(cell(acc.get(s), 8) for s in shown))

    end = max(r.train_s() for r in ok)
    times = [args.every_s * i for i in range(1, math.ceil(end / args.every_s) + 1)]
    print("\nheld-out accuracy by training seconds (the last evaluation done by then)")
    print(f"{'':{width}}" + "".join(f"{f'{t:g} s':>8}" for t in times))
    for r in runs:
        evals = r.evals()
        cells = [max((e for e in evals if e[1] <= t), default=None) for t in times]
        print(f"{r.label:{width}}" + "".join(cell(c[2] if c else None, 8) for c in cells))

    print(f"\nper run (median over steps after {args.skip}; the rest means over steps)")
    heads = ["step s", "train s", "final", *(h for h, _ in PER_STEP)]
    print(f"{'':{width}}" + "".join(f"{h:>12}" for h in heads))
    for r in runs:
        figures = [r.median_step_s(args.skip), r.train_s(), r.final()]
        line = "".join(cell(x, 12) for x in figures)
        line += "".join(cell(r.mean(key), 12, ".4g") for _, key in PER_STEP)
        print(f"{r.label:{width}}{line}")

    print(f"\nratios to {BASELINE} (π_old = the params at the step's start), per (j, k)")
    ref = [r for r in ok if r.jk is None]
    if ref:
        r = ref[0]
        print(f"on-policy reference: final {r.final():.3f}, {r.train_s():.0f} s training")
    head = f"{'final':>8}{'x base':>8}{'train s':>9}{'x base':>8}{'step s':>8}{'x base':>8}"
    print(f"{'':{width}}{head}")
    for jk in sorted({r.jk for r in runs if r.jk is not None}):
        group = [r for r in runs if r.jk == jk]
        base = next((r for r in group if r.mode == BASELINE and r.records), None)
        for r in group:
            pairs = [
                (r.final(), base.final() if base else math.nan),
                (r.train_s(), base.train_s() if base else math.nan),
                (r.median_step_s(args.skip), base.median_step_s(args.skip) if base else math.nan),
            ]
            line = "".join(
                cell(own, w, spec) + cell(own / b if b else math.nan, 8, ".2f")
                for (own, b), w, spec in zip(pairs, (8, 9, 8), (".3f", ".0f", ".3f"), strict=True)
            )
            print(f"{r.label:{width}}{line}")


def numerics(args: argparse.Namespace, out: Path) -> None:
    runs = [Run(f"numerics-{d}", d, [f"model.compute_dtype={d}"]) for d in DTYPES]
    sets = [f"steps={args.numerics_steps}", f"eval.every={10 * args.numerics_steps}"]
    for run in runs:
        print(f"numerics {run.label} ({args.numerics_steps} steps, lag 0) ...", flush=True)
        run_up(run, out, sets)
        print(f"  FAILED: {run.error}" if run.error else f"  {run.wall_s:.0f} s", flush=True)
    print(
        f"\nnumerical fidelity: |log π_sampler − log π_trainer| on the same version, nats over a "
        f"step's response tokens (trainer/mismatch_*); {args.numerics_steps} steps, lag 0"
    )
    print(f"{'':24}{'mean':>11}{'p95':>11}{'max':>11}   over steps")
    over: dict[tuple[str, str], tuple[float, float, float]] = {}
    for run in runs:
        for k in ("mean", "p95", "max"):
            key = f"trainer/mismatch_{k}"
            v = np.array([r[key] for r in run.trained if key in r], dtype=np.float64)
            figures = (v.mean(), np.percentile(v, 95), v.max()) if v.size else (math.nan,) * 3
            over[run.label, k] = (float(figures[0]), float(figures[1]), float(figures[2]))
            label = f"{run.label} step {k}"
            print(f"{label:24}" + "".join(cell(x, 11, ".3g") for x in over[run.label, k]))
    print(
        f"\nagainst the target (p95 <= {TARGET_P95} nats) and RLAX's figure ({RLAX_P95}, "
        "seeds/000: the p95 over steps of the per-step mean, with its recomputation)"
    )
    compared = [  # (name, which per-step figure, which statistic over steps)
        ("p95 of step means (RLAX's)", "mean", 1),
        ("mean of step p95s", "p95", 0),
    ]
    print(f"{'':38}{'nats':>10}{'x target':>10}{'':>9}{'x RLAX':>10}")
    for run in runs:
        for name, k, i in compared:
            value = over[run.label, k][i]
            met = "met" if value <= TARGET_P95 else "NOT met"
            print(
                f"{f'{run.label} {name}':38}{cell(value, 10, '.3g')}"
                f"{cell(value / TARGET_P95, 10, '.3g')}{met:>9}{cell(value / RLAX_P95, 10, '.3g')}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=200, help="training steps per run")
    ap.add_argument(
        "--configs",
        nargs="+",
        type=parse_config,
        default=[None, (1, 1), (1, 2), (4, 8)],
        help="'on' (the on-policy reference) and J,K staleness configs (default: on 1,1 1,2 4,8)",
    )
    ap.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    ap.add_argument("--out", type=Path, help="where the run directories go (default: a temp dir)")
    ap.add_argument("--numerics-only", action="store_true", help="only the fidelity table")
    ap.add_argument("--numerics-steps", type=int, default=20, help="steps of each numerics run")
    ap.add_argument("--eval-every", type=int, default=25, help="steps between evaluations")
    ap.add_argument("--every-s", type=float, default=20.0, help="training seconds per column")
    ap.add_argument(
        "--no-warmup", dest="warmup", action="store_false", help="no compile-cache warm-up runs"
    )
    ap.add_argument("--skip", type=int, default=5, help="first steps left out of the median")
    args = ap.parse_args()
    if args.steps < 1 or args.eval_every < 1 or args.numerics_steps < 1 or args.every_s <= 0:
        sys.exit("--steps, --eval-every, --numerics-steps and --every-s must be positive")
    out = args.out or Path(tempfile.mkdtemp(prefix="rlx-bench-offpolicy-"))
    out.mkdir(parents=True, exist_ok=True)
    planned = [] if args.numerics_only else plan(args.configs, args.modes)
    names = [n for r in planned for n in (r.name, f"warmup-{r.name}")]
    names += [f"numerics-{d}" for d in DTYPES]
    taken = [n for n in names if (out / n).exists()]
    if taken:  # `rlx up` would resume them
        sys.exit(f"{out} already holds run directories {', '.join(taken)}: choose another --out")
    print(f"uptime before: {uptime()}", flush=True)
    print(f"run directories under {out}", flush=True)
    t0 = time.monotonic()
    try:
        if not args.numerics_only:
            main_runs(planned, args, out)
            print_main(planned, args)
            print()
        numerics(args, out)
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    print(f"\ntotal {time.monotonic() - t0:.0f} s")
    print(f"uptime after: {uptime()}")


if __name__ == "__main__":
    main()
