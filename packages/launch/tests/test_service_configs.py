"""Every settable field of the run config's service sections reaches the service that reads it.

For each leaf field of `[trainer]`, `[inference]`, `[verifier]` and `[paramserver]` (found by
walking the dataclasses, so a field added later is covered without touching this file), a run
config sets it to a valid value other than its default; the service configs are written as `rlx
up` writes them (RunServices for a local run, TpuRunServices for the TPU nodes), read back with
each service's own config class and loader, and the value must be there, as must every other
section of the run config.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest

from rlx_controller.rundir import RunPaths
from rlx_core.config import load_config, loads_config
from rlx_core.configs.inference import InferenceConfig
from rlx_core.configs.objective import PRESET_DEFAULTS, presets_taking
from rlx_core.configs.paramserver import ParamServerConfig
from rlx_core.configs.run import RunConfig, config_hash, loads_run_config
from rlx_core.configs.run_sections import InferenceSection, TrainerSection
from rlx_core.configs.server import ServerConfig
from rlx_core.configs.trainer import MeshConfig, ModelOptions, TrainerConfig
from rlx_core.configs.verifier import VerifierConfig
from rlx_core.errors import ConfigError
from rlx_core.storage import open_storage
from rlx_launch.local import ServiceHandle
from rlx_launch.node import config_key
from rlx_launch.services import RunServices
from rlx_launch.tpu_services import TpuRunServices

BASE = """
run_dir = "/runs/r"
[model]
path = "/models/m"
[[datasets]]
name = "a"
path = "a.jsonl"
[batch]
prompts = 4
group_size = 4
max_prompt_tokens = 20
max_new_tokens = 40
[services]
inference_workers = 2
paramserver_replicas = 2
verifier_workers = 2
"""

TPU = """
[services]
provider = "gcp-tpu"
[provision]
project = "proj"
zone = "us-east5-a"
token_secret = "rlx-token"
[provision.trainer]
accelerator_type = "v5p-8"
[provision.inference]
accelerator_type = "v5p-8"
"""

# The sections the run hands to a service, and which service reads each: the run's field path
# prefix -> (service kind, the field's path in that service's config).
SECTIONS: dict[str, tuple[str, str]] = {
    **{f"trainer.{f.name}": ("trainer", f.name) for f in dataclasses.fields(TrainerSection)},
    **{f"inference.{f.name}": ("inference", f.name) for f in dataclasses.fields(InferenceSection)},
    **{f"verifier.{f.name}": ("verifier", f.name) for f in dataclasses.fields(VerifierConfig)},
    **{
        f"paramserver.{f.name}": ("paramserver", f.name)
        for f in dataclasses.fields(ParamServerConfig)
    },
}
RUN_OWNED = {"verifier.server", "paramserver.server", "paramserver.replica_id"}  # refused if set
LOADERS = {
    "trainer": TrainerConfig,
    "inference": InferenceConfig,
    "verifier": VerifierConfig,
    "paramserver": ParamServerConfig,
}
# objective overrides only the ppo preset takes: ppo needs a value head, which rlx has not, so no
# valid run config sets them (checked below, from the presets' table)
PPO_ONLY = sorted(n for d in PRESET_DEFAULTS.values() for n in d if presets_taking(n) == ["ppo"])
# values the generic rule below would get wrong, with the other fields they need
SPECIAL: dict[str, tuple[Any, tuple[str, ...]]] = {
    "trainer.objective.preset": ("dapo", ()),
    "trainer.objective.dual_clip": (3.0, ()),  # c > 1
    "trainer.update.reference": ("init", ()),  # "none" would drop grpo's KL term's reference
    "trainer.model.param_dtype": ("bfloat16", ("model.param_dtype=bfloat16",)),
    "trainer.model.compute_dtype": ("bfloat16", ("model.compute_dtype=bfloat16",)),
    "inference.engine.block_size": (32, ()),  # max_context must stay a multiple of it
    "inference.engine.max_context": (4096, ()),
    "verifier.judge.sandbox_runner": ("per-run", ()),
    "verifier.backend": ("lambda", ("verifier.aws_lambda.function_name=f",)),
}


def _config_class(tp: Any) -> type | None:
    args = [a for a in get_args(tp) if a is not type(None)]
    inner = args[0] if get_origin(tp) is not None and len(args) == 1 else tp
    return inner if dataclasses.is_dataclass(inner) else None


def _leaves(cls: type, prefix: str) -> Iterator[tuple[str, Any, Any]]:
    """(dotted path, type, default) of every leaf field under config class `cls`."""
    hints = typing.get_type_hints(cls)
    default = cls()
    for f in dataclasses.fields(cls):
        path = f"{prefix}.{f.name}"
        sub = _config_class(hints[f.name])
        if sub is not None:
            yield from _leaves(sub, path)
        else:
            yield path, hints[f.name], getattr(default, f.name)


def _run_leaves() -> list[tuple[str, Any, Any]]:
    base = loads_run_config(BASE)
    out = []
    for section in SECTIONS:
        if section in RUN_OWNED:
            continue
        top, name = section.split(".")
        hints = typing.get_type_hints(type(getattr(base, top)))
        sub = _config_class(hints[name])
        if sub is None:
            out.append((section, hints[name], getattr(getattr(base, top), name)))
            continue
        for path, tp, default in _leaves(sub, section):
            # a section's default in a run may differ from its class's (merged defaults)
            value: Any = base
            for part in path.split("."):
                value = getattr(value, part, None) if value is not None else None
            out.append((path, tp, value if value is not None else default))
    return out


def _other_value(tp: Any, default: Any) -> Any:
    """A value of type `tp` other than `default`, valid for the fields of these sections."""
    args = [a for a in get_args(tp) if a is not type(None)]
    if get_origin(tp) is Literal:
        return next(a for a in get_args(tp) if a != default)
    base = args[0] if args and get_origin(tp) is not Literal else tp
    if base is bool:
        return not default
    if base is int:
        return (default or 0) + 1
    if base is float:
        return default / 2 if default else 0.5
    if base is str:
        return "/tmp/rlx-x" if default in ("", "~/.cache/rlx/jax-compile") else default + "x"
    raise AssertionError(f"no rule for {tp!r}")


def _toml(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (str, bool)) else repr(value)


def _case(path: str, tp: Any, default: Any) -> tuple[Any, list[str]]:
    """(the value to set, the overrides that set it)."""
    value, extra = SPECIAL.get(path) or (_other_value(tp, default), ())
    sets = [f"{path}={_toml(value)}", *extra]
    name = path.removeprefix("trainer.objective.")
    if path.startswith("trainer.objective.") and name != "preset":
        # a preset that takes the override (the first, in DESIGN's order)
        sets.append(f"trainer.objective.preset={presets_taking(name)[0]}")
    return value, sets


CASES = [p for p in _run_leaves() if p[0].removeprefix("trainer.objective.") not in PPO_ONLY]


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _local_configs(cfg: RunConfig, tmp_path: Path) -> dict[str, Any]:
    """The service configs a local `rlx up` writes, read back with each service's class."""
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    services = RunServices(cfg, RunPaths.of(run), tmp_path / "token")
    first, _ = services.specs()
    specs = [*first, *services.rest_specs(["127.0.0.1:7001", "127.0.0.1:7002"])]
    out = {}
    for spec in specs:
        flag, path = spec.args
        assert flag == "--config"
        out[spec.name] = load_config(LOADERS[spec.kind], path)
    return out


