"""End-to-end benchmark: rlx's seconds per step on the built-in demo vs a single-process floor.

    uv run python tools/bench/e2e/bench.py [--steps N] [--skip S] [--repeats R]

In one run: the floor (tools/bench/e2e/floor.py in a subprocess: the demo's model, task, B and G
in one process, no services, RPC, snapshots or rollout log), then rlx itself, a real Driver with
real local services on the demo config as `rlx up` runs it (fresh temp run directory each),
for (j, k) = (1, 1), (1, 2), (4, 8) and the lockstep (1, 1) with lag 0, then the floor again (the
machine is shared: the two floor figures bracket the load). Held-out evaluation is switched off
(it is not part of a step); the demo's snapshot and checkpoint cadence are kept.

Seconds per step are steady-state medians: the first S steps (start-up, JIT compilation of the
trainer and the inference engine) are skipped, for the floor as for rlx. The price of the
architecture is rlx's figure divided by the floor's (the mean of the two floor runs); the goals
are <= 2x at (1, 1) and <= 1.2x with overlap. With --repeats R the sequence of configs runs R
times (each round starting one config later, so no config always follows the same one) and each
config is judged on its median ratio; the table shows that run and all R ratios (on this
2-core machine one run's ratio moves by up to +-0.2 between identical computations: measured).
Where rlx's step goes (main-thread calls of the loop: trainer step RPC, build_batch, snapshot,
checkpoint, metrics line, and the rest: waiting for rollouts; background calls: generate,
verify, rollout-log append) is printed per config.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from common import uptime  # noqa: E402  (tools/ is not a package)
from timing import Timed, Timings  # noqa: E402  (tools/ is not a package)

from rlx_controller import Clients, Driver, RunPaths, ServiceSet  # noqa: E402
from rlx_core.config import to_toml  # noqa: E402
from rlx_core.configs.run import RunConfig, loads_run_config  # noqa: E402
from rlx_data import (  # noqa: E402
    DEMO_TASK,
    base_model_dir,
    demo_config,
    write_addition_jsonl,
)
from rlx_launch import open_services  # noqa: E402

# (label, overrides, goal ratio)
CONFIGS: list[tuple[str, list[str], float]] = [
    ("(1,1) lag 1 (demo)", ["staleness.reload=1", "staleness.accept=1"], 2.0),
    ("(1,1) lag 0 lockstep", ["staleness.reload=1", "staleness.accept=1", "staleness.lag=0"], 2.0),
    ("(1,2) lag 1", ["staleness.reload=1", "staleness.accept=2"], 1.2),
    ("(4,8) lag 1", ["staleness.reload=4", "staleness.accept=8"], 1.2),
]
MAIN = [  # the loop's own calls, in the order a step makes them
    "build_batch",
    "trainer step RPC",
    "trainer checkpoint RPC",
    "metrics line",
    "snapshot",
    "  of which paramserver manifest (params hash)",
]
TRAINER_PARTS: list[tuple[str, Any]] = [  # from the trainer's own step metrics
    ("  π_old / π_ref prefill", lambda t: t["recompute_s"]),
    ("  forward, backward, optimizer", lambda t: t["compute_s"] - t["recompute_s"]),
    ("  push to the paramserver", lambda t: t["push_s"]),
    ("  rest (host copy, commit)", lambda t: t["step_time_s"] - t["compute_s"] - t["push_s"]),
]
BACKGROUND = [  # a unit runs in two stages (rlx_controller.pipeline)
    "gen stage",
    "  worker load_version RPC",
    "  worker generate RPC",
    "score+log stage",
    "  verifier RPC",
    "  rollout log append",
]


class TimedServices:
    """The run's real services (rlx_launch), the calls of their clients timed."""

    def __init__(self, inner: ServiceSet, timings: Timings) -> None:
        self.inner, self.timings = inner, timings
        self.token_file = inner.token_file

    def start(self, on_wait: Any = None) -> None:
        self.inner.start(on_wait)

    def connect(self) -> Clients:
        c, t = self.inner.connect(), self.timings
        manifest = {"manifest": "  of which paramserver manifest (params hash)"}
        return Clients(
            trainer=Timed(
                c.trainer,
                t,
                {"train_step": "trainer step RPC", "save_checkpoint": "trainer checkpoint RPC"},
            ),
            workers=[
                Timed(
                    w,
                    t,
                    {
                        "load_version": "  worker load_version RPC",
                        "generate": "  worker generate RPC",
                    },
                )
                for w in c.workers
            ],
            verifiers=[Timed(v, t, {"verify": "  verifier RPC"}) for v in c.verifiers],
            paramservers=[Timed(c.paramservers[0], t, manifest), *c.paramservers[1:]],
        )

    def addresses(self) -> dict[str, str]:
        return self.inner.addresses()

    def dead(self) -> list[str]:
        return self.inner.dead()

    def restart_dead(self, log: Any) -> list[str]:
        return self.inner.restart_dead(log)

    def restart_hung(self, name: str, log: Any) -> None:
        self.inner.restart_hung(name, log)

    def stop(self) -> None:
        self.inner.stop()


