"""Generation at real model sizes on this CPU: the rlx-inference engine vs HF transformers
`generate` (torch CPU), random weights in the shapes of Qwen2.5-0.5B and 1.5B, one run.

    flock /tmp/rlx-bench.lock uv run python tools/bench/generate/real_size.py \
        [--models 0.5b 1.5b] [--batches 8 32] [--dtype float32] [--repeats 2]

Per model and batch: `batch` random prompts of --prompt (128) tokens, exactly --new (128) new
tokens each, greedy, both sides f32 by default (--dtype bfloat16: both bf16). The engine has as
many slots as the batch (`tools/bench/accelerator/measure.engine_generate`), HF runs
`model.generate` in its own process on the checkpoint of the same weights (`hf_side.py`).
tokens/s = batch x new / wall of the whole batch (prefill included, compilation not: one warm-up
run first), the best of --repeats. A decode step = (wall with `new` tokens - wall with 1) /
decode steps run; its share of the memory-bandwidth limit = (every weight once + the KV cache
at the mean context) / step / the measured bandwidth, its share of the matmul limit = its
analytic FLOPs (2 x batch x the matrices' parameters, the head included, + attention) / step /
the measured f32 matmul peak. Both limits are measured in the same run: the bandwidth as the
fastest of a numpy copy (bytes read + written) and an f32 matrix-vector product (bytes read) in
numpy and in JAX over --bandwidth-gib, the peak as a 2048^3 f32 JAX matmul. The machine is
shared: `uptime` is printed before and after.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shutil
import sys
import tempfile
from dataclasses import replace
from datetime import date
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from rlx_inference.engine import engine_form
from rlx_model import ModelConfig, save_checkpoint
from rlx_model.paged import split_layers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "accelerator"))
from common import best, uptime
from measure import (
    HFSide,
    Workload,
    agreement,
    engine_generate,
    hf_generate,
    torch_python,
)
from peaks import matmul_flops, memcpy_bandwidth
from shapes import QWEN25_05B, QWEN25_15B, describe, random_params, si

MODELS = {"0.5b": QWEN25_05B, "1.5b": QWEN25_15B}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def read_bandwidth(n_bytes: int, repeats: int = 20) -> tuple[float, float]:
    """Bytes/s of reading an f32 matrix of `n_bytes` once, as a decode step reads its weights:
    [n / 4096, 4096] @ ones(4096), by numpy (its BLAS, every core) and by JAX."""
    m = np.ones((n_bytes // 4 // 4096, 4096), np.float32)
    ones = np.ones(4096, np.float32)
    jm = jnp.asarray(m)
    matvec = jax.jit(lambda a: a @ jnp.ones(4096, jnp.float32))

    return (
        n_bytes / best(lambda: m @ ones, repeats),
        n_bytes / best(lambda: matvec(jm).block_until_ready(), repeats),
    )


def measure_limits(n_bytes: int) -> dict[str, float]:
    """The machine's limits: memory bandwidth (bytes/s) of a numpy copy and of an f32
    matrix-vector read in numpy and JAX over `n_bytes`, and the f32 matmul peak (FLOP/s) of a
    2048^3 JAX matmul."""
    np_read, jax_read = read_bandwidth(n_bytes)
    return {  # best of many: a moment of other load on the shared machine does not count
        "copy": memcpy_bandwidth(n_bytes, repeats=20),
        "np_read": np_read,
        "jax_read": jax_read,
        "matmul": matmul_flops(2048, jnp.float32, repeats=10),
    }


def decode_flops(cfg: ModelConfig, batch: int, context: float) -> float:
    """Matmul FLOPs of one decode step of `batch` rows at `context` positions: every layer
    matrix and the head once per row, and attention's scores and values over the context."""
    d, q, kv, f = cfg.hidden_size, cfg.q_size, cfg.kv_size, cfg.intermediate_size
    matrices = cfg.num_layers * (d * q + 2 * d * kv + q * d + 3 * d * f) + cfg.vocab_size * d
    attention = cfg.num_layers * 2 * q * context
    return 2.0 * batch * (matrices + attention)


