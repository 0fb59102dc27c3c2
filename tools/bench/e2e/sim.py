"""Scaling simulation: the real controller loop with 1 ... 1024 simulated inference workers.

    uv run python tools/bench/e2e/sim.py [--workers 1,8,64,512,1024] [--steps 8] [--skip 3]

rlx_controller's Driver runs unchanged (schedule, prompt mixture, thread pool, rollout log in a
temp run directory on /dev/shm when there is one, build_batch, snapshots at every reload boundary,
metrics lines); only its services are replaced by in-process simulated clients with the methods it
calls (trainer: init, train_step, save_checkpoint; inference: load_version, generate; verifier:
verify; paramserver: manifest) whose latency follows a model, no JAX. Weak scaling: with W workers
a batch is W work units of one prompt × G samples (batch.prompts = W, prompts_per_unit = 1), one
unit per worker. Rollout throughput (units per second in the steady state, the first `skip` steps
left out) is compared with ideal linear scaling of the 1-worker figure:
efficiency = X(W) / (W × X(1)).

The latency model (RLAX-like: generation dominates, seconds per unit; all times scale with
--time-scale):
  - generate: gen_s × (1 + ε) per unit, ε ~ N(0, jitter) from a seeded RNG per unit id, clipped to
    ±4 σ (a worker decodes its unit's sequences as one batch, and a unit's total token count
    varies little); responses of 8-64 tokens per sample are returned (the log and batch sizes the
    controller handles); load_version: load_s when the version changes.
  - verify: verify_s per sample; train_step: train_s; save_checkpoint: ckpt_s; manifest: manifest_s.
The run directory is on tmpfs so that storage latency stays out of the controller's figure: on this
machine's disk the rollout log's two fsyncs per record (1024 records a step) alone cost about 1 s a
step (5.3 against 4.4 s/step); at scale the run directory is object storage, whose latency the post
threads overlap. All sleeps release the GIL, so what competes for the controller's one Python core
is the controller's own work (and the simulated clients' small bookkeeping, measured apart).

Where the time goes is measured per call (wall and thread CPU time, time.thread_time): the loop's
main-thread calls per step, and per unit the controller's CPU in run_unit outside the simulated
clients (prompt encoding, VerifySample construction, rollout record, rollout-log append).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import pstats
import random
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from common import uptime  # noqa: E402  (tools/ is not a package)
from timing import Timed, Timings  # noqa: E402  (tools/ is not a package)

from rlx_controller import Clients, Driver, build_batch  # noqa: E402
from rlx_core.clients import GenerateResult, StepResult, TrainBatch  # noqa: E402
from rlx_core.clients import WorkUnit as GenUnit  # noqa: E402
from rlx_core.clients.inference import LoadResult, Rollout  # noqa: E402
from rlx_core.clients.paramserver import TensorSpec  # noqa: E402
from rlx_core.clients.trainer import InitResult  # noqa: E402
from rlx_core.clients.verifier import SampleResult, VerifySample  # noqa: E402
from rlx_core.config import to_toml  # noqa: E402
from rlx_core.configs.run import RunConfig, loads_run_config  # noqa: E402
from rlx_core.errors import FailedPrecondition  # noqa: E402
from rlx_data import (  # noqa: E402
    DEMO_TASK,
    base_model_dir,
    demo_config,
    write_addition_jsonl,
)

__all__ = ["LatencyModel", "SimServices", "main", "sim_driver", "simulate"]


@dataclass(frozen=True)
class LatencyModel:
    """Seconds each simulated call takes (before --time-scale)."""

    gen_s: float = 4.0  # generation of one unit (G samples of one prompt on one worker)
    jitter: float = 0.02  # relative standard deviation of a unit's generation time
    load_s: float = 0.1  # a worker swapping in a new weight version
    verify_s: float = 0.002  # judging one sample (math answer rule)
    train_s: float = 2.0  # one trainer step (gradient update + push to the paramserver)
    ckpt_s: float = 0.5  # a trainer checkpoint
    manifest_s: float = 0.05  # the version manifest for the snapshot's params hash
    min_tokens: int = 8  # response lengths returned, uniform in [min_tokens, max_new_tokens]
    seed: int = 0

    def scaled(self, k: float) -> LatencyModel:
        return replace(
            self,
            gen_s=self.gen_s * k,
            load_s=self.load_s * k,
            verify_s=self.verify_s * k,
            train_s=self.train_s * k,
            ckpt_s=self.ckpt_s * k,
            manifest_s=self.manifest_s * k,
        )

    def rng(self, key: str) -> random.Random:
        """A seeded stream per key (Python's: a numpy Generator costs ~10x more to make, and the
        simulated clients' bookkeeping runs on the controller's interpreter lock)."""
        return random.Random(f"{self.seed}/{key}")

    def gen_time(self, unit_id: str) -> float:
        eps = self.rng(unit_id).gauss(0.0, self.jitter)
        return self.gen_s * (1.0 + max(-4 * self.jitter, min(eps, 4 * self.jitter)))


_DIGITS = bytes(48 + i % 10 for i in range(256))  # byte -> an ASCII digit


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


class _Clock:
    """CPU time the simulated clients spend on bookkeeping (to tell it from the controller's)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cpu: dict[str, float] = {}

    def add(self, what: str, c0: float) -> None:
        dt = time.thread_time() - c0
        with self.lock:
            self.cpu[what] = self.cpu.get(what, 0.0) + dt


class SimWorker:
    def __init__(self, index: int, model: LatencyModel, clock: _Clock) -> None:
        self.index, self.model, self.clock = index, model, clock
        self.loaded: int | None = None

    def load_version(self, version: int, *, force: bool = False, timeout: Any = None) -> LoadResult:
        previous = self.loaded
        if previous != version or force:
            _sleep(self.model.load_s)
            self.loaded = version
        return LoadResult(version=version, previous=previous, pull_s=self.model.load_s, nbytes=0)

    def generate(self, unit: GenUnit, *, timeout: Any = None) -> GenerateResult:
        if unit.version != self.loaded:
            raise FailedPrecondition(f"worker has {self.loaded} loaded, unit needs {unit.version}")
        _sleep(self.model.gen_time(unit.unit_id))
        c0 = time.thread_time()
        rng = self.model.rng("tokens/" + unit.unit_id)
        G = unit.samples_per_prompt
        n = len(unit.prompts) * G
        lengths = [rng.randint(self.model.min_tokens, unit.max_new_tokens) for _ in range(n)]
        # ASCII digits (a number to judge), drawn in C: a real worker's tokens cost the
        # controller nothing to make, and rng.choices took ~60 us of its interpreter per unit
        digits = tuple(rng.randbytes(sum(lengths)).translate(_DIGITS))
        rollouts, at = [], 0
        eos = unit.stop_token_ids[0]  # the run's tokenizer's (ids 48-57 exist in any vocabulary)
        for i in range(n):
            k = lengths[i]
            toks = (*digits[at : at + k - 1], eos)
            at += k - 1
            logp = (-0.5,) * k
            rollouts.append(
                Rollout(
                    prompt_index=i // G,
                    sample_index=i % G,
                    token_ids=toks,
                    sampler_logprobs=logp,
                    model_logprobs=logp,
                    finish_reason="stop",
                    versions=(unit.version,) * k,
                )
            )
        out = GenerateResult(
            unit_id=unit.unit_id,
            version=unit.version,
            rollouts=tuple(rollouts),
            generated_tokens=sum(lengths),
            elapsed_s=self.model.gen_s,
        )
        self.clock.add("generate", c0)
        return out

    def close(self) -> None:
        pass


class SimVerifier:
    def __init__(self, model: LatencyModel, clock: _Clock) -> None:
        self.model, self.clock = model, clock

    def verify(self, samples: Any, *, timeout: Any = None) -> list[SampleResult]:
        samples = list(samples)
        _sleep(self.model.verify_s * len(samples))
        c0 = time.thread_time()
        out = []
        for s in samples:
            assert isinstance(s, VerifySample)
            right = zlib.crc32(s.sample_id.encode()) % 2 == 0  # half right: groups teach
            out.append(
                SampleResult(
                    sample_id=s.sample_id, status="AC" if right else "WA", score=float(right)
                )
            )
        self.clock.add("verify", c0)
        return out

    def close(self) -> None:
        pass


class SimTrainer:
    def __init__(self, model: LatencyModel) -> None:
        self.model = model
        self.step = 0

    def init(self, **kw: Any) -> InitResult:
        self.step = int(kw.get("step") or 0)
        return InitResult(step=self.step, version=self.step, num_params=0, model="sim")

    def train_step(self, batch: TrainBatch, *, expected_step: int | None = None) -> StepResult:
        if expected_step is not None and expected_step != self.step:
            raise FailedPrecondition(f"trainer at step {self.step}, expected {expected_step}")
        _sleep(self.model.train_s)
        self.step += 1
        return StepResult(self.step, self.step, {"loss": 0.0})

    def save_checkpoint(self) -> tuple[int, str]:
        _sleep(self.model.ckpt_s)
        return self.step, f"sim://checkpoints/{self.step}"

    def close(self) -> None:
        pass


class SimParamServer:
    def __init__(self, model: LatencyModel) -> None:
        self.model = model

    def manifest(self, version: int | None = None, **kw: Any) -> tuple[int, list[TensorSpec]]:
        _sleep(self.model.manifest_s)
        v = version or 0
        spec = TensorSpec("w", np.dtype(np.float32), (4,), 0, (4,), 16, f"{v:032x}")
        return v, [spec]

    def close(self) -> None:
        pass


class SimServices:
    """A run's services as in-process simulated clients (a `ServiceSet`): nothing to start,
    stop or restart, no address to ping; each `connect()` makes fresh clients."""

    token_file = None

    def __init__(
        self, cfg: RunConfig, model: LatencyModel, timings: Timings | None, clock: _Clock
    ) -> None:
        self.cfg, self.model, self.timings, self.clock = cfg, model, timings, clock

    def start(self, on_wait: Any = None) -> None:
        pass

    def connect(self) -> Clients:
        t, m = self.timings, self.model
        n = self.cfg.services.inference_workers

        def timed(client: Any, methods: dict[str, str]) -> Any:
            return client if t is None else Timed(client, t, methods)

        trainer = timed(
            SimTrainer(m), {"train_step": "trainer step", "save_checkpoint": "trainer checkpoint"}
        )
        workers = [
            timed(
                SimWorker(i, m, self.clock),
                {"load_version": "worker load_version", "generate": "worker generate"},
            )
            for i in range(n)
        ]
        verifiers = max(1, self.cfg.services.verifier_workers)
        return Clients(
            trainer=trainer,
            workers=workers,
            verifiers=[
                timed(SimVerifier(m, self.clock), {"verify": "verifier"}) for _ in range(verifiers)
            ],
            paramservers=[timed(SimParamServer(m), {"manifest": "paramserver manifest"})],
        )

    def addresses(self) -> dict[str, str]:
        return {}

    def dead(self) -> list[str]:
        return []

    def restart_dead(self, log: Any) -> list[str]:
        return []

    def restart_hung(self, name: str, log: Any) -> None:
        pass

    def stop(self) -> None:
        pass


def sim_driver(
    cfg: RunConfig,
    run_dir: Path,
    *,
    model: LatencyModel,
    timings: Timings | None,
    clock: _Clock | None = None,
    **kw: Any,
) -> Driver:
    """The real Driver on simulated services (in-process clients, latency model); held-out
    evaluation off (it is not rollout throughput). With `timings`, its clients' calls and its
    stages are timed."""
    services = SimServices(cfg, model, timings, clock or _Clock())
    if timings is not None:
        kw["stage"] = timings.stage
    driver = Driver(
        cfg,
        run_dir,
        open_services=lambda *_a, **_k: services,
        **kw,
    )
    driver.eval_sets = []
    if timings is not None:
        driver.rollouts.append = timings.wrap("rollout log append", driver.rollouts.append)  # type: ignore[method-assign]
    return driver


def sim_config(run_dir: Path, data_dir: Path, workers: int, steps: int, max_new: int) -> RunConfig:
    # the demo checkpoint's tokenizer renders the prompts; its weights are never loaded here
    base = demo_config(str(run_dir), data_dir, base_model_dir())
    sets = [
        f"run_dir={run_dir}",
        f"steps={steps}",
        f"batch.prompts={workers}",
        "batch.prompts_per_unit=1",
        f"batch.max_new_tokens={max_new}",
        f"services.inference_workers={workers}",
        "services.verifier_workers=1",
    ]
    return loads_run_config(to_toml(base, comments=False), overrides=sets)


def simulate(
    workers: int,
    *,
    steps: int,
    skip: int,
    model: LatencyModel,
    data_dir: Path,
    max_new: int = 64,
    tmp_root: str | None = None,
    log: Any = None,
) -> dict[str, Any]:
    """One size: the real Driver with `workers` simulated workers for `steps` steps."""
    with tempfile.TemporaryDirectory(prefix="rlx-sim-", dir=tmp_root) as tmp:
        run_dir = Path(tmp) / "run"
        cfg = sim_config(run_dir, data_dir, workers, steps, max_new)
        timings, clock = Timings(), _Clock()
        driver = sim_driver(
            cfg, run_dir, model=model, timings=timings, clock=clock, log=log or (lambda _m: None)
        )
        t0 = time.monotonic()
        summary = driver.run(resume=False)
        wall = time.monotonic() - t0
        log_bytes = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file())
        logged = driver.rollouts.unit_ids()
        records = [
            json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        ]
    ends = timings.ends("trainer step")
    if summary.steps != steps or len(ends) != steps:
        raise RuntimeError(f"{workers} workers: ran {summary.steps} of {steps} steps")
    start, end = ends[skip - 1], ends[-1]
    n = steps - skip
    units = workers * n  # one unit per worker per batch
    G = cfg.batch.group_size
    cpu = timings.cpu(start, end)
    parts = timings.breakdown(start, end)
    return {
        "workers": workers,
        "units_per_s": units / (end - start),
        "samples_per_s": units * G / (end - start),
        "s_per_step": (end - start) / n,
        "wall_s": wall,
        "cpu": cpu,
        "parts": parts,
        "units": units,
        "steps": n,
        "sim_cpu": dict(clock.cpu),
        "run_dir_bytes": log_bytes,
        "logged_units": logged,
        "metrics": records,
    }