class _NoApi:
    def close(self) -> None:
        pass


def _tpu_configs(cfg: RunConfig, tmp_path: Path) -> dict[str, Any]:
    """The service configs TpuRunServices puts in the run directory for the node agents."""
    storage = open_storage(str(tmp_path / "run"))
    paths = RunPaths(uri="gs://bucket/runs/r", storage=storage, work=tmp_path / "work")
    services = TpuRunServices(cfg, paths, tmp_path / "token", api=_NoApi())  # type: ignore[arg-type]
    for i, name in enumerate(services.paramservers):
        services.remote.handles[name] = ServiceHandle(
            name=name, kind="paramserver", address=f"10.0.0.{i}:50100", pid=0, log="", port=50100
        )
    services._write_configs()
    out = {}
    for name in cfg.services.service_names():
        for n in cfg.services.service_names()[name]:
            spec = json.loads(storage.get(config_key(n)))
            assert spec["args"] == []
            out[n] = loads_config(LOADERS[name], spec["config"], source=n)
    return out


def _assert_sections_arrive(cfg: RunConfig, configs: dict[str, Any]) -> None:
    """Every section of the run config is, whole, in the config of each service that reads it
    (the run-sized defaults where a section is left out)."""
    effective = {
        "trainer.model": cfg.trainer.model
        or ModelOptions(param_dtype=cfg.model.param_dtype, compute_dtype=cfg.model.compute_dtype),
        "trainer.mesh": cfg.trainer.mesh or configs["trainer"].mesh,
        "inference.engine": cfg.inference.engine or configs["inference-0"].engine,
    }
    if cfg.services.provider == "local" and cfg.trainer.mesh is None:
        assert effective["trainer.mesh"] == MeshConfig()
    for section, (kind, name) in SECTIONS.items():
        if section in RUN_OWNED:
            continue
        want = effective.get(section, _get(cfg, section))
        names = [n for n in configs if n == kind or n.startswith(f"{kind}-")]
        assert names, kind
        for n in names:
            assert getattr(configs[n], name) == want, f"{section} differs in {n}"
    for i in range(cfg.services.paramserver_replicas):
        assert configs[f"paramserver-{i}"].replica_id == i
        assert configs[f"paramserver-{i}"].server == ServerConfig()
    for i in range(cfg.services.inference_workers):
        assert configs[f"inference-{i}"].worker_index == i


