"""Make the demo's base model, a complete HF checkpoint directory, with a fixed seed
(bit-identical when re-run on the same machine): a byte-level BPE tokenizer trained on the task's
own text, a ChatML chat template, and a short supervised fine-tune of a tiny Qwen2 model on the
training split. Deliberately stopped early, so RL has something to improve (held-out accuracy
< 60%).

    uv run python tools/demo/sft.py --out tools/demo/base_model            # the committed one
    uv run python tools/demo/sft.py --steps 400 --lr 3e-3 --out /tmp/base --eval-every 25

The SFT trains on exactly what the controller feeds the model: the record's prompt as the
user's turn rendered with the chat template (`rlx_core.tokenizer`'s `prompt_ids`), then the
zero-padded answer ("042") and `<|im_end|>`.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

TOOLS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOOLS / "demo"))
sys.path.insert(0, str(TOOLS / "make_goldens"))

from addition_lm import Codec, accuracy, response_logprobs  # noqa: E402  (tools/ is no package)
from make_goldens import (  # noqa: E402
    ENDOFTEXT,
    IM_END,
    SPECIAL_TOKENS,
    tokenizer_config,
    train_tokenizer,
    write_json,
)

from rlx_controller import AdditionTask, addition_splits  # noqa: E402
from rlx_core.tokenizer import Tokenizer, load_tokenizer  # noqa: E402
from rlx_model import init_params, save_checkpoint, tiny_config  # noqa: E402

# The demo's settings; tools/bench/e2e/floor.py and the controller's built-in demo use the same.
DIGITS = 2
HELDOUT = 500
HIDDEN = 64
LAYERS = 2
SFT_STEPS = 300
SFT_BATCH = 128
SFT_LR = 2e-3
SEED = 0
# An upper bound on the learned vocabulary (256 bytes + merges): the task's text runs out of
# merges long before it, so the vocabulary is the bytes, the merges of "user" and "assistant",
# and the three special tokens.
BPE_VOCAB = 512
MAX_POSITIONS = 512  # the model's max_position_embeddings and the tokenizer's model_max_length
# ChatML as in Qwen2.5, without its default system message (in this vocabulary its ~40 byte
# tokens would make every 14-token prompt four times longer).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)
_SPECIAL = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))


def task_text(task: AdditionTask) -> list[str]:
    """The training split as the model sees it (each prompt rendered with the chat template,
    then its completion), cut at the special tokens: the tokenizer's training corpus."""
    from tokenizers import Tokenizer as _Tokenizer
    from tokenizers import models

    # the template alone renders; the tokenizer it would encode with is what this makes
    renderer = Tokenizer(_Tokenizer(models.BPE()).to_str(), config={"chat_template": CHAT_TEMPLATE})
    train, _ = addition_splits(task)
    pieces = []
    for r in train:
        text = renderer.render([{"role": "user", "content": r["prompt"]}])
        pieces += _SPECIAL.split(text + task.target(r["answer"]) + IM_END)
    return [p for p in pieces if p]


def write_tokenizer(out: Path, task: AdditionTask) -> Tokenizer:
    """tokenizer.json, tokenizer_config.json and generation_config.json in `out` (the layout of
    Qwen2.5 instruct checkpoints), loaded back through rlx_core.tokenizer and checked."""
    tok = train_tokenizer(task_text(task), BPE_VOCAB)
    tok.save(str(out / "tokenizer.json"), pretty=True)
    write_json(
        out / "tokenizer_config.json",
        tokenizer_config(tok, chat_template=CHAT_TEMPLATE, model_max_length=MAX_POSITIONS),
    )
    end, im_end = tok.token_to_id(ENDOFTEXT), tok.token_to_id(IM_END)
    write_json(
        out / "generation_config.json",
        {"bos_token_id": end, "eos_token_id": [im_end, end], "pad_token_id": end},
    )
    loaded = load_tokenizer(str(out))
    digits = [loaded.token_id(str(d)) for d in range(10)]
    prompt = task.record(7, 35)["prompt"]
    ids = loaded.prompt_ids(prompt)
    if None in digits or [i for i in ids if i in digits] != [loaded.token_id(c) for c in "0735"]:
        raise SystemExit(f"digits are not single tokens in {loaded.decode(ids)!r}: {ids}")
    if loaded.stop_ids != (im_end, end) or loaded.decode(ids) != f"user\n{prompt}\nassistant\n":
        raise SystemExit(f"the tokenizer does not load back as written: {loaded.stop_ids}, {ids}")
    return loaded


def model_config(tok: Tokenizer, hidden: int = HIDDEN, layers: int = LAYERS) -> Any:
    """The tiny Qwen2 config (tied embeddings, 4 heads, 2 KV heads) over `tok`'s vocabulary."""
    return tiny_config(
        tok.vocab_size,
        hidden_size=hidden,
        num_layers=layers,
        max_position_embeddings=MAX_POSITIONS,
        eos_token_ids=(tok.token_id(IM_END),),
        bos_token_id=tok.token_id(ENDOFTEXT),
    )


def train_sft(
    codec: Codec,
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
    task = codec.task
    cfg = model_config(codec.tok, hidden, layers)
    params = init_params(cfg, seed)
    train, heldout = addition_splits(task)
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
        ids, valid = codec.encode_prompts([train[r]["prompt"] for r in rows])
        ans, mask = codec.encode_answers([task.target(train[r]["answer"]) for r in rows])
        params, state, loss = step(params, state, ids, valid, ans, mask)
        if eval_every and (i + 1) % eval_every == 0:
            acc = accuracy(params, cfg, codec, heldout)
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
    args.out.mkdir(parents=True, exist_ok=True)
    codec = Codec(write_tokenizer(args.out, task), task)
    cfg, params = train_sft(
        codec,
        steps=args.steps,
        batch=args.batch,
        lr=args.lr,
        seed=args.seed,
        hidden=args.hidden,
        layers=args.layers,
        eval_every=args.eval_every,
    )
    _, heldout = addition_splits(task)
    acc = accuracy(params, cfg, codec, heldout)
    save_checkpoint(args.out, cfg, params)
    info = {
        "task": {
            "digits": task.digits,
            "heldout": task.heldout,
            "seed": task.seed,
            "padded": task.padded,
        },
        "sft": {"steps": args.steps, "batch": args.batch, "lr": args.lr, "seed": args.seed},
        "tokenizer": {
            "kind": "byte-level BPE, Qwen2 pre-tokenizer (one token per digit), ChatML template",
            "trained_on": "the training split's chat-rendered prompts and completions",
            "bpe_vocab_limit": BPE_VOCAB,
            "vocab_size": codec.tok.vocab_size,
            "prompt_tokens": codec.P,
            "response_tokens": codec.R,
        },
        "model": {"hidden": args.hidden, "layers": args.layers},
        "heldout_accuracy": round(float(acc), 4),
    }
    write_json(args.out / "rlx_demo.json", info)
    print(
        f"base model -> {args.out}: vocab {codec.tok.vocab_size}, prompt {codec.P} tokens, "
        f"held-out accuracy {acc:.3f} ({time.perf_counter() - t0:.1f} s)"
    )


if __name__ == "__main__":
    main()
