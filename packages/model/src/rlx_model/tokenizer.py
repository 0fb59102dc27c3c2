"""Tokenizers: a checkpoint's own (`tokenizer.json` + chat template), or the built-in bytes.

`ByteTokenizer` needs no files: ids 0-255 are bytes, then <pad>, <bos>, <eos>. It is the vocabulary
of the tiny built-in configs and the demo.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from rlx_core.errors import InvalidArgument, NotFound

__all__ = ["ByteTokenizer", "HFTokenizer", "Tokenizer", "load_tokenizer"]


class Tokenizer(Protocol):
    vocab_size: int
    eos_token_ids: tuple[int, ...]

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as ids 0-255; 256 <pad>, 257 <bos>, 258 <eos>."""

    PAD, BOS, EOS = 256, 257, 258
    vocab_size = 259
    eos_token_ids = (EOS,)

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """A `tokenizer.json` (through the `tokenizers` library) and its chat template, if any."""

    def __init__(self, directory: str | Path) -> None:
        from tokenizers import Tokenizer as _Tokenizer

        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise NotFound(f"{path} does not exist")
        self._tok = _Tokenizer.from_file(str(path))
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        config_path = directory / "tokenizer_config.json"
        self.config: dict[str, Any] = (
            json.loads(config_path.read_text()) if config_path.is_file() else {}
        )
        # transformers >= 5 saves the template to its own file; older checkpoints embed it
        template_file = directory / "chat_template.jinja"
        self.chat_template: str | None = self.config.get("chat_template") or (
            template_file.read_text() if template_file.is_file() else None
        )
        eos = self._token_text(self.config.get("eos_token"))
        eos_id = self._tok.token_to_id(eos) if eos else None
        self.eos_token_ids: tuple[int, ...] = (eos_id,) if eos_id is not None else ()
        self.eos_token = eos
        self.bos_token = self._token_text(self.config.get("bos_token"))

    @staticmethod
    def _token_text(value: Any) -> str | None:
        if isinstance(value, dict):  # {"content": "<|im_end|>", ...} in older configs
            return value.get("content")
        return value

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def apply_chat_template(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        """Render the checkpoint's Jinja2 chat template (sandboxed) for these messages."""
        if not self.chat_template:
            raise InvalidArgument("this tokenizer has no chat_template in tokenizer_config.json")
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

        def raise_exception(message: str) -> None:
            raise InvalidArgument(f"chat template: {message}")

        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template).render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )


def load_tokenizer(checkpoint_dir: str | Path) -> HFTokenizer | None:
    """The checkpoint's tokenizer, or None when it has no tokenizer.json."""
    if not (Path(checkpoint_dir) / "tokenizer.json").is_file():
        return None
    return HFTokenizer(checkpoint_dir)