def test_the_walk_covers_every_section_field() -> None:
    paths = {p for p, _, _ in _run_leaves()}
    assert {"trainer.optimizer.b1", "trainer.optimizer.b2", "trainer.optimizer.eps"} <= paths
    assert {f"trainer.objective.{n}" for n in ("dual_clip", "scaled", "group_baseline")} <= paths
    assert "inference.engine.cache_mib" in paths and "inference.limits.max_samples" in paths
    assert "verifier.judge.workers" in paths and "paramserver.max_versions" in paths
    assert len(CASES) == len(paths) - len(PPO_ONLY) > 70


@pytest.mark.parametrize(("path", "tp", "default"), CASES, ids=[c[0] for c in CASES])
def test_a_set_field_reaches_its_service(path: str, tp: Any, default: Any, tmp_path: Path) -> None:
    value, sets = _case(path, tp, default)
    assert value != default
    cfg = loads_run_config(BASE, overrides=sets)
    assert _get(cfg, path) == value
    assert config_hash(cfg) != config_hash(loads_run_config(BASE))  # a resume would refuse it
    section = next(s for s in SECTIONS if path == s or path.startswith(s + "."))
    kind, name = SECTIONS[section]
    service_path = name + path.removeprefix(section)
    configs = _local_configs(cfg, tmp_path)
    for n, config in configs.items():
        if n == kind or n.startswith(f"{kind}-"):
            assert _get(config, service_path) == value, n
    _assert_sections_arrive(cfg, configs)


@pytest.mark.parametrize("name", PPO_ONLY)
def test_ppo_only_overrides_are_refused_with_the_reason(name: str) -> None:
    assert PPO_ONLY == ["gamma", "lam", "vf_clip", "vf_coef", "whiten"]
    with pytest.raises(ConfigError, match="takes no") as info:
        value = "true" if isinstance(PRESET_DEFAULTS["ppo"][name], bool) else "0.5"
        loads_run_config(BASE, overrides=[f"trainer.objective.{name}={value}"])
    assert info.value.field == f"trainer.objective.{name}"
    with pytest.raises(ConfigError, match="needs a value head"):
        loads_run_config(BASE, overrides=["trainer.objective.preset=ppo"])


def test_defaults_give_each_service_the_run_s_choices(tmp_path: Path) -> None:
    cfg = loads_run_config(BASE)
    configs = _local_configs(cfg, tmp_path)
    _assert_sections_arrive(cfg, configs)
    trainer = configs["trainer"]
    # grpo: π_old is the generating version, and the reference the initial weights
    assert trainer.old_policy == "generation" and trainer.reference == "init"
    # (j, k) = (1, 1) with its default lag 1: batch b comes from version b - 1
    assert trainer.keep_versions == 1 and trainer.keep_every == 1
    assert trainer.optimizer == type(trainer.optimizer)()  # rlx_trainer's own defaults
    assert trainer.paramserver.addresses == ("127.0.0.1:7001", "127.0.0.1:7002")
    assert trainer.paramserver.token_file == str(tmp_path / "token")
    assert trainer.checkpoint.uri == str(tmp_path / "run" / "checkpoints")
    engine = configs["inference-1"].engine
    # the run-sized engine: one unit's 16 samples together, 20 + 40 tokens in 16-token blocks
    assert (engine.slots, engine.max_context, engine.span_bucket, engine.cache_mib) == (
        16,
        64,
        64,
        64,
    )
    assert configs["inference-1"].model.checkpoint == "/models/m"
    assert configs["paramserver-1"].max_versions == 8
    assert configs["verifier-0"] == VerifierConfig()


