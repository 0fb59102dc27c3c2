"""Every objective override and optimizer field a run config sets arrives in the real trainer.

The run config is loaded as `rlx up` loads it, the trainer's config file is written as `rlx up`
writes it (RunServices), read with rlx_trainer's own config class, and a `Trainer` is built from
it: the objective it trains with carries the run's override values in its components, and its
optimizer makes the AdamW steps the run's optimizer fields give, worked out by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import rlx_core.configs.trainer as core_trainer
from rlx_controller.rundir import RunPaths
from rlx_core.config import load_config
from rlx_core.configs.objective import PRESET_DEFAULTS
from rlx_core.configs.run import loads_run_config
from rlx_launch.services import RunServices
from rlx_model import init_params, tiny_config
from rlx_trainer.config import OptimizerConfig, TrainerConfig
from rlx_trainer.trainer import Trainer

BASE = """
run_dir = "/runs/r"
[model]
path = "/models/m"
[[datasets]]
name = "a"
path = "a.jsonl"
[batch]
prompts = 2
group_size = 4
"""

# a value other than every preset's default, per override (ppo's own ones are left out: ppo
# needs a value head, which the run config refuses)
VALUES: dict[str, float | bool] = {
    "eps_low": 0.15,
    "eps_high": 0.35,
    "beta": 0.02,
    "tis_cap": 3.0,
    "dual_clip": 4.0,
    "scaled": True,
    "group_baseline": True,
}
# the attribute of the component that holds an override
ATTRIBUTE = {"tis_cap": "cap"}
OPTIMIZER = OptimizerConfig(
    lr=0.1,
    schedule="constant",
    warmup_steps=1,
    decay_steps=10,
    final_lr_ratio=0.5,
    b1=0.5,
    b2=0.75,
    eps=0.1,
    weight_decay=0.2,
    clip_norm=0.5,
)
PRESETS = [p for p in PRESET_DEFAULTS if p != "ppo"]


def _components(obj: Any) -> Iterator[Any]:
    """Every component dataclass inside an RLObjective (tuples of them included)."""
    if isinstance(obj, tuple):
        for item in obj:
            yield from _components(item)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        yield obj
        for f in dataclasses.fields(obj):
            yield from _components(getattr(obj, f.name))


def _trainer_config(preset: str, tmp_path: Path) -> TrainerConfig:
    sets = [f"trainer.objective.preset={preset}"]
    sets += [f"trainer.objective.{k}={str(VALUES[k]).lower()}" for k in PRESET_DEFAULTS[preset]]
    sets += [
        f"trainer.optimizer.{f.name}={getattr(OPTIMIZER, f.name)}"
        for f in dataclasses.fields(OPTIMIZER)
    ]
    cfg = loads_run_config(BASE, overrides=sets)
    run = tmp_path / "run"
    run.mkdir()
    RunServices(cfg, RunPaths.of(run), tmp_path / "token").rest_specs(["127.0.0.1:1"])
    return load_config(TrainerConfig, run / "services" / "trainer.toml")


def test_the_trainer_config_classes_are_rlx_core_s() -> None:
    assert TrainerConfig is core_trainer.TrainerConfig
    assert OptimizerConfig is core_trainer.OptimizerConfig


@pytest.mark.parametrize("preset", PRESETS)
def test_every_override_and_optimizer_field_reaches_the_trainer(
    preset: str, tmp_path: Path
) -> None:
    config = _trainer_config(preset, tmp_path)
    assert config.objective.overrides() == {k: VALUES[k] for k in PRESET_DEFAULTS[preset]}
    assert config.optimizer == OPTIMIZER
    model = tiny_config()
    trainer = Trainer(config, model, init_params(model, 0))
    parts = list(_components(trainer.objective))
    for name, value in config.objective.overrides().items():
        attr = ATTRIBUTE.get(name, name)
        holders = [c for c in parts if hasattr(c, attr)]
        assert holders, f"{preset}: no component takes {name}"
        for c in holders:
            assert getattr(c, attr) == value, (preset, name, c)
    # a KL term (beta 0.02 > 0) gets its reference model without update.reference being set
    assert config.update.reference == "auto" and trainer.reference is not None


def test_the_trainer_s_optimizer_steps_with_the_run_s_fields(tmp_path: Path) -> None:
    config = _trainer_config("grpo", tmp_path)
    model = tiny_config()
    opt = Trainer(config, model, init_params(model, 0)).optimizer
    p0 = {"w": jnp.array([1.0, -2.0])}  # a matrix-like name: weight decay applies
    grads = [np.array([0.3, -0.1]), np.array([0.2, 0.4])]  # norms < clip_norm 0.5: not clipped
    state = opt.init(p0)
    params = p0
    for g in grads:
        updates, state = opt.update({"w": jnp.asarray(g)}, state, params)
        params = {"w": params["w"] + updates["w"]}
    # by hand, AdamW in float64: lr 0 on update 0 (linear warmup over 1), then 0.1
    c = OPTIMIZER
    p = np.array([1.0, -2.0])
    m = v = np.zeros(2)
    for t, (g, lr) in enumerate(zip(grads, [0.0, c.lr], strict=True), start=1):
        m = c.b1 * m + (1 - c.b1) * g
        v = c.b2 * v + (1 - c.b2) * g * g
        m_hat, v_hat = m / (1 - c.b1**t), v / (1 - c.b2**t)
        p = p - lr * (m_hat / (np.sqrt(v_hat) + c.eps) + c.weight_decay * p)
    np.testing.assert_allclose(np.asarray(params["w"]), p, rtol=1e-6)
