"""Write tiny random Hugging Face checkpoints and their reference outputs for rlx's parity tests.

Usage (from anywhere; the venv is made on first use):
    python tools/make_goldens/make_goldens.py [--out DIR] [--venv DIR] [--check]

This is the only code in rlx that imports torch and transformers. It needs its own virtualenv with
the pinned versions below; when torch is not importable it creates one (default
~/.cache/rlx/goldens-venv) with pip, which finds the local CPU torch wheel through its configured
find-links, and re-executes itself inside it. Nothing is downloaded from the Hugging Face hub: the
models are built from configs with seeded random weights.

For each family (qwen2, qwen3, llama) it writes, under packages/model/tests/testdata/<family>/:
config.json, generation_config.json and model.safetensors (as `save_pretrained` writes them),
goldens.npz (logits, next-token log-probs and greedy continuations from the HF forward in f32) and
meta.json (versions, seeds, what each array is). qwen2/ also gets a trained byte-level BPE
tokenizer with a ChatML chat template and tokenizer_goldens.json; qwen2_sharded/ holds the qwen2
weights split into several shards with a model.safetensors.index.json. See
packages/model/tests/testdata/README.md.

Running it twice writes byte-identical files; `--check` regenerates into a temporary directory
and exits 1 when anything differs from what is under --out.
"""

from __future__ import annotations

import argparse
import filecmp
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "packages" / "model" / "tests" / "testdata"
DEFAULT_VENV = Path.home() / ".cache" / "rlx" / "goldens-venv"
REEXEC_ENV = "RLX_GOLDENS_REEXEC"

# Exact versions: the goldens are a function of these. torch 2.13.0 resolves to the local CPU wheel
# through pip's find-links; never let it resolve a CUDA build from an index.
PINNED = {
    "torch": "2.13.0",
    "transformers": "5.23.0",
    "tokenizers": "0.23.3",
    "safetensors": "0.8.0",
    "numpy": "2.4.6",
}

SEED = 1234
ATTN_IMPLEMENTATION = "eager"  # plain matmul + softmax; SDPA kernels may reorder the reductions
INIT_STD = 0.15  # weight init std: HF's 0.02 leaves attention nearly uniform at these widths
BATCH, SEQ = 2, 24
PROMPT_LENGTHS = (8, 5)  # two prompts of different lengths so position bugs show up
NEW_TOKENS = 24
LONG_SEQ = 100  # one longer sequence to exercise RoPE (and Llama 3 scaling) at larger positions
LONG_TAIL = 16  # full logits are kept for only the last LONG_TAIL positions of the long sequence
MIN_GREEDY_GAP = 2e-3  # prompts are redrawn until every greedy step wins by at least this logit
SHARD_BYTES = 200_000  # max_shard_size for qwen2_sharded: the ~0.56 MB checkpoint makes 3 shards

# Common tiny dimensions; each family overrides a few.
BASE_CONFIG: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "initializer_range": INIT_STD,
    "tie_word_embeddings": False,
    "use_cache": True,
}

