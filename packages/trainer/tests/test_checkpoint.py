"""Orbax checkpoints of the whole trainer state on a local path, GCS (emulator) and S3 (moto):
bit-exact round trips, keep-last-K, and uncommitted checkpoints that are never used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from trainer_helpers import MODEL, assert_bit_equal, config, flat, rl_batch

from rlx_core.errors import NotFound
from rlx_core.storage import open_storage
from rlx_model import init_params
from rlx_trainer.checkpoint import CheckpointStore
from rlx_trainer.trainer import Trainer


def _trainer(**sections: object) -> Trainer:
    return Trainer(config(**sections), MODEL, init_params(MODEL, 1), seed=3)


def _round_trip(uri: str) -> CheckpointStore:
    """Train, save at step 2, train on; restore step 2 and replay: bit-identical everywhere,
    the replayed batch a stale one (π_old = version 1, from the checkpoint's past versions)."""
    store = CheckpointStore(uri, keep=2)
    t = _trainer()
    for i in range(2):
        t.train_step(rl_batch(i, version=i))
    saved_params, saved_opt = flat(t.state.params), t.state.opt_state
    saved_rng = np.asarray(t.state.rng)
    assert t.save(store) == 2
    t.train_step(rl_batch(7, version=1))
    after_one_more = flat(t.state.params)
    assert store.steps() == [2]
    assert store.meta(2)[1]["past_versions"] == [0, 1]

    fresh = Trainer.from_checkpoint(config(), store)
    assert fresh.state.step == 2 and fresh.state.updates == 2
    assert fresh.kept_versions == [0, 1] and fresh.puller is None
    assert_bit_equal(fresh.state.params, _unflat(saved_params))
    np.testing.assert_array_equal(np.asarray(fresh.state.rng), saved_rng)
    import jax

    for a, b in zip(
        jax.tree.leaves(fresh.state.opt_state), jax.tree.leaves(saved_opt), strict=True
    ):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    fresh.train_step(rl_batch(7, version=1))
    assert_bit_equal(fresh.state.params, _unflat(after_one_more))

    # keep the last 2
    t.save(store)  # step 3
    t.train_step(rl_batch(8, version=3))
    t.save(store)  # step 4
    assert store.steps() == [3, 4]
    assert t.restore(store, 3) == 3
    assert t.state.step == 3
    return store


def _unflat(f: dict) -> dict:
    from rlx_model.decoder import unflatten

    return unflatten(f)


def test_local_round_trip_is_bit_exact_and_unfinalized_steps_are_ignored(tmp_path: Path) -> None:
    store = _round_trip(str(tmp_path / "ckpt"))
    # a step Orbax never finalised (its temporary directory) is not a checkpoint
    (tmp_path / "ckpt" / "9.orbax-checkpoint-tmp-123").mkdir()
    assert store.steps() == [3, 4]
    with pytest.raises(NotFound, match="step 9"):
        store.meta(9)


@pytest.mark.slow
def test_gcs_round_trip_on_the_emulator(gcs_uri: str) -> None:
    store = _round_trip(gcs_uri)
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket, prefix = gcs_uri[len("gs://") :].split("/", 1)
    client = storage.Client(project="test", credentials=AnonymousCredentials())
    client.bucket(bucket).blob(f"{prefix}/4/commit_success.txt").delete()
    assert store.steps() == [3]  # without Orbax's commit marker, step 4 is never used


@pytest.mark.slow
def test_s3_through_local_staging_and_a_commit_marker(s3_uri: str) -> None:
    store = _round_trip(s3_uri)
    st = open_storage(s3_uri)
    assert st.list_committed("") == ["3", "4"]
    # a step whose upload never committed: files but no marker
    st.put("5/state/_METADATA", b"{}")
    assert store.steps() == [3, 4]
    st.delete("4/_COMMITTED")
    assert store.steps() == [3]
    assert CheckpointStore(s3_uri).latest() == 3
