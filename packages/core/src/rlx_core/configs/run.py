"""The run configuration: one TOML file that says what to train, on what, how, and where.

    cfg = load_run_config("run.toml", overrides=["batch.group_size=16"])
    check_run_inputs(cfg)   # the files it names exist (datasets, model, prefilter)
    config_hash(cfg)        # what snapshots record, so a resume with another config is refused

Every mistake is a `ConfigError` naming the dotted field (`datasets[1].weight`,
`staleness.lag`), before anything is started. The staleness combination is checked here
(DESIGN §3): batch b is generated with version v(b), the newest multiple of `staleness.reload`
(j) at or below b - `staleness.lag`, and the largest b - v(b) over a run, lag + j - 1, must not
exceed `staleness.accept` (k).

The services' settings are their own config classes, composed (rlx_core.configs): `[trainer]`
(objective, optimizer, update, model, mesh, metrics: rlx_core.configs.run_sections), `[inference]`
(engine, limits), `[verifier]` and `[paramserver]`; rlx_launch.service_configs writes each
service's config from them. `[provision]` (a gcp-tpu run's nodes) is
rlx_core.configs.provision's.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import string
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from rlx_core.config import config_field, load_config, loads_config, to_toml
from rlx_core.configs.checks import at_least
from rlx_core.configs.paramserver import ParamServerConfig
from rlx_core.configs.provision import ProvisionConfig
from rlx_core.configs.run_sections import InferenceSection, TrainerSection
from rlx_core.configs.server import ServerConfig
from rlx_core.configs.verifier import (
    LANGUAGE_ALIASES,
    LANGUAGES,
    VerifierConfig,
    canonical_language,
)
from rlx_core.errors import ConfigError, NotFound
from rlx_core.storage import open_storage

__all__ = [
    "BatchConfig",
    "DatasetConfig",
    "DynamicSamplingConfig",
    "EvalConfig",
    "InferenceSection",
    "ModelSpec",
    "PrefilterConfig",
    "RunConfig",
    "SamplingConfig",
    "ServicesConfig",
    "SnapshotConfig",
    "StalenessConfig",
    "TrainerSection",
    "check_run_inputs",
    "config_hash",
    "load_run_config",
    "loads_run_config",
    "split_uri",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_DATASET_EXTENSIONS = (".jsonl", ".jsonl.gz", ".parquet")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """The policy model: an HF-format checkpoint directory, the demo's included (DESIGN §10)."""

    # the checkpoint directory on this machine: config.json, model.safetensors (or shards and
    # model.safetensors.index.json), tokenizer.json, tokenizer_config.json and/or
    # chat_template.jinja, generation_config.json
    path: str
    param_dtype: Literal["float32", "bfloat16"] = "float32"  # dtype of weights on device
    compute_dtype: Literal["float32", "bfloat16"] = "float32"  # dtype of matmuls

    MOVED_FIELDS: ClassVar[dict[str, str]] = {
        "source": "every model is an HF checkpoint directory now, the demo's too: give "
        "[model] path = DIR only (config.json, safetensors, tokenizer.json, ...)",
        "tiny": "the built-in byte-level configs are gone from runs: give [model] path = DIR "
        "(an HF checkpoint directory with its tokenizer)",
    }

    def __post_init__(self) -> None:
        if not self.path:
            raise ConfigError(
                "is empty: give the checkpoint directory (config.json, safetensors, "
                "tokenizer.json, tokenizer_config.json, generation_config.json)",
                field="path",
                value=self.path,
            )


