"""Prefill throughput: rlx-model (JAX) against HF transformers (torch CPU), one run, same weights.

    uv run python tools/bench/model_forward/bench.py [--batch 8 --seq 256 --repeats 5]

The model is the bench Qwen2 config of DESIGN §10 (4 layers, hidden 512, 8 heads, 2 KV heads,
vocab 32000, MLP 2048) with random weights, saved once as an HF checkpoint that both sides load.
Two workloads are timed on each side:

- `full logits`: logits at every position ([B, T, V] float32), as scoring/training needs;
- `prefill`: what an inference engine does for a prompt: fill the KV cache and take the logits of
  the last position only (HF: `use_cache=True, logits_to_keep=1`).

The f32 matmul peak is measured in the same run (2048^3 matmuls in both frameworks; the higher
counts), and each figure is also reported as a fraction of that peak from an analytic FLOP count.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from rlx_model import BENCH_CONFIG, ModelConfig, forward, init_params, logits, save_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import best, torch_python

CFG = BENCH_CONFIG

TORCH_SCRIPT = r"""
import json, sys, time
import torch
from transformers import AutoModelForCausalLM
ckpt, batch, seq, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32).eval()
tokens = torch.from_numpy(__import__("numpy").load(ckpt + "/tokens.npy")).long()

def best(fn):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter(); fn(); times.append(time.perf_counter() - t0)
    return min(times)

with torch.inference_mode():
    full = best(lambda: model(tokens, use_cache=False).logits)
    prefill = best(lambda: model(tokens, use_cache=True, logits_to_keep=1).logits)
    a = torch.ones(2048, 2048)
    peak = 2 * 2048**3 / best(lambda: a @ a)
    out = model(tokens[:, :32], use_cache=False).logits[0, :, :8].numpy().tolist()
print(json.dumps({"full_s": full, "prefill_s": prefill, "peak": peak, "sample": out,
                  "torch": torch.__version__, "threads": torch.get_num_threads(),
                  "attn": model.config._attn_implementation}))
"""


def flops(cfg: ModelConfig, batch: int, seq: int, head_positions: int) -> float:
    """Matmul FLOPs of one forward: projections and MLP for every token, causal attention
    (scores and values over the lower triangle), and the vocabulary head at head_positions."""
    d, q, kv, f = cfg.hidden_size, cfg.q_size, cfg.kv_size, cfg.intermediate_size
    per_token = cfg.num_layers * (d * q + 2 * d * kv + q * d + 3 * d * f)
    attention = cfg.num_layers * 2 * q * seq * (seq + 1) / 2  # QK^T and PV, causal half
    head = cfg.vocab_size * d * head_positions
    return 2.0 * batch * (per_token * seq + attention + head)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    b, t = args.batch, args.seq
    params = init_params(CFG, seed=0)
    tokens = np.random.default_rng(0).integers(0, CFG.vocab_size, (b, t)).astype(np.int32)

    with tempfile.TemporaryDirectory() as ckpt:
        save_checkpoint(ckpt, CFG, params)
        np.save(Path(ckpt) / "tokens.npy", tokens)
        print(f"torch side: {b} x {t} tokens ...", file=sys.stderr, flush=True)
        result = subprocess.run(
            [torch_python(), "-c", TORCH_SCRIPT, ckpt, str(b), str(t), str(args.repeats)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            sys.exit(f"torch side failed:\n{result.stderr}")
        ref = json.loads(result.stdout.strip().splitlines()[-1])

    print(f"rlx side: {b} x {t} tokens ...", file=sys.stderr, flush=True)
    tok = jnp.asarray(tokens)
    full_fn = jax.jit(lambda p, x: logits(p, CFG, forward(p, CFG, x)[0]))
    prefill_fn = jax.jit(lambda p, x: logits(p, CFG, forward(p, CFG, x)[0][:, -1]))
    sample = np.asarray(full_fn(params, tok[:, :32])[0, :, :8])
    max_diff = float(np.abs(sample - np.asarray(ref["sample"])).max())
    rlx_full = best(lambda: full_fn(params, tok).block_until_ready(), args.repeats)
    rlx_prefill = best(lambda: prefill_fn(params, tok).block_until_ready(), args.repeats)
    a = jnp.ones((2048, 2048), jnp.float32)
    mm = jax.jit(lambda x: x @ x)
    jax_peak = 2 * 2048**3 / best(lambda: mm(a).block_until_ready(), args.repeats)
    peak = max(jax_peak, ref["peak"])

    n = b * t
    print(f"\nmodel_forward: Qwen2 4 layers, d 512, 8 heads / 2 KV, vocab 32000, batch {b} x {t}")
    print(
        f"torch {ref['torch']} ({ref['threads']} threads, attn={ref['attn']}); "
        f"jax {jax.__version__} on {jax.devices()[0].platform}"
    )
    print(
        f"f32 matmul peak: {peak / 1e9:.1f} GFLOP/s (jax {jax_peak / 1e9:.1f}, "
        f"torch {ref['peak'] / 1e9:.1f})"
    )
    print(f"same weights, max |logit diff| on a 32-token sample: {max_diff:.2e}")
    header = f"{'workload':<14}{'torch tok/s':>12}{'rlx tok/s':>12}{'ratio':>8}"
    print(header + f"{'torch %peak':>13}{'rlx %peak':>11}")
    for name, t_ref, t_rlx, head in (
        ("full logits", ref["full_s"], rlx_full, t),
        ("prefill", ref["prefill_s"], rlx_prefill, 1),
    ):
        work = flops(CFG, b, t, head)
        print(
            f"{name:<14}{n / t_ref:>12.0f}{n / t_rlx:>12.0f}{t_ref / t_rlx:>8.2f}"
            f"{100 * work / t_ref / peak:>12.0f}%{100 * work / t_rlx / peak:>10.0f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