def profile_controller(
    workers: int, *, data_dir: Path, max_new: int, tmp_root: str | None, top: int = 16
) -> None:
    """What one unit and one batch cost on the controller's CPU, serially (one thread, no GIL
    contention) and with zero latencies: CPU per unit without a profiler, then cProfile's
    functions by own time per unit (the profiler inflates the figures; use the shares)."""
    model = LatencyModel().scaled(0.0)
    with tempfile.TemporaryDirectory(prefix="rlx-sim-prof-", dir=tmp_root) as tmp:
        run_dir = Path(tmp) / "run"
        cfg = sim_config(run_dir, data_dir, workers, 3, max_new)
        clock = _Clock()
        driver = sim_driver(
            cfg, run_dir, model=model, timings=None, clock=clock, log=lambda _m: None
        )
        driver._start_services()
        driver.writer.run_id = "profile"
        assert driver.units is not None
        run_unit = driver.units.run_unit
        build = functools.partial(
            build_batch,
            cfg=cfg,
            pad_id=driver.tokenizer.pad_id,
            prompt_tokens=driver.prompt_tokens.ids,
        )
        units = list(driver.schedule.plan(0).units)
        c0 = time.process_time()
        records = [run_unit(u) for u in units]
        c1 = time.process_time()
        build(0, records)
        c2 = time.process_time()
        sim_cpu = sum(clock.cpu.values())
        n = len(units)
        print(
            f"serial, one thread, {n} units of G {cfg.batch.group_size} x <= {max_new} tokens: "
            f"run_unit {1e3 * (c1 - c0) / n:.3f} ms CPU/unit (simulated clients' bookkeeping "
            f"{1e3 * sim_cpu / n:.3f} of it), build_batch {1e3 * (c2 - c1) / n:.3f} ms/unit"
        )
        units = list(driver.schedule.plan(1).units)
        prof = cProfile.Profile()
        prof.enable()
        records = [run_unit(u) for u in units]
        build(1, records)
        driver.writer.write(1, "reload", [], {})
        prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    print(f"cProfile, by own time, ms per unit (cumulative in brackets), batch of {n} units:")
    for (path, line, func), (_cc, calls, tt, ct, _callers) in rows:
        where = f"{Path(path).parent.name}/{Path(path).name}:{line}" if line else path
        print(f"  {1e3 * tt / n:8.3f} ({1e3 * ct / n:8.3f})  {calls:>7}  {func}  {where}")
    picks = [
        ("units.py", "run_unit"),
        ("units.py", "gen_unit"),
        ("session.py", "generate"),
        ("session.py", "verify"),
        ("rollout_log.py", "get"),
        ("rollout_log.py", "append"),
        ("rollout_log.py", "encode_record"),
        ("rollout_log.py", "decode_record"),
        ("rollout.py", "to_bytes"),
        ("rollout.py", "from_bytes"),
        ("verifier.py", "math"),
        ("batching.py", "build_batch"),
        ("snapshot_writer.py", "write"),
        ("sim.py", "generate"),
        ("sim.py", "verify"),
    ]
    print("cumulative ms per unit of the controller's steps (profiled):")
    for file, func in picks:
        ct = sum(v[3] for (p, _l, f), v in stats.items() if f == func and p.endswith(file))
        print(f"  {1e3 * ct / n:8.3f}  {file}:{func}")