@dataclass(frozen=True, kw_only=True)
class DatasetConfig:
    """One dataset of the prompt mixture (or of the held-out evaluation): a JSONL or Parquet
    file, which record fields make the prompt, and how its gold answers are written."""

    name: str  # unique short name, [A-Za-z0-9_.-]; prompt ids are "<name>/<row>"
    path: str  # JSONL (.jsonl, .jsonl.gz) or Parquet (.parquet) file: path, file://, s3://, gs://
    format: Literal["auto", "jsonl", "parquet"] = "auto"  # "auto": from the path's extension
    prompt_field: str = "prompt"  # record field holding the prompt text
    # record field of chat turns [{role, content}, ...] ending in a user turn; "" = prompt_field
    messages_field: str = ""
    # how a record becomes the model's input: {field} placeholders name record fields, and
    # {prompt} (the value of prompt_field) must appear; "{prompt}" = the prompt as is
    template: str = "{prompt}"
    # true: render the prompt with the checkpoint's chat template; false: the text as it is
    # (true: the templated text is one user turn; false: the dataset's template text is the
    # model input, tokenized with the tokenizer's special-token rules; messages_field and
    # system_prompt need true)
    chat_template: bool = True
    system_prompt: str = ""  # system turn put first when a record has none; "" = none
    answer_field: str = "answer"  # record field holding the gold answer (math)
    # how answer_field writes the gold: "plain" as is, "gsm8k" "... #### N", "math" last \boxed{}
    # (gsm8k: the number after the final "#### ", commas removed; math: braces balanced)
    answer_format: Literal["plain", "gsm8k", "math"] = "plain"
    reward: Literal["math", "code"] = "math"  # math: answer vs gold; code: run against tests
    # --- code (reward = "code"); see the README's "Code datasets" ---
    # record field of inline stdin/stdout tests: [{"input", "output"}] (or "stdin"/"answer"
    # keys), or {"inputs": [...], "outputs": [...]}; unused with tests_manifest or harness_field
    tests_field: str = "tests"
    # link (path or URI) of a manifest written by `rlx verifier upload`: tests by link, with the
    # problem's checker, comparator and limits; each record names its problem by problem_field
    tests_manifest: str = ""
    problem_field: str = "id"  # with tests_manifest: record field holding the problem's id
    # record field of assert-style tests (code run after the program; AC iff it runs to its
    # end); "" = stdin/stdout tests
    harness_field: str = ""
    language: str = "python"  # the programs' language: python, cpp, rust, go, java
    language_field: str = ""  # record field naming a row's own language; "" = `language` for all
    # where the program is in a response: "last_block" = the last fenced block of the language
    # (```python ... ```; an untagged block counts), "whole" = the whole response
    program: Literal["last_block", "whole"] = "last_block"
    # how outputs are compared without a checker: exact bytes, whitespace-separated tokens, or
    # numbers within 1e-6; "" = the manifest's choice, else tokens
    comparator: Literal["", "exact", "tokens", "float"] = ""
    # CPU seconds per run, for rows without their own (time_limit_field, or the manifest's
    # problem); 0 = the verifier's default (stdin/stdout 2 s, assert 5 s)
    time_limit_s: float = 0.0
    memory_mb: int = 0  # MiB per run, as time_limit_s; 0 = the verifier's (256, assert 512)
    # record field with a row's own time limit (seconds), used where a row has it; "" = none
    time_limit_field: str = ""
    memory_field: str = ""  # record field with a row's own memory limit (MiB), as above
    partial_credit: bool = False  # reward = fraction of tests passed (stdin/stdout tests only)
    # math: how the verifier finds the answer in a response (rlx_verifier.extract_answer)
    math_extractor: Literal["auto", "boxed", "hash", "answer_is", "last_number"] = "auto"
    weight: float = 1.0  # relative share of prompts drawn from this dataset, > 0

    @property
    def file_format(self) -> Literal["jsonl", "parquet"]:
        """`format`, or the one the path's extension names when it is "auto"."""
        if self.format != "auto":
            return self.format
        return "parquet" if self.path.lower().endswith(".parquet") else "jsonl"

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ConfigError(
                "must be letters, digits, '_', '.', '-' (not starting with a symbol)",
                field="name",
                value=self.name,
            )
        if not self.path:
            raise ConfigError(
                "is empty: give the JSONL or Parquet file", field="path", value=self.path
            )
        if self.format == "auto" and not self.path.lower().endswith(_DATASET_EXTENSIONS):
            raise ConfigError(
                f"cannot tell the format from the extension (one of "
                f'{", ".join(_DATASET_EXTENSIONS)}): set format = "jsonl" or "parquet"',
                field="path",
                value=self.path,
            )
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise ConfigError("must be a finite number > 0", field="weight", value=self.weight)
        try:
            names = [f for _, f, _, _ in string.Formatter().parse(self.template) if f is not None]
        except ValueError as e:
            raise ConfigError(f"is not a format string: {e}", field="template") from None
        if "prompt" not in names:
            raise ConfigError(
                "must contain {prompt} (where the prompt text goes)",
                field="template",
                value=self.template,
            )
        if any(not n.isidentifier() for n in names):
            raise ConfigError(
                "placeholders must be plain field names such as {prompt} or {question}",
                field="template",
                value=self.template,
            )
        self._check_prompt_fields()
        if self.reward == "code" and self.answer_format != "plain":
            raise ConfigError(
                'applies to math datasets only (reward = "code" has tests, not answers)',
                field="answer_format",
                value=self.answer_format,
            )
        self._check_code_fields()

    # the code fields and their defaults: a math dataset must leave them as they are
    _CODE_FIELDS: ClassVar[dict[str, object]] = {
        "tests_manifest": "",
        "harness_field": "",
        "language_field": "",
        "program": "last_block",
        "comparator": "",
        "time_limit_s": 0.0,
        "memory_mb": 0,
        "time_limit_field": "",
        "memory_field": "",
        "partial_credit": False,
    }

    def _check_code_fields(self) -> None:
        if self.reward == "math":
            for name, default in self._CODE_FIELDS.items():
                if getattr(self, name) != default:
                    raise ConfigError(
                        'applies to code datasets only: set reward = "code"',
                        field=name,
                        value=getattr(self, name),
                    )
            return
        if not (math.isfinite(self.time_limit_s) and self.time_limit_s >= 0):
            raise ConfigError(
                "must be a finite number of seconds >= 0 (0: the problem's or the verifier's)",
                field="time_limit_s",
                value=self.time_limit_s,
            )
        at_least(self, 0, "memory_mb")
        if canonical_language(self.language) is None:
            raise ConfigError(
                f"must be one of {', '.join(LANGUAGES)} (or {', '.join(LANGUAGE_ALIASES)})",
                field="language",
                value=self.language,
            )
        if self.harness_field and self.tests_manifest:
            raise ConfigError(
                "give assert-style tests (harness_field) or a manifest of stdin/stdout tests "
                "(tests_manifest), not both",
                field="harness_field",
                value=self.harness_field,
            )
        if self.harness_field and self.partial_credit:
            raise ConfigError(
                "applies to stdin/stdout tests only: an assert-style harness is one run",
                field="partial_credit",
                value=self.partial_credit,
            )

    def _check_prompt_fields(self) -> None:
        if self.messages_field:
            if self.prompt_field != "prompt":
                raise ConfigError(
                    "give prompt_field or messages_field, not both",
                    field="messages_field",
                    value=self.messages_field,
                )
            if self.template != "{prompt}":
                raise ConfigError(
                    "applies to prompt_field only: a messages_field record's turns are used as "
                    "they are",
                    field="template",
                    value=self.template,
                )
            if not self.chat_template:
                raise ConfigError(
                    "messages_field needs chat_template = true (chat turns are rendered with "
                    "the checkpoint's chat template)",
                    field="chat_template",
                    value=self.chat_template,
                )
        if self.system_prompt and not self.chat_template:
            raise ConfigError(
                "system_prompt needs chat_template = true (without it the templated text is "
                "the whole model input: put the instructions in template)",
                field="system_prompt",
                value=self.system_prompt,
            )


