"""Generation throughput: the rlx-inference engine vs HF transformers `generate` (torch CPU) vs the
same engine with continuous batching off (static batches), one run, same weights and prompts.

    uv run python tools/bench/generate/bench.py [--prompts 32 --new 128 --repeats 3]

Model: the bench Qwen2 config (DESIGN §10: 4 layers, hidden 512, 8 heads, 2 KV heads, vocab
32000, MLP 2048), random weights saved once as an HF checkpoint both sides load. Prompts: 32 of
mixed lengths (16-256 tokens). Workloads:

- `greedy` and `sampled` (temperature 1): 32 prompts x 128 new tokens, no stop tokens;
- `mixed lengths`: 32 prompts x 4 samples, temperature 1, 2% of the vocabulary as stop tokens,
  so outputs run from 1 to 128 tokens: where continuous batching pays.

tokens/s counts generated tokens (up to and including a stop token) over wall time, prefill
included, compilation excluded (one warm-up run first); the best of --repeats runs. The f32 matmul
peak is measured in the same run (2048^3 in both frameworks, the higher counts) and each figure is
also given as a fraction of it, from an analytic FLOP count of the work generating needs (prefill
+ decode, attention included; `flops`: the same count for both sides). The machine is shared:
`uptime` is printed before and after; trust ratios from one run more than absolute figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from rlx_core.clients.inference import Sampling, WorkUnit
from rlx_inference import Engine
from rlx_inference.config import EngineConfig
from rlx_model import BENCH_CONFIG, ModelConfig, init_params, save_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import torch_python, uptime

CFG = BENCH_CONFIG

TORCH_SCRIPT = r"""
import json, sys, time
import torch
from transformers import AutoModelForCausalLM
ckpt = sys.argv[1]
spec = json.load(open(ckpt + "/workloads.json"))
model = AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32).eval()

def batch(prompts):
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding, as decoder-only generation wants
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask

def run(w):
    total, outs = 0, []
    for start in range(0, len(w["prompts"]), w["batch"]):
        chunk = w["prompts"][start:start + w["batch"]]
        ids, mask = batch(chunk)
        kwargs = dict(max_new_tokens=w["new"], pad_token_id=0, do_sample=not w["greedy"])
        if w["greedy"]:
            kwargs.update(num_beams=1)
        else:
            kwargs.update(temperature=1.0, top_k=0, top_p=1.0)
        stops = w["stops"] or None
        kwargs["eos_token_id"] = stops
        if stops is None:
            kwargs["min_new_tokens"] = w["new"]
        out = model.generate(ids, attention_mask=mask, **kwargs)[:, ids.shape[1]:].tolist()
        for row in out:
            n = len(row)
            if stops:
                s = set(stops)
                n = next((i + 1 for i, t in enumerate(row) if t in s), len(row))
            total += n
            outs.append(row[:n])
    return total, outs

