"""Batch assembly (rlx_controller.batching): prefer-newest acceptance, INFRA exclusion and DAPO
dynamic sampling's drop of uniform groups, on rollout records, without a Driver or services."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlx_controller.batching import build_batch, judge_metrics
from rlx_controller.inputs import fitting_sources, load_datasets
from rlx_controller.mixture import PromptMixture, mixture_sources
from rlx_controller.prompts import PromptIds
from rlx_controller.rollout_log import decode_record, encode_record
from rlx_controller.schedule import Schedule
from rlx_core.config import to_toml
from rlx_core.configs.run import RunConfig, loads_run_config
from rlx_core.rollout import RolloutGroup, RolloutSample, RolloutUnit
from rlx_core.tokenizer import Tokenizer, load_tokenizer
from rlx_data import DEMO_TASK, base_model_dir, demo_config, write_addition_jsonl

B, G = 4, 4


@dataclass(frozen=True)
class _Run:
    """What batch building needs of a run: its config, tokenizer, schedule and prompt tokens."""

    cfg: RunConfig
    tokenizer: Tokenizer
    schedule: Schedule
    tokens: PromptIds

    @property
    def P(self) -> int:
        return self.cfg.batch.max_prompt_tokens

    @property
    def R(self) -> int:
        return self.cfg.batch.max_new_tokens

    def build(self, b: int, records: list[RolloutUnit]) -> tuple[Any, dict[str, Any]]:
        return build_batch(
            b, records, self.cfg, pad_id=self.tokenizer.pad_id, prompt_tokens=self.tokens.ids
        )


def _run(tmp_path: Path, dynamic: bool) -> _Run:
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
    tokenizer = load_tokenizer(cfg.model.path)
    datasets = load_datasets(cfg)
    tokens = PromptIds(
        tokenizer, datasets, max_tokens=cfg.batch.max_prompt_tokens, log=lambda _m: None
    )
    sources = fitting_sources(mixture_sources(cfg, list(datasets.values()), None), tokens)
    schedule = Schedule.from_config(cfg, PromptMixture(sources, seed=cfg.seed))
    return _Run(cfg, tokenizer, schedule, tokens)


def _records(d: _Run, rewards: list[list[float | None]]) -> list[RolloutUnit]:
    """Batch 0's planned units with responses "7" and the given rewards per (prompt, sample)."""
    seven = d.tokenizer.encode("7", add_special_tokens=False)
    response = (*seven, d.tokenizer.stop_ids[0])  # "7", then the checkpoint's EOS
    logp = np.linspace(-0.5, -0.25, len(response), dtype="<f4").tobytes()
    records = []
    for unit in d.schedule.plan(0).units:
        groups = []
        for p, ref in enumerate(unit.prompts):
            samples = []
            for g in range(G):
                r = rewards[unit.first_slot + p][g]
                samples.append(
                    RolloutSample(
                        tokens=response,
                        logp_f32=logp,
                        finish="stop",
                        text="7",
                        status="INFRA" if r is None else "AC",
                        reward=r,
                    )
                )
            groups.append(
                RolloutGroup(
                    prompt=ref.id,
                    prompt_ids=d.tokens.ids(ref.dataset, ref.row),
                    version=unit.version,
                    samples=tuple(samples),
                )
            )
        records.append(
            RolloutUnit(
                unit=unit.to_dict(),
                version=unit.version,
                generated_tokens=len(response) * G * len(groups),
                groups=tuple(groups),
            )
        )
    return records


REWARDS: list[list[float | None]] = [
    [1.0, 1.0, 1.0, 1.0],  # uniform: teaches nothing
    [1.0, 0.0, None, 0.0],  # informative, one INFRA sample
    [0.0, 0.0, 0.0, 0.0],  # uniform
    [0.0, 1.0, 0.0, 0.0],  # informative
]


