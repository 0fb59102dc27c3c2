"""Make the code example's base model, a complete HF checkpoint directory, with a fixed seed
(bit-identical when re-run on the same machine): a byte-level BPE tokenizer trained on the task's
own text, the demo's ChatML chat template, and a short supervised fine-tune of a tiny Qwen2 model
on the training split. Its targets are the reference response (a loop over every input line)
for LOOP_SHARE of the rows and, for the rest, a program that reads only the first line, right
on the prompt's example and WA on the hidden test: the base model writes that one by habit
(held-out greedy pass@1 0, sampled ~0.36), which is what RL has to unlearn.

    uv run python tools/demo/code_sft.py --out tools/demo/code_model          # the committed one
    uv run python tools/demo/code_sft.py --steps 400 --out /tmp/code --eval-every 50

The SFT trains on exactly what the controller feeds the model: the record's prompt as the
user's turn rendered with the chat template, then the target response (a fenced python block,
rlx_data.code_demo's `ArithProblem.response`) and `<|im_end|>`. Pass@1 is judged in the
verifier's sandbox on the hidden tests.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

TOOLS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOOLS / "demo"))
sys.path.insert(0, str(TOOLS / "make_goldens"))

from addition_lm import positions_of, response_logprobs  # noqa: E402  (tools/ is no package)
from code_lm import CodeCodec, Judge, pass_at_1  # noqa: E402
from make_goldens import (  # noqa: E402
    ENDOFTEXT,
    IM_END,
    QWEN2_SPLIT,
    SPECIAL_TOKENS,
    tokenizer_config,
    write_json,
)
from sft import CHAT_TEMPLATE, MAX_POSITIONS, model_config  # noqa: E402

from rlx_core.tokenizer import Tokenizer, load_tokenizer  # noqa: E402
from rlx_data import CODE_TASK, ArithCodeTask, code_splits  # noqa: E402
from rlx_model import forward, init_params, logits, save_checkpoint  # noqa: E402

HIDDEN = 64
LAYERS = 2
SFT_STEPS = 800
SFT_BATCH = 64
SFT_LR = 3e-3
SEED = 0
# share of SFT targets that are the reference (loop) program; the rest read only the first line
LOOP_SHARE = 0.3
# An upper bound on the learned vocabulary (256 bytes + merges); the merges spell the prompts'
# and programs' fixed words ("Example", "map", "split", ...), digits stay single tokens.
BPE_VOCAB = 512
# one pre-token per expression term: an optional operator (or the space / parenthesis before
# the first term), a variable, "*", one digit
TERM_SPLIT = r"[ (+\-*]?[a-c]\*\d"
_SPECIAL = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))


def task_text(task: ArithCodeTask) -> list[str]:
    """The training split as the model sees it (each prompt rendered with the chat template,
    then its reference response), cut at the special tokens: the tokenizer's corpus."""
    from tokenizers import Tokenizer as _Tokenizer
    from tokenizers import models

    renderer = Tokenizer(_Tokenizer(models.BPE()).to_str(), config={"chat_template": CHAT_TEMPLATE})
    train, _ = code_splits(task)
    pieces = []
    for p in train:
        text = renderer.render([{"role": "user", "content": p.prompt()}])
        pieces += _SPECIAL.split(text + p.response() + IM_END)
    return [p for p in pieces if p]