# The tokenizer's special tokens, appended after the learned vocabulary as in Qwen2.
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
BPE_VOCAB = 509  # learned tokens (256 bytes + merges); + 3 specials = 512 = the model's vocab
# Qwen2's pre-tokenizer pattern: contractions, letter runs, single digits, punctuation, spaces.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# ChatML as in Qwen2.5: a default system message when the conversation does not start with one.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)
TOKENIZER_TEXT = "Hello, world! The year 2024 has 366 days; naïve café ☕ costs 4.50€.\n  Done."
CHAT_MESSAGES = (
    {"role": "user", "content": "What is 12 + 30?"},
    {"role": "assistant", "content": "12 + 30 = 42."},
)
CORPUS = (
    "The quick brown fox jumps over the lazy dog. A small model learns to count: one, two, "
    "three, four, five, six, seven, eight, nine, ten.",
    "Reinforcement learning trains a policy to maximise the expected reward. The policy samples "
    "several answers to each question, a verifier scores them, and the trainer pushes up the "
    "log-probability of the answers that scored above the group's mean.",
    "What is 12 + 30? The answer is 42. What is 7 * 8? The answer is 56. What is 100 - 1? "
    "The answer is 99. Numbers such as 3.14159, 2.71828 and 1.41421 appear in mathematics.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # prints 5\n",
    "You are a helpful assistant. The user asks a question and the assistant answers it "
    "politely, step by step, and then gives the final answer in a box.",
    "Weights are stored in safetensors files; large checkpoints are split into shards listed in "
    "an index. Each tensor has a name, a dtype, a shape and a byte range.",
    "Le café est chaud. Der Hund läuft schnell. El niño come una manzana. naïve, façade, über.",
    "0123456789 00 11 22 33 44 55 66 77 88 99 2024-01-01 12:30:45",
)


@dataclass(frozen=True)
class FamilySpec:
    """One decoder family: its HF config class, the config fields it adds or overrides."""

    name: str
    config_class: str  # transformers class name, e.g. "Qwen2Config"
    overrides: dict[str, Any] = field(default_factory=dict)
    biases: bool = False  # q/k/v projections carry biases (set non-zero explicitly)


FAMILIES = (
    FamilySpec(
        "qwen2",
        "Qwen2Config",
        {
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "use_sliding_window": False,
            "bos_token_id": 509,  # <|endoftext|>, as in Qwen2 (checked in write_tokenizer)
            "eos_token_id": 511,  # <|im_end|>
        },
        biases=True,
    ),
    FamilySpec(
        "qwen3",
        "Qwen3Config",
        {
            "head_dim": 32,  # != hidden_size / num_attention_heads (16)
            "tie_word_embeddings": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0},
            "use_sliding_window": False,
            "attention_bias": False,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    ),
    FamilySpec(
        "llama",
        "LlamaConfig",
        {
            "head_dim": 16,
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500_000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                # Small, so the scaling changes frequencies that matter at positions < 100.
                "original_max_position_embeddings": 64,
            },
            "attention_bias": False,
            "mlp_bias": False,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    ),
)


# --- the virtualenv ----------------------------------------------------------------------------


def _have_pinned() -> bool:
    """Whether this interpreter has every pinned package at its pinned version."""
    import importlib.metadata

    for name, version in PINNED.items():
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return False
        if have.split("+")[0] != version:  # torch reports 2.13.0+cpu
            return False
    return True


def ensure_venv(venv: Path) -> None:
    """Return if the pinned packages are importable; otherwise build `venv` and re-exec in it."""
    if _have_pinned():
        return
    if os.environ.get(REEXEC_ENV):
        raise SystemExit(f"{sys.executable} still lacks the pinned packages {PINNED}")
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pins = [f"{name}=={version}" for name, version in PINNED.items()]
    subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
    os.environ[REEXEC_ENV] = "1"
    os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])


# --- deterministic writers ---------------------------------------------------------------------