def test_tpu_nodes_get_the_same_sections(tmp_path: Path) -> None:
    sets = [
        "run_dir=gs://bucket/runs/r",
        "trainer.optimizer.b2=0.95",
        "trainer.objective.preset=reinforce_pp",
        "trainer.objective.group_baseline=true",
        "inference.limits.max_prompts=9",
        "verifier.judge.math_workers=3",
        "paramserver.chunk_kib=1024",
    ]
    cfg = loads_run_config(BASE + TPU.replace("[services]\n", ""), overrides=sets)
    assert cfg.services.provider == "gcp-tpu"
    configs = _tpu_configs(cfg, tmp_path)
    _assert_sections_arrive(cfg, configs)
    trainer = configs["trainer"]
    assert trainer.optimizer.b2 == 0.95 and trainer.objective.group_baseline is True
    assert trainer.mesh == MeshConfig(data=1, fsdp=0, tensor=1)  # provision.trainer_mesh
    assert trainer.paramserver.token_file is None  # the node's own token
    assert trainer.checkpoint.staging_dir == ""
    assert trainer.paramserver.addresses == ("10.0.0.0:50100", "10.0.0.1:50100")
    # a slice's inference devices are one mesh of provision.inference_tensor_parallel
    assert configs["inference-0"].engine.tensor_parallel == 0
    assert configs["verifier-1"].judge.math_workers == 3


def test_tpu_sections_must_agree_with_provision() -> None:
    text = BASE + TPU.replace("[services]\n", "")
    with pytest.raises(ConfigError, match=r"provision\.trainer_mesh") as info:
        loads_run_config(text, overrides=["run_dir=gs://b/r", "trainer.mesh.data=2"])
    assert info.value.field == "trainer.mesh"
    with pytest.raises(ConfigError, match="inference_tensor_parallel") as info:
        loads_run_config(text, overrides=["run_dir=gs://b/r", "inference.engine.slots=8"])
    assert info.value.field == "inference.engine.tensor_parallel"


def test_a_written_trainer_config_is_plain_toml_with_comments(tmp_path: Path) -> None:
    cfg = loads_run_config(BASE, overrides=["trainer.objective.beta=0", "trainer.optimizer.b1=0.8"])
    RunServices(cfg, RunPaths.of(tmp_path / "run"), tmp_path / "token").rest_specs(["h:1"])
    text = (tmp_path / "run" / "services" / "trainer.toml").read_text()
    data = tomllib.loads(text)
    assert data["objective"] == {"preset": "grpo", "beta": 0.0}  # unset overrides: not written
    assert data["optimizer"]["b1"] == 0.8
    assert "# Adam β1, 0-1" in text  # the field's doc, from rlx_core.configs.trainer


@pytest.mark.parametrize(
    ("staleness", "keep", "every"),
    [("", 1, 1), ("reload=1\naccept=1\nlag=0", 0, 1), ("reload=4\naccept=8\nlag=5", 8, 4)],
)
def test_the_trainer_keeps_the_versions_the_schedule_can_still_use(
    tmp_path: Path, staleness: str, keep: int, every: int
) -> None:
    """π_old = the generating version: the trainer holds (and checkpoints) the versions batches
    still to train may come from: lag + j - 1 back, the multiples of j."""
    cfg = loads_run_config(BASE + f"[staleness]\n{staleness}\n")
    trainer = _local_configs(cfg, tmp_path)["trainer"]
    assert (trainer.keep_versions, trainer.keep_every) == (keep, every)
    assert cfg.staleness.max_staleness == keep
    ppo = loads_run_config(BASE, overrides=["trainer.objective.preset=decoupled_ppo"])
    assert _local_configs(ppo, tmp_path)["trainer"].old_policy == "step_start"


def test_the_models_dtypes_reach_the_trainer_and_every_worker(tmp_path: Path) -> None:
    """The sampler computes as the trainer does: bf16 compute on f32 params runs in bf16 in
    every worker too (it once ran f32 there, and the "mismatch" was the dtypes' difference)."""
    cfg = loads_run_config(BASE, overrides=["model.compute_dtype=bfloat16"])
    configs = _local_configs(cfg, tmp_path)
    trainer = configs["trainer"].model
    assert (trainer.param_dtype, trainer.compute_dtype) == ("float32", "bfloat16")
    for name in ("inference-0", "inference-1"):
        model = configs[name].model
        assert (model.dtype, model.compute_dtype) == ("float32", "bfloat16"), name
