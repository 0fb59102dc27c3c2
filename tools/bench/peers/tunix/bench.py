"""The built-in demo in rlx (`rlx up`, exactly as a user gets it) against the same training in
Google's Tunix, in alternating order, one table.

    uv run python tools/bench/peers/tunix/bench.py [--order ABBA] [--steps 600] [--out DIR]

A = rlx, B = Tunix (`--order` any string of A and B; default ABBA). Tunix runs in its own venv
(`--venv`, default ~/.cache/rlx-peers/tunix; `bash tools/bench/peers/tunix/setup.sh` creates
it) through driver.py, which imports nothing of rlx: this script hands it a plan made with rlx's
own code (demo config, chat-rendered prompts in rlx's mixture draw order, gold answers, held-out
split, optimizer settings, answer log-probs from `rlx model score`). After each rlx run the
plan's prompt order is checked against that run's metrics.jsonl `prompt_ids`.

Per run: seconds per step (median, and wall / steps), update seconds (rlx: trainer/compute_s;
Tunix: the wall seconds of RLCluster.update_actor, blocked until the params are ready),
seconds outside the update (step - update: generation, rewards, loop; plus Tunix's generate
call alone), peak memory (the largest sum of RSS over every process of that side, sampled every
0.25 s), held-out greedy accuracy by step, `uptime` before and after; then medians per side and
the ratios rlx / Tunix. `--out DIR` keeps the runs and writes DIR/peer_tunix.json.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent)]

from common import uptime  # noqa: E402  (tools/ is not a package)

DEFAULT_VENV = Path.home() / ".cache" / "rlx-peers" / "tunix"


def tunix_python(venv: Path) -> str:
    """The peer venv's interpreter, or exit with one line saying how to create it."""
    python = venv / "bin" / "python"
    ok = python.exists() and (
        subprocess.run(
            [str(python), "-c", "import tunix.rl.grpo.grpo_learner"],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )
    if not ok:
        sys.exit(
            f"no Tunix venv at {venv}: create it with `bash {HERE / 'setup.sh'} {venv}` "
            "(a few minutes; never inside rlx's venv)"
        )
    return str(python)


def make_plan(steps: int, work: Path, rlx: str) -> dict[str, Any]:
    """Everything the Tunix driver must match, from rlx's own code and CLI."""
    from rlx_controller import MixtureSource, PromptMixture
    from rlx_data import DEMO_TASK, addition_splits, base_model_dir, demo_config
    from rlx_data.demo import DEMO_STEPS

    base = base_model_dir()
    cfg = demo_config(str(work / "plan-run"), work / "plan-data", base)
    from rlx_core.tokenizer import load_tokenizer

    tok = load_tokenizer(str(base))
    train, heldout = addition_splits(DEMO_TASK)

    def render(text: str) -> str:
        return tok.render([{"role": "user", "content": text}])

    name = cfg.datasets[0].name
    mix = PromptMixture([MixtureSource(name, 1.0, rows=range(len(train)))], seed=cfg.seed)
    state = mix.initial_state()
    rows: list[list[int]] = []
    for _ in range(steps):
        refs, state = mix.draw(state, cfg.batch.prompts)
        rows.append([r.row for r in refs])
    stop_ids = [tok.token_id("<|im_end|>"), tok.token_id("<|endoftext|>")]

    # reference answer log-probs: `rlx model score` on 32 held-out prompts and their answers
    ref_in, ref_out = work / "score_in.jsonl", work / "score_out.jsonl"
    pairs = []
    for rec in heldout[:32]:
        prompt = tok.prompt_ids(rec["prompt"])
        answer = tok.encode(DEMO_TASK.target(rec["answer"]), add_special_tokens=False)
        pairs.append({"prompt_ids": prompt, "completion_ids": [*answer, stop_ids[0]]})
    ref_in.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    subprocess.run(
        [rlx, "model", "score", str(base), "--input", str(ref_in), "-o", str(ref_out)],
        check=True,
        capture_output=True,
    )
    scores = [json.loads(line)["logprobs"] for line in ref_out.read_text().splitlines()]
    o = cfg.trainer.optimizer
    return {
        "base_model": str(base),
        "steps": steps,
        "seed": cfg.seed,
        "group_size": cfg.batch.group_size,
        "max_prompt_tokens": cfg.batch.max_prompt_tokens,
        "max_new_tokens": cfg.batch.max_new_tokens,
        "temperature": cfg.sampling.temperature,
        "stop_ids": stop_ids,
        "beta": 0.0 if cfg.trainer.objective.beta is None else cfg.trainer.objective.beta,
        "clip_eps": 0.2,
        "optimizer": {
            "lr": o.lr,
            "warmup_steps": o.warmup_steps,
            "decay_steps": o.decay_steps,
            "final_lr_ratio": o.final_lr_ratio,
            "b1": o.b1,
            "b2": o.b2,
            "eps": o.eps,
            "weight_decay": o.weight_decay,
            "clip_norm": o.clip_norm,
        },
        "eval_every": cfg.eval.every,
        "eval_batch": len(heldout),
        "train_rows": rows,
        "train_prompts": [[render(train[r]["prompt"]) for r in step] for step in rows],
        "train_answers": [[train[r]["answer"] for r in step] for step in rows],
        "first_batch_ids": [tok.prompt_ids(train[r]["prompt"]) for r in rows[0]],
        "heldout_prompts": [render(r["prompt"]) for r in heldout],
        "heldout_answers": [r["answer"] for r in heldout],
        "score_reference": [{**p, "logprobs": s} for p, s in zip(pairs, scores, strict=True)],
        "demo_steps": DEMO_STEPS,
    }


class PeakRss:
    """The largest sum of RSS over a process tree (and any process naming `mark` on its command
    line: services that left the tree), sampled every `period` seconds."""

    def __init__(self, root: int, mark: str | None = None, period: float = 0.25) -> None:
        self.root, self.mark, self.period = root, mark, period
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _procs(self) -> dict[int, psutil.Process]:
        procs: dict[int, psutil.Process] = {}
        try:
            root = psutil.Process(self.root)
            procs[root.pid] = root
            procs.update({p.pid: p for p in root.children(recursive=True)})
        except psutil.NoSuchProcess:
            pass
        if self.mark:
            for p in psutil.process_iter(["cmdline"]):
                if any(self.mark in part for part in (p.info["cmdline"] or [])):
                    procs[p.pid] = p
        return procs

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for p in self._procs().values():
                with contextlib.suppress(psutil.Error):  # exited since listed
                    total += p.memory_info().rss
            self.peak = max(self.peak, total)
            self._stop.wait(self.period)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def rlx_tree() -> dict[str, Any]:
    """The commit rlx runs from and the tracked files changed beside it (the demo runs the
    working tree, so a run measures uncommitted edits too)."""
    repo = HERE.parents[3]

    def git(*args: str) -> str:
        cmd = ["git", "-C", str(repo), *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.rstrip()

    modified = git("status", "--porcelain", "--untracked-files=no").splitlines()
    return {
        "commit": git("rev-parse", "--short", "HEAD").strip(),
        "modified": [m[3:] for m in modified],
    }


def run_rlx(steps: int, work: Path, rlx: str, plan: dict[str, Any]) -> dict[str, Any]:
    run_dir = work / "rlx-run"
    tree = rlx_tree()
    cmd = [rlx, "up", "--run-dir", str(run_dir)]
    if steps != plan["demo_steps"]:
        cmd += ["--set", f"steps={steps}"]
    before = uptime()
    t0 = time.perf_counter()
    with open(work / "rlx-up.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work)
        rss = PeakRss(proc.pid, mark=str(run_dir))
        code = proc.wait()
    wall = time.perf_counter() - t0
    peak = rss.stop()
    after = uptime()
    if code != 0:
        sys.exit(f"rlx up exited {code}: see {work / 'rlx-up.log'}")
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if "step_s" in x]
    drawn = [[int(p.split("/")[1]) for p in x["prompt_ids"]] for x in train]
    order_ok = drawn == plan["train_rows"][: len(drawn)]
    step_s = [x["step_s"] for x in train]
    update_s = [x["trainer/compute_s"] for x in train]
    return {
        "side": "rlx",
        "steps": len(train),
        "wall_s": wall,
        "median_step_s": _median(step_s),
        "median_update_s": _median(update_s[1:]),
        "median_outside_s": _median([s - u for s, u in zip(step_s, update_s, strict=True)][1:]),
        "median_generate_s": None,  # rlx logs no separate generation time per step
        "peak_rss_bytes": peak,
        "heldout": {str(x["step"]): x["heldout"] for x in lines if "heldout" in x},
        "prompt_order_matches_plan": order_ok,
        "rlx_tree": tree,
        "uptime_before": before,
        "uptime_after": after,
    }


def run_tunix(work: Path, python: str, plan_path: Path) -> dict[str, Any]:
    out = work / "tunix.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    before = uptime()
    t0 = time.perf_counter()
    with open(work / "tunix.log", "w") as log:
        cmd = [python, str(HERE / "driver.py"), "--input", str(plan_path), "--output", str(out)]
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work, env=env)
        rss = PeakRss(proc.pid)
        code = proc.wait()
    wall = time.perf_counter() - t0
    peak = rss.stop()
    after = uptime()
    if code != 0:
        sys.exit(f"the Tunix driver exited {code}: see {work / 'tunix.log'}")
    r = json.loads(out.read_text())
    outside = [s - u for s, u in zip(r["step_s"], r["update_s"][1:], strict=False)]
    return {
        "side": "tunix",
        "steps": r["steps"],
        "wall_s": wall,
        "median_step_s": r["median_step_s"],
        "median_update_s": r["median_update_s"],
        "median_outside_s": _median(outside),
        "median_generate_s": r["median_generate_s"],
        "peak_rss_bytes": peak,
        "heldout": r["heldout"],
        "score_max_abs_diff": r["score_max_abs_diff"],
        "uptime_before": before,
        "uptime_after": after,
    }


def _load(r: dict[str, Any]) -> str:
    """The run's load averages before -> after, from its `uptime` lines."""
    before, after = (r[k].split("average:")[-1].strip() for k in ("uptime_before", "uptime_after"))
    return f"{before} -> {after}"


def _fmt(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def table(runs: list[dict[str, Any]], steps: int) -> str:
    rows = [
        "| run | side | s/step median | wall / steps | update s | outside update s | "
        "generate s | peak RSS GiB | held-out by step | load before -> after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(runs, 1):
        held = ", ".join(
            f"{k}: {v:.3f}" for k, v in sorted(r["heldout"].items(), key=lambda x: int(x[0]))
        )
        load = _load(r)
        rows.append(
            f"| {i} | {r['side']} | {_fmt(r['median_step_s'])} | {_fmt(r['wall_s'] / steps)} | "
            f"{_fmt(r['median_update_s'])} | {_fmt(r['median_outside_s'])} | "
            f"{_fmt(r['median_generate_s'])} | {r['peak_rss_bytes'] / 2**30:.2f} | {held} | "
            f"{load} |"
        )
    return "\n".join(rows)


def summary(runs: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """Per side the median over its runs of each figure; the ratios rlx / Tunix."""
    keys = ["median_step_s", "wall_per_step_s", "median_update_s", "median_outside_s"]
    keys.append("peak_rss_bytes")
    side: dict[str, dict[str, float | None]] = {}
    for name in ("rlx", "tunix"):
        these = [r for r in runs if r["side"] == name]
        for r in these:
            r["wall_per_step_s"] = r["wall_s"] / steps
        side[name] = {k: _median([r[k] for r in these if r[k] is not None]) for k in keys}
    ratios: dict[str, float | None] = {}
    for k in keys:
        a, b = side["rlx"][k], side["tunix"][k]
        ratios[k] = a / b if a and b else None
    return {"sides": side, "ratios_rlx_over_tunix": ratios}


@contextlib.contextmanager
def held(lock: Path | None) -> Iterator[None]:
    """An exclusive flock on `lock` (None: nothing) while one run goes: a full ABBA takes ~15
    min, so the machine's benchmark lock is taken per run, not for the whole sequence."""
    if lock is None:
        yield
        return
    with open(lock, "a") as f:
        t0 = time.perf_counter()
        fcntl.flock(f, fcntl.LOCK_EX)
        waited = time.perf_counter() - t0
        if waited > 1:
            print(f"waited {waited:.0f} s for {lock}", flush=True)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--order", default="ABBA", help="A = rlx, B = Tunix, in this order")
    ap.add_argument("--steps", type=int, default=0, help="training steps; 0 = the demo's (600)")
    ap.add_argument(
        "--venv", type=Path, default=Path(os.environ.get("RLX_TUNIX_VENV", DEFAULT_VENV))
    )
    ap.add_argument("--out", type=Path, default=None, help="keep runs here, and peer_tunix.json")
    ap.add_argument("--lock", type=Path, default=None, help="flock this file during each run")
    args = ap.parse_args()
    if not args.order or set(args.order) - {"A", "B"}:
        sys.exit(f"--order: a string of A (rlx) and B (Tunix), got {args.order!r}")
    python = tunix_python(args.venv)
    rlx = str(Path(sys.executable).parent / "rlx")
    from rlx_data.demo import DEMO_STEPS

    steps = args.steps or DEMO_STEPS
    out = args.out or Path(tempfile.mkdtemp(prefix="rlx-peer-tunix-"))
    out.mkdir(parents=True, exist_ok=True)
    plan = make_plan(steps, out, rlx)
    plan_path = out / "plan.json"
    plan_path.write_text(json.dumps(plan))
    print(f"plan: {steps} steps, order {args.order}, runs in {out}", flush=True)

    runs = []
    for i, which in enumerate(args.order, 1):
        work = out / f"{i}-{'rlx' if which == 'A' else 'tunix'}"
        work.mkdir(exist_ok=True)
        with held(args.lock):
            if which == "A":
                r = run_rlx(steps, work, rlx, plan)
            else:
                r = run_tunix(work, python, plan_path)
        runs.append(r)
        # after every run, so a sequence cut short keeps what it measured
        (out / "peer_tunix.json").write_text(json.dumps({"steps": steps, "runs": runs}, indent=1))
        print(
            f"run {i} {r['side']}: median step {_fmt(r['median_step_s'])} s, update "
            f"{_fmt(r['median_update_s'])} s, wall {r['wall_s']:.1f} s, load {_load(r)}",
            flush=True,
        )
        if r["side"] == "rlx":
            t = r["rlx_tree"]
            print(f"  rlx at {t['commit']}, modified: {', '.join(t['modified']) or 'none'}")
        if r["side"] == "rlx" and not r["prompt_order_matches_plan"]:
            sys.exit("rlx drew its prompts in another order than the plan's: the bench is stale")
    result = {"steps": steps, "order": args.order, "runs": runs, **summary(runs, steps)}
    (out / "peer_tunix.json").write_text(json.dumps(result, indent=1))
    print()
    print(table(runs, steps))
    print()
    for k, v in result["ratios_rlx_over_tunix"].items():
        print(f"rlx / tunix {k}: {_fmt(v, 3)}")
    print(
        f"tunix answer log-probs vs `rlx model score`: max |diff| "
        f"{max(r['score_max_abs_diff'] for r in runs if r['side'] == 'tunix'):.2e}"
        if any(r["side"] == "tunix" for r in runs)
        else ""
    )
    print(f"json: {out / 'peer_tunix.json'}")


if __name__ == "__main__":
    main()