@dataclass(frozen=True, kw_only=True)
class StalenessConfig:
    """DESIGN §3: the reload interval j, the acceptance bound k and the generation lead."""

    reload: int = 1  # j: inference moves to a new weight version every j versions, >= 1
    # k: the trainer at version t consumes a rollout of version v only if t - v <= k; an integer
    # >= 0, or inf (unbounded)
    accept: float = 1
    # how many batches generation runs ahead of training, >= 0; unset = 1 when lag + j - 1 <= k
    # allows it (generation of batch b+1 overlaps training of batch b), else 0
    lag: int | None = None

    def __post_init__(self) -> None:
        at_least(self, 1, "reload")
        k = self.accept
        if not (k == math.inf or (k >= 0 and float(k).is_integer())):
            raise ConfigError("must be an integer >= 0, or inf", field="accept", value=k)
        if self.lag is not None:
            at_least(self, 0, "lag")
        worst = self.effective_lag + self.reload - 1
        if worst > k:
            j, lag = self.reload, self.effective_lag
            b = lag + j - 1  # the first batch that reaches the worst staleness
            hint = (
                f"lower lag to <= {int(k) - j + 1}"
                if k - j + 1 >= 0
                else f"lower reload to <= {int(k) + 1}"
            )
            raise ConfigError(
                f"impossible staleness: with reload j={j} and lag={lag}, batch {b} is generated "
                f"with version {b - worst} while the trainer is at version {b}, so b - v(b) = "
                f"{worst} > accept k={int(k)}; {hint}, or raise accept to >= {worst}",
                field="lag" if self.lag is not None else "accept",
                value=self.lag if self.lag is not None else k,
            )

    @property
    def effective_lag(self) -> int:
        """`lag`, or its default: 1 if the bound allows it, else 0."""
        if self.lag is not None:
            return self.lag
        return 1 if self.reload <= self.accept else 0

    @property
    def max_staleness(self) -> int:
        """The largest b - v(b) of the schedule: lag + j - 1."""
        return self.effective_lag + self.reload - 1


