"""π_old as RLAX defines it: the policy that generated the rollouts, recomputed by the trainer from
that version's params (kept on the host, saved with every checkpoint), so that the IS ratio and
PPO's clip act on staleness; the numerical mismatch (sampler vs trainer on the same version) and
the policy lag (generating version vs the step's params) measured apart; exact after a restore."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np
import pytest
from trainer_helpers import MODEL, assert_bit_equal, config, flat, rl_batch

from rlx_core.clients import TrainBatch
from rlx_model import init_params
from rlx_model.decoder import unflatten
from rlx_trainer.checkpoint import CheckpointStore
from rlx_trainer.metrics import policy_lag
from rlx_trainer.trainer import Trainer

LAG_KEYS = ("lag_kl_k3", "lag_ratio_min", "lag_ratio_max")


def make(sections: dict | None = None, params: dict | None = None) -> Trainer:
    sections = {"keep_versions": 2, **(sections or {})}
    return Trainer(config(**sections), MODEL, params or init_params(MODEL, 1), seed=1)


def moved(t: Trainer, steps: int, first_seed: int = 100) -> None:
    """`steps` on-policy steps (each batch generated with the trainer's own version)."""
    for i in range(steps):
        t.train_step(rl_batch(first_seed + i, version=t.state.step))


def with_sampler(batch: TrainBatch, logp: np.ndarray) -> TrainBatch:
    """`batch` whose sampler log-probs are exactly `logp` on the response tokens."""
    shaped = logp.reshape(batch.tokens.shape)
    sampler = np.where(batch.loss_mask > 0, shaped, 0).astype(np.float32)
    return dataclasses.replace(batch, sampler_logp=sampler)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pi_old_is_a_prefill_of_the_generating_version_bit_for_bit(dtype: str) -> None:
    dtypes = {"param_dtype": dtype, "compute_dtype": dtype}
    t = make({"model": dtypes})
    v0 = flat(t.state.params)
    moved(t, 2)
    batch = rl_batch(7, version=0)  # generated with version 0, trained at step 2: staleness 2
    old = t.old_logprobs(batch)
    # the same prefill program on version 0's params, in a trainer that never moved
    fresh = make({"model": dtypes}, unflatten(v0))
    assert old.tobytes() == fresh.old_logprobs(batch).tobytes()
    # and not the current params': π_old is the behaviour policy, not the step's start
    current = t.old_logprobs(dataclasses.replace(batch, version=2))
    assert not np.array_equal(old, current)

    m = t.train_step(batch).metrics
    # the first update's forward is the current params' (a stale batch trains through the plain
    # forward, equal to their prefill up to rounding), so the lag metrics are π_current against
    # π_version0
    expected = policy_lag(old, current, batch.loss_mask.reshape(old.shape))
    for key in LAG_KEYS:
        assert m[key] == pytest.approx(expected[key], rel=1e-5), key
    assert m["lag_kl_k3"] > 0 and m["lag_ratio_min"] < 1 < m["lag_ratio_max"]
    assert m["ratio_max_abs_dev"] > 0  # the objective's ratio moved off 1 where the policy did


def test_clipping_acts_on_staleness_only_with_pi_old_the_generating_version() -> None:
    fast = {"optimizer": {"lr": 0.05, "schedule": "constant"}}
    gen = make({**fast, "update": {"old_policy": "generation"}})
    start = make({**fast, "update": {"old_policy": "step_start"}})
    for t in (gen, start):
        moved(t, 3)
    assert_bit_equal(gen.state.params, start.state.params)  # the same history, on-policy
    stale = rl_batch(9, version=1)  # staleness 2
    mg, ms = gen.train_step(stale).metrics, start.train_step(stale).metrics
    # π_old = version 1: the ratio sees two versions of change and PPO's clip acts on it
    assert mg["clip_frac"] > 0 and mg["ratio_max_abs_dev"] > 0.2, mg
    # π_old = the step's start: r == 1 on the first update, nothing clipped, no correction
    assert ms["ratio_max_abs_dev"] == 0.0 and ms["clip_frac"] == 0.0, ms
    # the numerics and the lag are measured either way (step_start prefills the generating
    # version; its step-start log-probs come from the fused forward, equal up to rounding)
    for key in ("mismatch_mean", "mismatch_max", "mismatch_p95"):
        assert mg[key] == ms[key], key
    for key in LAG_KEYS:
        assert mg[key] == pytest.approx(ms[key], rel=1e-5), key
    assert mg["lag_kl_k3"] > 0.01


@pytest.mark.parametrize("old_policy", ["generation", "step_start"])
def test_numerical_mismatch_is_measured_on_the_generating_version(old_policy: str) -> None:
    """A sampler that agrees with the trainer on the version it sampled from has no numerical
    mismatch at all, however far the policy has moved since: that is the lag's to report."""
    t = make({"update": {"old_policy": old_policy}})
    moved(t, 2)
    batch = rl_batch(11, version=0)
    generating = make({}, unflatten(dict(t._kept[0])))  # version 0's params
    exact = with_sampler(batch, generating.old_logprobs(batch))
    m = t.train_step(exact).metrics
    assert m["mismatch_max"] == 0.0 and m["mismatch_p95"] == 0.0
    assert m["lag_kl_k3"] > 0 and m["lag_ratio_max"] > 1
    # on-policy: no lag at all
    fresh = t.train_step(rl_batch(12, version=t.state.step)).metrics
    assert fresh["lag_kl_k3"] == 0.0 and fresh["lag_ratio_min"] == fresh["lag_ratio_max"] == 1.0


def test_only_the_versions_rollouts_come_from_are_kept() -> None:
    t = make({"keep_versions": 4, "keep_every": 2})
    moved(t, 7)
    # at step 7, rollouts can come from versions 3-6 of which the schedule only uses even ones
    assert [v for v in t.kept_versions if v < 7] == [4, 6]
    with pytest.raises(Exception, match="version 5: its params are not held"):
        t.train_step(rl_batch(1, version=5))


def test_a_restored_trainer_recomputes_pi_old_from_its_checkpoint(tmp_path: Path) -> None:
    """Batches generated a version or two behind, a checkpoint at step 3, and the same batches
    trained on by a trainer restored from it with no paramserver to pull from (as after a
    restart that lost the paramservers' versions): the params end bit-identical."""
    batches = [rl_batch(20 + b, version=max(0, b - 1 - b % 2)) for b in range(7)]
    store = CheckpointStore(str(tmp_path / "ckpt"), keep=3)
    t = make()
    for b, batch in enumerate(batches):
        if b == 3:
            t.save(store)
            version1 = unflatten(dict(t._kept[1]))
        t.train_step(batch)
    _, meta = store.meta(3)
    assert meta["past_versions"] == [1, 2]

    restored = Trainer.from_checkpoint(config(keep_versions=2), store, 3)
    assert restored.puller is None and restored.kept_versions == [1, 2]
    assert_bit_equal(restored.params_for_version(1), version1)
    metrics = [restored.train_step(batch).metrics for batch in batches[3:]]
    assert_bit_equal(restored.state.params, t.state.params)
    assert all(m["lag_kl_k3"] >= 0 for m in metrics)
    assert any(m["lag_kl_k3"] > 0 for m in metrics)


def test_a_checkpoint_without_past_versions_still_restores(tmp_path: Path) -> None:
    """keep_versions 0 (or a checkpoint from before past versions were saved): nothing extra
    is written or read, and an on-policy run goes on."""
    store = CheckpointStore(str(tmp_path / "ckpt"), keep=2)
    t = make({"keep_versions": 0})
    moved(t, 2)
    t.save(store)
    assert store.meta(2)[1]["past_versions"] == []
    restored = Trainer.from_checkpoint(config(keep_versions=0), store)
    assert restored.kept_versions == []
    restored.train_step(rl_batch(5, version=2))
    assert jax.tree.structure(restored.state.params) == jax.tree.structure(t.state.params)


def test_with_minibatches_the_lag_is_that_of_the_first_minibatch() -> None:
    """Later minibatches train on params this step already moved: the lag is taken over the
    first one's tokens, where the forward is still the step's starting params."""
    t = make({"update": {"minibatches": 2}})
    moved(t, 2)
    batch = rl_batch(13, version=0)
    gen = t.old_logprobs(batch)
    cur = t.old_logprobs(dataclasses.replace(batch, version=2))
    half = gen.shape[0] // 2
    mask = batch.loss_mask.reshape(gen.shape)
    m = t.train_step(batch).metrics
    expected = policy_lag(gen[:half], cur[:half], mask[:half])
    for key in LAG_KEYS:
        assert m[key] == pytest.approx(expected[key], rel=1e-5), key


def test_a_stale_batch_trains_through_the_plain_forward_even_when_aligned() -> None:
    """Aligned mode's remat makes r exactly 1 where π_old is the params being trained; a stale
    batch's π_old is another version, so its update is the unaligned one, bit for bit (one
    prefill for π_old and no second forward), while an on-policy step keeps the alignment."""
    aligned, plain = make(), make({"update": {"aligned": False}})
    for t in (aligned, plain):
        moved(t, 2)
    assert_bit_equal(aligned.state.params, plain.state.params)
    stale = rl_batch(21, version=0)
    ma, mp = aligned.train_step(stale).metrics, plain.train_step(stale).metrics
    assert_bit_equal(aligned.state.params, plain.state.params)
    for key in (*LAG_KEYS, "ratio_max_abs_dev", "loss"):
        assert ma[key] == mp[key], key
    assert ma["ratio_max_abs_dev"] > 0
