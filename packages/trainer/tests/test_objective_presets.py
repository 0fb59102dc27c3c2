"""Each preset against its paper's formula, written out here directly (loops over prompts and
samples, each sample sliced to its own length, no masks): the value and the gradient with respect
to log π_θ must agree to f32 precision (1e-5)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlx_trainer.objective import ObjectiveBatch, preset

sg = jax.lax.stop_gradient
B, G, T, L_MAX = 2, 4, 6, 8
LENGTHS = [[6, 3, 6, 2], [3, 6, 2, 3]]  # few distinct lengths: fewer eager compiles
REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.0, 0.2, 1.0, 0.5]]


def make_batch(seed: int = 0, spread: float = 0.25) -> tuple[jax.Array, ObjectiveBatch]:
    """Random log-probs with π_old, π_sampler and π_ref `spread` away from π_θ (enough for the
    clips to bite), and garbage in the padding positions."""
    k = jax.random.split(jax.random.PRNGKey(seed), 6)
    logp = -jax.random.uniform(k[0], (B, G, T), minval=0.05, maxval=2.0)
    mask = (jnp.arange(T) < jnp.array(LENGTHS)[..., None]).astype(jnp.float32)
    noise = lambda key: spread * jax.random.normal(key, (B, G, T))  # noqa: E731
    pad = lambda x: jnp.where(mask > 0, x, 37.0)  # noqa: E731
    return pad(logp), ObjectiveBatch(
        old_logp=pad(logp + noise(k[1])),
        sampler_logp=pad(logp + noise(k[2])),
        ref_logp=pad(logp + noise(k[3])),
        mask=mask,
        rewards=jnp.array(REWARDS),
        values=pad(jax.random.normal(k[4], (B, G, T))),
        max_len=L_MAX,
    )


def samples(logp: jax.Array, batch: ObjectiveBatch, b: int):
    """(i, n, logp_i, old_i, sampler_i, ref_i) for the G samples of prompt b, cut to length."""
    for i in range(G):
        n = LENGTHS[b][i]
        yield (
            i,
            n,
            logp[b, i, :n],
            batch.old_logp[b, i, :n],
            batch.sampler_logp[b, i, :n],
            batch.ref_logp[b, i, :n] if batch.ref_logp is not None else None,
        )


def grpo_advantages(b: int, std: bool = True) -> list[float]:
    R = np.array(REWARDS[b], np.float64)
    a = R - R.mean()
    if std:
        a = a / (R.std(ddof=1) + 1e-6)
    return [float(x) for x in a]


def ppo_clip(r: jax.Array, adv: float, lo: float, hi: float) -> jax.Array:
    return jnp.minimum(r * adv, jnp.clip(r, 1 - lo, 1 + hi) * adv)


def k3(logp: jax.Array, ref: jax.Array) -> jax.Array:
    rho = jnp.exp(ref - logp)  # π_ref/π_θ (DeepSeekMath eq. 4)
    return rho - jnp.log(rho) - 1


def check(name: str, formula: Callable[[jax.Array, ObjectiveBatch], jax.Array], **kw) -> dict:
    """preset(name, **kw) against the written-out J: value of loss = −J and its gradient."""
    logp, batch = make_batch(seed=kw.pop("seed", 0), spread=kw.pop("spread", 0.25))
    obj = preset(name, **kw)
    objective = jax.jit(jax.value_and_grad(obj, has_aux=True))
    (loss, metrics), grad = objective(logp, batch)
    ref_loss, ref_grad = jax.jit(jax.value_and_grad(lambda lp, bt: -formula(lp, bt)))(logp, batch)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-6)
    assert float(jnp.abs(ref_grad).sum()) > 1e-3
    return metrics


def test_grpo_is_deepseekmath_eq3_with_k3() -> None:
    eps, beta = 0.2, 0.04

    def J(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        total = 0.0
        for b in range(B):
            A = grpo_advantages(b)
            for i, n, lp, old, _, ref in samples(logp, batch, b):
                r = jnp.exp(lp - old)
                total += (ppo_clip(r, A[i], eps, eps) - beta * k3(lp, ref)).sum() / (G * n)
        return total / B

    m = check("grpo", J, eps_low=eps, eps_high=eps, beta=beta)
    assert float(m["clip_frac_low"]) > 0 and float(m["clip_frac_high"]) > 0


def test_dapo_is_the_token_level_clip_higher_objective() -> None:
    lo, hi = 0.2, 0.28

    def J(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        total = 0.0
        for b in range(B):
            A = grpo_advantages(b)
            n_group = sum(LENGTHS[b])
            for i, _, lp, old, _, _ in samples(logp, batch, b):
                total += ppo_clip(jnp.exp(lp - old), A[i], lo, hi).sum() / n_group
        return total / B

    obj = preset("dapo")
    assert obj.dynamic_sampling and not obj.regularisers
    check("dapo", J)


def test_dr_grpo_has_no_length_or_std_normalisation() -> None:
    eps = 0.2

    def J(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        total = 0.0
        for b in range(B):
            A = grpo_advantages(b, std=False)
            for i, _, lp, old, _, _ in samples(logp, batch, b):
                total += ppo_clip(jnp.exp(lp - old), A[i], eps, eps).sum() / (G * L_MAX)
        return total / B

    check("dr_grpo", J)


def test_token_reinforce_is_the_seeds_appendix_formula() -> None:
    def J(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        total = 0.0
        for b in range(B):
            A = grpo_advantages(b, std=False)
            for i, _, lp, old, _, _ in samples(logp, batch, b):
                total += (sg(jnp.exp(lp - old)) * A[i] * lp).sum() / (G * L_MAX)
        return total / B

    check("token_reinforce", J)


def test_sequence_reinforce_weights_the_sequence_by_its_ratio() -> None:
    def J(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        total = 0.0
        for b in range(B):
            A = grpo_advantages(b, std=False)
            for i, _, lp, old, _, _ in samples(logp, batch, b):
                r_i = sg(jnp.prod(jnp.exp(lp - old)))
                total += r_i * A[i] * lp.sum() / G
        return total / B

    check("reinforce", J, spread=0.1)


def test_rloo_is_reinforce_with_the_leave_one_out_baseline() -> None:
    def J(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        total = 0.0
        for b in range(B):
            R = REWARDS[b]
            for i, _, lp, old, _, _ in samples(logp, batch, b):
                baseline = sum(R[j] for j in range(G) if j != i) / (G - 1)
                r_i = sg(jnp.prod(jnp.exp(lp - old)))
                total += r_i * (R[i] - baseline) * lp.sum() / G
        return total / B

    check("rloo", J, spread=0.1)

    def J_scaled(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        return J(logp, batch) * (G - 1) / G

    check("rloo", J_scaled, spread=0.1, scaled=True)


def test_reinforce_pp_whitens_over_the_batch_with_k2() -> None:
    eps, beta = 0.2, 0.01

    def J(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        # token-level rewards R_i on every token, whitened over all response tokens (eqs. 11-12)
        tokens = np.concatenate(
            [np.full(LENGTHS[b][i], REWARDS[b][i]) for b in range(B) for i in range(G)]
        )
        mean, std = tokens.mean(), tokens.std()
        total = 0.0
        for b in range(B):
            for i, n, lp, old, _, ref in samples(logp, batch, b):
                A = (REWARDS[b][i] - mean) / (std + 1e-6)
                r = jnp.exp(lp - old)
                k2 = 0.5 * (lp - ref) ** 2
                total += (ppo_clip(r, A, eps, eps) - beta * k2).sum() / (G * n)
        return total / B

    check("reinforce_pp", J)


def test_cispo_is_minimax_m1_eq4() -> None:
    lo, hi = 0.1, 0.2

    def J(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        total = 0.0
        for b in range(B):
            A = grpo_advantages(b)
            n_group = sum(LENGTHS[b])
            for i, _, lp, old, _, _ in samples(logp, batch, b):
                r_hat = jnp.clip(jnp.exp(lp - old), 1 - lo, 1 + hi)
                total += (sg(r_hat) * A[i] * lp).sum() / n_group
        return total / B

    m = check("cispo", J, eps_low=lo, eps_high=hi)
    assert float(m["clip_frac_high"]) > 0 and float(m["clip_frac_low"]) > 0


def test_gspo_clips_the_length_normalised_sequence_ratio() -> None:
    lo, hi = 0.03, 0.04

    def J(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        total = 0.0
        for b in range(B):
            A = grpo_advantages(b)
            for i, _, lp, old, _, _ in samples(logp, batch, b):
                s = jnp.exp(jnp.mean(lp - old))
                total += ppo_clip(s, A[i], lo, hi) / G
        return total / B

    m = check("gspo", J, eps_low=lo, eps_high=hi, spread=0.1)
    assert 0 < float(m["clip_frac_low"] + m["clip_frac_high"]) < 1


@pytest.mark.parametrize("name", ["grpo", "token_reinforce", "cispo"])
def test_tis_multiplies_every_token_by_the_truncated_sampler_ratio(name: str) -> None:
    cap, eps, beta = 1.1, 0.2, 0.04

    def J(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        total = 0.0
        for b in range(B):
            A_std, A_plain = grpo_advantages(b), grpo_advantages(b, std=False)
            n_group = sum(LENGTHS[b])
            for i, n, lp, old, sampler, ref in samples(logp, batch, b):
                tis = jnp.minimum(jnp.exp(old - sampler), cap)  # seeds/004
                r = jnp.exp(lp - old)
                if name == "grpo":
                    term = (ppo_clip(r, A_std[i], eps, eps) - beta * k3(lp, ref)) / (G * n)
                elif name == "token_reinforce":
                    term = sg(r) * A_plain[i] * lp / (G * L_MAX)
                else:
                    term = sg(jnp.clip(r, 0.0, 1.28)) * A_std[i] * lp / n_group
                total += (sg(tis) * term).sum()
        return total / B

    m = check(name, J, tis_cap=cap)
    assert float(m["is_weight_max"]) > 1.0 or name != "grpo"


def test_decoupled_ppo_separates_behaviour_and_proximal_policies() -> None:
    eps = 0.2

    def J(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        total = 0.0
        for b in range(B):
            A = grpo_advantages(b)
            for i, n, lp, prox, behav, _ in samples(logp, batch, b):
                u_prox = jnp.exp(lp - prox)
                w = sg(jnp.exp(prox - behav))  # π_prox/π_behav
                total += (w * ppo_clip(u_prox, A[i], eps, eps)).sum() / (G * n)
        return total / B

    check("decoupled_ppo", J)

    def J_capped(logp: jax.Array, batch: ObjectiveBatch) -> jax.Array:
        total = 0.0
        for b in range(B):
            A = grpo_advantages(b)
            for i, n, lp, prox, behav, _ in samples(logp, batch, b):
                w = sg(jnp.minimum(jnp.exp(prox - behav), 1.05))
                total += (w * ppo_clip(jnp.exp(lp - prox), A[i], eps, eps)).sum() / (G * n)
        return total / B

    check("decoupled_ppo", J_capped, tis_cap=1.05)


def gae_loop(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """Textbook GAE by a Python loop over one sample (reward on the last token)."""
    n = len(values)
    adv = [0.0] * n
    nxt_v, nxt_a = 0.0, 0.0
    for t in reversed(range(n)):
        delta = rewards[t] + gamma * nxt_v - values[t]
        nxt_a = delta + gamma * lam * nxt_a
        nxt_v = values[t]
        adv[t] = nxt_a
    return adv


def test_ppo_is_the_clipped_surrogate_with_gae_and_the_value_loss() -> None:
    eps, gamma, lam, vf_coef, vf_clip = 0.2, 0.9, 0.8, 0.5, 0.2
    logp, batch = make_batch()
    assert batch.values is not None
    k = jax.random.PRNGKey(9)
    new_values = batch.values + 0.3 * jax.random.normal(k, batch.values.shape)

    advs, rets = {}, {}
    values = np.asarray(batch.values, np.float64)
    for b in range(B):
        for i in range(G):
            n = LENGTHS[b][i]
            v = [float(x) for x in values[b, i, :n]]
            r = [0.0] * (n - 1) + [REWARDS[b][i]]
            a = gae_loop(r, v, gamma, lam)
            advs[b, i] = a
            rets[b, i] = [a[t] + v[t] for t in range(n)]

    def J(logp: jax.Array) -> jax.Array:
        total = 0.0
        for b in range(B):
            for i, n, lp, old, _, _ in samples(logp, batch, b):
                r = jnp.exp(lp - old)
                total += ppo_clip(r, jnp.array(advs[b, i]), eps, eps).sum() / (G * n)
        return total / B

    def value_loss(v_new: jax.Array) -> jax.Array:
        total = 0.0
        for b in range(B):
            for i in range(G):
                n = LENGTHS[b][i]
                v, old, R = v_new[b, i, :n], batch.values[b, i, :n], jnp.array(rets[b, i])
                clipped = old + jnp.clip(v - old, -vf_clip, vf_clip)
                per = 0.5 * jnp.maximum((v - R) ** 2, (clipped - R) ** 2)
                total += per.sum() / (G * n)
        return total / B

    obj = preset("ppo", gamma=gamma, lam=lam, vf_coef=vf_coef, vf_clip=vf_clip)
    loss_fn = lambda lp, v: obj(lp, batch, values=v)  # noqa: E731
    (loss, metrics), (g_lp, g_v) = jax.jit(
        jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)
    )(logp, new_values)
    ref_fn = lambda lp, v: -J(lp) + vf_coef * value_loss(v)  # noqa: E731
    ref_loss, (r_lp, r_v) = jax.jit(jax.value_and_grad(ref_fn, argnums=(0, 1)))(logp, new_values)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g_lp, r_lp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g_v, r_v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["value_loss"], jax.jit(value_loss)(new_values), rtol=1e-5)
    # without the value head's predictions the loss is the policy part alone
    policy_only = jax.jit(lambda lp, bt: obj(lp, bt)[0])(logp, batch)
    np.testing.assert_allclose(policy_only, -jax.jit(J)(logp), rtol=1e-5, atol=1e-6)
