"""The accelerator bench's measurements: one generate workload on the rlx engine and on HF
`generate`, and one RL train step. Each returns a plain dict (what the JSON holds)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from shapes import decode_bytes, param_count, train_flops

from rlx_model import ModelConfig, Params

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True, kw_only=True)
class Workload:
    prompt: int  # tokens per prompt, every prompt alike
    new: int  # new tokens per sample, exactly (no stop tokens)
    repeats: int  # timed runs of each side; the best counts
    steps_per_call: int  # the engine's decode steps per compiled call
    span_bucket: int  # the engine's decode span bucket, positions


def prompts_for(cfg: ModelConfig, batch: int, prompt: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, cfg.vocab_size, (batch, prompt)).astype(np.int32)


# --- HF transformers, in its own process --------------------------------------------------------


def torch_python() -> tuple[str | None, str]:
    """(interpreter that has torch and transformers, why) or (None, why not): RLX_TORCH_PYTHON,
    else this interpreter (the GPU machine's python3), else the goldens venv that
    tools/make_goldens creates (a CPU machine whose workspace has no torch)."""
    explicit = os.environ.get("RLX_TORCH_PYTHON")
    if explicit:
        return explicit, "RLX_TORCH_PYTHON"
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        return sys.executable, "this interpreter"
    venv = Path.home() / ".cache" / "rlx" / "goldens-venv" / "bin" / "python"
    if venv.exists():
        return str(venv), "the goldens venv"
    return None, "not available here (no torch)"


class HFSide:
    """hf_side.py on one checkpoint, answering one workload per request."""

    def __init__(self, python: str, ckpt: str, dtype: str = "bfloat16") -> None:
        self.proc = subprocess.Popen(
            [python, str(HERE / "hf_side.py"), ckpt, dtype],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            self.close()
            raise RuntimeError("the HF side did not start (its stderr is above)")
        self.info: dict = json.loads(line)

    def generate(self, prompts: np.ndarray, new: int, repeats: int) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        req = {"prompts": prompts.tolist(), "new": new, "repeats": repeats}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the HF side died (its stderr is above)")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):  # it may have died already
                self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- one generate workload ------------------------------------------------------------------


def _best(fn, repeats: int) -> tuple[float, object]:
    """(fastest wall seconds, its result) of `repeats` calls."""
    best, result = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
        if seconds < best:
            best, result = seconds, out
    return best, result


def _decode_figures(
    cfg: ModelConfig, batch: int, w: Workload, full_s: float, one_s: float, steps: int
) -> dict:
    """Per decode step: seconds ((all new tokens - prefill and first token) / steps run), the
    bytes it must read at the mean context of those steps, and what that is per second."""
    step_s = max(full_s - one_s, 1e-9) / steps
    context = w.prompt + (steps + 1) / 2  # step j attends to prompt + j positions
    bytes_ = decode_bytes(cfg, batch, context)
    return {
        "tokens_per_s": batch * w.new / full_s,
        "full_s": full_s,
        "prefill_s": one_s,
        "decode_steps": steps,
        "step_s": step_s,
        "step_bytes": bytes_,
        "bytes_per_s": bytes_ / step_s,
    }


def engine_generate(
    cfg: ModelConfig, params: Params, batch: int, w: Workload, compile_dir: str
) -> tuple[dict, list[list[int]]]:
    """The rlx engine with `batch` slots on `batch` prompts, greedy: the best of `repeats` runs of
    the whole unit after a warm-up (compiles), and of the same unit with 1 new token."""
    from rlx_core.clients.inference import Sampling, WorkUnit
    from rlx_inference import Engine
    from rlx_inference.config import EngineConfig

    prompts = prompts_for(cfg, batch, w.prompt, seed=batch)
    block = 16
    max_context = -(-(w.prompt + w.new) // block) * block
    width = max_context // block
    itemsize = 2 if cfg.compute_dtype == "bfloat16" else 4
    block_bytes = 2 * cfg.num_layers * block * cfg.kv_size * itemsize
    config = EngineConfig(
        slots=batch,
        block_size=block,
        cache_mib=-(-(batch * width + 2) * block_bytes // (1 << 20)) + 1,
        max_context=max_context,
        steps_per_call=w.steps_per_call,
        span_bucket=w.span_bucket,
        max_prefill_tokens=max(2048, batch * w.prompt),
        compile_cache_dir=compile_dir,
    )

    def unit(new: int) -> WorkUnit:
        return WorkUnit(
            unit_id=f"b{batch}-n{new}",
            version=0,
            prompts=tuple(tuple(int(t) for t in p) for p in prompts),
            sampling=Sampling(greedy=True),
            seeds=tuple(range(batch)),
            max_new_tokens=new,
        )

    full, one = unit(w.new), unit(1)
    engine = Engine(cfg, params, config)  # its KV pool goes when this returns
    t0 = time.perf_counter()
    engine.generate(full)
    engine.generate(one)
    warm_s = time.perf_counter() - t0
    full_s, result = _best(lambda: engine.generate(full), w.repeats)
    one_s, _ = _best(lambda: engine.generate(one), w.repeats)
    steps = -(-(w.new - 1) // w.steps_per_call) * w.steps_per_call
    figures = _decode_figures(cfg, batch, w, full_s, one_s, steps)
    figures["warmup_s"] = warm_s
    figures["cache_mib"] = config.cache_mib
    tokens = [list(r.token_ids) for r in result.rollouts]  # type: ignore[attr-defined]
    return figures, tokens


def hf_generate(
    hf: HFSide, cfg: ModelConfig, batch: int, w: Workload
) -> tuple[dict, list[list[int]]]:
    prompts = prompts_for(cfg, batch, w.prompt, seed=batch)
    t0 = time.perf_counter()
    out = hf.generate(prompts, w.new, w.repeats)
    figures = _decode_figures(cfg, batch, w, out["full_s"], out["one_s"], w.new - 1)
    figures["wall_s"] = time.perf_counter() - t0
    return figures, out["tokens"]


def agreement(a: list[list[int]], b: list[list[int]]) -> dict:
    """How alike two greedy runs are (bf16 on different kernels: near-ties may break apart)."""
    first = sum(x[:1] == y[:1] for x, y in zip(a, b, strict=True)) / len(a)
    prefix = [
        next((i for i, (s, t) in enumerate(zip(x, y, strict=False)) if s != t), len(x))
        for x, y in zip(a, b, strict=True)
    ]
    return {"first_token_agree": first, "mean_common_prefix": float(np.mean(prefix))}


# --- one RL train step ----------------------------------------------------------------------


def train_step(
    cfg: ModelConfig,
    params: Params,
    prompts: int,
    group: int,
    seq: int,
    repeats: int,
    compile_dir: str,
) -> dict:
    """rlx_trainer's step (GRPO without KL, AdamW, the fused step: π_old from the update's own
    forward) on prompts x group x seq random tokens, bf16 compute on f32 params and moments.
    Out of memory: again with the batch in 4 microbatches (grad_accum), the same tokens."""
    from rlx_core.clients import TrainBatch
    from rlx_core.config import from_dict
    from rlx_trainer.config import TrainerConfig
    from rlx_trainer.trainer import Trainer

    def batch(version: int, seed: int) -> TrainBatch:
        rng = np.random.default_rng(seed)
        tokens = rng.integers(0, cfg.vocab_size, (prompts, group, seq)).astype(np.int32)
        mask = np.zeros((prompts, group, seq), np.float32)
        mask[..., seq // 4 :] = 1  # a quarter prompt, the rest response
        sampler = np.where(mask > 0, -rng.random(mask.shape) * 8, 0).astype(np.float32)
        rewards = rng.integers(0, 2, (prompts, group)).astype(np.float32)
        return TrainBatch.rl(tokens, mask, sampler, rewards, version=version)

    def run(grad_accum: int) -> dict:
        config = from_dict(
            TrainerConfig,
            {
                "model": {"param_dtype": "float32", "compute_dtype": "bfloat16"},
                "optimizer": {"lr": 1e-6, "schedule": "constant"},
                "objective": {"preset": "grpo", "beta": 0.0},
                "update": {"grad_accum": grad_accum},
                "keep_versions": 0,
                "compile_cache_dir": compile_dir,
            },
        )
        trainer = Trainer(config, cfg, params, seed=0)
        t0 = time.perf_counter()
        trainer.train_step(batch(trainer.state.step, 0))
        warm_s = time.perf_counter() - t0
        times = []
        for i in range(repeats):
            m = trainer.train_step(batch(trainer.state.step, i + 1)).metrics
            times.append(m["compute_s"])
        return {"step_s": min(times), "warmup_s": warm_s, "grad_accum": grad_accum}

    try:
        out = run(1)
    except Exception as e:  # XLA reports running out of device memory as a runtime error
        if "RESOURCE_EXHAUSTED" not in str(e) and "out of memory" not in str(e).lower():
            raise
        print(f"train step: out of memory at grad_accum 1: {e}", file=sys.stderr)
        out = None  # run again outside this block: the traceback holds the first trainer
    if out is None:
        out = run(4 if prompts % 4 == 0 else prompts)
    rows = prompts * group
    flops = train_flops(cfg, rows, seq)
    out |= {
        "prompts": prompts,
        "group": group,
        "seq": seq,
        "tokens": rows * seq,
        "params": param_count(cfg),
        "flops": flops,
        "flops_per_s": flops / out["step_s"],
    }
    return out
