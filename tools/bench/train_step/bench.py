"""Train-step time on the bench Qwen2 config, and what log-prob recomputation and aligned mode
cost, as ratios to a plain update. One run, one machine:

    uv run python tools/bench/train_step/bench.py [--prompts 4 --group 2 --seq 128 --repeats 3]

Model: DESIGN §10's bench config (4 layers, hidden 512, 8 heads, 2 KV heads, vocab 32000, MLP
2048), f32, random weights; GRPO without KL, AdamW, one update per batch.

- `plain update`: forward + backward + AdamW on the batch (aligned mode off), π_old given;
- `recompute π_old`: the prefill forward of the generation version over the same batch;
- `aligned update`: the update with jax.checkpoint(nothing_saveable) around the whole log-prob
  function (the forward runs twice: once for the values, once inside the backward);
- `fused step`: the default when π_old is the step's own params (`update.fuse_old`): no
  prefill, π_old is the stop-gradient of the training forward, no remat.

Each figure is the best of `repeats` steps after a warm-up step (compilation). `uptime` is
printed before and after: the machine is shared, and its load moves the absolute figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from rlx_core.clients import TrainBatch
from rlx_core.config import from_dict
from rlx_model import BENCH_CONFIG, init_params
from rlx_trainer.config import TrainerConfig
from rlx_trainer.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import uptime

CFG = BENCH_CONFIG


def batch(b: int, g: int, s: int, version: int, seed: int) -> TrainBatch:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, CFG.vocab_size, (b, g, s)).astype(np.int32)
    mask = np.zeros((b, g, s), np.float32)
    mask[..., s // 4 :] = 1  # a quarter prompt, the rest response
    sampler = np.where(mask > 0, -rng.random((b, g, s)) * 8, 0).astype(np.float32)
    rewards = rng.integers(0, 2, (b, g)).astype(np.float32)
    return TrainBatch.rl(tokens, mask, sampler, rewards, version=version)


def measure(
    aligned: bool, args: argparse.Namespace, params: dict, *, fuse: bool = False
) -> tuple[float, float]:
    """(best recompute seconds, best update seconds) over `repeats` steps after a warm-up."""
    cfg = from_dict(
        TrainerConfig,
        {
            "optimizer": {"lr": 1e-5, "schedule": "constant"},
            "objective": {"preset": "grpo", "beta": 0.0},
            "update": {"aligned": aligned, "fuse_old": fuse},
            "keep_versions": 0,
        },
    )
    t = Trainer(cfg, CFG, params, seed=0)
    recompute, update = [], []
    for i in range(args.repeats + 1):
        label = "warm-up (compiles)" if i == 0 else f"step {i}/{args.repeats}"
        print(f"  aligned={aligned} fuse={fuse} {label} ...", file=sys.stderr, flush=True)
        m = t.train_step(batch(args.prompts, args.group, args.seq, t.state.step, i)).metrics
        if i:
            recompute.append(m["recompute_s"])
            update.append(m["compute_s"] - m["recompute_s"])
    return min(recompute), min(update)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    before = uptime()
    params = init_params(CFG, seed=0)
    rec_plain, upd_plain = measure(False, args, params)
    rec_aligned, upd_aligned = measure(True, args, params)
    rec_fused, upd_fused = measure(True, args, params, fuse=True)
    after = uptime()
    tokens = args.prompts * args.group * args.seq
    recompute = min(rec_plain, rec_aligned)
    print(
        f"\ntrain_step: Qwen2 4 layers, d 512, vocab 32000, f32, GRPO, batch {args.prompts} "
        f"prompts x {args.group} samples x {args.seq} tokens = {tokens} tokens, best of "
        f"{args.repeats}"
    )
    print(f"uptime before: {before}")
    print(f"uptime after:  {after}")
    rows = [
        ("plain update (baseline)", upd_plain),
        ("recompute π_old (prefill)", recompute),
        ("aligned update", upd_aligned),
        ("full step, plain", upd_plain + recompute),
        ("full step, aligned", upd_aligned + recompute),
        ("fused step (default)", upd_fused + rec_fused),
    ]
    print(f"{'':28}{'seconds':>10}{'tokens/s':>11}{'x plain update':>16}")
    for name, seconds in rows:
        print(f"{name:28}{seconds:>10.3f}{tokens / seconds:>11.0f}{seconds / upd_plain:>16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