def train_term_tokenizer(corpus: list[str], bpe_vocab: int) -> Any:
    """make_goldens' Qwen2-style byte-level BPE whose pre-tokenizer also keeps each term of an
    expression whole ("a*7", "+b*2", "*c*5", with the space or parenthesis before a first term),
    so the merges give every term one token: a 2-layer model copies a term from the prompt by
    what it is (one attention lookup), where digits split from their variables would have to be
    found by position. Everything else is split as Qwen2 splits it (one token per digit)."""
    from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
    from tokenizers import Tokenizer as _Tokenizer

    tok = _Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(f"{TERM_SPLIT}|{QWEN2_SPLIT}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def write_tokenizer(out: Path, task: ArithCodeTask) -> Tokenizer:
    """tokenizer.json, tokenizer_config.json and generation_config.json in `out`, loaded back
    through rlx_core.tokenizer and checked."""
    tok = train_term_tokenizer(task_text(task), BPE_VOCAB)
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
    prompt = task.problem(0).prompt()
    if loaded.decode(loaded.prompt_ids(prompt)) != f"user\n{prompt}\nassistant\n":
        raise SystemExit("the tokenizer does not load back as written")
    if loaded.stop_ids != (im_end, end):
        raise SystemExit(f"stop ids {loaded.stop_ids}, expected {(im_end, end)}")
    return loaded


def train_sft(
    codec: CodeCodec,
    *,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    hidden: int = HIDDEN,
    layers: int = LAYERS,
    loop_share: float = LOOP_SHARE,
    eval_every: int = 0,
    log: Any = print,
) -> tuple[Any, Any]:
    """(cfg, params) after `steps` teacher-forced updates on the training split."""
    cfg = model_config(codec.tok, hidden, layers)
    params = init_params(cfg, seed)
    train, heldout = code_splits(codec.task)
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

    h_ids, h_valid = codec.encode_prompts([p.prompt() for p in heldout])
    h_loop = codec.encode_answers([p.response() for p in heldout])
    h_line = codec.encode_answers([p.response(first_line=True) for p in heldout])

    def exact(params: Any) -> str:
        """Held-out shares whose greedy response is the reference (loop) program, and the
        first-line program, token for token (teacher forced: one forward pass each)."""
        loop = float(_exact(params, h_ids, h_valid, *h_loop))
        line = float(_exact(params, h_ids, h_valid, *h_line))
        return f"loop {loop:.3f} first-line {line:.3f}"

    @jax.jit
    def _exact(params: Any, ids: Any, valid: Any, ans: Any, mask: Any) -> Any:
        P = ids.shape[1]
        tokens = jnp.concatenate([ids, ans], axis=1)
        ok = jnp.concatenate([valid, mask > 0], axis=1)
        positions = positions_of(jnp.concatenate([valid, jnp.ones_like(mask, bool)], axis=1))
        hidden, _ = forward(params, cfg, tokens, positions, valid=ok)
        pred = jnp.argmax(logits(params, cfg, hidden[:, P - 1 : -1]), axis=-1)
        return jnp.mean(jnp.all((pred == ans) | (mask == 0), axis=1))

    rng = np.random.default_rng(seed)
    for i in range(steps):
        rows = rng.integers(0, len(train), batch)
        ids, valid = codec.encode_prompts([train[r].prompt() for r in rows])
        first_line = rng.random(batch) >= loop_share
        ans, mask = codec.encode_answers(
            [train[r].response(first_line=bool(f)) for r, f in zip(rows, first_line, strict=True)]
        )
        params, state, loss = step(params, state, ids, valid, ans, mask)
        if eval_every and (i + 1) % eval_every == 0:
            log(f"sft step {i + 1}: loss {float(loss):.4f} held-out exact {exact(params)}")
    return cfg, params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="HF checkpoint directory to write")
    ap.add_argument("--steps", type=int, default=SFT_STEPS)
    ap.add_argument("--batch", type=int, default=SFT_BATCH)
    ap.add_argument("--lr", type=float, default=SFT_LR)
    ap.add_argument("--hidden", type=int, default=HIDDEN)
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--loop-share", type=float, default=LOOP_SHARE)
    ap.add_argument("--no-pass", action="store_true", help="skip the final sampled pass@1")
    args = ap.parse_args()
    task = CODE_TASK
    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    codec = CodeCodec(write_tokenizer(args.out, task), task)
    judge = Judge()
    print(f"vocab {codec.tok.vocab_size}, prompt {codec.P} ids, response {codec.R} ids")
    cfg, params = train_sft(
        codec,
        steps=args.steps,
        batch=args.batch,
        lr=args.lr,
        seed=args.seed,
        hidden=args.hidden,
        layers=args.layers,
        loop_share=args.loop_share,
        eval_every=args.eval_every,
    )
    save_checkpoint(args.out, cfg, params)
    _, heldout = code_splits(task)
    if args.no_pass:
        greedy = sampled = float("nan")
        greedy_counts = sampled_counts = Counter[str]()
    else:
        greedy, greedy_counts = pass_at_1(params, cfg, codec, judge, heldout)
        sampled, sampled_counts = pass_at_1(params, cfg, codec, judge, heldout, greedy=False)
    info = {
        "task": {
            "heldout": task.heldout,
            "seed": task.seed,
            "cases": task.cases,
            "low": task.low,
            "high": task.high,
        },
        "sft": {
            "steps": args.steps,
            "batch": args.batch,
            "lr": args.lr,
            "seed": args.seed,
            "loop_share": args.loop_share,
        },
        "tokenizer": {
            "kind": "byte-level BPE, Qwen2 pre-tokenizer + one pre-token per expression term, "
            "ChatML template",
            "trained_on": "the training split's chat-rendered prompts and reference responses",
            "bpe_vocab_limit": BPE_VOCAB,
            "vocab_size": codec.tok.vocab_size,
            "prompt_tokens": codec.P,
            "response_tokens": codec.R,
        },
        "model": {"hidden": args.hidden, "layers": args.layers},
        "heldout_pass_at_1": {
            "greedy": round(greedy, 4),
            "sampled_t1": round(sampled, 4),
            "greedy_verdicts": dict(sorted(greedy_counts.items())),
            "sampled_t1_verdicts": dict(sorted(sampled_counts.items())),
        },
    }
    write_json(args.out / "rlx_demo.json", info)
    print(
        f"base model -> {args.out}: vocab {codec.tok.vocab_size}, P {codec.P}, R {codec.R}, "
        f"held-out pass@1 greedy {greedy:.3f} {dict(greedy_counts)}, sampled {sampled:.3f} "
        f"{dict(sampled_counts)} ({time.perf_counter() - t0:.1f} s)"
    )


if __name__ == "__main__":
    main()