torch.manual_seed(0)
with torch.inference_mode():
    for name, w in spec.items():
        run({**w, "prompts": w["prompts"][:2]})  # warm-up
    a = torch.ones(2048, 2048)
    a @ a
    t0 = time.perf_counter(); [a @ a for _ in range(5)]; mm = (time.perf_counter() - t0) / 5
    print(json.dumps({"peak": 2 * 2048**3 / mm, "torch": torch.__version__,
                      "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:  # one workload name per line -> its timing
        w = spec[line.strip()]
        t0 = time.perf_counter(); total, outs = run(w); s = time.perf_counter() - t0
        print(json.dumps({"s": s, "tokens": total, "first": outs[0]}), flush=True)
"""


def flops(cfg: ModelConfig, prompt_lens: list[int], new_lens: list[int]) -> float:
    """Matmul FLOPs that generating needs (projections, MLP, attention over the context, the
    vocabulary head once per prompt and per new token). A prompt needs every layer at every
    position except the last layer, whose keys and values are needed everywhere but whose
    attention, output projection and MLP only at the last token (the only output: the engine
    computes just that; HF computes them everywhere, which this does not count)."""
    d, q, kv, f = cfg.hidden_size, cfg.q_size, cfg.kv_size, cfg.intermediate_size
    qkv, tail = d * q + 2 * d * kv, q * d + 3 * d * f
    per_token = cfg.num_layers * (qkv + tail)
    head = cfg.vocab_size * d
    total = 0.0
    for p, n in zip(prompt_lens, new_lens, strict=True):
        layers = cfg.num_layers - 1
        total += p * (layers * (qkv + tail) + qkv) + tail + head
        total += layers * 2 * q * p * (p + 1) / 2 + 2 * q * p
        for i in range(max(0, n - 1)):  # the first new token comes out of the prefill
            total += per_token + cfg.num_layers * 2 * q * (p + i + 1) + head
    return 2.0 * total


def run_engine(engine: Engine, unit: WorkUnit, repeats: int) -> tuple[float, list[list[int]]]:
    engine.generate(unit)  # warm-up: compiles every shape this workload meets
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = engine.generate(unit)
        times.append(time.perf_counter() - t0)
    assert result is not None
    return min(times), [list(r.token_ids) for r in result.rollouts]


def make_units(args: argparse.Namespace) -> tuple[dict, dict[str, WorkUnit], np.ndarray]:
    """The workloads as the torch side reads them, the same as work units, and prompt lengths."""
    rng = np.random.default_rng(0)
    lens = rng.integers(16, 257, args.prompts)
    prompts = [[int(t) for t in rng.integers(0, CFG.vocab_size, n)] for n in lens]
    stops = sorted(int(t) for t in rng.choice(CFG.vocab_size, CFG.vocab_size // 50, False))
    g = 4
    workloads = {
        "greedy": {"prompts": prompts, "greedy": True, "stops": []},
        "sampled": {"prompts": prompts, "greedy": False, "stops": []},
        "mixed lengths": {
            "prompts": [p for p in prompts for _ in range(g)],
            "greedy": False,
            "stops": stops,
        },
    }
    for w in workloads.values():
        w["batch"] = args.slots
        w["new"] = args.new
    units = {
        name: WorkUnit(
            unit_id=name,
            version=0,
            prompts=tuple(map(tuple, prompts)),
            samples_per_prompt=g if name == "mixed lengths" else 1,
            sampling=Sampling(greedy=True) if name == "greedy" else Sampling(temperature=1.0),
            seeds=tuple(range(len(w["prompts"]))),
            max_new_tokens=args.new,
            stop_token_ids=tuple(w["stops"]),
        )
        for name, w in workloads.items()
    }
    return workloads, units, lens


class TorchSide:
    """HF transformers in its own venv, answering one workload per request."""

    def __init__(self, ckpt: str) -> None:
        self.proc = subprocess.Popen(
            [torch_python(), "-c", TORCH_SCRIPT, ckpt],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            sys.exit("torch side failed (see its stderr above)")
        self.info = json.loads(line)

    def run(self, name: str) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(60)


def measure(
    units: dict[str, WorkUnit], engines: dict[str, Engine], torch_side: TorchSide, repeats: int
) -> list[dict]:
    """HF, engine and static runs interleaved (a change in the machine's load hits all three
    alike); the best of `repeats` of each."""
    rows = []
    for name, unit in units.items():
        best: dict[str, float] = {}
        hf_best: dict = {}
        outs: dict[str, list[list[int]]] = {}
        for r in range(repeats):
            print(f"{name}: round {r + 1}/{repeats}", file=sys.stderr, flush=True)
            h = torch_side.run(name)
            if not hf_best or h["s"] < hf_best["s"]:
                hf_best = h
            for label, engine in engines.items():
                t0 = time.perf_counter()
                result = engine.generate(unit)
                best[label] = min(best.get(label, 1e30), time.perf_counter() - t0)
                outs[label] = [list(x.token_ids) for x in result.rollouts]
        assert outs["engine"] == outs["static"], "static batching must not change the rollouts"
        new_lens = [len(o) for o in outs["engine"]]
        g = unit.samples_per_prompt
        n_prompt = [len(unit.prompts[i // g]) for i in range(len(new_lens))]
        rows.append(
            {
                "name": name,
                "samples": unit.num_samples,
                "hf": hf_best,
                "engine_s": best["engine"],
                "static_s": best["static"],
                "tokens": sum(new_lens),
                "flops": flops(CFG, n_prompt, new_lens),
                "same_first": outs["engine"][0] == hf_best["first"],
            }
        )
    return rows


def jax_peak() -> float:
    a = jnp.ones((2048, 2048), jnp.float32)
    mm = jax.jit(lambda x: x @ x)
    mm(a).block_until_ready()
    t0 = time.perf_counter()
    for _ in range(5):
        mm(a).block_until_ready()
    return 2 * 2048**3 / ((time.perf_counter() - t0) / 5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--steps-per-call", type=int, default=8)
    # decode attends over the longest live context rounded up to this: finer buckets attend to
    # fewer padded positions (a step at 32 rows: 37.1 ms CPU at 384 positions, 35.5 at 320,
    # 34.4 at 256) for more compiled programs (compiles are excluded here)
    parser.add_argument("--span-bucket", type=int, default=32)
    args = parser.parse_args()
    print(f"uptime before: {uptime()}", flush=True)
    workloads, units, lens = make_units(args)
    params = init_params(CFG, seed=0)
    config = EngineConfig(
        slots=args.slots,
        block_size=16,
        cache_mib=512,
        max_context=512,
        steps_per_call=args.steps_per_call,
        span_bucket=args.span_bucket,
    )
    engines = {
        "engine": Engine(CFG, params, config),
        "static": Engine(CFG, params, replace(config, continuous=False)),
    }
    print("rlx side: one warm-up run per workload (compiles) ...", file=sys.stderr, flush=True)
    for unit in units.values():
        for engine in engines.values():
            engine.generate(unit)
    with tempfile.TemporaryDirectory() as ckpt:
        save_checkpoint(ckpt, CFG, params)
        (Path(ckpt) / "workloads.json").write_text(json.dumps(workloads))
        print("torch side: loading, warm-up ...", file=sys.stderr, flush=True)
        torch_side = TorchSide(ckpt)
        try:
            rows = measure(units, engines, torch_side, args.repeats)
        finally:
            torch_side.close()
    ref = torch_side.info
    jp = jax_peak()
    peak = max(jp, ref["peak"])

    print(
        f"\ngenerate: Qwen2 4 layers, d 512, 8 heads / 2 KV, vocab 32000; {args.prompts} prompts "
        f"of {lens.min()}-{lens.max()} tokens, up to {args.new} new; engine {args.slots} slots, "
        f"block 16, {args.steps_per_call} steps per call, span bucket {args.span_bucket}"
    )
    print(
        f"torch {ref['torch']} ({ref['threads']} threads); jax {jax.__version__} on "
        f"{jax.devices()[0].platform}"
    )
    print(
        f"f32 matmul peak: {peak / 1e9:.1f} GFLOP/s "
        f"(jax {jp / 1e9:.1f}, torch {ref['peak'] / 1e9:.1f})"
    )
    print(f"greedy: first sample identical to HF's ({args.new} tokens): {rows[0]['same_first']}")
    print(
        f"{'workload':<15}{'samples':>8}{'HF tok/s':>10}{'static':>9}{'engine':>9}"
        f"{'eng/HF':>8}{'eng/static':>11}{'HF %peak':>10}{'eng %peak':>10}"
    )
    for row in rows:
        hf = row["hf"]
        hf_tps = hf["tokens"] / hf["s"]
        eng_tps = row["tokens"] / row["engine_s"]
        hf_work = row["flops"] * hf["tokens"] / row["tokens"]  # HF drew other samples
        hf_peak = 100 * hf_work / hf["s"] / peak
        eng_peak = 100 * row["flops"] / row["engine_s"] / peak
        print(
            f"{row['name']:<15}{row['samples']:>8}{hf_tps:>10.0f}"
            f"{row['tokens'] / row['static_s']:>9.0f}{eng_tps:>9.0f}{eng_tps / hf_tps:>8.2f}"
            f"{row['static_s'] / row['engine_s']:>11.2f}"
            f"{hf_peak:>9.0f}%{eng_peak:>9.0f}%"
        )
    print(f"uptime after: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
