"""A minimal single-process GRPO loop on the code example (rlx_data.code_demo).

Same model (tools/demo/code_model, its prompts rendered with its chat template), task, batch B
and group size G as `rlx up --example code`, but no services, no RPC, no snapshots, no rollout
log: sample B×G responses, run the last ```python block of each in the verifier's sandbox on the
problem's hidden tests (reward 1 for AC), one GRPO update (rlx_trainer.objective's
`preset("grpo")`), repeat. It picks the example's RL settings, and is the floor that
`rlx up --example code`'s seconds per step compare with.

    uv run python tools/bench/e2e/code_floor.py                  # the example's settings
    uv run python tools/bench/e2e/code_floor.py --steps 300 --lr 2e-3 --eval-every 25 --json

Prints seconds per step (training only, evaluation excluded), held-out greedy pass@1 and the
verdict mix over steps, and the wall time at which held-out pass@1 first reached the target
(default 0.85).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools" / "demo"))

from addition_lm import response_logprobs, sample  # noqa: E402  (tools/ is not a package)
from code_lm import CodeCodec, Judge, pass_at_1  # noqa: E402

from rlx_core.tokenizer import load_tokenizer  # noqa: E402
from rlx_data import (  # noqa: E402
    CODE_GROUP,
    CODE_LR,
    CODE_PROMPTS,
    CODE_STEPS,
    CODE_WARMUP,
    ArithCodeTask,
    code_splits,
)
from rlx_model import load_checkpoint  # noqa: E402
from rlx_trainer.objective import ObjectiveBatch, preset  # noqa: E402

BASE_MODEL = ROOT / "tools" / "demo" / "code_model"
# The example's RL settings (rlx_data.code_demo's run config uses the same).
B, G = CODE_PROMPTS, CODE_GROUP
LR = CODE_LR
TEMPERATURE = 1.0
PRESET = "grpo"
BETA = 0.0
MINIBATCHES = 1  # optimizer updates per batch (each on B / MINIBATCHES prompts)
EPOCHS = 1  # passes over the batch
WARMUP = CODE_WARMUP  # steps of linear learning-rate warmup
DECAY_STEPS = CODE_STEPS  # optimizer updates of cosine decay after warmup; 0 = constant
CLIP_NORM = 1.0  # global gradient-norm clip (the trainer's default)


def run(  # noqa: PLR0915  (one loop, read top to bottom)
    *,
    base: Path,
    steps: int,
    batch: int,
    group: int,
    lr: float,
    temperature: float,
    preset_name: str,
    beta: float,
    seed: int,
    minibatches: int,
    epochs: int,
    warmup: int,
    decay_steps: int,
    clip_norm: float,
    eval_every: int,
    target: float,
    stop_at_target: bool,
    log: Any = print,
) -> dict[str, Any]:
    info = json.loads((base / "rlx_demo.json").read_text())
    task = ArithCodeTask(**info["task"])
    cfg, params = load_checkpoint(base)
    codec = CodeCodec(load_tokenizer(str(base)), task)
    judge = Judge()
    train, heldout = code_splits(task)
    R = codec.R
    objective = preset(preset_name, beta=beta)
    # the trainer's optimizer: linear warmup from 0, then constant or cosine down to 0.1 × lr
    after = optax.cosine_decay_schedule(lr, decay_steps, alpha=0.1) if decay_steps else None
    if after is None:
        sched: Any = optax.linear_schedule(0.0, lr, warmup) if warmup else lr
    else:
        sched = optax.join_schedules(
            [optax.linear_schedule(0.0, lr, max(warmup, 1)), after], [max(warmup, 1)]
        )
    opt = optax.chain(optax.clip_by_global_norm(clip_norm), optax.adam(sched))
    opt_state = opt.init(params)
    mb = batch // minibatches
    ref_params = params

    @jax.jit
    def update(
        params: Any,
        opt_state: Any,
        ids: Any,
        valid: Any,
        resp: Any,
        mask: Any,
        old_logp: Any,
        rewards: Any,
    ) -> Any:
        def loss_fn(p: Any) -> Any:
            logp = response_logprobs(p, cfg, ids, valid, resp, mask).reshape(mb, group, R)
            ref = None
            if beta > 0:
                ref = response_logprobs(ref_params, cfg, ids, valid, resp, mask)
                ref = jax.lax.stop_gradient(ref).reshape(mb, group, R)
            ob = ObjectiveBatch(
                # the sampler's log-probs are π_old's: same weights, same program (max |Δ| 0)
                old_logp=old_logp.reshape(mb, group, R),
                sampler_logp=old_logp.reshape(mb, group, R),
                ref_logp=ref,
                mask=mask.reshape(mb, group, R),
                rewards=rewards.reshape(mb, group),
                max_len=R,
            )
            loss, _ = objective(logp, ob)
            return loss

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    rng = np.random.default_rng(seed)
    key = jax.random.PRNGKey(seed)
    base_acc, base_counts = pass_at_1(params, cfg, codec, judge, heldout)
    log(f"floor: base held-out pass@1 {base_acc:.3f} {dict(base_counts)} ({len(heldout)} prompts)")
    curve = [(0, 0.0, base_acc)]
    mixes: list[tuple[int, dict[str, int]]] = []
    mix: Counter[str] = Counter()
    train_time = 0.0
    eval_time = 0.0
    reached: dict[str, float] | None = None
    reward_sum = 0.0
    step_times: list[float] = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        rows = rng.integers(0, len(train), batch)
        problems = [train[r] for r in rows for _ in range(group)]
        prompts = [p.prompt() for p in problems]
        ids, valid = codec.encode_prompts(prompts)
        key, sub = jax.random.split(key)
        resp, sampler_logp, mask = sample(
            params,
            cfg,
            jnp.asarray(ids),
            jnp.asarray(valid),
            sub,
            R=R,
            stop_ids=codec.stop_ids,
            pad=codec.pad,
            temperature=temperature,
        )
        texts = codec.decode_responses(np.asarray(resp), np.asarray(mask))
        rewards, counts = judge.score(texts, problems)
        mix += counts
        rewards_j = jnp.asarray(rewards)
        for _ in range(epochs):
            for m in range(minibatches):
                rows_m = slice(m * mb * group, (m + 1) * mb * group)
                params, opt_state, _ = update(
                    params,
                    opt_state,
                    ids[rows_m],
                    valid[rows_m],
                    resp[rows_m],
                    mask[rows_m],
                    sampler_logp[rows_m],
                    rewards_j[rows_m],
                )
        jax.block_until_ready(params)
        dt = time.perf_counter() - t0
        step_times.append(dt)
        train_time += dt
        reward_sum += float(rewards.mean())
        if step % eval_every == 0 or step == steps:
            t1 = time.perf_counter()
            acc, held_counts = pass_at_1(params, cfg, codec, judge, heldout)
            eval_time += time.perf_counter() - t1
            curve.append((step, round(train_time, 2), acc))
            mixes.append((step, dict(sorted(mix.items()))))
            log(
                f"step {step}: mean reward {reward_sum / eval_every:.3f}, held-out {acc:.3f} "
                f"{dict(held_counts)}, train {train_time:.1f} s, eval {eval_time:.1f} s, "
                f"rollout verdicts {dict(sorted(mix.items()))}"
            )
            reward_sum = 0.0
            mix = Counter()
            if reached is None and acc >= target:
                reached = {"step": step, "train_s": train_time, "wall_s": train_time + eval_time}
                if stop_at_target:
                    break
    # the first steps include compilation: the steady-state figure skips them
    steady = step_times[5:] or step_times
    return {
        "base_accuracy": base_acc,
        "final_accuracy": curve[-1][2],
        "steps": len(step_times),
        "s_per_step": float(np.median(steady)),
        "s_per_step_mean": float(np.mean(steady)),
        "reached_target": reached,
        "target": target,
        "curve": curve,
        "rollout_verdicts": mixes,
        "settings": {
            "B": batch,
            "G": group,
            "lr": lr,
            "temperature": temperature,
            "preset": preset_name,
            "beta": beta,
            "seed": seed,
            "minibatches": minibatches,
            "epochs": epochs,
            "warmup": warmup,
            "decay_steps": decay_steps,
            "clip_norm": clip_norm,
            "task": info["task"],
            "model": info["model"],
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--base", type=Path, default=BASE_MODEL, help="the SFT base model directory")
    ap.add_argument("--steps", type=int, default=DECAY_STEPS)
    ap.add_argument("--batch", type=int, default=B)
    ap.add_argument("--group", type=int, default=G)
    ap.add_argument("--lr", type=float, default=LR)
    ap.add_argument("--temperature", type=float, default=TEMPERATURE)
    ap.add_argument("--preset", default=PRESET)
    ap.add_argument("--beta", type=float, default=BETA)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--minibatches", type=int, default=MINIBATCHES)
    ap.add_argument("--epochs", type=int, default=EPOCHS)
    ap.add_argument("--warmup", type=int, default=WARMUP)
    ap.add_argument("--clip-norm", type=float, default=CLIP_NORM)
    ap.add_argument(
        "--decay-steps", type=int, default=DECAY_STEPS, help="cosine decay length; 0 = constant"
    )
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--stop-at-target", action="store_true")
    ap.add_argument("--json", action="store_true", help="print one JSON summary line at the end")
    args = ap.parse_args()
    result = run(
        base=args.base,
        steps=args.steps,
        batch=args.batch,
        group=args.group,
        lr=args.lr,
        temperature=args.temperature,
        preset_name=args.preset,
        beta=args.beta,
        seed=args.seed,
        minibatches=args.minibatches,
        epochs=args.epochs,
        warmup=args.warmup,
        decay_steps=args.decay_steps,
        clip_norm=args.clip_norm,
        eval_every=args.eval_every,
        target=args.target,
        stop_at_target=args.stop_at_target,
    )
    reached = result["reached_target"]
    print(
        f"floor: {result['s_per_step']:.4f} s/step (median), held-out "
        f"pass@1 {result['base_accuracy']:.3f} -> {result['final_accuracy']:.3f} in "
        f"{result['steps']} steps; "
        + (
            f"reached {args.target:.2f} at step {reached['step']} after {reached['wall_s']:.1f} s"
            if reached
            else f"did not reach {args.target:.2f}"
        )
    )
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
