"""Make the demo's base model: a short supervised fine-tune of rlx_model's tiny byte-level model on
the addition task's training split, with a fixed seed (bit-identical on CPU for the same
settings). Deliberately stopped early, so RL has something to improve (held-out accuracy < 60%).

    uv run python tools/demo/sft.py --out tools/demo/base_model            # the committed one
    uv run python tools/demo/sft.py --steps 300 --out /tmp/base --eval-every 50
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, str(Path(__file__).resolve().parent))

from addition_lm import (
    accuracy,
    encode_answers,
    encode_prompts,
    prompt_len,
    response_len,
    response_logprobs,
)

from rlx_controller.demo import AdditionTask, addition_splits
from rlx_model import init_params, save_checkpoint, tiny_config

# The demo's settings; tools/bench/e2e/floor.py and the controller's built-in demo use the same.
DIGITS = 2
HELDOUT = 500
HIDDEN = 64
LAYERS = 2
SFT_STEPS = 168
SFT_BATCH = 128
SFT_LR = 3e-3
SEED = 0


def model_config(hidden: int = HIDDEN, layers: int = LAYERS) -> Any:
    return tiny_config(
        hidden_size=hidden, num_layers=layers, eos_token_ids=(258,), bos_token_id=257
    )


def train_sft(
    task: AdditionTask,
    *,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    hidden: int = HIDDEN,
    layers: int = LAYERS,
    eval_every: int = 0,
    log: Any = print,
) -> tuple[Any, Any]:
    """(cfg, params) after `steps` teacher-forced updates on the training split."""
    cfg = model_config(hidden, layers)
    params = init_params(cfg, seed)
    train, heldout = addition_splits(task)
    P, R = prompt_len(task), response_len(task)
    opt = optax.adam(lr)
    state = opt.init(params)

    @jax.jit
    def step(params: Any, state: Any, ids: Any, valid: Any, ans: Any, mask: Any) -> Any:
        def loss_fn(p: Any) -> Any:
            logp = response_logprobs(p, cfg, ids, valid, ans, mask)
            return -jnp.sum(logp) / jnp.sum(mask)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    rng = np.random.default_rng(seed)
    for i in range(steps):
        rows = rng.integers(0, len(train), batch)
        ids, valid = encode_prompts([train[r]["prompt"] for r in rows], P)
        ans, mask = encode_answers([task.target(train[r]["answer"]) for r in rows], R)
        params, state, loss = step(params, state, ids, valid, ans, mask)
        if eval_every and (i + 1) % eval_every == 0:
            acc = accuracy(params, cfg, task, heldout)
            log(f"sft step {i + 1}: loss {float(loss):.4f} held-out accuracy {acc:.3f}")
    return cfg, params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="HF checkpoint directory to write")
    ap.add_argument("--digits", type=int, default=DIGITS)
    ap.add_argument("--heldout", type=int, default=HELDOUT)
    ap.add_argument("--steps", type=int, default=SFT_STEPS)
    ap.add_argument("--batch", type=int, default=SFT_BATCH)
    ap.add_argument("--lr", type=float, default=SFT_LR)
    ap.add_argument("--hidden", type=int, default=HIDDEN)
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--unpadded", action="store_true", help="operands without leading zeros")
    args = ap.parse_args()
    task = AdditionTask(
        digits=args.digits, heldout=args.heldout, seed=args.seed, padded=not args.unpadded
    )
    t0 = time.perf_counter()
    cfg, params = train_sft(
        task,
        steps=args.steps,
        batch=args.batch,
        lr=args.lr,
        seed=args.seed,
        hidden=args.hidden,
        layers=args.layers,
        eval_every=args.eval_every,
    )
    _, heldout = addition_splits(task)
    acc = accuracy(params, cfg, task, heldout)
    save_checkpoint(args.out, cfg, params)
    info = {
        "task": {
            "digits": task.digits,
            "heldout": task.heldout,
            "seed": task.seed,
            "padded": task.padded,
        },
        "sft": {"steps": args.steps, "batch": args.batch, "lr": args.lr, "seed": args.seed},
        "model": {"hidden": args.hidden, "layers": args.layers},
        "heldout_accuracy": round(float(acc), 4),
    }
    (args.out / "rlx_demo.json").write_text(json.dumps(info, indent=2) + "\n")
    print(
        f"base model -> {args.out}: held-out accuracy {acc:.3f} ({time.perf_counter() - t0:.1f} s)"
    )


if __name__ == "__main__":
    main()