def write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write an uncompressed .npz that `np.load` reads, with fixed zip timestamps.

    `np.savez` stamps every member with the current time, so two runs never match byte for byte.
    """
    import numpy as np

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def write_json(path: Path, obj: Any) -> None:
    """Pretty JSON with a trailing newline, keys in the order given."""
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


# --- models ------------------------------------------------------------------------------------


def build_model(spec: FamilySpec) -> torch.nn.Module:
    """A seeded random model of `spec`, with non-trivial norms and biases, in eval mode."""
    import torch
    import transformers

    config_class = getattr(transformers, spec.config_class)
    config = config_class(**{**BASE_CONFIG, **spec.overrides})
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation=ATTN_IMPLEMENTATION, dtype=torch.float32
    )
    # HF initialises every RMSNorm weight to 1 and every bias to 0, under which a missing norm or
    # bias would go unnoticed; redraw them from a generator of their own.
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.2 * torch.randn(param.shape, generator=gen))
            elif name.endswith(".bias"):
                param.copy_(0.1 * torch.randn(param.shape, generator=gen))
    if spec.biases:
        assert any(n.endswith("q_proj.bias") for n, _ in model.named_parameters())
    model.eval()
    return model


def forward_logits(model: torch.nn.Module, ids: np.ndarray) -> np.ndarray:
    """Full-sequence f32 logits [B, T, V] for int ids [B, T] (no padding, no mask)."""
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids.astype("int64")), use_cache=False)
    return out.logits.float().numpy()


def next_token_logprobs(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """log p(ids[:, t+1] | ids[:, :t+1]) for t in 0..T-2: log_softmax(logits[:, :-1]) gathered."""
    import torch

    logp = torch.log_softmax(torch.from_numpy(logits[:, :-1]).double(), dim=-1)
    target = torch.from_numpy(ids[:, 1:].astype("int64"))[..., None]
    return logp.gather(-1, target)[..., 0].float().numpy()


def greedy(model: torch.nn.Module, prompt: np.ndarray) -> tuple[np.ndarray, float]:
    """The NEW_TOKENS greedy tokens after `prompt` [1, P], and the smallest top-1/top-2 gap.

    EOS is disabled so generation never stops early and no logits processor touches the scores:
    the result is plain argmax decoding with HF's KV cache. The gap is measured on a full forward
    of prompt + continuation, whose argmax must match what generate produced.
    """
    import numpy as np
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.from_numpy(prompt.astype("int64")),
            attention_mask=torch.ones(prompt.shape, dtype=torch.int64),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            use_cache=True,
        )
    full = out.numpy()
    new = full[:, prompt.shape[1] :]
    assert new.shape == (1, NEW_TOKENS), new.shape
    logits = forward_logits(model, full)[:, prompt.shape[1] - 1 : -1]
    if not np.array_equal(logits.argmax(-1), new):
        raise SystemExit("generate() disagrees with the argmax of a full forward pass")
    top2 = np.sort(logits, axis=-1)[..., -2:]
    return new.astype(np.int32), float((top2[..., 1] - top2[..., 0]).min())


def pick_prompt(
    model: torch.nn.Module, stream: int, length: int
) -> tuple[np.ndarray, np.ndarray, float, int]:
    """A seeded random prompt [1, length] whose greedy continuation is robust to rounding.

    Prompts are drawn from generator (SEED, stream) until every greedy step's top-1 logit beats
    the runner-up by MIN_GREEDY_GAP, so an f32 implementation within 1e-4 cannot pick another
    token. Returns the prompt, its continuation, that smallest gap and how many draws it took.
    """
    import numpy as np

    rng = np.random.default_rng([SEED, stream])
    vocab = BASE_CONFIG["vocab_size"]
    for draws in range(1, 101):
        prompt = rng.integers(0, vocab, size=(1, length), dtype=np.int32)
        new, gap = greedy(model, prompt)
        if gap >= MIN_GREEDY_GAP:
            return prompt, new, gap, draws
    raise SystemExit(f"no prompt of length {length} met MIN_GREEDY_GAP in 100 draws")


def attention_peak(model: torch.nn.Module, ids: np.ndarray) -> float:
    """Mean over layers, heads and queries of the largest attention probability.

    Reported in meta.json to show the weights are large enough for attention (and so RoPE) to
    matter: uniform attention over T keys would give about ln(T)/T.
    """
    import torch

    with torch.no_grad():
        out = model(
            input_ids=torch.from_numpy(ids.astype("int64")), output_attentions=True, use_cache=False
        )
    return float(torch.stack([a.amax(-1).mean() for a in out.attentions]).mean())


def make_goldens(model: torch.nn.Module) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The golden arrays for one family, and the meta.json facts about them."""
    import numpy as np

    vocab = BASE_CONFIG["vocab_size"]

    def draw(stream: int, shape: tuple[int, ...]) -> np.ndarray:
        # One generator per array, so redrawing a prompt leaves the other arrays unchanged.
        return np.random.default_rng([SEED, stream]).integers(0, vocab, size=shape, dtype=np.int32)

    input_ids = draw(0, (BATCH, SEQ))
    long_input_ids = draw(1, (1, LONG_SEQ))
    logits = forward_logits(model, input_ids)
    long_logits = forward_logits(model, long_input_ids)
    prompt_ids, greedy_ids, margin, draws = pick_prompt(model, 2, PROMPT_LENGTHS[0])
    prompt2_ids, greedy2_ids, margin2, draws2 = pick_prompt(model, 3, PROMPT_LENGTHS[1])
    arrays = {
        "input_ids": input_ids,
        "logits": logits,
        "logprobs": next_token_logprobs(logits, input_ids),
        "prompt_ids": prompt_ids,
        "greedy_ids": greedy_ids,
        "prompt2_ids": prompt2_ids,
        "greedy_prompt2_ids": greedy2_ids,
        "long_input_ids": long_input_ids,
        "long_logits_tail": long_logits[:, -LONG_TAIL:],
        "long_logprobs": next_token_logprobs(long_logits, long_input_ids),
        "long_argmax": long_logits.argmax(-1).astype(np.int32),
    }
    eos = model.config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    facts = {
        "greedy_min_top2_gap": {"greedy_ids": margin, "greedy_prompt2_ids": margin2},
        "prompt_draws": {"prompt_ids": draws, "prompt2_ids": draws2},
        "greedy_contains_eos": bool(eos_ids & set(np.concatenate([greedy_ids, greedy2_ids], 1)[0])),
        "logits_std": float(logits.std()),
        "attention_peak_mean": attention_peak(model, input_ids),
    }
    return arrays, facts


