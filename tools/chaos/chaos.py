"""Fault injection for rlx runs: random SIGKILL / SIGTERM / SIGSTOP schedules, then a comparison
with an uninterrupted run.

One schedule is a list of faults. Each fault waits for its trigger (the run's metrics reaching a
step, or a snapshot of a step being committed; a trigger that never comes fires after
`--trigger-timeout` seconds anyway), waits a random fraction of a second more, and sends a signal
to one target: a service of the run (`paramserver-0`, `trainer`, `inference-0`, `verifier-0`, ...),
the controller, or everything at once (`all`: the machine is lost). SIGSTOP is held for a few
seconds and then continued, or held until the controller is gone (`hold_s` 0: the controller
must notice the hung service itself, or a later fault ends the controller). Whenever the
controller has exited before the run finished, `rlx resume` continues it, as a user would.

At the end the run must equal the uninterrupted one exactly: the params hash in summary.json, the
prompts consumed at every step, and every per-step metric that does not measure time.

    uv run python tools/chaos/chaos.py --schedules 20                # the demo, made small
    uv run python tools/chaos/chaos.py --schedules 50 --seed 7 \\
        --set staleness.reload=2 --set staleness.accept=4 --set dynamic_sampling.enabled=true

tools/ is not a package: tests import this file by path (tests/test_chaos.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlx_controller import read_holder
from rlx_core.errors import RlxError
from rlx_core.processes import Process
from rlx_core.storage import open_storage
from rlx_launch import read_services, service_process

# `rlx` in a new process, from this interpreter's environment
CLI = [sys.executable, "-c", "from rlx_cli.main import app; app()"]

# the demo made small enough for many schedules: 20 steps of 8 prompts x 4 samples (the demo's
# checkpoint every 50 steps is kept: every resume replays from step 0, past the paramserver's
# 8 versions)
DEFAULT_SETS = (
    "steps=20",
    "batch.prompts=8",
    "batch.group_size=4",
    "eval.max_prompts=16",
    "eval.every=100",
)
SIGNALS = ("KILL", "TERM", "STOP")
_SNAPSHOT = re.compile(r"s(\d{10})")
_RUN_TIMEOUT_S = 600.0  # one controller process, start to exit


@dataclass(frozen=True)
class Fault:
    """One signal to one target, once its trigger has come."""

    trigger: str  # "step": the metrics reached step `at`; "snapshot": snapshot `at` committed
    at: int  # the step of the trigger
    delay_s: float  # seconds after the trigger, >= 0
    target: str  # a service name, "controller" or "all"
    signal: str  # "KILL", "TERM" or "STOP"
    hold_s: float = 0.0  # STOP only: SIGCONT after this long; 0 = held until the controller exits

    def __str__(self) -> str:
        hold = "" if self.signal != "STOP" else f" for {self.hold_s:g}s" if self.hold_s else " held"
        when = f"{self.trigger} {self.at}+{self.delay_s:.2f}s"
        return f"{self.signal} {self.target}{hold} @ {when}"


@dataclass
class Outcome:
    """What one schedule did and how its run compares with the uninterrupted one."""

    faults: list[Fault]
    fired: list[str] = field(default_factory=list)  # what was sent, in order
    controllers: int = 0  # controller processes started (1 + resumes)
    differences: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def identical(self) -> bool:
        return not self.differences

    @property
    def hit(self) -> int:
        """Faults that reached a live target (not: the run had finished, the target was down)."""
        return sum(" (pid " in f or f.startswith("KILL all") for f in self.fired)

    def to_dict(self) -> dict[str, Any]:
        return {
            "faults": [asdict(f) for f in self.faults],
            "fired": self.fired,
            "controllers": self.controllers,
            "hit": self.hit,
            "identical": self.identical,
            "differences": self.differences,
            "wall_s": round(self.wall_s, 1),
        }


# --- schedules --------------------------------------------------------------------------------


def random_schedule(
    rng: random.Random, *, steps: int, services: Sequence[str], faults: int = 0
) -> list[Fault]:
    """1 to 3 faults (or `faults`) at random steps, targets and signals. A held SIGSTOP of a
    service is followed, half the time, by the controller's death at the next snapshot (a
    resume then needs the versions of batches that were never generated)."""
    targets = [*services, "controller", "all"]
    out: list[Fault] = []
    for _ in range(faults or rng.randint(1, 3)):
        target = rng.choice(targets)
        sig = "KILL" if target == "all" else rng.choice(SIGNALS)
        at = rng.randint(0, steps - 1)
        delay = round(rng.uniform(0.0, 0.3), 3)  # a small run's step takes 0.1-0.5 s
        hold = 0.0
        if sig == "STOP":
            held = target != "controller" and rng.random() < 0.4
            hold = 0.0 if held else round(rng.uniform(0.5, 6.0), 1)
        out.append(Fault("step", at, delay, target, sig, hold))
        if sig == "STOP" and hold == 0.0 and rng.random() < 0.5:
            end = rng.choice(("KILL", "TERM"))
            out.append(Fault("snapshot", at + 1, round(rng.uniform(0, 0.2), 3), "controller", end))
    return sorted(out, key=lambda f: (f.at, f.trigger != "step"))


# --- the run directory, read from outside -----------------------------------------------------


def steps_done(run_dir: Path, offset: int = 0) -> int:
    """The last step in metrics.jsonl from byte `offset` on (a line being written is skipped)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return 0
    done = 0
    with path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    for line in text.splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            done = max(done, int(json.loads(line)["step"]))
    return done


