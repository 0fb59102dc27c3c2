"""The engine's contract: HF-golden greedy tokens, determinism regardless of batch mates, cache
occupancy or history, log-probs that mean what they say, stops, no leaked blocks, reloads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import jax
import numpy as np
import pytest

from rlx_core.clients.inference import Sampling, WorkUnit
from rlx_core.errors import Cancelled, ConfigError, FailedPrecondition, InvalidArgument
from rlx_inference.config import EngineConfig
from rlx_inference.engine import Engine
from rlx_model import forward, init_params, load_checkpoint, logits, tiny_config

DATA = Path(__file__).resolve().parents[2] / "model" / "tests" / "testdata"
CFG = tiny_config(vocab_size=97, hidden_size=32, num_layers=2)
PARAMS = init_params(CFG, seed=5)
# one decode shape (span = max_context) and prefill shapes of 1 or 4 rows x 16 or 32 positions
ENGINE = EngineConfig(
    slots=4, block_size=4, cache_mib=1, max_context=64, span_bucket=64, max_prefill_tokens=64
)
RNG = np.random.default_rng(0)
PROMPTS = tuple(tuple(int(t) for t in RNG.integers(1, 97, n)) for n in (3, 11, 6, 15, 1, 9))
SAMPLED = Sampling(temperature=1.3, top_p=0.9)


def unit(prompts=PROMPTS, g: int = 2, sampling: Sampling = SAMPLED, **kw) -> WorkUnit:
    args = {
        "unit_id": "u",
        "version": 0,
        "prompts": prompts,
        "samples_per_prompt": g,
        "sampling": sampling,
        "seeds": tuple(range(100, 100 + len(prompts) * g)),
        "max_new_tokens": 20,
    }
    args.update(kw)
    return WorkUnit(**args)


def engine(cfg=CFG, params=PARAMS, **kw) -> Engine:
    return Engine(cfg, params, replace(ENGINE, **kw))


def outputs(result) -> list[tuple]:
    return [(r.token_ids, r.sampler_logprobs, r.model_logprobs) for r in result.rollouts]


@pytest.mark.parametrize(
    "family",
    [
        "qwen2",
        pytest.param("qwen3", marks=pytest.mark.slow),
        pytest.param("llama", marks=pytest.mark.slow),
    ],
)
def test_greedy_tokens_equal_the_hf_goldens(family: str) -> None:
    cfg, params = load_checkpoint(DATA / family)
    g = np.load(DATA / family / "goldens.npz")
    prompts = (tuple(g["prompt_ids"][0].tolist()), tuple(g["prompt2_ids"][0].tolist()))
    eng = Engine(cfg, params, EngineConfig(slots=4, cache_mib=8, max_context=256))
    result = eng.generate(
        unit(prompts, g=1, sampling=Sampling(greedy=True), seeds=(0, 0), max_new_tokens=24)
    )
    assert list(result.rollouts[0].token_ids) == g["greedy_ids"][0].tolist()
    assert list(result.rollouts[1].token_ids) == g["greedy_prompt2_ids"][0].tolist()
    assert eng.free_blocks == eng.total_blocks


@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=pytest.mark.slow)])
def test_a_unit_is_bit_identical_alone_and_after_other_units(dtype: str) -> None:
    cfg = replace(CFG, param_dtype=dtype, compute_dtype=dtype)
    params = init_params(cfg, seed=5)
    target = unit()
    alone = outputs(engine(cfg, params).generate(target))
    eng = engine(cfg, params)
    eng.generate(unit(PROMPTS[:2], g=3, max_new_tokens=7))
    eng.generate(unit(PROMPTS[3:], g=1, sampling=Sampling(greedy=True), max_new_tokens=30))
    eng.generate(unit(PROMPTS[::-1], g=2, stop_token_ids=(5, 6, 7)))
    assert outputs(eng.generate(target)) == alone
    assert eng.free_blocks == eng.total_blocks  # no leaks, whatever ran


def test_a_sample_does_not_depend_on_its_batch_mates_or_the_cache_size() -> None:
    """The same (prompt, seed) draws the same tokens and log-probs: with other prompts around it,
    in another slot, and with a cache so small that samples queue for blocks."""
    full = engine().generate(unit())
    one = engine().generate(unit(PROMPTS[3:4], g=2, seeds=(106, 107)))
    assert outputs(one) == outputs(full)[6:8]
    small = engine()
    small.pool.allocate(small.pool.num_free - 25)  # room for 2 sequences of <= 10 blocks at once
    assert outputs(small.generate(unit())) == outputs(full)


def test_samples_of_a_prompt_share_its_prefill_with_the_same_bits() -> None:
    """G samples of a prompt: the prompt is computed once and its blocks copied to the others;
    each sample is bit-identical to that (prompt, seed) generated alone, where nothing is shared."""
    eng = engine()
    shared = outputs(eng.generate(unit(g=4, seeds=tuple(range(300, 324)))))
    assert eng.shared_prefills == 6 * 3  # 6 prompts, 3 of each 4 samples copied
    assert eng.free_blocks == eng.total_blocks
    for p, prompt in enumerate(PROMPTS):
        for k in range(4):
            seed = 300 + 4 * p + k
            alone = engine()
            got = outputs(alone.generate(unit((prompt,), g=1, seeds=(seed,))))
            assert alone.shared_prefills == 0
            assert got == shared[4 * p + k : 4 * p + k + 1], (p, k)


def test_a_first_token_does_not_depend_on_how_many_prompts_were_prefilled_with_it() -> None:
    """At a real head (d 512, 32000 tokens), XLA's code for the final norm and the head changes
    with the number of rows: the first token is drawn in a fixed-shape program, so a prompt
    prefilled alone or with 1, 3, 7 or 15 others of other lengths (so packed at other places
    in runs of other lengths) gets the same bits."""
    cfg = tiny_config(vocab_size=32000, hidden_size=512, num_layers=1)
    params = init_params(cfg, seed=1)
    rng = np.random.default_rng(3)
    others = tuple(
        tuple(int(t) for t in rng.integers(0, 32000, rng.integers(3, 31))) for _ in range(15)
    )
    target = tuple(int(t) for t in rng.integers(0, 32000, 20))
    eng = Engine(cfg, params, EngineConfig(slots=16, block_size=16, cache_mib=64, max_context=32))
    firsts = []
    for n in (0, 1, 3, 7, 15):
        prompts = (*others[:n], target)
        result = eng.generate(
            unit(
                prompts,
                g=1,
                sampling=Sampling(temperature=1.0),
                max_new_tokens=1,
                seeds=(*range(7, 7 + n), 99),
            )
        )
        firsts.append(outputs(result)[-1])
    assert firsts == [firsts[0]] * 5


def test_static_batching_gives_the_same_rollouts() -> None:
    assert outputs(engine(continuous=False).generate(unit())) == outputs(engine().generate(unit()))


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_logprobs_are_those_of_the_sampled_and_the_plain_distributions() -> None:
    """Recompute both log-probs from a full forward over prompt + generated tokens."""
    temperature = 0.7
    result = engine().generate(
        unit(PROMPTS[:2], g=1, sampling=Sampling(temperature=temperature), seeds=(1, 2))
    )
    for prompt, r in zip(PROMPTS[:2], result.rollouts, strict=True):
        seq = np.asarray([list(prompt) + list(r.token_ids)], np.int32)
        row = np.asarray(logits(PARAMS, CFG, forward(PARAMS, CFG, seq)[0]))[0]
        row = row[len(prompt) - 1 : -1].astype(np.float64)
        plain, tempered = log_softmax(row), log_softmax(row / temperature)
        picked = np.arange(len(r.token_ids)), np.asarray(r.token_ids)
        np.testing.assert_allclose(r.model_logprobs, plain[picked], atol=1e-4)
        np.testing.assert_allclose(r.sampler_logprobs, tempered[picked], atol=1e-4)


def test_truncation_and_greedy() -> None:
    eng = engine()
    greedy = eng.generate(unit(sampling=Sampling(greedy=True)))
    top1 = eng.generate(unit(sampling=Sampling(top_k=1, temperature=2.0)))
    assert [r.token_ids for r in top1.rollouts] == [r.token_ids for r in greedy.rollouts]
    # a one-token support: the sampled distribution gives it probability 1
    assert all(lp == 0.0 for r in top1.rollouts for lp in r.sampler_logprobs)
    assert all(lp < 0.0 for r in top1.rollouts for lp in r.model_logprobs)
    nucleus = eng.generate(unit(sampling=Sampling(top_p=0.001)))  # tiny nucleus: argmax only
    assert [r.token_ids for r in nucleus.rollouts] == [r.token_ids for r in greedy.rollouts]
    # different seeds give different samples at temperature 1
    a = eng.generate(unit(sampling=Sampling()))
    b = eng.generate(unit(sampling=Sampling(), seeds=tuple(range(500, 512))))
    assert [r.token_ids for r in a.rollouts] != [r.token_ids for r in b.rollouts]


def test_stop_tokens_and_sequences_end_samples() -> None:
    eng = engine()
    free_run = eng.generate(unit(g=1, max_new_tokens=20))
    first = free_run.rollouts[0].token_ids
    stop = eng.generate(unit(g=1, max_new_tokens=20, stop_token_ids=(first[4],)))
    r = stop.rollouts[0]
    assert r.finish_reason == "stop" and r.token_ids == first[: first.index(first[4]) + 1]
    seq = eng.generate(unit(g=1, stop_sequences=(tuple(first[2:4]),))).rollouts[0]
    assert seq.finish_reason == "stop" and seq.token_ids[-2:] == first[2:4]
    assert len(seq.token_ids) <= 4
    assert free_run.rollouts[1].finish_reason == "length"
    assert all(len(x.token_ids) == 20 for x in free_run.rollouts if x.finish_reason == "length")


def test_forced_reload_discards_partial_rollouts_and_counts_them() -> None:
    eng = engine()
    other = jax.tree.map(lambda x: x * 1.01, PARAMS)
    calls = []

    def poll():
        calls.append(1)
        return (other, 1) if len(calls) == 3 else None

    with pytest.raises(FailedPrecondition, match=r"reload to version 1.*4 partial rollouts"):
        eng.generate(unit(max_new_tokens=30), poll=poll)
    assert eng.discarded_partial == 4 and eng.version == 1
    assert eng.free_blocks == eng.total_blocks
    with pytest.raises(FailedPrecondition, match="needs version 0, but version 1 is loaded"):
        eng.generate(unit())


def test_interruptible_mode_recomputes_and_tags_versions() -> None:
    eng = engine(interruptible=True)
    other = jax.tree.map(lambda x: x * 1.01, PARAMS)
    calls = []

    def poll():
        calls.append(1)
        return (other, 1) if len(calls) == 3 else None

    result = eng.generate(unit(max_new_tokens=30, sampling=Sampling(greedy=True)), poll=poll)
    assert result.recomputed == 4 and result.version == 1
    versions = [set(r.versions) for r in result.rollouts]
    assert {0, 1} in versions and {1} in versions  # early ones old+new, late ones new only
    for r in result.rollouts:
        assert list(r.versions) == sorted(r.versions) and len(r.versions) == len(r.token_ids)
    assert eng.free_blocks == eng.total_blocks


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"prompts": ()}, "prompts"),
        ({"prompts": ((1, 2), ())}, r"prompts\[1\]"),
        ({"prompts": ((1, 97),)}, r"prompts\[0\]: ids \[97\] are outside"),
        ({"samples_per_prompt": 0}, "samples_per_prompt"),
        ({"max_new_tokens": 60}, "max_new_tokens"),
        ({"seeds": (1,)}, "seeds"),
        ({"sampling": Sampling(temperature=0.0)}, "sampling.temperature"),
        ({"sampling": Sampling(temperature=float("inf"))}, r"sampling.temperature: .*finite"),
        ({"sampling": Sampling(temperature=float("nan"))}, "sampling.temperature"),
        ({"sampling": Sampling(greedy=True, temperature=-1.0)}, "sampling.temperature"),
        ({"sampling": Sampling(top_p=float("nan"))}, "sampling.top_p"),
        ({"sampling": Sampling(top_k=-1)}, "sampling.top_k"),
        ({"sampling": Sampling(top_p=1.5)}, "sampling.top_p"),
        ({"stop_token_ids": (-1,)}, "stop_token_ids"),
    ],
)
def test_malformed_units_name_the_field(change: dict, field: str) -> None:
    with pytest.raises(InvalidArgument, match=field):
        engine().generate(unit(**change))


def test_greedy_takes_temperature_zero() -> None:
    greedy = Sampling(greedy=True)
    assert outputs(engine().generate(unit(sampling=replace(greedy, temperature=0.0)))) == outputs(
        engine().generate(unit(sampling=greedy))
    )


def test_a_cancelled_unit_frees_its_blocks_and_changes_no_later_unit() -> None:
    """Cancelled at a boundary (here the 6th), a unit raises Cancelled, returns every block, and
    the next unit's tokens and log-probs are bit-identical to those it has on a fresh engine."""
    target = unit()
    alone = outputs(engine().generate(target))
    eng = engine()
    boundaries = iter(range(1_000_000))
    big = unit(PROMPTS, g=8, max_new_tokens=40, seeds=tuple(range(len(PROMPTS) * 8)))
    with pytest.raises(Cancelled, match=r"work unit 'u': cancelled .* of 48 samples"):
        eng.generate(big, cancelled=lambda: next(boundaries) >= 5)
    assert eng.free_blocks == eng.total_blocks
    assert (eng.progress.queued, eng.progress.active) == (0, 0)
    assert (eng.cancelled_units, eng.units_done) == (1, 0)
    assert outputs(eng.generate(target)) == alone
    assert eng.free_blocks == eng.total_blocks


