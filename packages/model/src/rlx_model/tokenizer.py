"""Tokenizers: a checkpoint's own, from rlx_core (JAX-free, so the controller loads the same one).

`ByteTokenizer` is the vocabulary of the tiny built-in configs (ids 0-255 are bytes, then <pad>,
<bos>, <eos>); tests of the model code use it, a run never does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rlx_core.tokenizer import Tokenizer

__all__ = ["ByteTokenizer", "Tokenizer", "load_tokenizer"]


class ByteTokenizer:
    """UTF-8 bytes as ids 0-255; 256 <pad>, 257 <bos>, 258 <eos>."""

    PAD, BOS, EOS = 256, 257, 258
    vocab_size = 259
    stop_ids = (EOS,)

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


def load_tokenizer(checkpoint_dir: str | Path) -> Tokenizer | None:
    """The checkpoint's tokenizer, or None when it has no tokenizer.json."""
    if not (Path(checkpoint_dir) / "tokenizer.json").is_file():
        return None
    return Tokenizer.from_dir(str(checkpoint_dir))