def measure_model(
    label: str, cfg: ModelConfig, args: argparse.Namespace, w: Workload, torch_py: str | None
) -> list[dict]:
    """Each batch on the engine, then on HF (a change in the machine's load between batches hits
    both), the same random weights. Memory: the weights exist twice at most (f32 at the 1.5B
    shape: 6.2 GB a copy): the engine's form is made once, in two steps, and every engine
    shares it; HF's process, with its own copy, is started per batch."""
    print(f"{label}: random weights ...", file=sys.stderr, flush=True)
    params = random_params(cfg, seed=0)
    ckpt = tempfile.mkdtemp(prefix="rlx-gen-ckpt-")
    rows = []
    try:
        if torch_py is not None:
            save_checkpoint(ckpt, cfg, params)
        params = engine_form(cfg, split_layers(params))
        for batch in args.batches:
            print(f"{label} b{batch}: rlx ...", file=sys.stderr, flush=True)
            rlx, tokens = engine_generate(cfg, params, batch, w, args.compile_cache)
            row = {"model": label, "batch": batch, "rlx": rlx, "hf": None}
            rows.append(row)
            gc.collect()
            if torch_py is None:
                continue
            print(f"{label} b{batch}: HF ...", file=sys.stderr, flush=True)
            hf = HFSide(torch_py, ckpt, args.dtype)
            try:
                row["hf_info"] = hf.info
                row["hf"], hf_tokens = hf_generate(hf, cfg, batch, w)
            finally:
                hf.close()
            row["agree"] = agreement(tokens, hf_tokens)
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    return rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["0.5b"], choices=sorted(MODELS))
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--prompt", type=int, default=128, help="tokens per prompt")
    parser.add_argument("--new", type=int, default=128, help="new tokens per sample, exactly")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per side; best counts")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    # 16: the engine's per-call work (gathering the cached keys and values) is ~10% of a
    # decode step at the 0.5B shape and batch 32 with 8; 128 new tokens waste 1 step either way
    parser.add_argument("--steps-per-call", type=int, default=16)
    parser.add_argument(
        "--span-bucket", type=int, default=0, help="decode span bucket; 0: prompt + new"
    )
    parser.add_argument("--bandwidth-gib", type=float, default=1.0)
    parser.add_argument("--compile-cache", default=str(Path.home() / ".cache/rlx/jax-compile"))
    parser.add_argument("--no-hf", action="store_true", help="the engine alone")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    print(f"uptime before: {uptime()}", flush=True)
    n_bytes = int(args.bandwidth_gib * (1 << 30))
    limits = measure_limits(n_bytes)
    w = Workload(
        prompt=args.prompt,
        new=args.new,
        repeats=args.repeats,
        steps_per_call=args.steps_per_call,
        span_bucket=args.span_bucket or args.prompt + args.new,
    )
    torch_py = None if args.no_hf else torch_python()[0]
    rows = []
    for label in args.models:
        cfg = MODELS[label]
        if args.dtype == "bfloat16":
            cfg = replace(cfg, param_dtype="bfloat16", compute_dtype="bfloat16")
        rows += measure_model(label, cfg, args, w, torch_py)
        gc.collect()
    # the machine is shared: the limits are measured again at the end, the higher counts
    end = measure_limits(n_bytes)
    limits = {k: max(v, end[k]) for k, v in limits.items()}
    copy_bw, np_read, jax_read, peak = (
        limits[k] for k in ("copy", "np_read", "jax_read", "matmul")
    )
    bandwidth = max(copy_bw, np_read, jax_read)

    info = next((r["hf_info"] for r in rows if "hf_info" in r), None)
    print(
        f"\ngenerate at real sizes: {args.dtype}, greedy, prompts of {args.prompt} tokens, "
        f"exactly {args.new} new; best of {args.repeats}; engine {args.steps_per_call} steps "
        f"per call, span bucket {w.span_bucket}"
    )
    for label in args.models:
        print(f"  {label}: {describe(MODELS[label])}")
    hf_desc = (
        f"torch {info['torch']}, transformers {info['transformers']}, attn {info['attn']}, "
        f"{info['threads']} threads"
        if info
        else "HF: not run"
    )
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; {date.today()}")
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; {hf_desc}")
    print(
        f"memory bandwidth: {si(bandwidth, 'B/s')} (the fastest over {args.bandwidth_gib:g} GiB "
        f"of: numpy copy {si(copy_bw, 'B/s')} (read + write), matrix-vector read numpy "
        f"{si(np_read, 'B/s')}, JAX {si(jax_read, 'B/s')}; best of the run's start and end); "
        f"f32 matmul peak {si(peak, 'FLOP/s')} (JAX, 2048^3)"
    )
    print(
        f"{'model':<6}{'batch':>6}{'HF tok/s':>10}{'rlx tok/s':>11}{'rlx/HF':>8}"
        f"{'step ms HF':>12}{'rlx':>7}{'%BW HF':>8}{'rlx':>6}{'%mm HF':>8}{'rlx':>6}  agreement"
    )
    for r in rows:
        cfg = MODELS[r["model"]]
        context = args.prompt + args.new / 2
        flops = decode_flops(cfg, r["batch"], context)
        rlx, hf = r["rlx"], r["hf"]

        def shares(side: dict, flops: float = flops) -> tuple[float, float]:
            return 100 * side["bytes_per_s"] / bandwidth, 100 * flops / side["step_s"] / peak

        rb, rm = shares(rlx)
        if hf is None:
            print(
                f"{r['model']:<6}{r['batch']:>6}{'-':>10}{rlx['tokens_per_s']:>11.1f}{'-':>8}"
                f"{'-':>12}{rlx['step_s'] * 1e3:>7.0f}{'-':>8}{rb:>5.0f}%{'-':>8}{rm:>5.0f}%"
            )
            continue
        hb, hm = shares(hf)
        a = r["agree"]
        print(
            f"{r['model']:<6}{r['batch']:>6}{hf['tokens_per_s']:>10.1f}"
            f"{rlx['tokens_per_s']:>11.1f}{rlx['tokens_per_s'] / hf['tokens_per_s']:>8.2f}"
            f"{hf['step_s'] * 1e3:>12.0f}{rlx['step_s'] * 1e3:>7.0f}{hb:>7.0f}%{rb:>5.0f}%"
            f"{hm:>7.0f}%{rm:>5.0f}%  first token {100 * a['first_token_agree']:.0f}%, "
            f"common prefix {a['mean_common_prefix']:.1f}"
        )
    for r in rows:
        rlx, hf = r["rlx"], r["hf"]
        hf_prefill = f"HF {hf['prefill_s']:.2f} s, " if hf else ""
        print(
            f"  {r['model']} b{r['batch']}: prefill + first token {hf_prefill}rlx "
            f"{rlx['prefill_s']:.2f} s; decode step reads {si(rlx['step_bytes'], 'B')}; rlx "
            f"warm-up (compiles) {rlx['warmup_s']:.0f} s"
        )
    print(f"uptime after: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
