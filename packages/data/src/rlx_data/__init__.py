"""What a run trains and evaluates on: dataset files (JSONL, Parquet) and their rows, code tasks
and their tests, gold answers, the built-in demo tasks. No JAX."""

from rlx_data._version import __version__

__all__ = ["__version__"]