def snapshot_committed(run_dir: Path, step: int) -> bool:
    root = run_dir / "snapshots"
    if not root.is_dir():
        return False
    for d in root.iterdir():
        m = _SNAPSHOT.match(d.name)
        if m and int(m[1]) == step and (d / "_COMMITTED").exists():
            return True
    return False


def finished(run_dir: Path, steps: int) -> bool:
    path = run_dir / "summary.json"
    if not path.exists():
        return False
    try:
        summary = json.loads(path.read_text())
    except ValueError:
        return False
    return summary.get("steps") == steps and not summary.get("stopped")


def service_procs(run_dir: Path) -> dict[str, Process]:
    """The run's services that still run as the processes it recorded (pid, start time and run,
    rlx_core.processes): a pid the system has given to another process is left alone."""
    try:
        handles = read_services(run_dir)
    except RlxError:  # not a services file rlx wrote (a missing one reads as {})
        return {}
    procs = {name: service_process(h, run_dir) for name, h in handles.items() if h.pid}
    return {name: p for name, p in procs.items() if p is not None}


def service_pids(run_dir: Path) -> dict[str, int]:
    return {name: p.pid for name, p in service_procs(run_dir).items()}


def controller_pid(run_dir: Path) -> int | None:
    """The pid in controller.pid while the run's lease names that process (pid and start time on
    this host): never a pid the system has since reused."""
    try:
        pid = int((run_dir / "controller.pid").read_text())
        holder = read_holder(open_storage(str(run_dir)))
    except (OSError, ValueError, RlxError):
        return None
    if holder is None or holder.pid != pid or holder.process() is None:
        return None
    return pid


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# --- comparing with the uninterrupted run -------------------------------------------------------


def _timing(key: str) -> bool:
    """Metrics that measure time (or throughput) and so differ between any two runs."""
    return key.endswith("_s") or "per_s" in key or key.endswith("_unix")


