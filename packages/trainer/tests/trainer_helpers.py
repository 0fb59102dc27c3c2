"""Shared builders for the trainer tests: configs from plain dicts, and synthetic batches."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlx_core.clients import TrainBatch
from rlx_core.config import from_dict
from rlx_model import ModelConfig, tiny_config
from rlx_trainer.config import TrainerConfig

MODEL: ModelConfig = tiny_config()  # the built-in "tiny": 2 layers, d 64, byte vocabulary
B, G, S, PROMPT = 4, 4, 24, 10


def config(**sections: Any) -> TrainerConfig:
    base: dict[str, Any] = {
        "optimizer": {"lr": 1e-3, "schedule": "constant"},
        "objective": {"preset": "grpo", "beta": 0.0},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return from_dict(TrainerConfig, base)


def rl_batch(
    seed: int = 0, *, version: int = 0, b: int = B, g: int = G, s: int = S, vocab: int = 256
) -> TrainBatch:
    """Random prompts + responses with ragged response lengths (right padding), random sampler
    log-probs and rewards."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, (b, g, s)).astype(np.int32)
    lengths = rng.integers(PROMPT + 2, s + 1, (b, g))
    pos = np.arange(s)
    valid = pos[None, None, :] < lengths[..., None]
    mask = ((pos >= PROMPT)[None, None, :] & valid).astype(np.float32)
    sampler = np.where(mask > 0, -rng.random((b, g, s)) * 4, 0).astype(np.float32)
    rewards = rng.integers(0, 2, (b, g)).astype(np.float32)
    return TrainBatch.rl(tokens, mask, sampler, rewards, version=version, valid=valid)


def sft_batch(seed: int = 0, *, b: int = B, g: int = G, s: int = S) -> TrainBatch:
    """A learnable pattern: each row counts up from a random start (mod 256)."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 256, (b, g, 1))
    tokens = ((start + np.arange(s)) % 256).astype(np.int32)
    mask = np.zeros((b, g, s), np.float32)
    mask[..., 1:] = 1
    return TrainBatch.sft(tokens, mask)


def flat(params: Any) -> dict[str, np.ndarray]:
    from rlx_trainer.trainer import flatten

    return {k: np.asarray(v) for k, v in flatten(params).items()}


def assert_bit_equal(a: Any, b: Any) -> None:
    fa, fb = flat(a), flat(b)
    assert fa.keys() == fb.keys()
    for k in fa:
        assert fa[k].dtype == fb[k].dtype, k
        assert fa[k].tobytes() == fb[k].tobytes(), f"{k} differs"