def test_without_dynamic_sampling_every_group_trains(tmp_path: Path) -> None:
    d = _run(tmp_path, dynamic=False)
    batch, info = d.build(0, _records(d, REWARDS))
    assert info["groups"] == B and info["dropped_uniform"] == 0 and info["excluded"] == 1
    ids = [ref.id for u in d.schedule.plan(0).units for ref in u.prompts]
    assert info["prompts"] == ids
    assert batch.loss_mask.shape[:2] == (B, G) and batch.loss_mask[:, :, d.P].sum() == B * G - 1
    # the INFRA sample is masked out and never scored 0: it holds its group's mean reward
    assert batch.loss_mask[1, 2].sum() == 0 and batch.rewards[1, 2] == np.float32(1 / 3)


def _arrays(batch: object) -> list[bytes]:
    names = ("tokens", "valid", "loss_mask", "sampler_logp", "rewards")
    return [np.asarray(getattr(batch, n)).tobytes() for n in names]


def test_records_read_back_from_the_log_give_the_same_batch_bit_for_bit(tmp_path: Path) -> None:
    """A replayed batch is built from the records the log gives back: the same arrays, bit for
    bit, as the batch of the records that were logged (float32 log-probs never widened); a
    record without prompt ids (logged before records carried them) gets the run's own."""
    d = _run(tmp_path, dynamic=False)
    rng = np.random.default_rng(0)
    records = []
    for rec in _records(d, REWARDS):
        groups = []
        for group in rec.groups:
            samples = tuple(
                dataclasses.replace(
                    s, logp_f32=(-5 * rng.random(len(s.tokens))).astype("<f4").tobytes()
                )
                for s in group.samples
            )
            groups.append(dataclasses.replace(group, samples=samples))
        records.append(dataclasses.replace(rec, groups=tuple(groups)))
    replayed = [decode_record(encode_record(r)) for r in records]
    assert replayed == records
    without_ids = [
        dataclasses.replace(
            r, groups=tuple(dataclasses.replace(g, prompt_ids=()) for g in r.groups)
        )
        for r in records
    ]
    want, _ = d.build(0, records)
    assert want.sampler_logp is not None
    n = len(records[0].groups[0].samples[0].tokens)
    assert np.count_nonzero(want.sampler_logp) == n * (B * G - 1)  # all but the INFRA sample's
    for other in (replayed, without_ids):
        got, _ = d.build(0, other)
        assert _arrays(got) == _arrays(want)
    # the INFRA sample's log-probs stay 0 and out of the loss
    P = d.P
    assert not want.sampler_logp[1, 2].any() and not want.loss_mask[1, 2].any()
    first = records[0].groups[0].samples[0]
    assert want.sampler_logp[0, 0, P : P + len(first.tokens)].tobytes() == first.logp_f32


def test_dynamic_sampling_drops_uniform_groups_and_pads_the_short_batch(tmp_path: Path) -> None:
    d = _run(tmp_path, dynamic=True)
    pays = _records(d, REWARDS)
    batch, info = d.build(0, pays)
    ids = [ref.id for u in d.schedule.plan(0).units for ref in u.prompts]
    assert info["groups"] == 2 and info["dropped_uniform"] == 2
    assert info["prompts"] == [ids[1], ids[3]]
    P = d.P
    # accepted groups first, with their responses and rewards
    seven = d.tokenizer.encode("7", add_special_tokens=False)
    assert batch.tokens[0, 0, P] == seven[0] and batch.loss_mask[0, 0, P] == 1.0
    np.testing.assert_array_equal(batch.rewards[1], [0.0, 1.0, 0.0, 0.0])
    # the two empty slots: a real prompt, no response, no loss, reward 0 (they teach nothing)
    name, row = ids[1].split("/")
    first = d.tokens.ids(name, int(row))
    for slot in (2, 3):
        assert batch.loss_mask[slot].sum() == 0 and batch.rewards[slot].sum() == 0
        assert batch.valid[slot, :, P - len(first) : P].all()
        assert (batch.tokens[slot, :, P:] == d.tokenizer.pad_id).all() and not batch.valid[
            slot, :, P:
        ].any()
    # every group uniform: still one fixed-shape batch, nothing to learn, no crash
    batch, info = d.build(0, _records(d, [[1.0] * G] * B))
    assert info["groups"] == 0 and info["dropped_uniform"] == B
    assert batch.loss_mask.sum() == 0 and batch.tokens.shape == (B, G, d.P + d.R)