def per_step(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The last record of each step in metrics.jsonl (a resume trains some steps again), without
    the metrics that measure time."""
    out: dict[int, dict[str, Any]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        merged = out.setdefault(int(rec["step"]), {})
        merged.update({k: v for k, v in rec.items() if not _timing(k)})
    return out


def compare(run_dir: Path, reference: Path) -> list[str]:
    """The differences between a run and the uninterrupted reference (empty: identical)."""
    problems = []
    got, want = (json.loads((d / "summary.json").read_text()) for d in (run_dir, reference))
    for key in ("steps", "params_hash", "heldout_before", "heldout_after"):
        if got.get(key) != want.get(key):
            problems.append(f"summary {key}: {got.get(key)!r} != {want.get(key)!r}")
    mine, theirs = per_step(run_dir), per_step(reference)
    if sorted(mine) != sorted(theirs):
        problems.append(f"steps recorded: {sorted(mine)} != {sorted(theirs)}")
    for step in sorted(set(mine) & set(theirs)):
        a, b = mine[step], theirs[step]
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                problems.append(f"step {step} {key}: {a.get(key)!r} != {b.get(key)!r}")
    return problems


# --- running a schedule -------------------------------------------------------------------------


class _Run:
    """The controller processes of one run directory (`rlx up`, then `rlx resume`s)."""

    def __init__(self, run_dir: Path, args: list[str], log: Callable[[str], None]) -> None:
        self.run_dir = run_dir
        self.args = args
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0
        self.held: list[int] = []  # pids SIGSTOPped until the controller exits
        self._timers: list[threading.Timer] = []
        self.signalled = False  # the current controller was sent a SIGKILL / SIGTERM
        self.crashes: list[str] = []  # controllers that failed on their own: the end of the log

    def start(self) -> None:
        verb = ["up", "--run-dir", str(self.run_dir), *self.args] if not self.started else []
        cmd = [*CLI, *(verb or ["resume", str(self.run_dir)])]
        self.log_path = self.run_dir.parent / f"{self.run_dir.name}.controller{self.started}.log"
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        self.started += 1
        self.signalled = False
        # a step trigger counts the steps this controller trains (a resume trains some again)
        metrics = self.run_dir / "metrics.jsonl"
        self.offset = metrics.stat().st_size if metrics.exists() else 0

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ended(self) -> None:
        """The controller exited: note a failure of its own; continue what it left stopped
        (its successor kills them)."""
        if self.proc is not None and self.proc.returncode and not self.signalled:
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-3:]
            self.crashes.append(f"controller {self.started} exited {self.proc.returncode}: {tail}")
            self.signalled = True  # noted once
        for pid in self.held:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.held.clear()

    def wait_exit(self, timeout_s: float) -> None:
        assert self.proc is not None
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.log(f"controller still running after {timeout_s:.0f} s: SIGKILL")
            self.proc.kill()
            self.proc.wait()
        self.ended()

    def send(self, fault: Fault, steps: int) -> str:
        """Send `fault`'s signal to its target; what was done, in words."""
        sig = getattr(signal, f"SIG{fault.signal}")
        if fault.target == "all":
            pids = [controller_pid(self.run_dir), *service_pids(self.run_dir).values()]
            hit = [p for p in pids if p is not None and _alive(p)]
            self.signalled = True
            for pid in hit:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return f"KILL all ({len(hit)} processes)"
        pid = self._live_target(fault.target, steps)
        if pid is None:
            return f"{fault}: no live target"
        os.kill(pid, sig)
        if fault.target == "controller" and sig != signal.SIGSTOP:
            self.signalled = True
        if sig == signal.SIGSTOP:
            if fault.hold_s > 0:
                timer = threading.Timer(fault.hold_s, _cont, (pid,))
                timer.daemon = True
                timer.start()
                self._timers.append(timer)
            else:
                self.held.append(pid)
        return f"{fault.signal} {fault.target} (pid {pid}) at step {steps_done(self.run_dir)}"

    def _live_target(self, target: str, steps: int, wait_s: float = 60.0) -> int | None:
        """The pid of `target`, waiting for it while its controller is (re)starting it."""
        deadline = time.monotonic() + wait_s
        while not finished(self.run_dir, steps) and time.monotonic() < deadline:
            if target == "controller":
                pid = controller_pid(self.run_dir)
            else:
                pid = service_pids(self.run_dir).get(target)
            if pid is not None and _alive(pid) and pid not in self.held:
                return pid
            if not self.running():
                return None
            time.sleep(0.05)
        return None

    def cleanup(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self.ended()
        if self.running():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()
        for proc in service_procs(self.run_dir).values():
            proc.signal_group(signal.SIGKILL)


def _cont(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def run_schedule(
    faults: Sequence[Fault],
    run_dir: Path,
    args: Sequence[str],
    *,
    steps: int,
    reference: Path | None = None,
    trigger_timeout_s: float = 90.0,
    max_controllers: int = 8,
    log: Callable[[str], None] = print,
) -> Outcome:
    """Run `rlx up --run-dir run_dir ARGS` under `faults` (resuming whenever the controller has
    exited early) to the end; compare with `reference` when given."""
    start = time.monotonic()
    outcome = Outcome(list(faults))
    run = _Run(run_dir, list(args), log)
    run.start()
    try:
        for fault in faults:
            _wait_trigger(run, fault, steps, trigger_timeout_s)
            if finished(run_dir, steps):
                outcome.fired.append(f"{fault}: run already finished")
                continue
            time.sleep(fault.delay_s)
            done = run.send(fault, steps)
            outcome.fired.append(done)
            log(f"  {done}")
            if fault.target in ("controller", "all") and fault.signal != "STOP":
                run.wait_exit(120.0)
        while not finished(run_dir, steps):
            if run.running():
                run.wait_exit(_RUN_TIMEOUT_S)
                continue
            run.ended()
            if run.started >= max_controllers:
                outcome.differences.append(f"not finished after {run.started} controllers")
                break
            run.start()
    finally:
        run.cleanup()
    outcome.controllers = run.started
    outcome.wall_s = time.monotonic() - start
    outcome.differences += run.crashes
    if reference is not None and finished(run_dir, steps):
        outcome.differences += compare(run_dir, reference)
    return outcome


def _wait_trigger(run: _Run, fault: Fault, steps: int, timeout_s: float) -> None:
    """Until `fault`'s trigger (or `timeout_s` without progress, or the run's end); a controller
    that exited meanwhile is resumed."""
    deadline = time.monotonic() + timeout_s
    last = steps_done(run.run_dir, run.offset)
    while True:
        if finished(run.run_dir, steps):
            return
        done = steps_done(run.run_dir, run.offset)
        if fault.trigger == "step" and done >= fault.at:
            return
        if fault.trigger == "snapshot" and snapshot_committed(run.run_dir, fault.at):
            return
        if done != last:
            last, deadline = done, time.monotonic() + timeout_s
        if time.monotonic() > deadline:
            return  # any moment will do
        if not run.running():
            run.ended()
            run.start()
        time.sleep(0.02)


def reference_run(run_dir: Path, args: Sequence[str], steps: int) -> Path:
    """The uninterrupted run of the same config."""
    outcome = run_schedule([], run_dir, args, steps=steps, max_controllers=1, log=lambda _: None)
    if outcome.differences:
        raise RuntimeError(f"the uninterrupted run did not finish: {outcome.differences}")
    return run_dir


# --- the command ---------------------------------------------------------------------------------


def _services(sets: Sequence[str]) -> list[str]:
    """The service names of a run with these `--set` values (the demo's counts otherwise)."""
    counts = {"inference_workers": 1, "paramserver_replicas": 1, "verifier_workers": 1}
    for s in sets:
        key, _, value = s.partition("=")
        if key.startswith("services.") and key[len("services.") :] in counts:
            counts[key[len("services.") :]] = int(value)
    return [
        "trainer",
        *(f"inference-{i}" for i in range(counts["inference_workers"])),
        *(f"paramserver-{i}" for i in range(counts["paramserver_replicas"])),
        *(f"verifier-{i}" for i in range(counts["verifier_workers"])),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=20, help="random schedules to run")
    parser.add_argument("--seed", type=int, default=0, help="schedule i uses seed*1000 + i")
    parser.add_argument("--config", default="", help="a run config (default: the demo)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides"
    )
    parser.add_argument("--no-default-sets", action="store_true", help="only --set's overrides")
    parser.add_argument("--out", default="", help="keep run directories and results.json here")
    parser.add_argument("--trigger-timeout", type=float, default=90.0, metavar="S")
    opts = parser.parse_args(argv)

    sets = [*([] if opts.no_default_sets else DEFAULT_SETS), *opts.set]
    steps = next((int(s.split("=", 1)[1]) for s in reversed(sets) if s.startswith("steps=")), 0)
    if not steps:
        parser.error("set the run's length with --set steps=N")
    args = [*([opts.config] if opts.config else []), *(x for s in sets for x in ("--set", s))]
    out = Path(opts.out) if opts.out else Path(tempfile.mkdtemp(prefix="rlx-chaos-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"chaos: {opts.schedules} schedules, seed {opts.seed}, sets {sets}; files in {out}")

    t0 = time.monotonic()
    reference = reference_run(out / "reference", args, steps)
    print(f"reference run: {time.monotonic() - t0:.0f} s")
    results = []
    for i in range(opts.schedules):
        rng = random.Random(opts.seed * 1000 + i)
        faults = random_schedule(rng, steps=steps, services=_services(sets))
        print(f"schedule {i}: " + "; ".join(str(f) for f in faults))
        run_dir = out / f"run{i:03d}"
        outcome = run_schedule(
            faults,
            run_dir,
            args,
            steps=steps,
            reference=reference,
            trigger_timeout_s=opts.trigger_timeout,
        )
        verdict = (
            "identical" if outcome.identical else "DIFFERENT: " + "; ".join(outcome.differences[:5])
        )
        print(f"  {outcome.controllers} controller(s), {outcome.wall_s:.0f} s: {verdict}")
        results.append(outcome.to_dict())
        if outcome.identical and not opts.out:
            shutil.rmtree(run_dir, ignore_errors=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))

    same = sum(r["identical"] for r in results)
    print("\n| # | faults | hit | controllers | s | identical |\n|---|---|---|---|---|---|")
    for i, r in enumerate(results):
        faults = "; ".join(str(Fault(**f)) for f in r["faults"])
        row = f"{r['hit']} | {r['controllers']} | {r['wall_s']:.0f} | {r['identical']}"
        print(f"| {i} | {faults} | {row} |")
    print(f"\n{same} of {len(results)} schedules identical to the uninterrupted run")
    return 0 if same == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
