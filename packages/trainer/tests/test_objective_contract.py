"""The public contract of DESIGN §5: `preset(name, **overrides)` → RLObjective, called as
`loss, metrics = obj(logp, ObjectiveBatch(...))`, jittable, with clear errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlx_core.errors import ConfigError, InvalidArgument
from rlx_trainer.objective import (
    K3KL,
    PRESETS,
    GroupAdvantage,
    IndividualAggregation,
    MaskedISGrad,
    ObjectiveBatch,
    RLObjective,
    preset,
    preset_overrides,
)

B, G, T = 2, 4, 6
ALL_PRESETS = [
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
]


def make_batch(seed: int = 0) -> tuple[jax.Array, ObjectiveBatch]:
    k = jax.random.split(jax.random.PRNGKey(seed), 7)
    logp = -jax.random.uniform(k[0], (B, G, T), minval=0.05, maxval=2.0)
    lengths = jnp.array([[6, 3, 4, 2], [1, 6, 5, 3]])
    mask = (jnp.arange(T) < lengths[..., None]).astype(jnp.float32)
    noise = lambda key, s: s * jax.random.normal(key, (B, G, T))  # noqa: E731
    return logp, ObjectiveBatch(
        old_logp=logp + noise(k[1], 0.1),
        sampler_logp=logp + noise(k[2], 0.1),
        ref_logp=logp + noise(k[3], 0.2),
        mask=mask,
        rewards=jnp.array([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.5]]),
        values=jax.random.normal(k[4], (B, G, T)),
        max_len=8,
    )


def test_every_design_preset_exists_and_runs_jitted() -> None:
    assert sorted(PRESETS) == sorted(ALL_PRESETS)
    logp, batch = make_batch()
    for name in ALL_PRESETS:
        obj = preset(name)
        traces = []

        def traced(lp: jax.Array, b: ObjectiveBatch, o=obj, t=traces):
            t.append(1)
            return o(lp, b)

        step = jax.jit(jax.value_and_grad(traced, has_aux=True))
        (loss, metrics), grad = step(logp, batch)
        assert loss.shape == () and loss.dtype == jnp.float32, name
        assert metrics["loss"] == loss, name
        assert grad.shape == logp.shape and bool(jnp.isfinite(grad).all()), name
        assert float(jnp.abs(grad).sum()) > 0, name
        for key, value in metrics.items():
            assert isinstance(value, jax.Array) and value.shape == (), (name, key)
        # the same shapes again reuse the compiled program
        step(logp + 0.01, batch)
        assert len(traces) == 1, name


def test_contract_call_with_the_design_overrides() -> None:
    logp, batch = make_batch()
    obj = preset("grpo", eps_low=0.2, eps_high=0.2, beta=0.04)
    assert isinstance(obj, RLObjective)
    direct = RLObjective(
        agg=IndividualAggregation(),
        IS=None,
        adv=GroupAdvantage(normalise_std=True),
        grad_1=MaskedISGrad(eps_low=0.2, eps_high=0.2),
        grad_2=K3KL(beta=0.04),
    )
    assert obj == direct
    loss, metrics = obj(logp, batch)
    np.testing.assert_allclose(loss, direct(logp, batch)[0], rtol=0, atol=0)
    expected = {
        "loss",
        "objective",
        "pg_objective",
        "reg_objective",
        "ratio_mean",
        "ratio_max",
        "is_weight_mean",
        "is_weight_max",
        "clip_frac_low",
        "clip_frac_high",
        "kl_k1",
        "kl_k3",
        "entropy_proxy",
        "adv_mean",
        "adv_abs_mean",
        "response_tokens",
    }
    assert expected <= set(metrics)
    np.testing.assert_allclose(metrics["objective"], -loss, rtol=1e-6)
    np.testing.assert_allclose(
        metrics["pg_objective"] + metrics["reg_objective"], metrics["objective"], rtol=1e-6
    )


def test_unknown_preset_names_it_with_a_hint() -> None:
    with pytest.raises(ConfigError, match=r"'grpoo'.*did you mean 'grpo'") as info:
        preset("grpoo")
    assert info.value.field == "preset"


def test_unknown_override_names_it_with_a_hint() -> None:
    with pytest.raises(ConfigError, match=r"eps_hgh.*did you mean 'eps_high'") as info:
        preset("grpo", eps_hgh=0.3)
    assert info.value.field == "eps_hgh"


def test_clip_override_on_a_preset_without_clip_is_refused_but_none_is_default() -> None:
    with pytest.raises(ConfigError, match=r"eps_low.*'reinforce' has no clip"):
        preset("reinforce", eps_low=0.2)
    assert preset("reinforce", eps_low=None, eps_high=None, beta=None, tis_cap=None) == preset(
        "reinforce"
    )


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"eps_low": -0.1}, "eps_low"),
        ({"eps_low": 1.5}, "eps_low"),
        ({"eps_high": -1.0}, "eps_high"),
        ({"beta": -0.01}, "beta"),
        ({"tis_cap": 0.0}, "tis_cap"),
        ({"beta": "0.04"}, "beta"),
        ({"dual_clip": 0.5}, "dual_clip"),
    ],
)
def test_bad_override_values_name_the_field(override: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        preset("grpo", **override)
    assert info.value.field == field
    assert str(info.value).startswith(field)


def test_every_preset_takes_the_common_overrides() -> None:
    for name in ALL_PRESETS:
        names = set(preset_overrides(name))
        assert {"beta", "tis_cap"} <= names, name
        preset(name, beta=0.1, tis_cap=2.0)
        if "eps_low" in names:
            preset(name, eps_low=0.1, eps_high=0.3)


def test_bad_shapes_name_the_field() -> None:
    logp, batch = make_batch()
    obj = preset("grpo")
    bad = ObjectiveBatch(
        old_logp=batch.old_logp[:, :, :-1],
        sampler_logp=batch.sampler_logp,
        mask=batch.mask,
        rewards=batch.rewards,
    )
    with pytest.raises(InvalidArgument, match=r"^old_logp: shape \(2, 4, 5\)"):
        obj(logp, bad)
    bad_r = ObjectiveBatch(
        old_logp=batch.old_logp,
        sampler_logp=batch.sampler_logp,
        mask=batch.mask,
        rewards=batch.rewards[:, :3],
    )
    with pytest.raises(InvalidArgument, match=r"^rewards: shape"):
        obj(logp, bad_r)


def test_kl_without_ref_logp_names_the_field() -> None:
    logp, batch = make_batch()
    no_ref = ObjectiveBatch(
        old_logp=batch.old_logp,
        sampler_logp=batch.sampler_logp,
        mask=batch.mask,
        rewards=batch.rewards,
    )
    with pytest.raises(InvalidArgument, match=r"^ref_logp:"):
        preset("grpo", beta=0.04)(logp, no_ref)
    loss, metrics = preset("grpo", beta=0.0)(logp, no_ref)
    assert "kl_k1" not in metrics and bool(jnp.isfinite(loss))


def test_gae_without_values_names_the_field() -> None:
    logp, batch = make_batch()
    no_values = ObjectiveBatch(
        old_logp=batch.old_logp,
        sampler_logp=batch.sampler_logp,
        mask=batch.mask,
        rewards=batch.rewards,
    )
    with pytest.raises(InvalidArgument, match=r"^values:"):
        preset("ppo")(logp, no_values)


def test_value_predictions_only_for_critic_objectives() -> None:
    logp, batch = make_batch()
    with pytest.raises(InvalidArgument, match=r"^values: this objective has no value loss"):
        preset("grpo")(logp, batch, values=logp)
    with pytest.raises(InvalidArgument, match=r"^values: shape \(2, 4\)"):
        preset("ppo")(logp, batch, values=logp[..., 0])
