"""Comparing directory trees: what a command wrote, or that it wrote nothing."""

from __future__ import annotations

from pathlib import Path

__all__ = ["tree"]


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root`, relative to it, with its bytes (None for a directory); empty
    when `root` does not exist."""
    return {
        str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }
