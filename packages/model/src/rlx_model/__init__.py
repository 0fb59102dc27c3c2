"""The JAX decoder-only model families (Qwen2, Qwen3, Llama), HF checkpoint and tokenizer loading,
per-token log-probs, mesh and sharding specs.
"""

from rlx_model._version import __version__

__all__ = ["__version__"]
