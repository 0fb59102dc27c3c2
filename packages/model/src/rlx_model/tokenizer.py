"""A checkpoint's own tokenizer, from rlx_core (JAX-free, so the controller loads the same one)."""

from __future__ import annotations

from pathlib import Path

from rlx_core.tokenizer import Tokenizer

__all__ = ["Tokenizer", "load_tokenizer"]


def load_tokenizer(checkpoint_dir: str | Path) -> Tokenizer | None:
    """The checkpoint's tokenizer, or None when it has no tokenizer.json."""
    if not (Path(checkpoint_dir) / "tokenizer.json").is_file():
        return None
    return Tokenizer.from_dir(str(checkpoint_dir))
