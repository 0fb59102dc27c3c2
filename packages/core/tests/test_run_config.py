"""The run config: a full TOML file loads, every mistake names its field, impossible staleness
is rejected with the numbers, the config round-trips and hashes stably."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from rlx_core.config import from_dict, to_toml
from rlx_core.configs.run import (
    RunConfig,
    check_run_inputs,
    config_hash,
    load_run_config,
    loads_run_config,
    split_uri,
)
from rlx_core.errors import ConfigError

FULL = """
run_dir = "s3://bucket/runs/r1"
seed = 7
steps = 500

[model]
path = "/models/qwen"
param_dtype = "bfloat16"

[[datasets]]
name = "gsm"
path = "/data/gsm.jsonl"
template = "Question: {prompt}\\nAnswer:"
weight = 2.0

[[datasets]]
name = "cf"
path = "gs://b/cf.jsonl"
reward = "code"
prompt_field = "statement"
language = "cpp"

[trainer.objective]
preset = "dapo"
eps_high = 0.3
beta = 0.0

[trainer.optimizer]
lr = 1e-6
warmup_steps = 10
b2 = 0.95

[trainer.update]
minibatches = 2

[inference.limits]
max_prompts = 64

[verifier.judge]
workers = 3

[paramserver]
chunk_kib = 4096

[staleness]
reload = 2
accept = 4
lag = 3

[batch]
prompts = 64
group_size = 16
prompts_per_unit = 16
max_new_tokens = 1024

[sampling]
temperature = 0.9
top_p = 0.95

[services]
inference_workers = 4
paramserver_replicas = 2

[snapshots]
every = 4
keep = 3

[dynamic_sampling]
max_rounds = 2
budget = 0.5

[prefilter]
file = "/data/pass_rates.jsonl"
min_pass_rate = 0.0
max_pass_rate = 1.0