def bench_driver(
    cfg: RunConfig,
    run_dir: Path,
    *,
    timings: Timings,
    cpu_marks_at: int,
    log: Any,
) -> tuple[Driver, dict[int, tuple[float, dict[str, float]]]]:
    """The real Driver on the real local services, its calls and stages timed, held-out
    evaluation off (not part of a step); and the CPU of every process of the run at the steady
    window's ends (steps `cpu_marks_at` and steps - 1: the step's trainer call and checkpoint
    are done; the final step's checkpoint is left out), filled as the run goes."""
    opened: list[TimedServices] = []

    def timed_services(cfg: RunConfig, paths: RunPaths, **kw: Any) -> TimedServices:
        opened.append(TimedServices(open_services(cfg, paths, **kw), timings))
        return opened[-1]

    driver = Driver(cfg, run_dir, open_services=timed_services, stage=timings.stage, log=log)
    driver.eval_sets = []
    driver.rollouts.append = timings.wrap("  rollout log append", driver.rollouts.append)  # type: ignore[method-assign]
    cpu_marks: dict[int, tuple[float, dict[str, float]]] = {}

    def mark(record: dict[str, Any]) -> None:
        if record.get("step") in (cpu_marks_at, cfg.steps - 1):
            handles = opened[-1].inner.provider.handles  # type: ignore[attr-defined]
            pids = {n: h.pid for n, h in handles.items()}
            cpu_marks[record["step"]] = (time.monotonic(), service_cpu(pids))

    driver.add_metrics_listener(mark)
    return driver, cpu_marks


def run_floor(steps: int, skip: int) -> dict[str, Any]:
    """floor.py's loop in a subprocess (floor_cpu.py: the same loop, CPU per step measured)."""
    cmd = [sys.executable, str(HERE / "floor_cpu.py"), f"--steps={steps}", f"--skip={skip}"]
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"floor failed ({out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.monotonic() - t0
    return result


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds user + system) of every process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return out


