"""The built-in demo trained in Tunix: run by `bench.py` in the peer venv, never in rlx's.

    ~/.cache/rlx-peers/tunix/bin/python driver.py --input plan.json --output tunix.json

`plan.json` (written by bench.py from rlx's own code) holds everything that must match rlx's
demo: the base model directory, the prompt strings of every step in rlx's draw order with their
gold answers, the held-out prompts, the batch shape, the objective and optimizer settings, and
reference answer log-probs from `rlx model score`. This file imports nothing of rlx.

Tunix's pieces: its Qwen2 module and safetensors loader (`tunix.models.qwen2`), `RLCluster`
with the vanilla rollout (its `Sampler`, sharing the actor's weights on one mesh), and
`GRPOLearner` (GRPO loss, sequence-mean-token-mean, one update per batch). Timing wraps two
calls of the cluster: `update_actor` (blocked until the new params are ready) and `generate`.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import transformers
from flax import nnx
from tunix.models.qwen2 import model as qwen2_model
from tunix.models.qwen2 import params as qwen2_params
from tunix.rl import common as rl_common
from tunix.rl import rl_cluster as rl_cluster_lib
from tunix.rl.grpo import grpo_learner
from tunix.rl.rollout import base_rollout

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def answer_correct(response: str, answer: str) -> bool:
    """The demo's math rule: the last number in `response` equals the integer `answer` (what
    rlx's verifier decides for these prompts with its `last_number` extractor)."""
    found = _NUMBER.findall(response)
    if not found:
        return False
    text = found[-1].replace(",", "")
    try:
        return int(text) == int(answer) if "." not in text else float(text) == int(answer)
    except ValueError:
        return False


def reward_fn(prompts: list[str], completions: list[str], answer: Any, **_: Any) -> list[float]:
    return [
        1.0 if answer_correct(c, str(a)) else 0.0 for c, a in zip(completions, answer, strict=True)
    ]


def model_config(hf: dict[str, Any]) -> qwen2_model.ModelConfig:
    """Tunix's Qwen2 config from the checkpoint's config.json."""
    heads = int(hf["num_attention_heads"])
    return qwen2_model.ModelConfig(
        num_layers=int(hf["num_hidden_layers"]),
        vocab_size=int(hf["vocab_size"]),
        embed_dim=int(hf["hidden_size"]),
        hidden_dim=int(hf["intermediate_size"]),
        num_heads=heads,
        head_dim=int(hf.get("head_dim") or hf["hidden_size"] // heads),
        num_kv_heads=int(hf["num_key_value_heads"]),
        rope_theta=int(hf["rope_theta"]),
        norm_eps=float(hf["rms_norm_eps"]),
        use_tied_embedding=bool(hf.get("tie_word_embeddings", False)),
    )


def optimizer(o: dict[str, Any]) -> optax.GradientTransformation:
    """rlx's chain (rlx_trainer.optim): global-norm clip, then AdamW on linear warmup from 0 and
    a cosine to lr * final_lr_ratio. rlx masks weight decay off norms and biases; with the
    demo's weight decay 0 the mask changes nothing, so it is left out."""
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=o["lr"],
        warmup_steps=o["warmup_steps"],
        decay_steps=o["warmup_steps"] + o["decay_steps"],
        end_value=o["lr"] * o["final_lr_ratio"],
    )
    adamw = optax.adamw(
        schedule, b1=o["b1"], b2=o["b2"], eps=o["eps"], weight_decay=o["weight_decay"]
    )
    return optax.chain(optax.clip_by_global_norm(o["clip_norm"]), adamw)