ARRAY_DOCS = {
    "input_ids": f"int32 [{BATCH}, {SEQ}]: seeded random token ids, no padding",
    "logits": f"float32 [{BATCH}, {SEQ}, vocab]: HF forward of input_ids (f32, eager attention)",
    "logprobs": (
        f"float32 [{BATCH}, {SEQ - 1}]: log_softmax(logits[:, t])[input_ids[:, t + 1]] for "
        f"t = 0..{SEQ - 2} (computed in f64, stored as f32)"
    ),
    "prompt_ids": (
        f"int32 [1, {PROMPT_LENGTHS[0]}]: seeded random prompt, redrawn until every greedy step "
        f"wins by >= {MIN_GREEDY_GAP} logits"
    ),
    "greedy_ids": (
        f"int32 [1, {NEW_TOKENS}]: the new tokens of greedy generate(prompt_ids), no EOS stop, "
        "KV cache on"
    ),
    "prompt2_ids": f"int32 [1, {PROMPT_LENGTHS[1]}]: a second, shorter prompt, drawn the same way",
    "greedy_prompt2_ids": f"int32 [1, {NEW_TOKENS}]: the same for prompt2_ids",
    "long_input_ids": f"int32 [1, {LONG_SEQ}]: seeded random ids, to reach larger RoPE positions",
    "long_logits_tail": (
        f"float32 [1, {LONG_TAIL}, vocab]: logits of long_input_ids at positions "
        f"{LONG_SEQ - LONG_TAIL}..{LONG_SEQ - 1} only (to keep the file small)"
    ),
    "long_logprobs": (
        f"float32 [1, {LONG_SEQ - 1}]: next-token log-probs of long_input_ids at every position"
    ),
    "long_argmax": f"int32 [1, {LONG_SEQ}]: argmax of the long_input_ids logits at every position",
}


# --- tokenizer ---------------------------------------------------------------------------------


