"""Configuration of the rlx trainer service: model precision, mesh, optimizer, objective, how a
batch is split into updates, mismatch thresholds, checkpoints and the paramserver replicas.

Here, in rlx_core (no JAX), so that the run config composes these classes; `rlx_trainer.config`
re-exports them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlx_core.configs.checks import at_least
from rlx_core.configs.objective import ObjectiveConfig
from rlx_core.configs.server import ServerConfig
from rlx_core.errors import ConfigError

__all__ = [
    "CheckpointConfig",
    "MeshConfig",
    "MetricsConfig",
    "ModelOptions",
    "ObjectiveConfig",
    "OptimizerConfig",
    "ParamServerLink",
    "TrainerConfig",
    "UpdateConfig",
]

Dtype = Literal["float32", "bfloat16"]


@dataclass(frozen=True, kw_only=True)
class ModelOptions:
    """How the trainer holds and runs the model, whatever checkpoint it comes from."""

    param_dtype: Dtype = "float32"  # dtype of params (and so of Adam moments) on device
    compute_dtype: Dtype = "float32"  # dtype of matmuls; norms and softmax always run in f32
    remat: Literal["none", "dots_saveable", "nothing_saveable"] = "none"  # per-layer, training
    logprob_chunk: int = 128  # positions per vocabulary-projection chunk in log-prob code, >= 1

    def __post_init__(self) -> None:
        at_least(self, 1, "logprob_chunk")


@dataclass(frozen=True, kw_only=True)
class MeshConfig:
    """The device mesh (data, fsdp, tensor); the product must equal the number of devices."""

    data: int = 1  # data-parallel replicas, >= 1 (batch rows split over data × fsdp)
    # fully-sharded data parallel: params sharded too, >= 1; 0 = every device data × tensor
    # leaves (a slice whose size the config does not know)
    fsdp: int = 1
    tensor: int = 1  # tensor parallel: heads / MLP width / vocab split, >= 1

    def __post_init__(self) -> None:
        at_least(self, 1, "data", "tensor")
        if self.fsdp < 0:
            raise ConfigError("must be >= 1, or 0 for the remaining devices", field="fsdp")

    @property
    def shape(self) -> tuple[int, int, int]:
        """(data, fsdp, tensor) as configured (fsdp 0: see `resolve`)."""
        return (self.data, self.fsdp, self.tensor)

    def resolve(self, devices: int) -> tuple[int, int, int]:
        """The shape on `devices` devices: fsdp 0 takes all that data × tensor leave."""
        if self.fsdp:
            return self.shape
        rest, left = divmod(devices, self.data * self.tensor)
        if left or not rest:
            raise ConfigError(
                f"fsdp = 0: {devices} devices do not divide into data {self.data} × tensor "
                f"{self.tensor}",
                field="fsdp",
            )
        return (self.data, rest, self.tensor)


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """AdamW with global-norm clipping and a warmup + cosine (or constant) learning rate."""

    lr: float = 1e-6  # peak learning rate, > 0
    schedule: Literal["cosine", "constant"] = "cosine"  # after warmup: cosine decay or flat
    warmup_steps: int = 0  # optimizer updates of linear warmup from 0, >= 0
    decay_steps: int = 1000  # updates of cosine decay after warmup, >= 1
    final_lr_ratio: float = 0.1  # cosine ends at lr × this, 0-1
    b1: float = 0.9  # Adam β1, 0-1
    b2: float = 0.999  # Adam β2, 0-1
    eps: float = 1e-8  # Adam ε, > 0
    weight_decay: float = 0.0  # decoupled weight decay (not on norms and biases), >= 0
    clip_norm: float = 1.0  # global gradient-norm clip, > 0; 0 = off

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ConfigError("must be > 0", field="lr", value=self.lr)
        at_least(self, 0, "warmup_steps", "weight_decay", "clip_norm")
        at_least(self, 1, "decay_steps")
        for name in ("final_lr_ratio", "b1", "b2"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ConfigError("must be within 0-1", field=name, value=value)
        if self.eps <= 0:
            raise ConfigError("must be > 0", field="eps", value=self.eps)


@dataclass(frozen=True, kw_only=True)
class UpdateConfig:
    """How one global batch becomes optimizer updates, and which policies feed the objective."""

    minibatches: int = 1  # sequential optimizer updates per epoch; divides the batch's B, >= 1
    epochs: int = 1  # passes over the batch's minibatches, >= 1
    grad_accum: int = 1  # microbatches whose gradients make one update; divides B/minibatches
    # jax.checkpoint(nothing_saveable) around the whole log-prob function, so the training
    # forward compiles like the π_old prefill and r == 1 exactly on the first update (DESIGN §6)
    aligned: bool = True
    # when π_old is the params being trained (old_policy gives the current version and the batch
    # makes one update: epochs = minibatches = 1), take log π_old from the training forward itself
    # (stop-gradient) instead of a separate prefill: one forward fewer, no remat, r == 1 exactly
    fuse_old: bool = True
    # π_old from: "generation" = the params of the version the batch was generated with;
    # "step_start" = the params before this step (decoupled PPO's proximal policy); "auto" =
    # step_start for decoupled_ppo, generation otherwise
    old_policy: Literal["auto", "generation", "step_start"] = "auto"
    # the frozen KL reference: "init" = the params at Init, "none", "auto" = init exactly when
    # the objective has a KL term (its beta, the preset's default or the override, > 0)
    reference: Literal["auto", "none", "init"] = "auto"

    def __post_init__(self) -> None:
        at_least(self, 1, "minibatches", "epochs", "grad_accum")


@dataclass(frozen=True, kw_only=True)
class MetricsConfig:
    """Thresholds on |log π_sampler − log π_trainer| over response tokens; unset = not checked.
    `warn_*` adds a warning to the step's reply; `stop_*` refuses the step (FAILED_PRECONDITION,
    nothing applied), so the controller stops the run."""

    warn_mismatch_mean: float | None = None  # nats, > 0
    warn_mismatch_max: float | None = None  # nats, > 0
    stop_mismatch_mean: float | None = None  # nats, > 0
    stop_mismatch_max: float | None = None  # nats, > 0

    def __post_init__(self) -> None:
        for name in (
            "warn_mismatch_mean",
            "warn_mismatch_max",
            "stop_mismatch_mean",
            "stop_mismatch_max",
        ):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError("must be > 0", field=name, value=value)


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    """Orbax checkpoints of params, optimizer state, step and RNG."""

    uri: str = ""  # a path, gs://bucket/prefix, or s3://bucket/prefix; "" = no checkpoints
    keep: int = 3  # committed checkpoints kept (the oldest are deleted), >= 1
    every: int = 0  # save after every N-th step, >= 0; 0 = only on SaveCheckpoint
    staging_dir: str = ""  # s3:// only: local directory Orbax writes to first; "" = a temp dir

    def __post_init__(self) -> None:
        at_least(self, 1, "keep")
        at_least(self, 0, "every")


@dataclass(frozen=True, kw_only=True)
class ParamServerLink:
    """Where each new version goes. Every replica gets every version before TrainStep returns."""

    addresses: tuple[str, ...] = ()  # host:port of each replica; empty = push nowhere
    token_file: str | None = None  # their bearer token; unset: RLX_TOKEN, RLX_TOKEN_FILE, default
    timeout_s: float = 600.0  # deadline of one push (waits for room on the replicas), > 0
    pull_old_versions: bool = True  # fetch π_old's params from a replica when not kept locally

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ConfigError("must be > 0", field="timeout_s", value=self.timeout_s)


@dataclass(frozen=True, kw_only=True)
class TrainerConfig:
    """Everything `rlx-trainer` reads from its TOML file and flags."""

    server: ServerConfig = field(default_factory=ServerConfig)  # where and how it listens
    model: ModelOptions = field(default_factory=ModelOptions)
    mesh: MeshConfig = field(default_factory=MeshConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    paramserver: ParamServerLink = field(default_factory=ParamServerLink)
    # π_old: the params of past versions, held on the host (and saved with each checkpoint, so
    # a restored trainer has them too): those up to keep_versions before the current one that
    # are multiples of keep_every (a run sets its largest staleness and its reload interval j:
    # rollouts come only from multiples of j), >= 0 and >= 1
    keep_versions: int = 2
    keep_every: int = 1
    compile_cache_dir: str = "~/.cache/rlx/jax-compile"  # JAX persistent cache; "" = off

    def __post_init__(self) -> None:
        at_least(self, 0, "keep_versions")
        at_least(self, 1, "keep_every")
        if self.objective.has_kl and self.update.reference == "none":
            beta = self.objective.effective()["beta"]
            whose = "the override" if self.objective.beta is not None else "the preset's default"
            raise ConfigError(
                f"the {self.objective.preset} objective has a KL term (beta {beta}, {whose}), "
                'which needs a reference model: set update.reference = "init" (or "auto"), or '
                "objective.beta = 0",
                field="update.reference",
                value=self.update.reference,
            )

    @property
    def reference(self) -> Literal["none", "init"]:
        """`update.reference`, "auto" resolved: "init" when the objective has a KL term."""
        if self.update.reference != "auto":
            return self.update.reference
        return "init" if self.objective.has_kl else "none"

    @property
    def old_policy(self) -> Literal["generation", "step_start"]:
        """`update.old_policy`, "auto" resolved: step_start for decoupled_ppo, else generation."""
        if self.update.old_policy != "auto":
            return self.update.old_policy
        return "step_start" if self.objective.preset == "decoupled_ppo" else "generation"