class Clock:
    """Wall seconds of the cluster's update and generate calls, and of our evaluations."""

    def __init__(self) -> None:
        self.update_s: list[float] = []
        self.update_end: list[float] = []
        self.generate_s: list[float] = []
        self.eval_s: list[tuple[float, float]] = []  # (start, end) of each evaluation

    def wrap(self, cluster: rl_cluster_lib.RLCluster) -> None:
        update, generate = cluster.update_actor, cluster.generate

        def timed_update(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = update(*args, **kwargs)
            jax.block_until_ready(nnx.state(cluster.actor_trainer.model))
            t1 = time.perf_counter()
            self.update_s.append(t1 - t0)
            self.update_end.append(t1)
            return out

        def timed_generate(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = generate(*args, **kwargs)
            self.generate_s.append(time.perf_counter() - t0)
            return out

        cluster.update_actor = timed_update
        cluster.generate = timed_generate

    def step_s(self) -> list[float]:
        """Seconds between the ends of consecutive updates, less any evaluation between them."""
        out = []
        for a, b in zip(self.update_end, self.update_end[1:], strict=False):
            inside = sum(e - s for s, e in self.eval_s if a <= s < b)
            out.append(b - a - inside)
        return out


def heldout_accuracy(sampler: Any, prompts: list[str], answers: list[str], p: dict) -> float:
    """Greedy accuracy on the held-out prompts, as rlx evaluates (one greedy answer each,
    max_new_tokens new tokens, stop at the stop ids, judged by the last-number rule)."""
    correct = 0
    for i in range(0, len(prompts), p["eval_batch"]):
        out = sampler(
            input_strings=prompts[i : i + p["eval_batch"]],
            max_generation_steps=p["max_new_tokens"],
            max_prompt_length=p["max_prompt_tokens"],
            temperature=0.0,
            top_p=None,
            eos_tokens=p["stop_ids"],
        )
        correct += sum(
            answer_correct(t, a)
            for t, a in zip(out.text, answers[i : i + p["eval_batch"]], strict=True)
        )
    return correct / len(prompts)


def score_check(cluster: rl_cluster_lib.RLCluster, ref: list[dict], pad: int, eos: int) -> float:
    """Max |Tunix log-prob - rlx log-prob| over the reference completions' tokens."""
    prompts = jnp.array([r["prompt_ids"] for r in ref], dtype=jnp.int32)
    completions = jnp.array([r["completion_ids"] for r in ref], dtype=jnp.int32)
    graphdef, state = nnx.split(cluster.actor_trainer.model)
    logps = rl_common.compute_per_token_logps(
        graphdef,
        state,
        prompt_tokens=prompts,
        completion_tokens=completions,
        pad_id=pad,
        eos_id=eos,
    )
    want = np.array([r["logprobs"] for r in ref], dtype=np.float64)
    return float(np.max(np.abs(np.asarray(logps, dtype=np.float64) - want)))


def run(p: dict[str, Any]) -> dict[str, Any]:
    t_start = time.perf_counter()
    base = Path(p["base_model"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(base))
    train_steps = p["steps"]
    batches = p["train_prompts"][:train_steps]  # chat-rendered by rlx's tokenizer
    answers = p["train_answers"][:train_steps]
    held_prompts = p["heldout_prompts"]
    # the ids Tunix's sampler feeds the model must be rlx's (no BOS, special tokens parsed)
    for text, want in zip(batches[0], p["first_batch_ids"], strict=True):
        got = tokenizer.encode(text)
        if got != want:
            raise SystemExit(f"tokenization differs from rlx's: {got} != {want} for {text!r}")

    # one CPU device; Auto axes as Tunix's examples use (Explicit ones reject its gathers)
    auto = jax.sharding.AxisType.Auto
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(auto, auto))
    cfg = model_config(json.loads((base / "config.json").read_text()))
    model = qwen2_params.create_model_from_safe_tensors(str(base), cfg, mesh, dtype=jnp.float32)

    rollout = base_rollout.RolloutConfig(
        max_tokens_to_generate=p["max_new_tokens"],
        max_prompt_length=p["max_prompt_tokens"],
        kv_cache_size=p["max_prompt_tokens"] + p["max_new_tokens"],
        temperature=p["temperature"],
        top_p=1.0,
        top_k=None,
        eos_tokens=p["stop_ids"],
    )
    training = rl_cluster_lib.RLTrainingConfig(
        actor_optimizer=optimizer(p["optimizer"]),
        eval_every_n_steps=10**9,  # held-out accuracy is measured below, as rlx measures it
        max_steps=train_steps,
    )
    cluster = rl_cluster_lib.RLCluster(
        actor=model,
        tokenizer=tokenizer,
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh={r: mesh for r in rl_cluster_lib.Role},
            rollout_engine="vanilla",
            offload_to_cpu=False,
            training_config=training,
            rollout_config=rollout,
        ),
    )
    algo = grpo_learner.GRPOConfig(
        num_generations=p["group_size"],
        num_iterations=1,
        beta=p["beta"],
        epsilon=p["clip_eps"],
        loss_agg_mode="sequence-mean-token-mean",
    )
    learner = grpo_learner.GRPOLearner(rl_cluster=cluster, algo_config=algo, reward_fns=reward_fn)
    clock = Clock()
    clock.wrap(cluster)
    sampler = cluster.rollout._sampler  # the vanilla rollout's Sampler (no public accessor)
    pad, eos = cluster.rollout.pad_id(), cluster.rollout.eos_id()
    max_dev = score_check(cluster, p["score_reference"], pad, eos)

    heldout: dict[int, float] = {}

    def evaluate(step: int) -> None:
        t0 = time.perf_counter()
        heldout[step] = heldout_accuracy(sampler, held_prompts, p["heldout_answers"], p)
        clock.eval_s.append((t0, time.perf_counter()))
        print(f"tunix step {step}: held-out accuracy {heldout[step]:.3f}", flush=True)

    def batches_in_order() -> Any:
        for k in range(train_steps):
            if k % p["eval_every"] == 0:
                evaluate(k)
            # the vanilla sampler draws with PRNGKey(0) at every call unless given a seed
            rollout.seed = jax.random.PRNGKey(p["seed"] * 1_000_003 + k + 1)
            yield {"prompts": np.array(batches[k]), "answer": np.array(answers[k])}

    t_train = time.perf_counter()
    learner.train(batches_in_order())
    evaluate(train_steps)
    wall = time.perf_counter() - t_start
    steps_s = clock.step_s()
    return {
        "side": "tunix",
        "steps": len(clock.update_s),
        "wall_s": wall,
        "train_wall_s": time.perf_counter() - t_train,
        "step_s": steps_s,
        "update_s": clock.update_s,
        "generate_s": clock.generate_s,
        "median_step_s": statistics.median(steps_s) if steps_s else None,
        "median_update_s": statistics.median(clock.update_s[1:] or clock.update_s),
        "median_generate_s": statistics.median(clock.generate_s[1:] or clock.generate_s),
        "heldout": {str(k): v for k, v in sorted(heldout.items())},
        "score_max_abs_diff": max_dev,
        "versions": {
            "jax": jax.__version__,
            "optax": optax.__version__,
            "transformers": transformers.__version__,
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", required=True, help="plan JSON written by bench.py")
    ap.add_argument("--output", required=True, help="where to write the result JSON")
    args = ap.parse_args()
    plan = json.loads(Path(args.input).read_text())
    result = run(plan)
    Path(args.output).write_text(json.dumps(result))
    print(
        f"tunix: {result['steps']} steps, wall {result['wall_s']:.1f} s, median step "
        f"{result['median_step_s']:.4f} s, update {result['median_update_s']:.4f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
