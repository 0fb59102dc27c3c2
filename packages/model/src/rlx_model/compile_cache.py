"""JAX's persistent compilation cache, shared by every JAX process of rlx (trainer, inference).

A restarted or resumed service finds its compiled programs on disk instead of compiling them
again; the cache is keyed by the program, its shapes and the JAX/XLA version, so a stale entry is
never used.
"""

from __future__ import annotations

import os

import jax

__all__ = ["DEFAULT_COMPILE_CACHE_DIR", "enable_compile_cache"]

DEFAULT_COMPILE_CACHE_DIR = "~/.cache/rlx/jax-compile"
_ENABLED: dict[str, str] = {}  # "dir": the directory in use, once set


def enable_compile_cache(directory: str) -> str | None:
    """Turn on JAX's persistent compilation cache in `directory` (once per process; later calls
    keep the first directory); returns the directory in use. "" leaves it off."""
    if not directory or "dir" in _ENABLED:
        return _ENABLED.get("dir")
    path = os.path.expanduser(directory)
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    _ENABLED["dir"] = path
    return path
