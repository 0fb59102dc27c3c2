"""The committed demo base model (tools/demo/base_model) is a complete, consistent HF checkpoint
directory that takes the path every model takes: its own tokenizer and chat template."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from rlx_core.tokenizer import load_tokenizer
from rlx_data import DEMO_TASK, addition_splits, base_model_dir

BASE = base_model_dir()
FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "rlx_demo.json",
    "tokenizer.json",
    "tokenizer_config.json",
)


def _json(name: str) -> dict[str, Any]:
    data = json.loads((BASE / name).read_text())
    assert isinstance(data, dict)
    return data


def _safetensors_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    assert isinstance(header, dict)
    return header


def test_files_are_complete_and_small() -> None:
    assert sorted(p.name for p in BASE.iterdir()) == sorted(FILES)
    assert sum(p.stat().st_size for p in BASE.iterdir()) < 5_000_000


def test_tokenizer_chat_template_and_stop_ids() -> None:
    tok = load_tokenizer(str(BASE))
    end, start, im_end = (tok.token_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"))
    assert (end, start, im_end) == (tok.vocab_size - 3, tok.vocab_size - 2, tok.vocab_size - 1)
    assert tok.render([{"role": "user", "content": "07+35="}]) == (
        "<|im_start|>user\n07+35=<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (tok.eos_token, tok.bos_token) == ("<|im_end|>", None)
    assert tok.stop_ids == (im_end, end) and tok.pad_id == end
    generation = _json("generation_config.json")
    assert generation["eos_token_id"] == [im_end, end] and generation["bos_token_id"] == end
    config = _json("config.json")
    assert (config["model_type"], config["architectures"]) == ("qwen2", ["Qwen2ForCausalLM"])
    assert config["vocab_size"] == tok.vocab_size
    assert (config["eos_token_id"], config["bos_token_id"]) == (im_end, end)
    tensors = _safetensors_header(BASE / "model.safetensors")
    embed = tensors["model.embed_tokens.weight"]
    assert embed["shape"] == [tok.vocab_size, config["hidden_size"]]
    assert embed["dtype"] == "F32" and config["torch_dtype"] == "float32"


def test_every_digit_is_its_own_token() -> None:
    tok = load_tokenizer(str(BASE))
    ids = tok.prompt_ids("07+35=")
    pieces = [tok.decode([i], skip_special_tokens=False) for i in ids]
    assert pieces == [
        "<|im_start|>",
        "user",
        "\n",
        "0",
        "7",
        "+",
        "3",
        "5",
        "=",
        "<|im_end|>",
        "\n",
        "<|im_start|>",
        "assistant",
        "\n",
    ]
    # the completion the base model was taught: three digits, then <|im_end|>
    answer = [*tok.encode("042", add_special_tokens=False), tok.stop_ids[0]]
    assert [tok.decode([i]) for i in answer] == ["0", "4", "2", ""]
    assert tok.decode(answer) == "042"
    # zero-padded operands: every prompt of the task has the same number of ids
    train, heldout = addition_splits(DEMO_TASK)
    assert {len(tok.prompt_ids(r["prompt"])) for r in train[:500] + heldout} == {len(ids)}


def test_rlx_demo_json_describes_the_task_and_a_base_below_60_percent() -> None:
    info = _json("rlx_demo.json")
    assert info["task"] == {
        "digits": DEMO_TASK.digits,
        "heldout": DEMO_TASK.heldout,
        "seed": DEMO_TASK.seed,
        "padded": DEMO_TASK.padded,
    }
    assert 0.3 < info["heldout_accuracy"] < 0.6
    assert info["tokenizer"]["vocab_size"] == load_tokenizer(str(BASE)).vocab_size
