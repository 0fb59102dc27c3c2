"""rlx_core.tokenizer: a checkpoint's tokenizer files, its chat template with transformers'
semantics, special tokens and stop ids, without JAX."""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

import pytest

from rlx_core.errors import InvalidArgument, NotFound
from rlx_core.tokenizer import Tokenizer, load_tokenizer

QWEN2 = Path(__file__).resolve().parents[2] / "model" / "tests" / "testdata" / "qwen2"
GOLDENS = json.loads((QWEN2 / "tokenizer_goldens.json").read_text())


def _copy(tmp_path: Path, **files: object) -> Path:
    """The qwen2 test checkpoint's tokenizer files in tmp_path, with `files` replaced (a dict is
    written as JSON, a str as text, None removes the file)."""
    out = tmp_path / "ckpt"
    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(QWEN2 / name, out / name)
    for name, body in files.items():
        path = out / name.replace("__", ".")
        if body is None:
            path.unlink()
        elif isinstance(body, dict):
            path.write_text(json.dumps(body))
        else:
            path.write_text(str(body))
    return out


def test_the_goldens_of_transformers_are_reproduced() -> None:
    """transformers 5.23's AutoTokenizer and apply_chat_template wrote these goldens
    (tools/make_goldens): ids of a text, the rendered chat and its ids, all equal."""
    tok = load_tokenizer(str(QWEN2))
    assert tok.vocab_size == GOLDENS["vocab_size_with_added"]
    assert tok.encode(GOLDENS["text"], add_special_tokens=False) == GOLDENS["text_ids"]
    assert tok.decode(GOLDENS["text_ids"]) == GOLDENS["text"]
    assert tok.render(GOLDENS["messages"]) == GOLDENS["chat_text"]
    assert tok.prompt_ids(GOLDENS["messages"]) == GOLDENS["chat_ids"]
    # special tokens are kept whole in the rendered text, and left out when decoding
    assert tok.prompt_ids(GOLDENS["messages"])[0] == GOLDENS["special_token_ids"]["<|im_start|>"]
    assert "<|im_start|>" not in tok.decode(GOLDENS["chat_ids"])


def test_stop_ids_come_from_generation_config_then_the_eos_token(tmp_path: Path) -> None:
    tok = load_tokenizer(str(QWEN2))
    assert tok.stop_ids == (511,) and tok.eos_token == "<|im_end|>" and tok.pad_id == 509
    # a list in generation_config.json (Qwen2.5-Instruct writes [151645, 151643])
    d = _copy(tmp_path, generation_config__json={"eos_token_id": [509, 511]})
    assert load_tokenizer(str(d)).stop_ids == (509, 511)
    bad = tmp_path / "bad"
    shutil.copytree(d, bad)
    (bad / "generation_config.json").write_text(json.dumps({"eos_token_id": 100000}))
    with pytest.raises(InvalidArgument, match="eos_token_id 100000 is outside the vocabulary"):
        load_tokenizer(str(bad))


def test_a_plain_prompt_gets_the_tokenizers_own_special_tokens(tmp_path: Path) -> None:
    """chat=False encodes text with the post-processor, as transformers' encode() does: a
    Llama-style tokenizer adds its BOS; the chat path never adds one (the template writes it)."""
    body = json.loads((QWEN2 / "tokenizer.json").read_text())
    body["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [
            {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
        ],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {
            "<|endoftext|>": {"id": "<|endoftext|>", "ids": [509], "tokens": ["<|endoftext|>"]}
        },
    }
    d = _copy(tmp_path, tokenizer__json=json.dumps(body))
    tok = load_tokenizer(str(d))
    plain = tok.prompt_ids("12 + 30 =", chat=False)
    assert plain[0] == 509 and plain[1:] == tok.encode("12 + 30 =", add_special_tokens=False)
    chat = tok.prompt_ids("12 + 30 =")
    assert chat == tok.encode(
        tok.render([{"role": "user", "content": "12 + 30 ="}]), add_special_tokens=False
    )
    assert 509 not in chat


def test_chat_template_jinja_wins_and_template_errors_name_the_checkpoint(tmp_path: Path) -> None:
    d = _copy(
        tmp_path, chat_template__jinja="{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
    )
    tok = load_tokenizer(str(d))
    assert tok.render([{"role": "user", "content": "hi"}]) == "[hi]"
    (tmp_path / "r").mkdir()
    raising = _copy(tmp_path / "r", chat_template__jinja="{{ raise_exception('only user turns') }}")
    with pytest.raises(InvalidArgument, match="chat template: only user turns"):
        load_tokenizer(str(raising)).render([{"role": "user", "content": "x"}])
    config = json.loads((QWEN2 / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (tmp_path / "n").mkdir()
    none = _copy(tmp_path / "n", tokenizer_config__json=config)
    with pytest.raises(InvalidArgument, match=r"has no chat template.*chat_template = false"):
        load_tokenizer(str(none)).prompt_ids("x")


def test_strftime_now_is_the_date_the_tokenizer_was_given(tmp_path: Path) -> None:
    """A Llama-3.1-style template writes today's date: a run fixes it at its first start, so a
    resumed run renders the same ids."""
    template = "Today: {{ strftime_now('%d %b %Y') }} {{ messages | tojson }}"
    d = _copy(tmp_path, chat_template__jinja=template)
    day = datetime.datetime(2024, 7, 26, tzinfo=datetime.UTC)
    tok = load_tokenizer(str(d), now=day)
    text = tok.render([{"role": "user", "content": "café"}])
    assert text == 'Today: 26 Jul 2024 [{"role": "user", "content": "café"}]'  # tojson keeps é


def test_a_directory_without_tokenizer_json_is_named(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=r"has no tokenizer\.json"):
        load_tokenizer(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(InvalidArgument, match=r"tokenizer\.json does not load"):
        Tokenizer.from_dir(str(tmp_path))
