"""The train step through `Trainer`: aligned log-prob recomputation (r == 1 exactly), π_old from
the generation version, minibatches and accumulation, SFT, metrics and thresholds, bad batches."""

from __future__ import annotations

import dataclasses
import itertools

import jax
import numpy as np
import pytest
from trainer_helpers import MODEL, assert_bit_equal, config, flat, rl_batch, sft_batch

from rlx_core.clients import TrainBatch
from rlx_core.errors import ConfigError, FailedPrecondition, InvalidArgument
from rlx_model import init_params
from rlx_trainer.trainer import Trainer


def make(cfg_sections: dict | None = None, seed: int = 1) -> Trainer:
    return Trainer(config(**(cfg_sections or {})), MODEL, init_params(MODEL, seed), seed=seed)


@pytest.mark.parametrize("fuse", [False, True], ids=["prefill", "fused"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_aligned_mode_gives_ratio_exactly_one_for_every_token(dtype: str, fuse: bool) -> None:
    # grad_accum 2: every microbatch of the first update still has π_θ == π_old. Unfused, π_old
    # is the prefill and aligned mode makes the training forward match it bit for bit.
    t = make(
        {
            "model": {"param_dtype": dtype, "compute_dtype": dtype},
            "update": {"grad_accum": 2, "fuse_old": fuse},
        }
    )
    r = t.train_step(rl_batch(0))
    m = r.metrics
    assert m["ratio_max_abs_dev"] == 0.0, m
    assert m["ratio_min"] == 1.0 and m["ratio_max"] == 1.0 and m["ratio_mean"] == 1.0
    assert m["kl_k1"] == 0.0 and m["kl_k3"] == 0.0
    assert r.step == 1 and t.state.step == 1


def test_fused_old_policy_agrees_with_the_prefill_and_is_deterministic() -> None:
    """π_old from the training forward itself (the default when it is the step's params) gives
    the prefill path's step up to float rounding, and the same params bit for bit when run
    again; the prefill path is what `update.fuse_old = false` runs."""
    batch = rl_batch(3)
    prefill = make({"update": {"fuse_old": False}})
    fused, again = make(), make()
    rp, rf, ra = (t.train_step(batch).metrics for t in (prefill, fused, again))
    assert rf["ratio_max_abs_dev"] == 0.0 and rf["kl_k1"] == 0.0
    for name in ("mismatch_mean", "mismatch_max", "mismatch_p95", "loss", "entropy"):
        assert rf[name] == pytest.approx(rp[name], abs=1e-6), name
    assert rf["grad_norm"] == pytest.approx(rp["grad_norm"], rel=1e-5)
    fp, ff = flat(prefill.state.params), flat(fused.state.params)
    for k in fp:  # Adam's first step is about ±lr (1e-3) per weight: 1% of it
        np.testing.assert_allclose(ff[k], fp[k], atol=1e-5, rtol=0, err_msg=k)
    assert_bit_equal(fused.state.params, again.state.params)
    assert rf["mismatch_max"] == ra["mismatch_max"]


def test_unaligned_ratio_deviation_is_measured_not_assumed() -> None:
    """Without aligned mode r is whatever XLA makes it; the metric reports it (see README)."""
    t = make({"update": {"aligned": False, "fuse_old": False}})
    m = t.train_step(rl_batch(0)).metrics
    assert 0.0 <= m["ratio_max_abs_dev"] < 1e-3
    assert m["ratio_min"] <= 1.0 <= m["ratio_max"]


def test_old_policy_is_recomputed_from_the_generation_version() -> None:
    t = make({"keep_versions": 2})
    v0 = flat(t.state.params)
    t.train_step(rl_batch(0, version=0))
    t.train_step(rl_batch(1, version=1))
    assert t.kept_versions == [0, 1]
    assert_bit_equal(t.params_for_version(0), {k: v for k, v in _unflat(v0).items()})
    # a batch from version 0 at step 2: π_old is version 0's, so r moves away from 1
    m = t.train_step(rl_batch(2, version=0)).metrics
    assert m["ratio_max_abs_dev"] > 1e-4
    # version 0 was dropped (keep 2 older than the current); no paramserver to pull it from
    assert t.kept_versions == [1, 2]
    with pytest.raises(FailedPrecondition, match="version 0: its params are not held"):
        t.train_step(rl_batch(3, version=0))
    assert t.state.step == 3  # the refused step changed nothing


def _unflat(flat_params: dict[str, np.ndarray]) -> dict:
    from rlx_model.decoder import unflatten

    return unflatten(flat_params)


def test_grad_accumulation_equals_one_big_microbatch() -> None:
    batch = rl_batch(4)
    a = make({"update": {"grad_accum": 1}})
    b = make({"update": {"grad_accum": 2}})
    ra, rb = a.train_step(batch), b.train_step(batch)
    fa, fb = flat(a.state.params), flat(b.state.params)
    for k in fa:
        np.testing.assert_allclose(fa[k], fb[k], atol=1e-5, rtol=0, err_msg=k)
    assert ra.metrics["loss"] == pytest.approx(rb.metrics["loss"], abs=1e-6)
    assert ra.metrics["grad_norm"] == pytest.approx(rb.metrics["grad_norm"], rel=1e-4)


def test_minibatches_make_sequential_updates() -> None:
    t = make({"update": {"minibatches": 2, "epochs": 2}})
    m = t.train_step(rl_batch(5)).metrics
    assert m["updates"] == 4.0 and t.state.updates == 4
    # the first update is on-policy, later ones are not: r moved away from 1 after it
    assert m["ratio_max_abs_dev"] == 0.0
    assert m["ratio_max"] > 1.0 or m["ratio_min"] < 1.0


def test_sft_step_learns_a_pattern() -> None:
    t = make()
    losses = [t.train_step(sft_batch(i % 2)).metrics["loss"] for i in range(8)]
    assert losses[0] > 5.0  # about log(259) at init
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert losses[-1] < losses[0] - 0.5, losses


def test_metrics_and_mismatch_thresholds() -> None:
    batch = rl_batch(6)
    # π_old from the prefill, so a sampler that agrees with the prefill has no mismatch at all
    t = make({"metrics": {"warn_mismatch_mean": 0.5}, "update": {"fuse_old": False}})
    r = t.train_step(batch)
    m = r.metrics
    for name in (
        "loss",
        "mismatch_mean",
        "mismatch_max",
        "mismatch_p95",
        "ratio_mean",
        "ratio_max",
        "clip_frac",
        "entropy",
        "kl_k1",
        "kl_k3",
        "grad_norm",
        "lr",
        "tokens",
        "compute_s",
    ):
        assert name in m, name
    assert m["mismatch_mean"] <= m["mismatch_p95"] <= m["mismatch_max"]
    assert 0 < m["entropy"] < np.log(MODEL.vocab_size) + 1e-3
    assert any("mismatch_mean" in w for w in r.warnings)
    # the sampler agreeing with the trainer: no mismatch at all
    old = np.asarray(
        jax.device_get(t._functions("rl", 4).prefill(t.state.params, _device_micro(t, batch))[0])
    ).reshape(batch.tokens.shape)
    exact = dataclasses.replace(
        batch, sampler_logp=np.where(batch.loss_mask > 0, old, 0), version=1
    )
    m2 = t.train_step(exact).metrics
    assert m2["mismatch_max"] == 0.0

    for fuse in (False, True):  # fused, the check comes after the update, which is not applied
        stopper = make({"metrics": {"stop_mismatch_max": 0.1}, "update": {"fuse_old": fuse}})
        before = flat(stopper.state.params)
        with pytest.raises(FailedPrecondition, match="stop_mismatch_max"):
            stopper.train_step(batch)
        assert stopper.state.step == 0
        assert_bit_equal(stopper.state.params, _unflat(before))


def _device_micro(t: Trainer, batch: TrainBatch) -> dict:
    from rlx_trainer.batch import split_batch

    return {k: jax.numpy.asarray(v) for k, v in split_batch(batch, 1)[0].arrays.items()}


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            lambda b: dataclasses.replace(
                b, tokens=np.where(b.tokens == b.tokens[0, 0, 3], 300, b.tokens)
            ),
            "tokens",
            "vocabulary",
        ),
        (lambda b: rl_batch(0, s=600), "tokens", "context"),
        (
            lambda b: dataclasses.replace(b, loss_mask=b.loss_mask[:, :, :-1]),
            "loss_mask",
            "does not match",
        ),
        (lambda b: dataclasses.replace(b, rewards=b.rewards[:, :3]), "rewards", "shape"),
        (
            lambda b: dataclasses.replace(b, sampler_logp=b.sampler_logp[:2]),
            "sampler_logp",
            "does not match",
        ),
        (lambda b: dataclasses.replace(b, version=5), "version", "not a version"),
        (lambda b: rl_batch(0, b=3), "tokens", "does not split"),
    ],
)
def test_invalid_batches_name_the_field_and_change_nothing(change, field, message) -> None:
    t = make({"update": {"minibatches": 2}})
    before = flat(t.state.params)
    with pytest.raises(InvalidArgument, match=message) as info:
        t.train_step(change(rl_batch(0)))
    assert str(info.value).startswith(field + ":"), info.value
    assert t.state.step == 0
    assert_bit_equal(t.state.params, _unflat(before))


