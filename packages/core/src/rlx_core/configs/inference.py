"""Configuration of the rlx inference worker: its engine, its model, its paramserver link.

Here, in rlx_core (no JAX), so that the run config composes these classes; `rlx_inference.config`
re-exports them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlx_core.configs.checks import at_least
from rlx_core.configs.server import ServerConfig
from rlx_core.errors import ConfigError

__all__ = ["EngineConfig", "InferenceConfig", "ModelSource", "ParamServerLink", "UnitLimits"]


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """The generation engine: slots, the paged KV cache, shape buckets."""

    slots: int = 32  # sequences decoded together (the fixed decode batch), >= 1
    block_size: int = 16  # positions per KV block, >= 1
    cache_mib: int = 256  # memory of the KV block pool, MiB, >= 1; full: sequences wait
    max_context: int = 2048  # positions per sequence (prompt + new tokens), multiple of block_size
    steps_per_call: int = 4  # decode steps per compiled call (host sync every this many), >= 1
    span_bucket: int = 128  # decode attends to a span rounded up to this many positions, >= 1
    max_prefill_tokens: int = 2048  # rows x padded length of one prefill call, >= 16
    continuous: bool = True  # refill a slot as soon as its sequence ends; False: static batches
    interruptible: bool = False  # forced reload recomputes partial rollouts (not reproducible)
    compile_cache_dir: str = "~/.cache/rlx/jax-compile"  # JAX persistent cache; "" disables it
    # devices the weights and KV cache are split over (heads, MLP width, vocabulary), >= 0; 0 =
    # all. 1 in one process: one device, no mesh; the mesh spans every device of every process
    # (rlx_inference.mesh), those the split leaves compute the same as replicas
    tensor_parallel: int = 1

    def __post_init__(self) -> None:
        at_least(self, 1, "slots", "block_size", "cache_mib", "steps_per_call", "span_bucket")
        if self.tensor_parallel < 0:
            raise ConfigError(
                "must be >= 1, or 0 for all devices",
                field="tensor_parallel",
                value=self.tensor_parallel,
            )
        if self.max_context < 1 or self.max_context % self.block_size:
            raise ConfigError(
                f"must be a positive multiple of block_size ({self.block_size})",
                field="max_context",
                value=self.max_context,
            )
        if self.max_prefill_tokens < 16:
            raise ConfigError(
                "must be >= 16", field="max_prefill_tokens", value=self.max_prefill_tokens
            )


@dataclass(frozen=True, kw_only=True)
class ModelSource:
    """Which architecture the worker runs (the weights come from the paramserver)."""

    checkpoint: str = ""  # HF directory: its config.json (weights there are loaded as version 0)
    builtin: str = ""  # or a built-in tiny config name ("tiny", "small")
    dtype: Literal["float32", "bfloat16"] = "float32"  # params (and compute, unless set below)
    # the matmuls' input dtype; "" = dtype. A run sets [model]'s, the trainer's: the sampler's
    # log-probs are only comparable with the trainer's when both compute alike
    compute_dtype: Literal["", "float32", "bfloat16"] = ""

    def __post_init__(self) -> None:
        if bool(self.checkpoint) == bool(self.builtin):
            raise ConfigError(
                "set exactly one of model.checkpoint and model.builtin",
                field="model.checkpoint",
                value=self.checkpoint,
            )


@dataclass(frozen=True, kw_only=True)
class ParamServerLink:
    """Where versions come from."""

    addresses: tuple[str, ...] = ()  # host:port of each of the R replicas
    token_file: str | None = None  # bearer token file of the paramserver; unset: RLX_TOKEN etc.
    timeout_s: float = 600.0  # deadline of one pull, s > 0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ConfigError("must be > 0", field="paramserver.timeout_s", value=self.timeout_s)


@dataclass(frozen=True, kw_only=True)
class UnitLimits:
    """The largest work unit a worker takes: past a cap, Generate answers INVALID_ARGUMENT
    before the unit waits its turn. A prompt plus max_new_tokens is capped by
    engine.max_context. The defaults take the controller's units with room: a training unit is
    prompts_per_unit x group_size (32 x 8 in the demo), an evaluation unit a held-out split
    divided among the workers (500 prompts x 1 in the demo)."""

    max_prompts: int = 8192  # prompts in one unit, >= 1
    max_samples_per_prompt: int = 1024  # G, samples drawn per prompt, >= 1
    max_samples: int = 65536  # prompts x G in one unit, >= 1

    def __post_init__(self) -> None:
        at_least(self, 1, "max_prompts", "max_samples_per_prompt", "max_samples", prefix="limits.")


@dataclass(frozen=True, kw_only=True)
class InferenceConfig:
    """Everything `rlx-inference` reads from its TOML file and flags."""

    server: ServerConfig = field(default_factory=ServerConfig)  # where and how it listens
    model: ModelSource = field(default_factory=lambda: ModelSource(builtin="tiny"))
    engine: EngineConfig = field(default_factory=EngineConfig)
    paramserver: ParamServerLink = field(default_factory=ParamServerLink)
    limits: UnitLimits = field(default_factory=UnitLimits)  # the largest unit Generate takes
    worker_index: int = 0  # this worker's index i; it pulls from replica i mod R, >= 0

    def __post_init__(self) -> None:
        at_least(self, 0, "worker_index")