def train_tokenizer(corpus: Iterable[str] = CORPUS, bpe_vocab: int = BPE_VOCAB) -> Any:
    """A Qwen2-style byte-level BPE (NFC, Qwen2 split regex, so every digit is its own token,
    byte-level) trained on `corpus`, with SPECIAL_TOKENS appended after its learned vocabulary
    (at most `bpe_vocab` tokens: the 256 bytes + merges).

    tools/demo/sft.py makes the demo's tokenizer with it too."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def tokenizer_config(tok: Any, *, chat_template: str, model_max_length: int) -> dict[str, Any]:
    """tokenizer_config.json for a `train_tokenizer` tokenizer, in the layout of Qwen2.5 hub
    checkpoints (chat_template inside it; transformers 5 would write chat_template.jinja)."""
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    return {
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(ids[t]): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for t in SPECIAL_TOKENS
        },
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": IM_END,
        "errors": "replace",
        "model_max_length": model_max_length,
        "pad_token": ENDOFTEXT,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def write_tokenizer(out: Path) -> dict[str, Any]:
    """Write tokenizer.json + tokenizer_config.json to `out`, check them, return the goldens."""
    import transformers

    tok = train_tokenizer()
    tok.save(str(out / "tokenizer.json"), pretty=True)
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    # The qwen2 config's bos/eos ids (509, 511) assume the specials follow a full BPE_VOCAB.
    if ids != {t: BPE_VOCAB + i for i, t in enumerate(SPECIAL_TOKENS)}:
        raise SystemExit(f"special tokens landed at {ids}; grow CORPUS or lower BPE_VOCAB")
    config = tokenizer_config(
        tok, chat_template=CHAT_TEMPLATE, model_max_length=BASE_CONFIG["max_position_embeddings"]
    )
    write_json(out / "tokenizer_config.json", config)

    # Prove the files load through transformers and agree with the bare tokenizers library.
    hf = transformers.AutoTokenizer.from_pretrained(str(out))
    text_ids = hf.encode(TOKENIZER_TEXT, add_special_tokens=False)
    if text_ids != tok.encode(TOKENIZER_TEXT, add_special_tokens=False).ids:
        raise SystemExit("AutoTokenizer and tokenizers disagree on the golden text")
    if hf.decode(text_ids) != TOKENIZER_TEXT:
        raise SystemExit("the tokenizer does not round-trip the golden text")
    messages = [dict(m) for m in CHAT_MESSAGES]
    chat_text = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    chat_ids = hf.encode(chat_text, add_special_tokens=False)
    if chat_ids != tok.encode(chat_text, add_special_tokens=False).ids:
        raise SystemExit("AutoTokenizer and tokenizers disagree on the chat text")
    if sum(i in ids.values() for i in chat_ids) != 2 * (len(messages) + 1) + 1:
        raise SystemExit("special tokens in the chat text were not kept whole")
    if hf.eos_token_id != ids[IM_END]:
        raise SystemExit(f"eos_token_id is {hf.eos_token_id}, expected {ids[IM_END]}")
    return {
        "tokenizer_class_loaded": type(hf).__name__,
        "vocab_size_with_added": tok.get_vocab_size(with_added_tokens=True),
        "special_token_ids": ids,
        "eos_token": IM_END,
        "eos_token_id": ids[IM_END],
        "text": TOKENIZER_TEXT,
        "text_ids": text_ids,
        "messages": messages,
        "add_generation_prompt": True,
        "chat_text": chat_text,
        "chat_ids": chat_ids,
    }


# --- driver ------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    """The installed versions of the pinned packages (torch with its local tag)."""
    import importlib.metadata

    return {name: importlib.metadata.version(name) for name in PINNED}


def check_reload(model_dir: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Reload `model_dir` with from_pretrained and require the same logits, bit for bit.

    This proves the files on disk (config.json, tied weights, the redrawn norms and biases,
    shards) are what produced the goldens.
    """
    import numpy as np
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(model_dir), attn_implementation=ATTN_IMPLEMENTATION, dtype="float32"
    ).eval()
    if not np.array_equal(forward_logits(model, arrays["input_ids"]), arrays["logits"]):
        raise SystemExit(f"{model_dir} reloads to a model with different logits")