def test_a_unit_cancelled_before_it_starts_computes_nothing() -> None:
    eng = engine()
    with pytest.raises(Cancelled, match="after 0 of 12 samples"):
        eng.generate(unit(), cancelled=lambda: True)
    assert eng.tokens_done == 0 and eng.free_blocks == eng.total_blocks


def test_cache_smaller_than_one_sequence_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"engine.cache_mib"):
        Engine(CFG, PARAMS, EngineConfig(cache_mib=1, max_context=1 << 20, block_size=16))


DEMO_MODEL = Path(__file__).resolve().parents[3] / "tools" / "demo" / "base_model"


def test_bf16_sampler_logprobs_match_the_trainers_prefill() -> None:
    """bf16 compute: the engine's decode and the trainer's prefill (`token_logprobs`, the
    function the trainer recomputes π_old with) round the same float32 values, so the sampler's
    log-probs of the demo's base model agree with the trainer's to far below the 0.002-nat p95
    target (a bf16 residual stream measured p95 9e-3, max 4e-2 here)."""
    import dataclasses

    import jax.numpy as jnp

    from rlx_model import token_logprobs

    cfg, params = load_checkpoint(str(DEMO_MODEL), param_dtype="float32")
    cfg = dataclasses.replace(cfg, compute_dtype="bfloat16")
    rng = np.random.default_rng(0)
    prompts = tuple(tuple(int(t) for t in rng.integers(1, 260, n)) for n in (5, 9, 14, 19))
    config = EngineConfig(slots=16, block_size=16, cache_mib=4, max_context=64, span_bucket=64)
    result = Engine(cfg, params, config).generate(
        unit(prompts, g=4, sampling=Sampling(), seeds=tuple(range(16)), max_new_tokens=24)
    )
    tokens = np.zeros((16, 64), np.int32)
    valid = np.zeros((16, 64), bool)
    for i, r in enumerate(result.rollouts):
        seq = list(prompts[i // 4]) + list(r.token_ids)
        tokens[i, : len(seq)], valid[i, : len(seq)] = seq, True
    targets = jnp.roll(tokens, -1, axis=1)
    trainer = np.asarray(token_logprobs(params, cfg, tokens, targets, valid=valid)[0])
    diffs = np.concatenate(
        [
            np.abs(np.asarray(r.sampler_logprobs) - trainer[i, n - 1 : n - 1 + len(r.token_ids)])
            for i, r in enumerate(result.rollouts)
            for n in [len(prompts[i // 4])]
        ]
    )
    assert diffs.size > 200
    assert np.percentile(diffs, 95) < 1e-4 and diffs.mean() < 1e-4, (diffs.mean(), diffs.max())
    assert diffs.max() < 0.01
