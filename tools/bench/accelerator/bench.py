"""Accelerator benchmark: the rlx engine vs HF transformers `generate`, decode's share of the HBM
roofline, and the RL train step's MFU, in bf16, in one run of at most 8 minutes. Run it through
run.sh (which sets PYTHONPATH to the source tree and the time limit):

    bash tools/bench/accelerator/run.sh            # one H100/H200: Qwen2.5-0.5B and 1.5B shapes
    JAX_PLATFORMS=cpu bash tools/bench/accelerator/run.sh --small    # tiny shapes, on a CPU

Items, most important first (a wall-clock guard skips what is left after --budget-s):
generate on the 0.5B shape at batch 32, then 256, the train step, batch 1, then the 1.5B shape
at 32, 256, 1. Random weights, saved once per shape as an HF checkpoint the HF side loads. Writes
$OUT/accelerator.json (after every item) when OUT is set. See README.md beside this file.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

import jax
import jaxlib
from measure import (
    HFSide,
    Workload,
    agreement,
    engine_generate,
    hf_generate,
    torch_python,
    train_step,
)
from peaks import Peaks, measure
from shapes import describe, random_params, shapes, si

from rlx_model import ModelConfig, enable_compile_cache, save_checkpoint


@dataclass(frozen=True)
class Item:
    name: str
    shape: int  # index into shapes()
    batch: int  # 0 for the train step


def plan(labels: list[str], batches: list[int]) -> list[Item]:
    """Generate on the first shape at the first two batches, its train step, its other batches,
    then every batch of each other shape."""

    def gen(s: int, b: int) -> Item:
        return Item(f"{labels[s]} generate b{b}", s, b)

    first = [gen(0, b) for b in batches]
    items = [*first[:2], Item(f"{labels[0]} train step", 0, 0), *first[2:]]
    return items + [gen(s, b) for s in range(1, len(labels)) for b in batches]


class Model:
    """One shape's random weights, its HF checkpoint and the HF process on it (made on first
    use, dropped when the bench moves to the next shape)."""

    def __init__(self, cfg: ModelConfig, seed: int, torch_py: str | None) -> None:
        self.cfg = cfg
        self.params = random_params(cfg, seed)
        self.hf: HFSide | None = None
        self.hf_error = ""
        self.dir = tempfile.mkdtemp(prefix="rlx-accel-ckpt-")
        if torch_py is None:
            return
        save_checkpoint(self.dir, cfg, self.params)
        try:
            self.hf = HFSide(torch_py, self.dir)
        except RuntimeError as e:
            self.hf_error = str(e)

    def close(self) -> None:
        if self.hf is not None:
            self.hf.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Report:
    """The rows of the table and the JSON, rewritten after every item."""

    def __init__(self, args: argparse.Namespace, peaks: Peaks, workload: Workload) -> None:
        self.args = args
        self.peaks = peaks
        self.rows: list[dict] = []
        self.items: dict[str, dict] = {}
        self.meta: dict = {
            "device": peaks.device_kind,
            "platform": peaks.platform,
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "small": args.small,
            "versions": {
                "jax": jax.__version__,
                "jaxlib": jaxlib.__version__,
                "python": platform.python_version(),
                "torch": None,
                "transformers": None,
            },
            "hf": None,
            "peaks": peaks.as_dict(),
            "workload": {
                "sampling": "greedy (argmax), both sides; every sample exactly `new` tokens",
                "prompt": workload.prompt,
                "new": workload.new,
                "repeats": workload.repeats,
                "engine_steps_per_call": workload.steps_per_call,
                "engine_span_bucket": workload.span_bucket,
                "dtype": "bf16 weights and matmuls (train: bf16 matmuls, f32 params and Adam)",
            },
        }

    def row(
        self, item: str, figure: str, rlx: str, hf: str = "-", ratio: str = "-", note: str = ""
    ) -> None:
        self.rows.append(
            {"item": item, "figure": figure, "rlx": rlx, "hf": hf, "ratio": ratio, "note": note}
        )

    def generate(
        self, item: str, rlx: dict, hf: dict | None, hf_missing: str, agree: dict | None
    ) -> None:
        bw = self.peaks.bandwidth
        self.items[item] = {"rlx": rlx, "hf": hf, "agreement": agree}
        share = rlx["bytes_per_s"] / bw
        step = f"step {rlx['step_s'] * 1e3:.2f} ms"
        gb = f"{si(rlx['step_bytes'], 'B')}/step"
        if hf is None:
            self.row(item, "tokens/s", f"{rlx['tokens_per_s']:.0f}", note=f"HF: {hf_missing}")
            self.row(item, "decode HBM roofline", f"{100 * share:.1f}%", note=f"{step}, {gb}")
            return
        hf_share = hf["bytes_per_s"] / bw
        tok = rlx["tokens_per_s"] / hf["tokens_per_s"]
        assert agree is not None
        note = (
            f"first token agrees {100 * agree['first_token_agree']:.0f}%, common prefix "
            f"{agree['mean_common_prefix']:.1f}"
        )
        self.row(
            item,
            "tokens/s",
            f"{rlx['tokens_per_s']:.0f}",
            f"{hf['tokens_per_s']:.0f}",
            f"{tok:.2f}",
            note,
        )
        self.row(
            item,
            "decode HBM roofline",
            f"{100 * share:.1f}%",
            f"{100 * hf_share:.1f}%",
            f"{share / hf_share:.2f}",
            f"{step} vs {hf['step_s'] * 1e3:.2f} ms, {gb}",
        )

    def train(self, item: str, out: dict) -> None:
        self.items[item] = {"rlx": out}
        mfu = out["flops_per_s"] / self.peaks.flops
        note = (
            f"{out['prompts']}x{out['group']}x{out['seq']} = {out['tokens']} tokens, "
            f"{out['step_s']:.3f} s/step, {si(out['flops'], 'FLOP')}"
        )
        if out["grad_accum"] > 1:
            note += f", grad_accum {out['grad_accum']} (OOM at 1)"
        self.row(item, "MFU (bf16)", f"{100 * mfu:.1f}%", note=note)

    def skip(self, item: str, why: str) -> None:
        self.items[item] = {"skipped": why}
        self.row(item, f"skipped: {why}", "")

    def as_dict(self, elapsed: float) -> dict:
        return {**self.meta, "elapsed_s": elapsed, "rows": self.rows, "items": self.items}

    def write(self, elapsed: float) -> None:
        out = os.environ.get("OUT")
        if not out:
            return
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, "accelerator.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.as_dict(elapsed), f, indent=1)
        os.replace(path + ".tmp", path)

    def print(self, elapsed: float) -> None:
        m, p = self.meta, self.peaks
        v = m["versions"]
        print(f"\naccelerator bench: {m['device']} ({m['platform']}), {m['date']}")
        print(
            f"jax {v['jax']} (jaxlib {v['jaxlib']}), torch {v['torch'] or 'n/a'}, "
            f"transformers {v['transformers'] or 'n/a'}, python {v['python']}"
        )
        print(f"HF side: {m['hf'] or 'n/a'}")
        print(
            f"memory bandwidth: {si(p.bandwidth, 'B/s')} ({p.bandwidth_source}); "
            f"measured copy {si(p.measured_copy, 'B/s')}"
        )
        print(
            f"matmul peak: {si(p.flops, 'FLOP/s')} ({p.flops_source}); measured matmul "
            f"bf16 {si(p.measured_bf16, 'FLOP/s')}, f32 {si(p.measured_f32, 'FLOP/s')}"
        )
        w = m["workload"]
        print(
            f"generate: {w['sampling']}; prompt {w['prompt']}, new {w['new']}; best of "
            f"{w['repeats']}; tokens/s = batch x new / wall (prefill included, compilation "
            f"not); decode step = (wall(new) - wall(1)) / steps run; roofline = (weights + KV "
            f"at the mean context) / step / HBM bandwidth; {w['dtype']}"
        )
        for label, cfg in shapes(self.args.small):
            if label in self.args.shapes:
                print(f"  {label}: {describe(cfg)}")
        print(f"{'item':<18}{'figure':<22}{'rlx':>9}{'HF':>9}{'rlx/HF':>8}  note".rstrip())
        for r in self.rows:
            if r["figure"].startswith("skipped"):
                print(f"{r['item']:<18}{r['figure']}")
                continue
            print(
                f"{r['item']:<18}{r['figure']:<22}{r['rlx']:>9}{r['hf']:>9}{r['ratio']:>8}  "
                f"{r['note']}".rstrip()
            )
        print(f"elapsed {elapsed:.0f} s")


def run_item(
    item: Item, model: Model, report: Report, w: Workload, args: argparse.Namespace
) -> None:
    if item.batch == 0:
        out = train_step(
            model.cfg,
            model.params,
            args.train_prompts,
            args.train_group,
            args.train_seq,
            args.repeats,
            args.compile_cache,
        )
        report.train(item.name, out)
        return
    rlx, rlx_tokens = engine_generate(model.cfg, model.params, item.batch, w, args.compile_cache)
    hf = agree = None
    if model.hf is not None:
        hf, hf_tokens = hf_generate(model.hf, model.cfg, item.batch, w)
        agree = agreement(rlx_tokens, hf_tokens)
    missing = model.hf_error or report.meta["hf"] or "not available here (no torch)"
    report.generate(item.name, rlx, hf, missing, agree)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="tiny shapes, batch 4 and 1")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=420.0,
        help="skip the remaining items once this much wall time is used",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--shapes", nargs="+", default=None, help="labels: 0.5B 1.5B (small: tiny bench)"
    )
    parser.add_argument(
        "--batches", type=int, nargs="+", default=None, help="default 32 256 1 (small: 4 1)"
    )
    parser.add_argument("--prompt", type=int, default=None, help="prompt tokens (128; small 32)")
    parser.add_argument("--new", type=int, default=None, help="new tokens (128; small 16)")
    parser.add_argument(
        "--span-bucket",
        type=int,
        default=0,
        help="the engine's decode span bucket; 0: prompt + new (one decode program to compile)",
    )
    parser.add_argument("--no-train", action="store_true", help="leave out the train step")
    parser.add_argument(
        "--compile-cache",
        default=os.environ.get("RLX_BENCH_COMPILE_CACHE", "/tmp/rlx-accel-jax-cache"),
    )
    parser.add_argument("--train-prompts", type=int, default=None)
    parser.add_argument("--train-group", type=int, default=None)
    parser.add_argument("--train-seq", type=int, default=None)
    args = parser.parse_args()
    args.train_prompts = args.train_prompts or (2 if args.small else 8)
    args.train_group = args.train_group or (2 if args.small else 4)
    args.train_seq = args.train_seq or (64 if args.small else 512)
    args.batches = args.batches or ([4, 1] if args.small else [32, 256, 1])
    args.prompt = args.prompt or (32 if args.small else 128)
    args.new = args.new or (16 if args.small else 128)
    known = [label for label, _ in shapes(args.small)]
    args.shapes = args.shapes or known
    if unknown := sorted(set(args.shapes) - set(known)):
        parser.error(f"--shapes {unknown}: not among {known}")
    return args


class Runner:
    """The items in order, one shape's Model at a time, the time guard."""

    def __init__(self, args: argparse.Namespace, report: Report, w: Workload, t0: float) -> None:
        self.args, self.report, self.w, self.t0 = args, report, w, t0
        self.cfgs = [(label, cfg) for label, cfg in shapes(args.small) if label in args.shapes]
        self.items = plan([label for label, _ in self.cfgs], args.batches)
        if args.no_train:
            self.items = [item for item in self.items if item.batch]
        self.model: Model | None = None
        self.torch_py, why = torch_python()
        report.meta["hf"] = f"{why}: {self.torch_py}" if self.torch_py else why
        if self.torch_py is None:
            print(f"HF: {why}", flush=True)

    def model_for(self, item: Item) -> Model:
        cfg = self.cfgs[item.shape][1]
        if self.model is not None and self.model.cfg == cfg:
            return self.model
        self.close()
        gc.collect()
        self.model = model = Model(cfg, item.shape, self.torch_py)
        if model.hf is not None:
            info, meta = model.hf.info, self.report.meta
            meta["versions"]["torch"] = info["torch"]
            meta["versions"]["transformers"] = info["transformers"]
            meta["hf"] = (
                f"{info['device']}, {info['dtype']}, attn {info['attn']}, "
                f"{info['threads']} threads ({self.torch_py})"
            )
        return model

    def run(self) -> None:
        out_of_time = False
        for item in self.items:
            elapsed = time.time() - self.t0
            if out_of_time or elapsed > self.args.budget_s:
                out_of_time = True
                print(f"{item.name}: skipped: time ({elapsed:.0f} s used)", flush=True)
                self.report.skip(item.name, "time")
                continue
            print(f"{item.name}: start at {elapsed:.0f} s", file=sys.stderr, flush=True)
            try:
                run_item(item, self.model_for(item), self.report, self.w, self.args)
            except Exception as e:  # one failed item must not cost the others their figures
                traceback.print_exc()
                self.report.skip(item.name, f"error: {type(e).__name__}: {str(e)[:200]}")
            gc.collect()
            self.report.write(time.time() - self.t0)

    def close(self) -> None:
        if self.model is not None:
            self.model.close()
            self.model = None


def main() -> int:
    args = parse_args()
    t0 = float(os.environ.get("RLX_BENCH_T0", time.time()))  # run.sh's start: imports count
    small = args.small
    w = Workload(
        prompt=args.prompt,
        new=args.new,
        repeats=args.repeats,
        steps_per_call=8 if small else 16,
        span_bucket=args.span_bucket or args.prompt + args.new,
    )
    enable_compile_cache(args.compile_cache)  # first call wins: the engine's and trainer's too
    print(f"devices: {jax.devices()}", file=sys.stderr, flush=True)
    report = Report(args, measure(small), w)
    runner = Runner(args, report, w, t0)
    try:
        runner.run()
    except KeyboardInterrupt:  # run.sh's time limit: keep what was measured
        for item in runner.items:
            if item.name not in report.items:
                report.skip(item.name, "time (interrupted)")
    finally:
        runner.close()
    elapsed = time.time() - t0
    report.write(elapsed)
    report.print(elapsed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