@dataclass(frozen=True, kw_only=True)
class BatchConfig:
    """Batch shape and lengths."""

    prompts: int = 32  # B: prompts per training batch, >= 1
    group_size: int = 8  # G: samples per prompt, >= 1 (group baselines need >= 2)
    prompts_per_unit: int = 0  # prompts per work unit, divides B; 0 = B (one unit per batch)
    max_prompt_tokens: int = 512  # longer prompts are rejected when the dataset is loaded, >= 1
    max_new_tokens: int = 512  # generation stops here, >= 1

    def __post_init__(self) -> None:
        at_least(self, 1, "prompts", "group_size", "max_prompt_tokens", "max_new_tokens")
        at_least(self, 0, "prompts_per_unit")
        if self.prompts_per_unit and self.prompts % self.prompts_per_unit:
            raise ConfigError(
                f"must divide prompts ({self.prompts})",
                field="prompts_per_unit",
                value=self.prompts_per_unit,
            )

    @property
    def unit_prompts(self) -> int:
        return self.prompts_per_unit or self.prompts

    @property
    def units_per_batch(self) -> int:
        return self.prompts // self.unit_prompts


@dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    """How inference samples (per-sample seeds come from the schedule)."""

    temperature: float = 1.0  # > 0
    top_p: float = 1.0  # nucleus mass, (0, 1]
    top_k: int = 0  # keep the k most likely tokens, >= 0; 0 = all

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ConfigError("must be > 0", field="temperature", value=self.temperature)
        if not 0 < self.top_p <= 1:
            raise ConfigError("must be within (0, 1]", field="top_p", value=self.top_p)
        at_least(self, 0, "top_k")


