"""rlx_core.configs: the services' config classes without JAX, and the objective presets' table
they and the run config validate against."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from rlx_core.config import from_dict, to_toml
from rlx_core.configs.inference import EngineConfig, InferenceConfig, ModelSource
from rlx_core.configs.objective import (
    COMMON_OVERRIDES,
    OVERRIDES,
    PRESET_DEFAULTS,
    PRESETS,
    ObjectiveConfig,
    presets_taking,
)
from rlx_core.configs.paramserver import ParamServerConfig
from rlx_core.configs.trainer import OptimizerConfig, TrainerConfig, UpdateConfig
from rlx_core.configs.verifier import VerifierConfig
from rlx_core.errors import ConfigError


def test_the_table_has_design_s_presets_and_every_override_is_a_field() -> None:
    assert PRESETS == (
        "grpo",
        "dapo",
        "dr_grpo",
        "reinforce",
        "token_reinforce",
        "rloo",
        "reinforce_pp",
        "cispo",
        "gspo",
        "ppo",
        "decoupled_ppo",
    )
    fields = {f.name for f in dataclasses.fields(ObjectiveConfig)} - {"preset"}
    assert set(OVERRIDES) == fields
    assert len(OVERRIDES) == 12
    for name, defaults in PRESET_DEFAULTS.items():
        assert {"beta", "tis_cap"} <= set(defaults), name
        assert set(defaults) <= set(OVERRIDES), name
    # DESIGN §5's defaults: grpo has a KL term, dapo clips higher and has none
    assert PRESET_DEFAULTS["grpo"]["beta"] == 0.04
    assert PRESET_DEFAULTS["dapo"]["eps_high"] == 0.28 and PRESET_DEFAULTS["dapo"]["beta"] == 0.0
    assert presets_taking("scaled") == ["rloo"]
    assert set(COMMON_OVERRIDES) <= set(OVERRIDES)


@pytest.mark.parametrize(
    ("preset", "kl"),
    [("grpo", True), ("dapo", False), ("reinforce_pp", True), ("cispo", False)],
)
def test_the_kl_term_follows_the_preset_default_unless_overridden(preset: str, kl: bool) -> None:
    assert ObjectiveConfig(preset=preset).has_kl is kl
    assert ObjectiveConfig(preset=preset, beta=0.0).has_kl is False
    assert ObjectiveConfig(preset=preset, beta=0.5).has_kl is True


def test_effective_parameters_are_the_defaults_with_the_overrides() -> None:
    cfg = ObjectiveConfig(preset="rloo", scaled=True, beta=0.1)
    assert cfg.overrides() == {"beta": 0.1, "scaled": True}
    assert cfg.effective() == {"beta": 0.1, "tis_cap": None, "scaled": True}


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"preset": "grpoo"}, "preset", r"unknown objective preset 'grpoo'; did you mean 'grpo'"),
        ({"preset": "ppo"}, "preset", "needs a value head"),
        ({"preset": "reinforce", "eps_low": 0.1}, "eps_low", "has no clip for eps_low"),
        ({"preset": "grpo", "scaled": True}, "scaled", r"takes no scaled \(presets taking it"),
        ({"preset": "grpo", "eps_low": 1.5}, "eps_low", "must be 0-1"),
        ({"preset": "grpo", "beta": -0.1}, "beta", "must be >= 0"),
        ({"preset": "grpo", "tis_cap": 0}, "tis_cap", "must be > 0"),
        ({"preset": "grpo", "dual_clip": 0.5}, "dual_clip", "must be > 1"),
        ({"preset": "grpo", "beta": float("inf")}, "beta", "must be finite"),
        ({"preset": "grpo", "whiten": True}, "whiten", "takes no whiten"),
    ],
)
def test_bad_objectives_name_the_field(data: dict, field: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        from_dict(ObjectiveConfig, data, path="objective")
    assert info.value.field == f"objective.{field}"


def test_reference_auto_is_init_exactly_when_the_objective_has_a_kl_term() -> None:
    assert TrainerConfig().reference == "init"  # grpo's default beta 0.04
    no_kl = from_dict(TrainerConfig, {"objective": {"beta": 0.0}})
    assert no_kl.reference == "none"
    explicit = from_dict(
        TrainerConfig, {"objective": {"beta": 0.0}, "update": {"reference": "init"}}
    )
    assert explicit.reference == "init"
    with pytest.raises(ConfigError, match="preset's default") as info:
        from_dict(TrainerConfig, {"update": {"reference": "none"}})
    assert info.value.field == "update.reference"


@pytest.mark.parametrize(
    "cfg",
    [
        TrainerConfig(
            optimizer=OptimizerConfig(b1=0.8, b2=0.95, eps=1e-6),
            objective=ObjectiveConfig(preset="reinforce_pp", group_baseline=True, dual_clip=3.0),
            update=UpdateConfig(minibatches=2, reference="init"),
        ),
        InferenceConfig(
            model=ModelSource(checkpoint="/ckpt"), engine=EngineConfig(slots=3), worker_index=2
        ),
        ParamServerConfig(max_versions=5, replica_id=1),
        VerifierConfig(backend="local"),
    ],
)
def test_every_service_config_reads_back_what_to_toml_writes(cfg: object) -> None:
    assert from_dict(type(cfg), tomllib.loads(to_toml(cfg))) == cfg