def _ms(x: float) -> str:
    return f"{1e3 * x:.2f}"


def main() -> None:  # noqa: PLR0915  (one report, top to bottom)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workers", default="1,8,64,512,1024")
    ap.add_argument("--steps", type=int, default=8, help="training steps per size")
    ap.add_argument("--skip", type=int, default=3, help="first steps left out")
    ap.add_argument("--time-scale", type=float, default=1.0, help="multiplies every latency")
    ap.add_argument("--jitter", type=float, default=LatencyModel.jitter)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--profile-workers", type=int, default=512, help="0: no profile")
    args = ap.parse_args()
    sizes = [int(x) for x in args.workers.split(",")]
    model = replace(LatencyModel(), jitter=args.jitter).scaled(args.time_scale)
    print(f"uptime before: {uptime()}")
    print(
        f"latency model: generate {model.gen_s:.2f} s/unit (1 prompt x G 8, N(0, {model.jitter}) "
        f"relative jitter), load_version {model.load_s:.2f} s, verify "
        f"{1e3 * model.verify_s:.1f} ms/sample, train_step {model.train_s:.2f} s, checkpoint "
        f"{model.ckpt_s:.2f} s, manifest {model.manifest_s:.2f} s; responses "
        f"{model.min_tokens}-{args.max_new_tokens} tokens; (j, k) = (1, 1), lag 1"
    )
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    t_all = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlx-sim-data-") as data:
        write_addition_jsonl(data, DEMO_TASK)
        for w in sizes:
            print(f"{w} workers ({args.steps} steps) ...", flush=True)
            r = simulate(
                w,
                steps=args.steps,
                skip=args.skip,
                model=model,
                data_dir=Path(data),
                max_new=args.max_new_tokens,
                tmp_root=shm,
            )
            rows.append(r)
            print(
                f"  {r['units_per_s']:.2f} units/s, {r['s_per_step']:.3f} s/step, "
                f"{r['wall_s']:.0f} s wall; {uptime()}",
                flush=True,
            )
        if args.profile_workers:
            print()
            profile_controller(
                args.profile_workers,
                data_dir=Path(data),
                max_new=args.max_new_tokens,
                tmp_root=shm,
            )
    base = rows[0]["units_per_s"] / rows[0]["workers"]
    print()
    print(
        f"weak scaling: units per batch = workers, steady state = steps {args.skip + 1}-"
        f"{args.steps}; ideal = workers x the {rows[0]['workers']}-worker figure per worker"
    )
    print(
        f"{'workers':>8}{'units/s':>10}{'samples/s':>11}{'ideal':>10}{'efficiency':>12}"
        f"{'s/step':>9}"
    )
    for r in rows:
        ideal = base * r["workers"]
        print(
            f"{r['workers']:>8}{r['units_per_s']:>10.2f}{r['samples_per_s']:>11.1f}"
            f"{ideal:>10.2f}{r['units_per_s'] / ideal:>11.1%} {r['s_per_step']:>8.3f}"
        )
    last = rows[-1]
    eff = last["units_per_s"] / (base * last["workers"])
    print(
        f"goal: >= 95% at {last['workers']} workers: {eff:.1%} "
        + ("met" if eff >= 0.95 else "NOT met")
    )
    print()
    print("controller cost (steady-state window): per step on the loop's thread, wall (CPU) ms")
    cats = ["build_batch", "trainer step", "trainer checkpoint", "metrics line", "snapshot"]
    print(f"{'':<22}" + "".join(f"{r['workers']:>18}" for r in rows))
    for c in cats:
        cells = []
        for r in rows:
            cpu, wall, _ = r["cpu"].get(c, (0.0, 0.0, 0))
            cells.append(f"{_ms(wall / r['steps'])} ({_ms(cpu / r['steps'])})")
        print(f"{c:<22}" + "".join(f"{x:>18}" for x in cells))
    for r in rows:  # a unit = its two stages
        g, sl = (r["cpu"].get(c, (0.0, 0.0, 0)) for c in ("gen stage", "score+log stage"))
        r["cpu"]["run_unit"] = (g[0] + sl[0], g[1] + sl[1], sl[2])
    print("per unit, wall (CPU) ms; controller = both stages minus the simulated clients")
    ucats = ["run_unit", "gen stage", "score+log stage", "worker generate"]
    ucats += ["verifier", "rollout log append"]
    for c in ucats:
        cells = []
        for r in rows:
            cpu, wall, k = r["cpu"].get(c, (0.0, 0.0, 0))
            cells.append(f"{_ms(wall / k)} ({_ms(cpu / k)})" if k else "-")
        print(f"{c:<22}" + "".join(f"{x:>18}" for x in cells))
    cells = []
    for r in rows:
        ru = r["cpu"].get("run_unit", (0.0, 0.0, 0))
        sim = sum(r["cpu"].get(c, (0.0, 0.0, 0))[0] for c in ("worker generate", "verifier"))
        cells.append(f"{_ms((ru[0] - sim) / max(1, ru[2]))} CPU")
    print(f"{'controller per unit':<22}" + "".join(f"{x:>18}" for x in cells))
    cells = []
    for r in rows:
        ru = r["cpu"].get("run_unit", (0.0, 0.0, 0))
        sim = sum(r["cpu"].get(c, (0.0, 0.0, 0))[0] for c in ("worker generate", "verifier"))
        main = sum(r["cpu"].get(c, (0.0, 0.0, 0))[0] for c in cats)
        cells.append(f"{(ru[0] - sim + main) / r['steps']:.3f} s")
    print(f"{'controller CPU/step':<22}" + "".join(f"{x:>18}" for x in cells))
    print()
    print(f"total {time.monotonic() - t_all:.0f} s")
    print(f"uptime after: {uptime()}")


if __name__ == "__main__":
    main()
