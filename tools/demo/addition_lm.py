"""JAX helpers for the demo's addition task: fixed-shape encoding, batched sampling, scoring and
held-out accuracy, with a checkpoint's own tokenizer (rlx_core.tokenizer). Used by
tools/demo/sft.py (the base model) and tools/bench/e2e/floor.py (the single-process GRPO floor).

A prompt is what the controller feeds the model: the record's prompt as the user's turn,
rendered with the checkpoint's chat template (`tok.prompt_ids`). A completion is the answer's
tokens then the tokenizer's `eos_token` (`<|im_end|>` for the demo). Shapes are fixed per task
(prompts left-padded to P ids, responses right-padded to R), so each function compiles once.

    codec = Codec(load_tokenizer(base_dir), task)
    ids, valid = codec.encode_prompts(["07+35="])
    resp, logp, mask = sample(params, cfg, ids, valid, key, R=codec.R, stop_ids=codec.stop_ids,
                              pad=codec.pad)
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rlx_core.tokenizer import Tokenizer
from rlx_data import AdditionTask, addition_answer_correct, demo_token_counts
from rlx_model import ModelConfig, forward, logits, token_logprobs


class Codec:
    """A checkpoint's tokenizer at the task's fixed shapes: P prompt ids, R response ids."""

    def __init__(self, tok: Tokenizer, task: AdditionTask) -> None:
        self.tok = tok
        self.task = task
        eos = tok.token_id(tok.eos_token) if tok.eos_token else None
        if eos is None or eos not in tok.stop_ids:
            raise ValueError(f"{tok.source}: eos_token {tok.eos_token!r} must end generation")
        self.eos = eos  # ends every completion the base model is taught
        self.stop_ids = tok.stop_ids  # any of these ends a sampled response
        self.pad = tok.pad_id  # filler of padded positions (never attended to, never trained)
        self._prompt_ids: dict[str, list[int]] = {}
        # the longest prompt and answer, as demo_config counts them; encode_* refuse longer ones
        self.P, self.R = demo_token_counts(tok, task)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The chat-rendered ids of one prompt (cached: the splits are encoded over and over)."""
        ids = self._prompt_ids.get(prompt)
        if ids is None:
            ids = self._prompt_ids[prompt] = self.tok.prompt_ids(prompt)
        return ids

    def answer_ids(self, completion: str) -> list[int]:
        """A completion's ids followed by the eos id."""
        return [*self.tok.encode(completion, add_special_tokens=False), self.eos]

    def encode_prompts(self, prompts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Left-padded prompt ids [N, P] and their validity mask."""
        ids = np.full((len(prompts), self.P), self.pad, np.int32)
        valid = np.zeros((len(prompts), self.P), bool)
        for i, text in enumerate(prompts):
            row = self.prompt_ids(text)
            if len(row) > self.P:
                raise ValueError(f"prompt {text!r} has {len(row)} ids, more than P = {self.P}")
            ids[i, self.P - len(row) :] = row
            valid[i, self.P - len(row) :] = True
        return ids, valid

    def encode_answers(self, completions: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Right-padded completion ids + eos [N, R] and the mask of real tokens."""
        ids = np.full((len(completions), self.R), self.pad, np.int32)
        mask = np.zeros((len(completions), self.R), np.float32)
        for i, text in enumerate(completions):
            row = self.answer_ids(text)
            if len(row) > self.R:
                raise ValueError(f"completion {text!r} has {len(row)} ids, more than R = {self.R}")
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1.0
        return ids, mask

    def decode_responses(self, response: np.ndarray, mask: np.ndarray) -> list[str]:
        """The text of each sampled response (special tokens left out, as the controller does)."""
        return [
            self.tok.decode([int(t) for t, keep in zip(row, m, strict=True) if keep])
            for row, m in zip(response, mask, strict=True)
        ]


def positions_of(valid: jax.Array) -> jax.Array:
    return jnp.maximum(jnp.cumsum(valid.astype(jnp.int32), axis=1) - 1, 0)


@partial(jax.jit, static_argnames=("cfg", "R", "stop_ids", "pad", "greedy"))
def sample(
    params: Any,
    cfg: ModelConfig,
    prompt_ids: jax.Array,
    prompt_valid: jax.Array,
    key: jax.Array,
    *,
    R: int,  # noqa: N803
    stop_ids: tuple[int, ...],
    pad: int,
    temperature: float = 1.0,
    greedy: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(response ids [N, R], sampler log-probs [N, R], mask [N, R]) for left-padded prompts.

    A response ends with the first of `stop_ids` (kept, and masked in). No KV cache: the whole
    fixed-length sequence is recomputed per new token, which at these lengths (P + R ~ 18) costs
    less than cache bookkeeping.
    """
    n, P = prompt_ids.shape
    stops = jnp.asarray(stop_ids, jnp.int32)
    tokens = jnp.concatenate([prompt_ids, jnp.full((n, R), pad, jnp.int32)], axis=1)
    valid_all = jnp.concatenate([prompt_valid, jnp.ones((n, R), bool)], axis=1)
    positions = positions_of(valid_all)
    valid = jnp.concatenate([prompt_valid, jnp.zeros((n, R), bool)], axis=1)
    done = jnp.zeros((n,), bool)
    logps = []
    masks = []
    for s in range(R):
        hidden, _ = forward(params, cfg, tokens, positions, valid=valid)
        lg = logits(params, cfg, hidden[:, P + s - 1])
        if greedy:
            tok = jnp.argmax(lg, axis=-1).astype(jnp.int32)
            lp = jnp.take_along_axis(jax.nn.log_softmax(lg), tok[:, None], axis=-1)[:, 0]
        else:
            lf = lg / temperature
            tok = jax.random.categorical(jax.random.fold_in(key, s), lf).astype(jnp.int32)
            lp = jnp.take_along_axis(jax.nn.log_softmax(lf), tok[:, None], axis=-1)[:, 0]
        live = ~done
        tok = jnp.where(live, tok, pad)
        tokens = tokens.at[:, P + s].set(tok)
        valid = valid.at[:, P + s].set(live)
        logps.append(jnp.where(live, lp, 0.0))
        masks.append(live.astype(jnp.float32))
        done = done | jnp.isin(tok, stops)
    return tokens[:, P:], jnp.stack(logps, 1), jnp.stack(masks, 1)


def response_logprobs(
    params: Any,
    cfg: ModelConfig,
    prompt_ids: jax.Array,
    prompt_valid: jax.Array,
    response: jax.Array,
    mask: jax.Array,
) -> jax.Array:
    """log π(response_t | prompt, response_<t) [N, R] (differentiable in params)."""
    P = prompt_ids.shape[1]
    tokens = jnp.concatenate([prompt_ids, response], axis=1)
    valid = jnp.concatenate([prompt_valid, mask > 0], axis=1)
    positions = positions_of(jnp.concatenate([prompt_valid, jnp.ones_like(mask, bool)], axis=1))
    # the last position predicts nothing; any in-vocabulary id fills its target
    targets = jnp.concatenate([tokens[:, 1:], tokens[:, :1]], axis=1)
    logp, _ = token_logprobs(params, cfg, tokens, targets, positions, valid=valid)
    return logp[:, P - 1 : -1] * mask


def rewards_for(texts: Sequence[str], answers: Sequence[str]) -> np.ndarray:
    return np.asarray(
        [float(addition_answer_correct(t, a)) for t, a in zip(texts, answers, strict=True)],
        np.float32,
    )


def accuracy(
    params: Any,
    cfg: ModelConfig,
    codec: Codec,
    records: Sequence[dict[str, str]],
    *,
    batch: int = 256,
) -> float:
    """Greedy accuracy on `records` (the last batch is padded to keep one shape)."""
    correct = 0.0
    for start in range(0, len(records), batch):
        chunk = list(records[start : start + batch])
        real = len(chunk)
        chunk += [chunk[-1]] * (batch - real)
        ids, valid = codec.encode_prompts([r["prompt"] for r in chunk])
        resp, _, mask = sample(
            params,
            cfg,
            jnp.asarray(ids),
            jnp.asarray(valid),
            jax.random.PRNGKey(0),
            R=codec.R,
            stop_ids=codec.stop_ids,
            pad=codec.pad,
            greedy=True,
        )
        texts = codec.decode_responses(np.asarray(resp), np.asarray(mask))
        correct += rewards_for(texts[:real], [r["answer"] for r in chunk[:real]]).sum()
    return correct / len(records)