def service_cpu(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each service's process tree (its worker processes included) and of
    this process (the controller)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out = {"controller": time.process_time()}
    for name, root in pids.items():
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            total += table.get(pid, (0, 0.0))[1]
            todo.extend(children.get(pid, []))
        out[name] = total
    return out


def demo_cfg(run_dir: Path, steps: int, overrides: list[str]) -> RunConfig:
    data = run_dir / "data"
    write_addition_jsonl(data, DEMO_TASK)
    base = demo_config(str(run_dir), data, base_model_dir())
    sets = [f"run_dir={run_dir}", f"steps={steps}", *overrides]
    return loads_run_config(to_toml(base, comments=False), overrides=sets)


def run_rlx(label: str, overrides: list[str], steps: int, skip: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rlx-bench-e2e-") as tmp:
        run_dir = Path(tmp) / "run"
        cfg = demo_cfg(run_dir, steps, overrides)
        timings = Timings()

        def log(msg: str) -> None:
            print(f"  [{label}] {msg}", flush=True)

        driver, cpu_marks = bench_driver(cfg, run_dir, timings=timings, cpu_marks_at=skip, log=log)
        t0 = time.monotonic()
        summary = driver.run(resume=False)
        wall = time.monotonic() - t0
        records = [
            json.loads(line)
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if line.strip()
        ]
    step_s = [r["step_s"] for r in records if "step_s" in r and r["step"] > skip]
    steady = [r for r in records if "step_s" in r and r["step"] > skip]
    trainer_ms = {
        k: 1e3 * statistics.median(r.get(f"trainer/{k}", 0.0) for r in steady)
        for k in ("step_time_s", "compute_s", "recompute_s", "push_s")
    }
    ends = timings.ends("trainer step RPC")
    if summary.steps != steps or len(ends) != steps or not step_s:
        raise SystemExit(f"{label}: ran {summary.steps} of {steps} steps")
    start, end = ends[skip - 1], ends[-1]
    n = steps - skip
    parts = timings.breakdown(start, end)
    main_ms = {c: 1e3 * parts.get((c, True), (0.0, 0))[0] / n for c in MAIN}
    counted = sum(v for c, v in main_ms.items() if not c.startswith(" "))
    mean = (end - start) / n
    main_ms["rest: waiting for rollouts, dispatch"] = 1e3 * mean - counted
    bg: dict[str, tuple[float, int]] = {}
    for c in BACKGROUND:
        secs = sum(parts.get((c, m), (0.0, 0))[0] for m in (True, False))
        calls = sum(parts.get((c, m), (0.0, 0))[1] for m in (True, False))
        bg[c] = (secs, calls)
    (t_a, cpu_a), (t_b, cpu_b) = cpu_marks[skip], cpu_marks[steps - 1]
    cpu_steps = steps - 1 - skip
    cpu = {k: (cpu_b[k] - cpu_a.get(k, 0.0)) / cpu_steps for k in cpu_b}
    return {
        "label": label,
        "cpu": cpu,
        "cpu_wall": (t_b - t_a) / cpu_steps,
        "median": statistics.median(step_s),
        "mean": mean,
        "wall_s": wall,
        "lag": cfg.staleness.effective_lag,
        "main_ms": main_ms,
        "background": bg,
        "steps_in_window": n,
        "train_s_per_step": summary.train_s_per_step,
        "trainer_ms": trainer_ms,
    }


def main() -> None:  # noqa: PLR0915  (one report, top to bottom)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=50, help="training steps per run")
    ap.add_argument("--skip", type=int, default=5, help="first steps left out (warm-up)")
    ap.add_argument("--only", default="", help="run only configs whose label contains this")
    ap.add_argument("--repeats", type=int, default=1, help="rounds over the configs (median)")
    args = ap.parse_args()
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
    if args.steps <= args.skip + 3:
        raise SystemExit(f"--steps ({args.steps}) must exceed --skip ({args.skip}) by 4 or more")
    print(f"uptime before: {uptime()}", flush=True)
    t_all = time.monotonic()

    def floor_run() -> dict[str, Any]:
        print(f"floor ({args.steps} steps) ...", flush=True)
        f = run_floor(args.steps, args.skip)
        print(
            f"  floor: {f['s_per_step']:.4f} s/step, {f['cpu_per_step']:.4f} CPU s/step, "
            f"{f['wall_s']:.0f} s wall; {uptime()}",
            flush=True,
        )
        return f

    # floor, config, floor, config, ..., floor: each config is compared with the two floor runs
    # around it (the machine is shared, its load drifts)
    floors = [floor_run()]
    chosen = [c for c in CONFIGS if not args.only or args.only in c[0]]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in chosen}
    for rnd in range(args.repeats):
        for label, overrides, goal in chosen[rnd % len(chosen) :] + chosen[: rnd % len(chosen)]:
            print(f"rlx {label} ({args.steps} steps) ...", flush=True)
            r = run_rlx(label, overrides, args.steps, args.skip)
            r["goal"] = goal
            runs[label].append(r)
            print(
                f"  {label}: {r['median']:.4f} s/step (median), {sum(r['cpu'].values()):.4f} "
                f"CPU s/step, {r['wall_s']:.0f} s wall; {uptime()}",
                flush=True,
            )
            floors.append(floor_run())
            r["floor"] = statistics.mean(f["s_per_step"] for f in floors[-2:])
            r["floor_cpu"] = statistics.mean(f["cpu_per_step"] for f in floors[-2:])
            r["ratio"] = r["median"] / r["floor"]
    rows = []  # per config, its median-ratio run (the lower middle one of an even count)
    for label, _, _ in chosen:
        ranked = sorted(runs[label], key=lambda r: r["ratio"])
        row = ranked[(len(ranked) - 1) // 2]
        row["ratios"] = [r["ratio"] for r in runs[label]]
        rows.append(row)

    print()
    print(
        f"e2e on the demo (B 32, G 8): steady-state s/step = median of steps {args.skip + 1}-"
        f"{args.steps}; floor = mean of the floor runs before and after each config "
        "("
        + ", ".join(f"{f['s_per_step']:.4f}" for f in floors)
        + ")"
        + (
            f"; {args.repeats} runs per config, the median-ratio one shown"
            if args.repeats > 1
            else ""
        )
    )
    print(
        f"{'config':<22}{'s/step':>8}{'mean':>8}{'floor':>8}{'x floor':>9}  {'goal':<14}"
        f"{'CPU s/step':>11}{'floor CPU':>10}{'x':>6}"
        + ("  all runs x floor" if args.repeats > 1 else "")
    )
    for r in rows:
        met = "met" if r["ratio"] <= r["goal"] else "NOT met"
        cpu = sum(r["cpu"].values())
        spread = ", ".join(f"{x:.2f}" for x in r["ratios"]) if args.repeats > 1 else ""
        print(
            f"{r['label']:<22}{r['median']:>8.4f}{r['mean']:>8.4f}{r['floor']:>8.4f}"
            f"{r['ratio']:>9.2f}  {'<= ' + format(r['goal'], '.1f') + 'x ' + met:<14}"
            f"{cpu:>11.3f}{r['floor_cpu']:>10.3f}{cpu / r['floor_cpu']:>6.2f}  {spread}"
        )
    print()
    print("where rlx's step goes (ms per step, steady-state window; main = the loop's thread)")
    width = max(len(c) for c in [*MAIN, *BACKGROUND, "rest: waiting for rollouts, dispatch"])
    print(f"{'main thread':<{width}}" + "".join(f"{r['label'][:20]:>22}" for r in rows))
    keys = [*MAIN, "rest: waiting for rollouts, dispatch"]
    for c in keys:
        print(f"{c:<{width}}" + "".join(f"{r['main_ms'][c]:>22.1f}" for r in rows))
    print(f"{'= mean s/step x 1000':<{width}}" + "".join(f"{1e3 * r['mean']:>22.1f}" for r in rows))
    print(f"{'inside the trainer step (median ms)':<{width}}")
    for name, cell in TRAINER_PARTS:
        print(f"{name:<{width}}" + "".join(f"{cell(r['trainer_ms']):>22.1f}" for r in rows))
    print(f"{'background (ms/call; calls)':<{width}}")
    for c in BACKGROUND:
        cells = []
        for r in rows:
            secs, calls = r["background"][c]
            cells.append(f"{1e3 * secs / calls:.1f} ({calls})" if calls else "-")
        print(f"{c:<{width}}" + "".join(f"{x:>22}" for x in cells))
    print("CPU ms per step by process tree (2 cores: 2000 ms of CPU per s of wall at most)")
    names = sorted({k for r in rows for k in r["cpu"]})
    for k in names:
        print(f"{k:<{width}}" + "".join(f"{1e3 * r['cpu'].get(k, 0.0):>22.1f}" for r in rows))
    print(
        f"{'floor (one process)':<{width}}"
        + "".join(f"{1e3 * r['floor_cpu']:>22.1f}" for r in rows)
    )
    print()
    print(f"total {time.monotonic() - t_all:.0f} s")
    print(f"uptime after: {uptime()}")


if __name__ == "__main__":
    main()
