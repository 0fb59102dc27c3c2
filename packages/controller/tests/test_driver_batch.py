"""The driver's batch assembly: prefer-newest acceptance, INFRA exclusion and DAPO dynamic
sampling's drop of uniform groups, on logged-rollout payloads (no services needed)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from rlx_controller.demo import DEMO_TASK, demo_config, write_addition_jsonl
from rlx_controller.driver import PAD, Driver, encode, pack_logp
from rlx_controller.run_config import loads_run_config
from rlx_controller.services import base_model_dir
from rlx_core.config import to_toml
from rlx_core.errors import Corrupt

B, G = 4, 4


def _driver(tmp_path: Path, dynamic: bool) -> Driver:
    data = tmp_path / "data"
    write_addition_jsonl(data, DEMO_TASK)
    base = demo_config(str(tmp_path / "run"), data, base_model_dir())
    cfg = loads_run_config(
        to_toml(base, comments=False),
        overrides=(
            f"batch.prompts={B}",
            f"batch.group_size={G}",
            "batch.prompts_per_unit=2",
            f"dynamic_sampling.enabled={'true' if dynamic else 'false'}",
        ),
    )
    return Driver(cfg, tmp_path / "run", log=lambda _m: None)


def _payloads(d: Driver, rewards: list[list[float | None]]) -> list[dict]:
    """Batch 0's planned units with responses "7" and the given rewards per (prompt, sample)."""
    pays = []
    for unit in d.schedule.plan(0).units:
        samples = []
        for p in range(len(unit.prompts)):
            for g in range(G):
                r = rewards[unit.first_slot + p][g]
                samples.append(
                    {
                        "tokens": [ord("7"), 258],
                        "logp": [-0.5, -0.25],
                        "finish": "stop",
                        "status": "INFRA" if r is None else "AC",
                        "reward": r,
                    }
                )
        pays.append({"unit": unit.to_dict(), "version": unit.version, "samples": samples})
    return pays


REWARDS: list[list[float | None]] = [
    [1.0, 1.0, 1.0, 1.0],  # uniform: teaches nothing
    [1.0, 0.0, None, 0.0],  # informative, one INFRA sample
    [0.0, 0.0, 0.0, 0.0],  # uniform
    [0.0, 1.0, 0.0, 0.0],  # informative
]


def test_without_dynamic_sampling_every_group_trains(tmp_path: Path) -> None:
    d = _driver(tmp_path, dynamic=False)
    batch, info = d.build_batch(0, _payloads(d, REWARDS))
    assert info["groups"] == B and info["dropped_uniform"] == 0 and info["excluded"] == 1
    ids = [ref.id for u in d.schedule.plan(0).units for ref in u.prompts]
    assert info["prompt_ids"] == ids
    assert batch.loss_mask.shape[:2] == (B, G) and batch.loss_mask[:, :, d.P].sum() == B * G - 1
    # the INFRA sample is masked out and never scored 0: it holds its group's mean reward
    assert batch.loss_mask[1, 2].sum() == 0 and batch.rewards[1, 2] == np.float32(1 / 3)


def test_packed_log_probs_give_the_same_batch_as_listed_ones(tmp_path: Path) -> None:
    """New records keep the sampler log-probs as packed float32 (`logp_f32`); records written
    before as JSON lists (`logp`). Both give the same arrays, bit for bit; a count that does not
    match the tokens is Corrupt either way."""
    d = _driver(tmp_path, dynamic=False)
    listed = _payloads(d, REWARDS)
    rng = np.random.default_rng(0)
    for pay in listed:
        for s in pay["samples"]:
            s["logp"] = [float(x) for x in -rng.random(2).astype(np.float32) * 5]
    packed = copy.deepcopy(listed)
    for pay in packed:
        for s in pay["samples"]:
            s["logp_f32"] = pack_logp(s.pop("logp"))
    a, _ = d.build_batch(0, listed)
    b, _ = d.build_batch(0, packed)
    assert a.sampler_logp is not None and b.sampler_logp is not None
    assert a.sampler_logp.tobytes() == b.sampler_logp.tobytes()
    assert np.count_nonzero(b.sampler_logp) == 2 * (B * G - 1)  # all but the INFRA sample's
    for pays in (listed, packed):
        broken = copy.deepcopy(pays)
        key = "logp_f32" if "logp_f32" in broken[0]["samples"][0] else "logp"
        broken[0]["samples"][0][key] = pack_logp([-1.0]) if key == "logp_f32" else [-1.0]
        with pytest.raises(Corrupt, match="1 log-probs for 2 tokens"):
            d.build_batch(0, broken)


def test_dynamic_sampling_drops_uniform_groups_and_pads_the_short_batch(tmp_path: Path) -> None:
    d = _driver(tmp_path, dynamic=True)
    pays = _payloads(d, REWARDS)
    batch, info = d.build_batch(0, pays)
    ids = [ref.id for u in d.schedule.plan(0).units for ref in u.prompts]
    assert info["groups"] == 2 and info["dropped_uniform"] == 2
    assert info["prompt_ids"] == [ids[1], ids[3]]
    P = d.P
    # accepted groups first, with their responses and rewards
    assert batch.tokens[0, 0, P] == ord("7") and batch.loss_mask[0, 0, P] == 1.0
    np.testing.assert_array_equal(batch.rewards[1], [0.0, 1.0, 0.0, 0.0])
    # the two empty slots: a real prompt, no response, no loss, reward 0 (they teach nothing)
    name, row = ids[1].split("/")
    first = encode(d._prompt(name, int(row)).text)
    for slot in (2, 3):
        assert batch.loss_mask[slot].sum() == 0 and batch.rewards[slot].sum() == 0
        assert batch.valid[slot, :, P - len(first) : P].all()
        assert (batch.tokens[slot, :, P:] == PAD).all() and not batch.valid[slot, :, P:].any()
    # every group uniform: still one fixed-shape batch, nothing to learn, no crash
    batch, info = d.build_batch(0, _payloads(d, [[1.0] * G] * B))
    assert info["groups"] == 0 and info["dropped_uniform"] == B
    assert batch.loss_mask.sum() == 0 and batch.tokens.shape == (B, G, d.P + d.R)


def test_params_hash_names_the_params_by_their_manifest() -> None:
    from rlx_controller.driver import params_hash
    from rlx_core.clients.paramserver import TensorSpec

    def spec(name: str, digest: str, shape: tuple[int, ...] = (4,)) -> TensorSpec:
        return TensorSpec(name, np.dtype(np.float32), shape, 0, shape, 16, digest, 0)

    a, b = spec("a", "1" * 64), spec("b", "2" * 64)
    assert params_hash([a, b]) == params_hash([b, a])  # order of the manifest does not matter
    assert len({params_hash([a, b]), params_hash([a, spec("b", "3" * 64)])}) == 2  # bytes
    assert params_hash([a, b]) != params_hash([a, spec("b", "2" * 64, (2, 2))])  # shape
    assert params_hash([a, b]) != params_hash([a, spec("c", "2" * 64)])  # name
