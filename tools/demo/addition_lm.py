"""JAX helpers for the demo's addition task: fixed-shape encoding, batched sampling, scoring and
held-out accuracy, on rlx_model's tiny byte-level model. Used by tools/demo/sft.py (the base
model) and tools/bench/e2e/floor.py (the single-process GRPO floor).

Shapes are fixed per task (prompts left-padded to P, responses to R), so each function compiles
once. Sequences are `<bos> a+b=` then the answer's characters and `<eos>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rlx_controller.demo import AdditionTask, addition_answer_correct
from rlx_model import ByteTokenizer, ModelConfig, forward, logits, token_logprobs

TOK = ByteTokenizer()
PAD, BOS, EOS = ByteTokenizer.PAD, ByteTokenizer.BOS, ByteTokenizer.EOS


def prompt_len(task: AdditionTask) -> int:
    """P: <bos> + two operands + '+' + '='."""
    return 1 + 2 * task.digits + 2


def response_len(task: AdditionTask) -> int:
    """R: the longest answer plus <eos>."""
    return task.max_answer_chars + 1


def encode_prompts(prompts: Sequence[str], P: int) -> tuple[np.ndarray, np.ndarray]:  # noqa: N803
    """Left-padded prompt ids [N, P] and their validity mask."""
    ids = np.full((len(prompts), P), PAD, np.int32)
    valid = np.zeros((len(prompts), P), bool)
    for i, text in enumerate(prompts):
        row = [BOS, *TOK.encode(text)]
        ids[i, P - len(row) :] = row
        valid[i, P - len(row) :] = True
    return ids, valid


def encode_answers(answers: Sequence[str], R: int) -> tuple[np.ndarray, np.ndarray]:  # noqa: N803
    """Right-padded answer ids + <eos> [N, R] and the mask of real tokens."""
    ids = np.full((len(answers), R), PAD, np.int32)
    mask = np.zeros((len(answers), R), np.float32)
    for i, text in enumerate(answers):
        row = [*TOK.encode(text), EOS]
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1.0
    return ids, mask


def positions_of(valid: jax.Array) -> jax.Array:
    return jnp.maximum(jnp.cumsum(valid.astype(jnp.int32), axis=1) - 1, 0)


@partial(jax.jit, static_argnames=("cfg", "R", "greedy"))
def sample(
    params: Any,
    cfg: ModelConfig,
    prompt_ids: jax.Array,
    prompt_valid: jax.Array,
    key: jax.Array,
    *,
    R: int,  # noqa: N803
    temperature: float = 1.0,
    greedy: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(response ids [N, R], sampler log-probs [N, R], mask [N, R]) for left-padded prompts.

    No KV cache: the whole fixed-length sequence is recomputed per new token, which at these
    lengths (P + R ~ 12) costs less than cache bookkeeping.
    """
    n, P = prompt_ids.shape
    tokens = jnp.concatenate([prompt_ids, jnp.full((n, R), PAD, jnp.int32)], axis=1)
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
        tok = jnp.where(live, tok, PAD)
        tokens = tokens.at[:, P + s].set(tok)
        valid = valid.at[:, P + s].set(live)
        logps.append(jnp.where(live, lp, 0.0))
        masks.append(live.astype(jnp.float32))
        done = done | (tok == EOS)
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
    targets = jnp.concatenate([tokens[:, 1:], jnp.full((tokens.shape[0], 1), PAD)], axis=1)
    logp, _ = token_logprobs(params, cfg, tokens, targets, positions, valid=valid)
    return logp[:, P - 1 : -1] * mask


def decode_responses(response: np.ndarray, mask: np.ndarray) -> list[str]:
    out = []
    for row, m in zip(response, mask, strict=True):
        ids = [int(t) for t, keep in zip(row, m, strict=True) if keep and t != EOS]
        out.append(TOK.decode(ids))
    return out


def rewards_for(texts: Sequence[str], answers: Sequence[str]) -> np.ndarray:
    return np.asarray(
        [float(addition_answer_correct(t, a)) for t, a in zip(texts, answers, strict=True)],
        np.float32,
    )


def accuracy(
    params: Any,
    cfg: ModelConfig,
    task: AdditionTask,
    records: Sequence[dict[str, str]],
    *,
    batch: int = 256,
) -> float:
    """Greedy accuracy on `records` (the last batch is padded to keep one shape)."""
    P, R = prompt_len(task), response_len(task)
    correct = 0.0
    for start in range(0, len(records), batch):
        chunk = list(records[start : start + batch])
        real = len(chunk)
        chunk += [chunk[-1]] * (batch - real)
        ids, valid = encode_prompts([r["prompt"] for r in chunk], P)
        resp, _, mask = sample(
            params,
            cfg,
            jnp.asarray(ids),
            jnp.asarray(valid),
            jax.random.PRNGKey(0),
            R=R,
            greedy=True,
        )
        texts = decode_responses(np.asarray(resp), np.asarray(mask))
        correct += rewards_for(texts[:real], [r["answer"] for r in chunk[:real]]).sum()
    return correct / len(records)