[eval]
every = 20
datasets = [{ name = "gsm-test", path = "/data/gsm_test.jsonl" }]
"""


def test_full_config_loads_round_trips_and_hashes() -> None:
    cfg = loads_run_config(FULL)
    assert cfg.seed == 7 and cfg.model.path == "/models/qwen" and cfg.datasets[1].reward == "code"
    assert cfg.trainer.objective.overrides() == {"eps_high": 0.3, "beta": 0.0}
    assert cfg.trainer.optimizer.b2 == 0.95 and cfg.trainer.optimizer.schedule == "cosine"
    # a partial [trainer.update] / [paramserver] table keeps the run's defaults for the rest
    assert cfg.trainer.update.minibatches == 2 and cfg.trainer.update.old_policy == "auto"
    assert cfg.paramserver.chunk_kib == 4096 and cfg.paramserver.max_versions == 8
    assert cfg.inference.limits.max_prompts == 64 and cfg.verifier.judge.workers == 3
    assert cfg.staleness.max_staleness == 4 and cfg.batch.units_per_batch == 4
    assert cfg.dynamic_sampling_enabled  # dapo turns it on by default
    assert cfg.snapshot_every == 4
    again = from_dict(RunConfig, tomllib.loads(to_toml(cfg)))
    assert again == cfg
    assert config_hash(again) == config_hash(cfg)
    assert config_hash(loads_run_config(FULL, overrides=["seed=8"])) != config_hash(cfg)


def test_minimal_config_defaults() -> None:
    cfg = loads_run_config(
        'run_dir = "r"\n[model]\npath = "m"\n[[datasets]]\nname = "a"\npath = "a.jsonl"\n'
    )
    assert cfg.staleness.reload == 1 and cfg.staleness.accept == 1
    assert cfg.staleness.effective_lag == 1  # overlap when (j, k) allows it
    assert cfg.batch.units_per_batch == 1 and not cfg.dynamic_sampling_enabled
    assert cfg.snapshot_every == 1


def test_unbounded_accept() -> None:
    cfg = loads_run_config(FULL.replace("accept = 4", "accept = inf").replace("lag = 3", "lag = 9"))
    assert cfg.staleness.accept == math.inf and cfg.staleness.max_staleness == 10
    assert "accept = inf" in to_toml(cfg)


BAD = [
    ("seed = 7", "sede = 7", "sede", "did you mean 'seed'"),
    ("weight = 2.0", "weight = -1.0", "datasets[0].weight", "> 0"),
    (
        'template = "Question: {prompt}\\nAnswer:"',
        'template = "Q: {question}"',
        "datasets[0].template",
        "{prompt}",
    ),
    ('preset = "dapo"', 'preset = "dapoo"', "trainer.objective.preset", "did you mean 'dapo'"),
    ("eps_high = 0.3", "eps_hihg = 0.3", "trainer.objective.eps_hihg", "did you mean 'eps_high'"),
    ("eps_high = 0.3", "gamma = 0.9", "trainer.objective.gamma", "'dapo' takes no gamma"),
    ("b2 = 0.95", "b2 = 1.5", "trainer.optimizer.b2", "within 0-1"),
    ("max_prompts = 64", "max_prompts = 8", "inference.limits.max_prompts", "training unit"),
    ("workers = 3", "workers = 3\n[verifier.server]\nport = 9", "verifier.server", "run's"),
    ("chunk_kib = 4096", "replica_id = 1", "paramserver.replica_id", "numbers the replicas"),
    ("lag = 3", "lag = 4", "staleness.lag", "lower lag to <= 3"),
    ("accept = 4", "accept = 2.5", "staleness.accept", "integer"),
    ("prompts_per_unit = 16", "prompts_per_unit = 10", "batch.prompts_per_unit", "divide"),
    ("top_p = 0.95", "top_p = 1.5", "sampling.top_p", "(0, 1]"),
    (
        "paramserver_replicas = 2",
        "paramserver_replicas = 5",
        "services.paramserver_replicas",
        "inference_workers",
    ),
    ("every = 4", "every = 3", "snapshots.every", "multiple of staleness.reload"),
    ('name = "cf"', 'name = "gsm"', "datasets[1].name", "already used by datasets[0]"),
    ('path = "/models/qwen"', 'path = ""', "model.path", "checkpoint directory"),
    ("max_pass_rate = 1.0", "max_pass_rate = 0.0", "prefilter.min_pass_rate", "min_pass_rate <"),
    ('path = "gs://b/cf.jsonl"', 'path = ""', "datasets[1].path", "empty"),
]


@pytest.mark.parametrize(("old", "new", "field", "message"), BAD)
def test_errors_name_the_field(old: str, new: str, field: str, message: str) -> None:
    assert old in FULL
    with pytest.raises(ConfigError) as info:
        loads_run_config(FULL.replace(old, new, 1))
    assert info.value.field == field
    assert message in str(info.value)
    assert str(info.value).startswith(field)


def test_grpo_without_overrides_gets_its_reference_model() -> None:
    grpo = FULL.replace('preset = "dapo"\neps_high = 0.3\nbeta = 0.0', 'preset = "grpo"')
    cfg = loads_run_config(grpo)
    assert cfg.trainer.objective.has_kl and cfg.trainer.update.reference == "auto"
    assert (
        loads_run_config(grpo, overrides=["trainer.objective.beta=0"]).trainer.objective.beta == 0
    )
    with pytest.raises(ConfigError, match="has a KL term") as info:
        loads_run_config(grpo, overrides=["trainer.update.reference=none"])
    assert info.value.field == "trainer.update.reference"


@pytest.mark.parametrize(
    ("table", "where"),
    [
        ('[algorithm]\npreset = "grpo"\noverrides = { beta = 0.0 }', "[trainer.objective]"),
        ("[optimizer]\nlr = 1e-6", "[trainer.optimizer]"),
    ],
)
def test_old_tables_say_where_their_fields_moved(table: str, where: str) -> None:
    old = FULL.replace("[staleness]", f"{table}\n\n[staleness]")
    with pytest.raises(ConfigError, match=f"moved to \\{where[:-1]}\\]") as info:
        loads_run_config(old)
    assert info.value.field == table[1:].split("]", maxsplit=1)[0]


def test_impossible_staleness_message_explains() -> None:
    text = FULL.replace("reload = 2", "reload = 4").replace("lag = 3", "lag = 0")
    text = text.replace("every = 4\nkeep", "every = 8\nkeep").replace("accept = 4", "accept = 2")
    with pytest.raises(ConfigError) as info:
        loads_run_config(text)
    msg = str(info.value)
    assert info.value.field == "staleness.lag"
    assert "b - v(b) = 3 > accept k=2" in msg and "lower reload to <= 3" in msg
    # without an explicit lag the default is 0 when 1 would not fit, and accept is blamed
    with pytest.raises(ConfigError) as info2:
        loads_run_config(text.replace("lag = 0\n", ""))
    assert info2.value.field == "staleness.accept"


def test_services_addresses() -> None:
    ext = FULL.replace("inference_workers = 4", 'provider = "external"\ninference_workers = 4')
    with pytest.raises(ConfigError) as info:
        loads_run_config(ext)
    assert info.value.field == "services.trainer_address"
    assert "inference_addresses" in str(info.value)
    with pytest.raises(ConfigError) as info:
        loads_run_config(FULL, overrides=['services.trainer_address="h:1"'])
    assert info.value.field == "services.provider"
    with pytest.raises(ConfigError) as info:
        loads_run_config(ext, overrides=['services.inference_addresses=["nohost"]'])
    assert info.value.field == "services.inference_addresses[0]"


def test_dynamic_sampling_needs_groups() -> None:
    with pytest.raises(ConfigError) as info:
        loads_run_config(FULL, overrides=["batch.group_size=1"])
    assert info.value.field == "batch.group_size"


@pytest.fixture
def math_jsonl(tmp_path: Path) -> Path:
    """A 10-record math dataset."""
    path = tmp_path / "math.jsonl"
    path.write_text("".join(f'{{"prompt": "{i}+1=", "answer": "{i + 1}"}}\n' for i in range(10)))
    return path


def test_check_run_inputs(tmp_path: Path, math_jsonl: Path) -> None:
    ckpt = Path(__file__).resolve().parents[2] / "model" / "tests" / "testdata" / "qwen2"
    text = (
        f'run_dir = "{tmp_path}/run"\n[model]\npath = "{ckpt}"\n'
        f'[[datasets]]\nname = "a"\npath = "{math_jsonl}"\n'
    )
    cfg = loads_run_config(text)
    check_run_inputs(cfg)
    missing = loads_run_config(text + f'[[datasets]]\nname = "b"\npath = "{tmp_path}/nope.jsonl"\n')
    with pytest.raises(ConfigError) as info:
        check_run_inputs(missing)
    assert info.value.field == "datasets[1].path" and "nope.jsonl" in str(info.value)
    model = loads_run_config(text, overrides=[f"model.path={tmp_path}"])
    with pytest.raises(ConfigError, match=r"config\.json") as info:
        check_run_inputs(model)
    assert info.value.field == "model.path"
    # a checkpoint without its tokenizer cannot render or encode a prompt: refused at start
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text((ckpt / "config.json").read_text())
    no_tok = loads_run_config(text, overrides=[f"model.path={tmp_path}/ckpt"])
    with pytest.raises(ConfigError, match=r"holds no tokenizer\.json") as info:
        check_run_inputs(no_tok)
    assert info.value.field == "model.path"
    prefilter = loads_run_config(text, overrides=[f"prefilter.file={tmp_path}/p.jsonl"])
    with pytest.raises(ConfigError) as info:
        check_run_inputs(prefilter)
    assert info.value.field == "prefilter.file"


def test_load_from_file(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(FULL)
    assert load_run_config(path, overrides=("steps=3",)).steps == 3
    with pytest.raises(ConfigError, match="not found"):
        load_run_config(tmp_path / "missing.toml")


def test_split_uri() -> None:
    assert split_uri("s3://b/d/x.jsonl") == ("s3://b/d", "x.jsonl")
    assert split_uri("s3://b/x.jsonl") == ("s3://b", "x.jsonl")
    assert split_uri("x.jsonl") == (".", "x.jsonl")
    assert split_uri("/x.jsonl") == ("/", "x.jsonl")
    with pytest.raises(ConfigError):
        split_uri("s3://b/d/")
