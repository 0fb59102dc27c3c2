"""Values and gradients worked out by hand on tiny cases, and the invariances every objective must
keep (padding, permutations within a group, equal rewards, averaging over prompts)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlx_core.errors import ConfigError
from rlx_trainer.objective import (
    K3KL,
    PRESETS,
    BatchNormAdvantage,
    Context,
    EntropyBonus,
    GroupAdvantage,
    GroupAggregation,
    IndividualAggregation,
    LogProbGrad,
    MaskedISGrad,
    ObjectiveBatch,
    RLObjective,
    SequenceIS,
    ppo,
    preset,
)

A = 0.5 / math.sqrt(0.5)  # GRPO advantage of rewards (1, 0): ±0.5 / std(ddof=1) = ±0.70710678


def batch_of(
    logp: list,
    *,
    log_r: list | None = None,
    mask: list | None = None,
    rewards: list,
    ref_minus_logp: list | None = None,
    old_minus_sampler: list | None = None,
    max_len: int | None = None,
) -> tuple[jax.Array, ObjectiveBatch]:
    """A batch from Python lists: old_logp = logp − log r; sampler_logp = old_logp − the given
    log(π_old/π_sampler); ref_logp = logp + the given log(π_ref/π_θ)."""
    lp = jnp.array(logp, jnp.float32)
    old = lp - (0.0 if log_r is None else jnp.array(log_r, jnp.float32))
    sampler = old - (0.0 if old_minus_sampler is None else jnp.array(old_minus_sampler))
    ref = None if ref_minus_logp is None else lp + jnp.array(ref_minus_logp, jnp.float32)
    m = jnp.ones_like(lp) if mask is None else jnp.array(mask, jnp.float32)
    return lp, ObjectiveBatch(
        old_logp=old,
        sampler_logp=sampler,
        ref_logp=ref,
        mask=m,
        rewards=jnp.array(rewards, jnp.float32),
        max_len=max_len,
    )


def loss_and_grad(obj: RLObjective, logp: jax.Array, batch: ObjectiveBatch):
    return jax.value_and_grad(lambda lp: obj(lp, batch), has_aux=True)(logp)


# ------------------------------------------------------------------------------- by hand


def test_grpo_on_policy_by_hand() -> None:
    # one prompt, samples of lengths 2 and 1, rewards (1, 0), π_θ = π_old, no KL:
    # J = 1/2 (1/2 (A + A) + 1/1 (−A)) = 0; ∂loss/∂logp = −Agg·Adv = −(1/4)A, −(1/4)A, +(1/2)A, 0
    logp, batch = batch_of(
        [[[-0.5, -1.0], [-0.3, 9.0]]], mask=[[[1, 1], [1, 0]]], rewards=[[1.0, 0.0]]
    )
    (loss, m), grad = loss_and_grad(preset("grpo", beta=0.0), logp, batch)
    np.testing.assert_allclose(loss, 0.0, atol=1e-7)
    np.testing.assert_allclose(grad, [[[-A / 4, -A / 4], [A / 2, 0.0]]], rtol=1e-5)
    assert float(m["ratio_mean"]) == 1.0 and float(m["ratio_max"]) == 1.0
    assert float(m["clip_frac_low"]) == 0.0 and float(m["clip_frac_high"]) == 0.0
    np.testing.assert_allclose(m["entropy_proxy"], (0.5 + 1.0 + 0.3) / 3, rtol=1e-6)
    assert float(m["response_tokens"]) == 3.0


def test_ppo_clip_mask_by_hand() -> None:
    # rewards (1, 0): A = (+0.7071, −0.7071). Sample 0: r = 1.5 > 1.2 with A > 0 → clipped high;
    # sample 1: r = 0.5 < 0.8 with A < 0 → clipped low. Both keep PPO's value, lose the gradient:
    # J = 1/2 (1.2 A − 0.8 A) = 0.2 A
    logp, batch = batch_of(
        [[[-1.0], [-1.0]]], log_r=[[[math.log(1.5)], [math.log(0.5)]]], rewards=[[1.0, 0.0]]
    )
    (loss, m), grad = loss_and_grad(preset("grpo", beta=0.0), logp, batch)
    np.testing.assert_allclose(loss, -0.2 * A, rtol=1e-5)
    np.testing.assert_array_equal(grad, jnp.zeros_like(grad))
    assert float(m["clip_frac_low"]) == 0.5 and float(m["clip_frac_high"]) == 0.5

    # swap the ratios: r = 0.5 with A > 0 and r = 1.5 with A < 0 are inside PPO's min: not
    # clipped, J = 1/2 (0.5 A − 1.5 A), ∂loss/∂logp_i = −1/2 r_i A_i
    logp, batch = batch_of(
        [[[-1.0], [-1.0]]], log_r=[[[math.log(0.5)], [math.log(1.5)]]], rewards=[[1.0, 0.0]]
    )
    (loss, m), grad = loss_and_grad(preset("grpo", beta=0.0), logp, batch)
    np.testing.assert_allclose(loss, 0.5 * A, rtol=1e-5)
    np.testing.assert_allclose(grad, [[[-0.25 * A], [0.75 * A]]], rtol=1e-5)
    assert float(m["clip_frac_low"]) == 0.0 and float(m["clip_frac_high"]) == 0.0


def test_dual_clip_by_hand() -> None:
    # A < 0 with r = 4 > c = 3: dual-clip PPO caps the loss at c·A and stops the gradient
    logp, batch = batch_of(
        [[[-1.0], [-1.0]]], log_r=[[[0.0], [math.log(4.0)]]], rewards=[[1.0, 0.0]]
    )
    (loss, m), grad = loss_and_grad(preset("grpo", beta=0.0, dual_clip=3.0), logp, batch)
    np.testing.assert_allclose(loss, -0.5 * (A - 3.0 * A), rtol=1e-5)
    np.testing.assert_allclose(grad, [[[-0.5 * A], [0.0]]], rtol=1e-5)
    assert float(m["clip_frac_high"]) == 0.5
    # without it the token is unclipped: gradient −1/2 · r · A = +2A
    _, grad = loss_and_grad(preset("grpo", beta=0.0), logp, batch)
    np.testing.assert_allclose(grad, [[[-0.5 * A], [2.0 * A]]], rtol=1e-5)


def test_cispo_clips_the_weight_but_keeps_the_gradient() -> None:
    # r = 1.5 is clipped to 1.28 as a weight; the token still gets −Agg·1.28·A (Agg = 1/2)
    logp, batch = batch_of(
        [[[-1.0], [-2.0]]], log_r=[[[math.log(1.5)], [0.0]]], rewards=[[1.0, 0.0]]
    )
    (loss, m), grad = loss_and_grad(preset("cispo"), logp, batch)
    np.testing.assert_allclose(loss, -0.5 * (1.28 * A * -1.0 + 1.0 * -A * -2.0), rtol=1e-5)
    np.testing.assert_allclose(grad, [[[-0.5 * 1.28 * A], [0.5 * A]]], rtol=1e-5)
    assert float(m["clip_frac_high"]) == 0.5
    np.testing.assert_allclose(m["is_weight_max"], 1.28, rtol=1e-6)


def test_k3_kl_by_hand() -> None:
    # equal rewards (A = 0), π_ref/π_θ = 2 on both tokens: K3 = 2 − ln 2 − 1 = 0.3068528;
    # J = −β K3; ∂J/∂logp = Agg·β(ρ − 1) = 1/2 · 0.1 · 1
    logp, batch = batch_of(
        [[[-1.0], [-2.0]]], rewards=[[1.0, 1.0]], ref_minus_logp=[[[math.log(2.0)]] * 2]
    )
    (loss, m), grad = loss_and_grad(preset("grpo", beta=0.1), logp, batch)
    k3 = 1.0 - math.log(2.0)
    np.testing.assert_allclose(loss, 0.1 * k3, rtol=1e-5)
    np.testing.assert_allclose(grad, [[[-0.05], [-0.05]]], rtol=1e-5)
    np.testing.assert_allclose(m["kl_k3"], k3, rtol=1e-5)
    np.testing.assert_allclose(m["kl_k1"], -math.log(2.0), rtol=1e-5)
    np.testing.assert_allclose(m["reg_objective"], -0.1 * k3, rtol=1e-5)
    assert float(m["pg_objective"]) == 0.0


def test_k2_kl_by_hand() -> None:
    # reinforce_pp's K2: −β ½ (log π_θ − log π_ref)² with log π_θ − log π_ref = −ln 2
    logp, batch = batch_of(
        [[[-1.0], [-2.0]]], rewards=[[1.0, 1.0]], ref_minus_logp=[[[math.log(2.0)]] * 2]
    )
    (loss, _), grad = loss_and_grad(preset("reinforce_pp", beta=0.1), logp, batch)
    np.testing.assert_allclose(loss, 0.1 * 0.5 * math.log(2.0) ** 2, rtol=1e-5)
    # ∂J/∂logp = −β (logp − ref) · Agg = 0.1 · ln 2 / 2
    np.testing.assert_allclose(grad, [[[-0.05 * math.log(2.0)]] * 2], rtol=1e-5)


def test_tis_weight_by_hand() -> None:
    # token-REINFORCE, rewards (1, 0): A = ±0.5; π_old/π_sampler = 3 on sample 0, truncated to 2
    logp, batch = batch_of(
        [[[-1.0], [-2.0]]],
        rewards=[[1.0, 0.0]],
        old_minus_sampler=[[[math.log(3.0)], [0.0]]],
        max_len=1,
    )
    (loss, m), grad = loss_and_grad(preset("token_reinforce", tis_cap=2.0), logp, batch)
    # J = 1/(G L) Σ w A logp = 1/2 (2 · 0.5 · −1 + 1 · −0.5 · −2)
    np.testing.assert_allclose(loss, -0.5 * (-1.0 + 1.0), atol=1e-6)
    np.testing.assert_allclose(grad, [[[-0.5], [0.25]]], rtol=1e-5)
    np.testing.assert_allclose(m["is_weight_max"], 2.0, rtol=1e-6)
    assert float(m["clip_frac_high"]) == 0.5
    _, grad_off = loss_and_grad(preset("token_reinforce"), logp, batch)
    np.testing.assert_allclose(grad_off, [[[-0.25], [0.25]]], rtol=1e-5)


def test_sequence_reinforce_by_hand() -> None:
    # sample 0 has token ratios 2 and 1: r_0 = 2 weights log π(o_0) = sum of its log-probs
    logp, batch = batch_of(
        [[[-1.0, -0.5], [-2.0, -1.0]]],
        log_r=[[[math.log(2.0), 0.0], [0.0, 0.0]]],
        rewards=[[1.0, 0.0]],
    )
    (loss, _), grad = loss_and_grad(preset("reinforce"), logp, batch)
    np.testing.assert_allclose(loss, -0.5 * (2 * 0.5 * -1.5 + -0.5 * -3.0), rtol=1e-5)
    np.testing.assert_allclose(grad, [[[-0.5, -0.5], [0.25, 0.25]]], rtol=1e-5)


def test_entropy_bonus_gradient_by_hand() -> None:
    # GradTerm2 = −c sg[logp] logp: ∂J/∂logp = −c logp · Agg
    obj = RLObjective(
        agg=IndividualAggregation(),
        adv=GroupAdvantage(),
        grad_1=LogProbGrad(),
        grad_2=EntropyBonus(coef=0.1),
    )
    logp, batch = batch_of([[[-1.0], [-2.0]]], rewards=[[1.0, 1.0]])
    _, grad = loss_and_grad(obj, logp, batch)
    np.testing.assert_allclose(grad, [[[-0.05], [-0.1]]], rtol=1e-5)


def test_gae_by_hand_and_across_mask_gaps() -> None:
    values = jnp.array([0.5, 0.2, 0.1])
    rewards = jnp.array([0.0, 0.0, 1.0])
    mask = jnp.ones(3)
    adv, ret = ppo.gae(rewards, values, mask, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(adv, [0.5, 0.8, 0.9], rtol=1e-6)  # Monte Carlo R − V
    np.testing.assert_allclose(ret, [1.0, 1.0, 1.0], rtol=1e-6)
    adv, _ = ppo.gae(rewards, values, mask, gamma=1.0, lam=0.0)
    np.testing.assert_allclose(adv, [-0.3, -0.1, 0.9], rtol=1e-5)  # one-step δ_t
    adv, _ = ppo.gae(rewards, values, mask, gamma=0.5, lam=1.0)
    np.testing.assert_allclose(adv, [0.25 - 0.5, 0.5 - 0.2, 0.9], rtol=1e-5)
    # a masked gap (value 99 there) is skipped, as if the sample were contiguous
    adv, ret = ppo.gae(
        jnp.array([0.0, 5.0, 0.0, 1.0]),
        jnp.array([0.5, 99.0, 0.2, 0.1]),
        jnp.array([1.0, 0.0, 1.0, 1.0]),
        gamma=0.9,
        lam=0.7,
    )
    ref, _ = ppo.gae(rewards, values, mask, gamma=0.9, lam=0.7)
    np.testing.assert_allclose(adv, [ref[0], 0.0, ref[1], ref[2]], rtol=1e-6)
    assert float(ret[1]) == 0.0


def test_value_loss_by_hand() -> None:
    # V = 1, V_old = 0, target 2, clip 0.2: max((1−2)², (0.2−2)²)/2 = 1.62, gradient 0 (the
    # clipped branch wins and does not depend on V); unclipped: 0.5, gradient V − R = −1
    v = jnp.array([1.0])
    f = lambda v, clip: ppo.value_loss(v, jnp.array([0.0]), jnp.array([2.0]), clip=clip).sum()  # noqa: E731
    np.testing.assert_allclose(f(v, 0.2), 1.62, rtol=1e-6)
    np.testing.assert_allclose(jax.grad(f)(v, 0.2), [0.0])
    np.testing.assert_allclose(f(v, None), 0.5, rtol=1e-6)
    np.testing.assert_allclose(jax.grad(f)(v, None), [-1.0])


def test_batch_norm_advantage_is_whitened_over_response_tokens() -> None:
    rewards = [[1.0, 0.0], [0.5, 0.0]]
    mask = [[[1, 1, 0], [1, 0, 0]], [[1, 1, 1], [1, 1, 0]]]
    logp, batch = batch_of(np.zeros((2, 2, 3)).tolist(), mask=mask, rewards=rewards)
    for group_baseline in (False, True):
        R = np.array(rewards)
        if group_baseline:
            R = R - R.mean(axis=1, keepdims=True)
        tokens = np.concatenate(
            [np.full(int(sum(mask[b][i])), R[b, i]) for b in range(2) for i in range(2)]
        )
        expected = (R - tokens.mean()) / (tokens.std() + 1e-6)
        obj = RLObjective(
            agg=IndividualAggregation(),
            adv=BatchNormAdvantage(group_baseline=group_baseline),
            grad_1=LogProbGrad(),
        )
        _, m = obj(logp, batch)
        per_token = np.array(mask) * expected[..., None]
        np.testing.assert_allclose(m["adv_mean"], per_token.sum() / np.sum(mask), atol=1e-6)
        np.testing.assert_allclose(
            m["adv_abs_mean"], np.abs(per_token).sum() / np.sum(mask), rtol=1e-5
        )


def test_group_aggregation_batch_scope_is_the_whole_batch_token_mean() -> None:
    k = jax.random.split(jax.random.PRNGKey(3), 2)
    logp = -jax.random.uniform(k[0], (2, 3, 4))
    mask = (jnp.arange(4) < jnp.array([[4, 1, 2], [3, 3, 4]])[..., None]).astype(jnp.float32)
    rewards = jax.random.uniform(k[1], (2, 3))
    batch = ObjectiveBatch(old_logp=logp, sampler_logp=logp, mask=mask, rewards=rewards)
    adv = GroupAdvantage()
    obj = RLObjective(agg=GroupAggregation(scope="batch"), adv=adv, grad_1=LogProbGrad())
    R = np.asarray(rewards)
    A = (R - R.mean(1, keepdims=True)) / (R.std(1, ddof=1, keepdims=True) + 1e-6)
    expected = (np.asarray(mask) * A[..., None] * np.asarray(logp)).sum() / float(mask.sum())
    np.testing.assert_allclose(obj(logp, batch)[0], -expected, rtol=1e-5)


def test_sequence_is_geometric_and_product() -> None:
    # sample 0 has 3 tokens with ratios 8, 1, 1 (and a padding slot): geometric mean 2, product 8
    logp, batch = batch_of(
        [[[-1.0, -1.0, -1.0, 5.0], [-1.0, -1.0, -1.0, -1.0]]],
        log_r=[[[math.log(8.0), 0.0, 0.0, 3.0], [0.0, 0.0, 0.0, 0.0]]],
        mask=[[[1, 1, 1, 0], [1, 1, 1, 1]]],
        rewards=[[1.0, 0.0]],
    )
    for geometric, weight in ((True, 2.0), (False, 8.0)):
        obj = RLObjective(
            agg=IndividualAggregation(),
            IS=SequenceIS(geometric=geometric),
            adv=GroupAdvantage(normalise_std=False),
            grad_1=LogProbGrad(),
        )
        _, m = obj(logp, batch)
        np.testing.assert_allclose(m["is_weight_max"], weight, rtol=1e-6)


def test_rlobjective_rejects_wrong_components() -> None:
    with pytest.raises(ConfigError, match=r"^grad_1: .*GradTerm1"):
        RLObjective(agg=IndividualAggregation(), adv=GroupAdvantage(), grad_1=K3KL())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^IS: "):
        RLObjective(
            agg=IndividualAggregation(),
            IS=(LogProbGrad(),),
            adv=GroupAdvantage(),
            grad_1=LogProbGrad(),
        )


# ------------------------------------------------------------------------------ invariances

B, G, T = 2, 4, 6
LENGTHS = jnp.array([[6, 3, 4, 2], [1, 6, 5, 3]])


def random_batch(seed: int = 0) -> tuple[jax.Array, ObjectiveBatch]:
    k = jax.random.split(jax.random.PRNGKey(seed), 6)
    logp = -jax.random.uniform(k[0], (B, G, T), minval=0.05, maxval=2.0)
    mask = (jnp.arange(T) < LENGTHS[..., None]).astype(jnp.float32)
    n = lambda key: 0.2 * jax.random.normal(key, (B, G, T))  # noqa: E731
    return logp, ObjectiveBatch(
        old_logp=logp + n(k[1]),
        sampler_logp=logp + n(k[2]),
        ref_logp=logp + n(k[3]),
        mask=mask,
        rewards=jax.random.bernoulli(k[5], 0.5, (B, G)).astype(jnp.float32),
        values=jax.random.normal(k[4], (B, G, T)),
        max_len=10,
    )


OBJECTIVES = {
    name: preset(name) if name == "decoupled_ppo" else preset(name, tis_cap=2.0) for name in PRESETS
}


def run_all(logp: jax.Array, batch: ObjectiveBatch) -> dict:
    """{preset: (loss, metrics, grad)} for every preset. Eager: the presets share most of their
    primitives, so op-by-op dispatch compiles less than one program per preset (measured)."""
    out = {}
    for name, obj in OBJECTIVES.items():
        (loss, m), g = jax.value_and_grad(obj, has_aux=True)(logp, batch)
        out[name] = (loss, m, g)
    return out


def test_padding_changes_nothing() -> None:
    logp, batch = random_batch()
    base = run_all(logp, batch)
    # garbage (inf, −inf, nan, huge) in every padding position of every input: no NaN anywhere,
    # the same loss, gradient and metrics, and exactly zero gradient on padding
    junk = jnp.resize(jnp.array([jnp.inf, -jnp.inf, jnp.nan, 1e30, -1e30]), (B, G, T))
    dirty = lambda x: jnp.where(batch.mask > 0, x, junk)  # noqa: E731
    garbage = ObjectiveBatch(
        old_logp=dirty(batch.old_logp),
        sampler_logp=dirty(batch.sampler_logp),
        ref_logp=dirty(batch.ref_logp),
        mask=batch.mask,
        rewards=batch.rewards,
        values=dirty(batch.values),
        max_len=batch.max_len,
    )
    padded = run_all(dirty(logp), garbage)
    for name in PRESETS:
        loss, m, g = base[name]
        loss2, m2, g2 = padded[name]
        np.testing.assert_allclose(loss2, loss, rtol=1e-6, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(g2, g, rtol=1e-6, atol=1e-7, err_msg=name)
        assert float(jnp.abs(jnp.where(batch.mask > 0, 0.0, g2)).max()) == 0.0, name
        for key in m:
            np.testing.assert_allclose(m2[key], m[key], rtol=1e-6, atol=1e-7, err_msg=key)


def test_permuting_samples_within_a_group_changes_nothing() -> None:
    logp, batch = random_batch(1)
    perm = jnp.array([2, 0, 3, 1])
    p = lambda x: None if x is None else x[:, perm]  # noqa: E731
    shuffled = ObjectiveBatch(
        old_logp=p(batch.old_logp),
        sampler_logp=p(batch.sampler_logp),
        ref_logp=p(batch.ref_logp),
        mask=p(batch.mask),
        rewards=p(batch.rewards),
        values=p(batch.values),
        max_len=batch.max_len,
    )
    base, other = run_all(logp, batch), run_all(logp[:, perm], shuffled)
    for name in PRESETS:
        np.testing.assert_allclose(other[name][0], base[name][0], rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(
            other[name][2], base[name][2][:, perm], rtol=1e-5, atol=1e-7, err_msg=name
        )


def test_equal_rewards_give_zero_policy_gradient_in_grpo() -> None:
    logp, batch = random_batch(2)
    equal = ObjectiveBatch(
        old_logp=batch.old_logp,
        sampler_logp=batch.sampler_logp,
        ref_logp=batch.ref_logp,
        mask=batch.mask,
        rewards=jnp.array([[1.0] * G, [0.0] * G]),
    )
    (_, m), grad = loss_and_grad(preset("grpo", beta=0.0), logp, equal)
    np.testing.assert_array_equal(grad, jnp.zeros_like(grad))
    assert float(m["adv_abs_mean"]) == 0.0
    # with a KL term only the KL's gradient is left: β K3 averaged per sample, then over G, B
    beta = 0.04
    (_, _), grad = loss_and_grad(preset("grpo", beta=beta), logp, equal)

    def kl_loss(lp: jax.Array) -> jax.Array:
        rho = jnp.exp(batch.ref_logp - lp)
        k3 = (rho - jnp.log(rho) - 1) * batch.mask
        return beta * (k3.sum(-1) / LENGTHS).mean()

    np.testing.assert_allclose(grad, jax.grad(kl_loss)(logp), rtol=1e-5, atol=1e-8)


def test_a_batch_averages_its_prompts() -> None:
    logp, batch = random_batch(3)
    both = run_all(logp, batch)

    def one(b: int) -> dict:
        sl = lambda x: None if x is None else x[b : b + 1]  # noqa: E731
        sub = ObjectiveBatch(
            old_logp=sl(batch.old_logp),
            sampler_logp=sl(batch.sampler_logp),
            ref_logp=sl(batch.ref_logp),
            mask=sl(batch.mask),
            rewards=sl(batch.rewards),
            values=sl(batch.values),
            max_len=batch.max_len,
        )
        return run_all(logp[b : b + 1], sub)

    first, second = one(0), one(1)
    for name in PRESETS:
        if name == "reinforce_pp":  # whitens over the whole batch by design
            continue
        np.testing.assert_allclose(
            both[name][0], (first[name][0] + second[name][0]) / 2, rtol=1e-5, err_msg=name
        )


def test_on_policy_ratios_are_exactly_one() -> None:
    logp, batch = random_batch(4)
    on = ObjectiveBatch(
        old_logp=logp,
        sampler_logp=logp,
        ref_logp=batch.ref_logp,
        mask=batch.mask,
        rewards=batch.rewards,
        values=batch.values,
        max_len=batch.max_len,
    )
    for name, (_, m, _) in run_all(logp, on).items():
        assert float(m["ratio_mean"]) == 1.0 and float(m["ratio_max"]) == 1.0, name
        assert float(m["is_weight_max"]) == 1.0, name
        assert float(m["clip_frac_low"]) == 0.0 and float(m["clip_frac_high"]) == 0.0, name


def test_masked_is_grad_value_matches_ppo_min_everywhere() -> None:
    r = jnp.linspace(0.1, 3.0, 59)
    for adv in (-1.3, 0.0, 0.7):
        term = MaskedISGrad(eps_low=0.2, eps_high=0.28, dual_clip=2.5)
        logp = jnp.log(r)[None, None, :]
        _, batch = batch_of(np.zeros((1, 1, 59)).tolist(), rewards=[[0.0]])
        ctx = Context.build(logp, batch)
        got = term(ctx, jnp.full_like(logp, adv)) * adv
        expected = jnp.minimum(r * adv, jnp.clip(r, 0.8, 1.28) * adv)
        if adv < 0:
            expected = jnp.maximum(expected, 2.5 * adv)
        np.testing.assert_allclose(got[0, 0], expected, rtol=1e-6, atol=1e-7)