@dataclass(frozen=True, kw_only=True)
class ServicesConfig:
    """Which services run the job: started locally, or already running at addresses."""

    # local: processes on 127.0.0.1; gcp-tpu: on TPU VMs (and CPU VMs) that [provision]
    # describes (rlx provision); external: already running at the addresses below
    provider: Literal["local", "external", "gcp-tpu"] = "local"
    inference_workers: int = 1  # inference processes, >= 1
    paramserver_replicas: int = 1  # paramserver processes, >= 1, <= inference_workers
    verifier_workers: int = 1  # verifier processes, >= 1
    # provider = "external": where the running services listen (host:port)
    inference_addresses: tuple[str, ...] = ()
    paramserver_addresses: tuple[str, ...] = ()
    trainer_address: str = ""
    verifier_addresses: tuple[str, ...] = ()
    token_file: str | None = None  # bearer token of external services; unset: RLX_TOKEN...
    rpc_timeout_s: float = 600.0  # deadline of one call before it is retried, > 0

    def service_names(self) -> dict[str, list[str]]:
        """The run's services by kind: "trainer", "inference-0", "paramserver-0", ..."""
        return {
            "trainer": ["trainer"],
            "inference": [f"inference-{i}" for i in range(self.inference_workers)],
            "paramserver": [f"paramserver-{i}" for i in range(self.paramserver_replicas)],
            "verifier": [f"verifier-{i}" for i in range(self.verifier_workers)],
        }

    def __post_init__(self) -> None:
        at_least(self, 1, "inference_workers", "paramserver_replicas", "verifier_workers")
        if self.paramserver_replicas > self.inference_workers:
            raise ConfigError(
                f"must be <= inference_workers ({self.inference_workers})",
                field="paramserver_replicas",
                value=self.paramserver_replicas,
            )
        if not self.rpc_timeout_s > 0:
            raise ConfigError("must be > 0", field="rpc_timeout_s", value=self.rpc_timeout_s)
        lists = {
            "inference_addresses": self.inference_addresses,
            "paramserver_addresses": self.paramserver_addresses,
            "verifier_addresses": self.verifier_addresses,
        }
        for name, addresses in lists.items():
            for i, address in enumerate(addresses):
                if not re.match(r"^[^\s:]+:\d{1,5}$|^\[[0-9a-fA-F:]+\]:\d{1,5}$", address):
                    raise ConfigError("must be host:port", field=f"{name}[{i}]", value=address)
        if self.provider == "external":
            missing = [n for n, a in lists.items() if not a]
            if not self.trainer_address:
                missing.insert(0, "trainer_address")
            if missing:
                raise ConfigError(
                    f'provider = "external" needs the addresses of every service; missing: '
                    f"{', '.join(missing)}",
                    field=missing[0],
                )
        elif any(lists.values()) or self.trainer_address:
            raise ConfigError(
                'addresses are only for provider = "external" (the other providers start their '
                "own services)",
                field="provider",
                value=self.provider,
            )


@dataclass(frozen=True, kw_only=True)
class SnapshotConfig:
    """Controller snapshots and trainer checkpoints."""

    every: int = 0  # snapshot every N steps, a multiple of staleness.reload; 0 = every reload
    keep: int = 5  # snapshots kept (older ones deleted), >= 1
    checkpoint_every: int = 10  # trainer checkpoint every N steps, >= 1
    checkpoint_keep: int = 3  # trainer checkpoints kept, >= 1

    def __post_init__(self) -> None:
        at_least(self, 0, "every")
        at_least(self, 1, "keep", "checkpoint_every", "checkpoint_keep")


@dataclass(frozen=True, kw_only=True)
class DynamicSamplingConfig:
    """DAPO dynamic sampling: drop groups whose rewards are all equal, refill from new prompts."""

    enabled: bool | None = None  # unset = the preset's choice (on for dapo)
    max_rounds: int = 3  # refill rounds per batch, >= 1
    budget: float = 1.0  # refill prompts per batch at most, as a multiple of B, > 0

    def __post_init__(self) -> None:
        at_least(self, 1, "max_rounds")
        if not self.budget > 0:
            raise ConfigError("must be > 0", field="budget", value=self.budget)