def write_family(spec: FamilySpec, out: Path) -> None:
    """Write `out/<family>/` (and `out/qwen2_sharded/` for qwen2)."""
    model = build_model(spec)
    model_dir = out / spec.name
    model_dir.mkdir(parents=True)
    model.save_pretrained(str(model_dir))
    arrays, facts = make_goldens(model)
    write_npz(model_dir / "goldens.npz", arrays)
    check_reload(model_dir, arrays)
    meta: dict[str, Any] = {
        "family": spec.name,
        "architecture": type(model).__name__,
        "generator": "tools/make_goldens/make_goldens.py",
        "versions": versions(),
        "seed": SEED,
        "dtype": "float32",
        "attn_implementation": model.config._attn_implementation,
        "init": {
            "initializer_range": INIT_STD,
            "norm_weights": "1 + 0.2 * N(0, 1)",
            "biases": "0.1 * N(0, 1)" if spec.biases else "none",
        },
        "generation": {
            "max_new_tokens": NEW_TOKENS,
            "do_sample": False,
            "eos_token_id": None,
            "note": "EOS disabled: plain argmax decoding, never stops early",
        },
        "checks": facts,
        "arrays": {name: ARRAY_DOCS[name] for name in arrays},
    }
    if spec.name == "qwen2":
        tok_goldens = write_tokenizer(model_dir)
        write_json(model_dir / "tokenizer_goldens.json", tok_goldens)
        meta["tokenizer"] = "tokenizer_goldens.json (ids of a fixed text and of a chat rendering)"
        sharded = out / "qwen2_sharded"
        model.save_pretrained(str(sharded), max_shard_size=SHARD_BYTES)
        if not (sharded / "model.safetensors.index.json").is_file():
            raise SystemExit("max_shard_size did not produce a sharded checkpoint")
        check_reload(sharded, arrays)
    write_json(model_dir / "meta.json", meta)


def generate_all(out: Path) -> list[str]:
    """Regenerate every output directory under `out` (replacing them); return their names."""
    import torch
    import transformers

    transformers.logging.disable_progress_bar()
    torch.set_num_threads(1)  # one thread: the same reduction order on every run
    torch.use_deterministic_algorithms(True)
    names = [spec.name for spec in FAMILIES] + ["qwen2_sharded"]
    with tempfile.TemporaryDirectory() as tmp:
        for spec in FAMILIES:
            write_family(spec, Path(tmp))
            print(f"built {spec.name}", file=sys.stderr)
        out.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.rmtree(out / name, ignore_errors=True)
            shutil.copytree(Path(tmp) / name, out / name)
    return names


def diff_trees(a: Path, b: Path) -> list[str]:
    """Relative paths that differ between directory trees a and b (missing on either side too)."""
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    differ = files_a ^ files_b
    differ |= {p for p in files_a & files_b if not filecmp.cmp(a / p, b / p, shallow=False)}
    return sorted(str(p) for p in differ)


def main() -> None:
    """Parse arguments, make sure we run in the pinned venv, then write or check the goldens."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="testdata directory")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="venv with torch (made)")
    parser.add_argument(
        "--check", action="store_true", help="regenerate into a temp dir; exit 1 on any difference"
    )
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    ensure_venv(args.venv.expanduser().resolve())
    out = args.out.resolve()
    if not args.check:
        for name in generate_all(out):
            print(f"wrote {out / name}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        names = generate_all(Path(tmp))
        differ = [f"{n}/{p}" for n in names for p in diff_trees(Path(tmp) / n, out / n)]
    if differ:
        print("differs from a fresh run:\n  " + "\n  ".join(differ))
        raise SystemExit(1)
    print(f"{out}: identical to a fresh run")


if __name__ == "__main__":
    main()
