"""The JAX decoder families (Qwen2, Qwen3, Llama 3), HF checkpoint and tokenizer loading,
per-token log-probs, and mesh/sharding specs: one model code for the trainer and inference."""

from rlx_model._version import __version__
from rlx_model.checkpoint import load_checkpoint, load_config, save_checkpoint, to_hf_config
from rlx_model.compile_cache import DEFAULT_COMPILE_CACHE_DIR, enable_compile_cache
from rlx_model.config import BENCH_CONFIG, TINY_CONFIGS, ModelConfig, RopeScaling, tiny_config
from rlx_model.decoder import (
    KVCache,
    Params,
    forward,
    init_cache,
    init_params,
    logits,
    param_shapes,
    token_logprobs,
)
from rlx_model.families import FAMILIES, config_from_hf, get_family
from rlx_model.generate import SamplingParams, generate, sample_logits
from rlx_model.sharding import batch_sharding, make_mesh, param_shardings, shard_params
from rlx_model.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "BENCH_CONFIG",
    "DEFAULT_COMPILE_CACHE_DIR",
    "FAMILIES",
    "TINY_CONFIGS",
    "KVCache",
    "ModelConfig",
    "Params",
    "RopeScaling",
    "SamplingParams",
    "Tokenizer",
    "__version__",
    "batch_sharding",
    "config_from_hf",
    "enable_compile_cache",
    "forward",
    "generate",
    "get_family",
    "init_cache",
    "init_params",
    "load_checkpoint",
    "load_config",
    "load_tokenizer",
    "logits",
    "make_mesh",
    "param_shapes",
    "param_shardings",
    "sample_logits",
    "save_checkpoint",
    "shard_params",
    "tiny_config",
    "to_hf_config",
    "token_logprobs",
]