@dataclass(frozen=True, kw_only=True)
class PrefilterConfig:
    """Keep only prompts whose base-model pass rate lies strictly between two bounds."""

    file: str = ""  # JSONL written by `rlx prefilter` ({dataset, row, pass_rate}); "" = off
    min_pass_rate: float = 0.0  # keep prompts with pass rate > this
    max_pass_rate: float = 1.0  # keep prompts with pass rate < this

    def __post_init__(self) -> None:
        if not 0 <= self.min_pass_rate < self.max_pass_rate <= 1:
            raise ConfigError(
                "needs 0 <= min_pass_rate < max_pass_rate <= 1",
                field="min_pass_rate",
                value=self.min_pass_rate,
            )


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """Held-out evaluation (greedy accuracy, and sampled pass@k), run by the controller between
    steps."""

    datasets: tuple[DatasetConfig, ...] = ()  # held-out sets; empty = no evaluation
    every: int = 10  # evaluate every N steps (and at the start and the end), >= 1
    max_prompts: int = 0  # prompts per dataset, >= 0; 0 = all
    # sampled answers per prompt (with [sampling]) for pass@1, pass@k, avg@k, >= 0; 0 = greedy only
    samples: int = 0

    def __post_init__(self) -> None:
        at_least(self, 1, "every")
        at_least(self, 0, "max_prompts", "samples")


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything `rlx up` reads from a run's TOML file."""

    run_dir: str  # where the run keeps its state: a path, file://, s3://bucket/p or gs://bucket/p
    seed: int = 0  # run seed: every random choice is a function of it, >= 0
    steps: int = 100  # training batches to run, >= 1
    model: ModelSpec  # the checkpoint to train: [model] path = "DIR"
    datasets: tuple[DatasetConfig, ...] = ()  # the prompt mixture, at least one
    # the trainer's objective, optimizer, update, model options, mesh and mismatch metrics
    trainer: TrainerSection = field(default_factory=TrainerSection)
    inference: InferenceSection = field(default_factory=InferenceSection)  # engine, unit limits
    # rlx_verifier's config (judge, backend, repository, aws_lambda); its [server] is the run's
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    paramserver: ParamServerConfig = config_field(
        default_factory=lambda: ParamServerConfig(max_versions=8),
        merge=True,
        doc="rlx_paramserver's config of every replica (max_versions, chunk_kib, ...; in a run "
        "max_versions defaults to 8); its [server] and replica_id are the run's",
    )
    staleness: StalenessConfig = field(default_factory=StalenessConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    services: ServicesConfig = field(default_factory=ServicesConfig)
    snapshots: SnapshotConfig = field(default_factory=SnapshotConfig)
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    prefilter: PrefilterConfig = field(default_factory=PrefilterConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # the TPU VMs (and CPU VMs) of `services.provider = "gcp-tpu"` (rlx provision); absent for
    # local runs
    provision: ProvisionConfig | None = None

    # retired tables: loading one says where its fields went
    MOVED_FIELDS: ClassVar[dict[str, str]] = {
        "algorithm": "[algorithm] moved to [trainer.objective] (preset = ..., and each override "
        'as a field: preset = "grpo", beta = 0.0, tis_cap = 2.0 instead of overrides = '
        "{ beta = 0.0 }); old_policy is [trainer.update] old_policy",
        "optimizer": "[optimizer] moved to [trainer.optimizer] (rlx_trainer's OptimizerConfig: "
        "lr, schedule, warmup_steps, decay_steps, final_lr_ratio, b1, b2, eps, weight_decay, "
        "clip_norm; its schedule defaults to cosine)",
    }

    def __post_init__(self) -> None:
        if not self.run_dir:
            raise ConfigError("is empty: give a directory or URI", field="run_dir")
        at_least(self, 0, "seed")
        at_least(self, 1, "steps")
        if not self.datasets:
            raise ConfigError(
                "needs at least one [[datasets]] table (name, path)", field="datasets"
            )
        for group, items in (("datasets", self.datasets), ("eval.datasets", self.eval.datasets)):
            seen: dict[str, int] = {}
            for i, ds in enumerate(items):
                if ds.name in seen:
                    raise ConfigError(
                        f"name {ds.name!r} is already used by {group}[{seen[ds.name]}]",
                        field=f"{group}[{i}].name",
                        value=ds.name,
                    )
                seen[ds.name] = i
        j = self.staleness.reload
        if self.snapshots.every % j:
            raise ConfigError(
                f"must be a multiple of staleness.reload ({j}): snapshots are taken at reload "
                "boundaries",
                field="snapshots.every",
                value=self.snapshots.every,
            )
        if self.dynamic_sampling_enabled and self.batch.group_size < 2:
            raise ConfigError(
                "dynamic sampling drops groups whose rewards are all equal: needs group_size >= 2",
                field="batch.group_size",
                value=self.batch.group_size,
            )
        self._check_services()
        self._check_provision()

    def _check_services(self) -> None:
        """The service sections fit the run: what the run sets itself is left alone, and the
        workers take the run's units."""
        for name, server in (
            ("verifier", self.verifier.server),
            ("paramserver", self.paramserver.server),
        ):
            if server != ServerConfig():
                raise ConfigError(
                    "is the run's: it sets where each service listens and its token",
                    field=f"{name}.server",
                )
        if self.paramserver.replica_id:
            raise ConfigError(
                "is the run's: it numbers the replicas 0..R-1",
                field="paramserver.replica_id",
                value=self.paramserver.replica_id,
            )
        options = self.trainer.model
        for dtype in ("param_dtype", "compute_dtype"):
            want = getattr(self.model, dtype)
            if options is not None and getattr(options, dtype) != want:
                raise ConfigError(
                    f"must be model.{dtype} ({want!r}): the trainer and the workers run the "
                    f"model in the dtypes of [model]",
                    field=f"trainer.model.{dtype}",
                    value=getattr(options, dtype),
                )
        b = self.batch
        engine = self.inference.engine
        need = b.max_prompt_tokens + b.max_new_tokens
        if engine is not None and engine.max_context < need:
            raise ConfigError(
                f"must hold batch.max_prompt_tokens + batch.max_new_tokens ({need})",
                field="inference.engine.max_context",
                value=engine.max_context,
            )
        limits = self.inference.limits
        for name, cap, unit in (
            ("max_prompts", limits.max_prompts, b.unit_prompts),
            ("max_samples_per_prompt", limits.max_samples_per_prompt, b.group_size),
            ("max_samples", limits.max_samples, b.unit_prompts * b.group_size),
        ):
            if cap < unit:
                raise ConfigError(
                    f"a training unit has {unit} (batch.prompts_per_unit, batch.group_size)",
                    field=f"inference.limits.{name}",
                    value=cap,
                )

    def _check_provision(self) -> None:
        if self.services.provider != "gcp-tpu":
            return
        if self.provision is None:
            raise ConfigError(
                'services.provider = "gcp-tpu" needs a [provision] table (project, zone, '
                "token_secret, pools)",
                field="provision",
            )
        if not re.match(r"^(gs|s3)://", self.run_dir):
            raise ConfigError(
                "the TPU VMs read their service configs from the run directory: it must be "
                "gs://bucket/prefix (or s3://)",
                field="run_dir",
                value=self.run_dir,
            )
        svc, p = self.services, self.provision
        wanted = {
            "inference": ("services.inference_workers", svc.inference_workers),
            "paramserver": ("services.paramserver_replicas", svc.paramserver_replicas),
            "verifier": ("services.verifier_workers", svc.verifier_workers),
        }
        for pool, (name, n) in wanted.items():
            count = p.pool(pool).count
            if count and p.pool(pool).has_nodes and count != n:
                raise ConfigError(
                    f"one slice or VM per service: {name} is {n}",
                    field=f"provision.{pool}.count",
                    value=count,
                )
        # on TPU the slices' shapes are [provision]'s: a section may only say the same
        mesh = self.trainer.mesh
        if mesh is not None and mesh.shape != p.trainer_mesh:
            raise ConfigError(
                f"must be provision.trainer_mesh {p.trainer_mesh} (data, fsdp, tensor) with "
                'services.provider = "gcp-tpu"; leave [trainer.mesh] out',
                field="trainer.mesh",
                value=mesh.shape,
            )
        engine = self.inference.engine
        if engine is not None and engine.tensor_parallel != p.inference_tensor_parallel:
            raise ConfigError(
                f"must be provision.inference_tensor_parallel ({p.inference_tensor_parallel}) "
                'with services.provider = "gcp-tpu"',
                field="inference.engine.tensor_parallel",
                value=engine.tensor_parallel,
            )

    @property
    def dynamic_sampling_enabled(self) -> bool:
        if self.dynamic_sampling.enabled is not None:
            return self.dynamic_sampling.enabled
        return self.trainer.objective.preset == "dapo"

    @property
    def snapshot_every(self) -> int:
        """Steps between snapshots: `snapshots.every`, or every reload boundary."""
        return self.snapshots.every or self.staleness.reload


def loads_run_config(text: str, *, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """RunConfig from TOML text."""
    return loads_config(RunConfig, text, overrides=overrides)


def load_run_config(path: str | os.PathLike[str], *, overrides: tuple[str, ...] = ()) -> RunConfig:
    """RunConfig from a TOML file, `KEY=VALUE` overrides applied; ConfigError on any problem."""
    return load_config(RunConfig, path, overrides=overrides)


def config_hash(cfg: RunConfig) -> str:
    """sha256 of the config's canonical TOML (comments off): equal configs, equal hashes. The
    [provision] table is left out: where the machines are (zone, capacity) may change between a
    preemption and its resume, and leaves the results as they are."""
    import copy

    bare = copy.copy(cfg)
    object.__setattr__(bare, "provision", None)  # a copy without it (no checks to run again)
    return hashlib.sha256(to_toml(bare, comments=False).encode()).hexdigest()


def split_uri(uri: str) -> tuple[str, str]:
    """(directory URI, object name) of a file's path or URI, for `open_storage(dir).get(name)`:
    "s3://b/d/x.jsonl" -> ("s3://b/d", "x.jsonl"); "x.jsonl" -> (".", "x.jsonl")."""
    head, sep, name = uri.rpartition("/")
    if not name:
        raise ConfigError(f"{uri!r} names a directory, not a file", value=uri)
    if not sep:
        return ".", name
    return head or "/", name


def _check_file(uri: str, field_path: str) -> None:
    directory, name = split_uri(uri)
    try:
        found = open_storage(directory).exists(name)
    except NotFound:
        found = False
    if not found:
        raise ConfigError(f"no such file: {uri}", field=field_path, value=uri)


def check_run_inputs(cfg: RunConfig) -> None:
    """The files `cfg` names exist: dataset JSONL files, the model directory, the prefilter file.
    ConfigError naming the field otherwise. Call it before anything is started."""
    for group, items in (("datasets", cfg.datasets), ("eval.datasets", cfg.eval.datasets)):
        for i, ds in enumerate(items):
            _check_file(ds.path, f"{group}[{i}].path")
            if ds.tests_manifest:
                _check_file(ds.tests_manifest, f"{group}[{i}].tests_manifest")
    if "://" in cfg.model.path and not cfg.model.path.startswith("file://"):
        raise ConfigError(
            "must be a local directory (config.json + safetensors)",
            field="model.path",
            value=cfg.model.path,
        )
    local = cfg.model.path.removeprefix("file://")
    for name, what in (
        ("config.json", "an HF checkpoint directory"),
        ("tokenizer.json", "the checkpoint's tokenizer, which renders and encodes the prompts"),
    ):
        if not os.path.isfile(os.path.join(local, name)):
            raise ConfigError(
                f"{local} holds no {name} (expected {what})",
                field="model.path",
                value=cfg.model.path,
            )
    if cfg.prefilter.file:
        _check_file(cfg.prefilter.file, "prefilter.file")