def test_kl_preset_needs_a_reference_model() -> None:
    kl = {"preset": "grpo", "beta": 0.04}
    with pytest.raises(ConfigError, match=r"^update\.reference: the grpo objective has a KL term"):
        make({"objective": kl, "update": {"reference": "none"}})
    # reference = "auto" (the default) takes the Init params when the objective has a KL term
    assert make({"objective": {"preset": "grpo", "beta": 0.0}}).reference is None
    t = make({"objective": kl})
    assert t.config.reference == "init" and t.reference is not None
    m = t.train_step(rl_batch(0)).metrics
    assert m["kl_k1"] == 0.0  # π_θ == π_ref on the first update
    m = t.train_step(rl_batch(1, version=1)).metrics
    assert m["kl_k3"] > 0.0


def _deleted(tree: object) -> set[bool]:
    return {x.is_deleted() for x in jax.tree.leaves(tree)}


@pytest.mark.parametrize("updates", [{}, {"grad_accum": 2}], ids=["one-jit", "accumulated"])
def test_an_update_writes_into_an_older_state_never_into_the_one_it_starts_from(
    updates: dict,
) -> None:
    # keep_versions 0: no host view of a past version pins its buffers
    t = make({"keep_versions": 0, "update": updates})
    s0 = t.state
    t.train_step(rl_batch(0))
    s1 = t.state
    t.train_step(rl_batch(1, version=1))
    # step 2 wrote its moments (and, in one jit, its params) into step 0's state's buffers
    assert _deleted(s0.opt_state) == {True} and _deleted(s1.opt_state) == {False}
    assert _deleted(s0.params) == ({True} if not updates else {False})
    assert _deleted(s1.params) == {False}

    # a step computed and not adopted (its push failed) leaves the state as it was, and the
    # same step adopted afterwards is the one a trainer without that attempt makes
    before = flat(t.state.params)
    new, _ = t.compute_step(rl_batch(2, version=2))
    assert_bit_equal(t.state.params, _unflat(before))
    del new
    t.train_step(rl_batch(2, version=2))
    clean = make({"keep_versions": 0, "update": updates})
    for i in range(3):
        clean.train_step(rl_batch(i, version=i))
    assert_bit_equal(t.state.params, clean.state.params)
    for a, b in zip(
        jax.tree.leaves(t.state.opt_state), jax.tree.leaves(clean.state.opt_state), strict=True
    ):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_the_reference_model_is_never_an_update_s_spare() -> None:
    # reference = init: the Init params are the reference, so they are not written into
    t = make({"objective": {"preset": "grpo", "beta": 0.04}, "keep_versions": 0})
    ref = flat(t.reference)
    for i in range(3):
        t.train_step(rl_batch(i, version=i))
    assert _deleted(t.reference) == {False}
    assert_bit_equal(t.reference, _unflat(ref))