def test_params_hash_names_the_params_by_their_manifest() -> None:
    from rlx_controller.session import params_hash
    from rlx_core.clients.paramserver import TensorSpec

    def spec(name: str, digest: str, shape: tuple[int, ...] = (4,)) -> TensorSpec:
        return TensorSpec(name, np.dtype(np.float32), shape, 0, shape, 16, digest)

    a, b = spec("a", "1" * 64), spec("b", "2" * 64)
    assert params_hash([a, b]) == params_hash([b, a])  # order of the manifest does not matter
    assert len({params_hash([a, b]), params_hash([a, spec("b", "3" * 64)])}) == 2  # bytes
    assert params_hash([a, b]) != params_hash([a, spec("b", "2" * 64, (2, 2))])  # shape
    assert params_hash([a, b]) != params_hash([a, spec("c", "2" * 64)])  # name


def test_judge_metrics_per_dataset_rewards_verdicts_and_costs() -> None:
    """Per-dataset rewards over scored samples (an INFRA one left out), the verdict counts, and
    the verifier's cost averaged over the code samples it judged (NO_CODE never reached it)."""
    from rlx_core.rollout import Judgement

    def sample(status: str, reward: float | None, j: Judgement | None = None) -> RolloutSample:
        return RolloutSample(
            tokens=(1,),
            logp_f32=np.zeros(1, "<f4").tobytes(),
            finish="stop",
            text="",
            status=status,
            reward=reward,
            judgement=j or Judgement(),
        )

    code = RolloutGroup(
        prompt="code/3",
        prompt_ids=(1,),
        version=0,
        samples=(
            sample("AC", 1.0, Judgement(tests_passed=2, tests_total=2, run_s=0.03, compile_s=0.5)),
            sample("WA", 0.0, Judgement(tests_total=2, first_failed=0, run_s=0.01, check_s=0.02)),
            sample("NO_CODE", 0.0, Judgement(tests_total=2)),
            sample("INFRA", None, Judgement(tests_total=2, run_s=0.05)),
        ),
    )
    math = RolloutGroup(
        prompt="gsm.v2/7",
        prompt_ids=(1,),
        version=0,
        samples=(sample("AC", 1.0), sample("WA", 0.0), sample("AC", 1.0), sample("AC", 1.0)),
    )
    unit = RolloutUnit(unit={"unit_id": "u"}, version=0, generated_tokens=8, groups=(code, math))
    units = [unit, dataclasses.replace(unit, verify_s=0.25)]
    out = judge_metrics([code, math], units)
    assert out["reward/code"] == 1 / 3 and out["reward/gsm.v2"] == 0.75
    assert out["verdicts"] == {"AC": 4, "INFRA": 1, "NO_CODE": 1, "WA": 2}
    # three judged code samples (AC, WA, INFRA): NO_CODE is not one
    assert np.isclose(out["verifier/compile_s"], 0.5 / 3)
    assert np.isclose(out["verifier/run_s"], 0.09 / 3)
    assert np.isclose(out["verifier/check_s"], 0.02 / 3)
    assert out["verifier/wait_s"] == 0.25
    assert out["verifier_errors"] == 0  # INFRA is not a refusal
    # a math-only batch has no verifier cost fields beyond the wait
    assert set(judge_metrics([math], [unit])) == {
        "reward/gsm.v2",
        "verdicts",
        "verifier/wait_s",
        "verifier_errors",
    }
    # samples the verifier refused (ERROR) count in every unit of the batch, trained on or not
    refused = dataclasses.replace(code, samples=(sample("ERROR", None), sample("ERROR", None)))
    other = dataclasses.replace(unit, groups=(refused,))
    assert judge_metrics([math], [unit, other])["verifier_errors"] == 2
