"""The rollout log's record, per work unit: bytes and encode + decode time of the RLXROLL1 JSON
record (the first format, reproduced here as driver.py and rollout_log.py wrote and read it)
against the RLXROLL2 record (`RolloutUnit.to_bytes`, protobuf), for a realistic unit: 8 prompts
x 8 samples x 512 response tokens, ids from a 151,646-token vocabulary (Qwen2's), ~200-token
prompts, ~4 characters of text per token.

    uv run python tools/bench/rollout_log/bench.py [--repeats 30]

encode: from the worker's reply (GenerateResult), the decoded texts and the verdicts to the
framed record's bytes. decode: from those bytes to what the batch reads of every sample (its
token ids and float32 log-probs as an array), the frame's sha256 checked. Each is the median of
`--repeats` runs; `uptime` before and after.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import uptime

from rlx_controller import decode_record, encode_record
from rlx_core.clients import GenerateResult, Rollout, SampleResult
from rlx_core.rollout import RolloutUnit

PROMPTS, G, TOKENS, PROMPT_TOKENS, VOCAB = 8, 8, 512, 200, 151_646


def _reply(
    seed: int = 0,
) -> tuple[dict[str, Any], list[list[int]], GenerateResult, list[str], list[SampleResult]]:
    """A unit as the driver holds it after generation and scoring: the work unit's dict, the
    prompts' ids, the worker's reply, the decoded texts and the verdicts."""
    rng = np.random.default_rng(seed)
    unit = {
        "unit_id": "b00000012.r0.u0003",
        "batch": 12,
        "round": 0,
        "index": 3,
        "version": 12,
        "prompts": [
            {"dataset": "gsm8k", "row": int(r), "epoch": 0} for r in rng.integers(0, 7473, PROMPTS)
        ],
        "seeds": [[int(x) for x in rng.integers(0, 2**63, G)] for _ in range(PROMPTS)],
        "first_slot": 24,
    }
    prompt_ids = [rng.integers(0, VOCAB, PROMPT_TOKENS).tolist() for _ in range(PROMPTS)]
    rollouts = []
    for p in range(PROMPTS):
        for g in range(G):
            lp = np.log(rng.random(TOKENS).astype(np.float32) * 0.99 + 0.01)
            rollouts.append(
                Rollout(
                    prompt_index=p,
                    sample_index=g,
                    token_ids=tuple(int(t) for t in rng.integers(0, VOCAB, TOKENS)),
                    sampler_logprobs=tuple(float(x) for x in lp),  # float32 values, as on the wire
                    model_logprobs=(),
                    finish_reason="length",
                    versions=(),
                )
            )
    words = [
        "the",
        "answer",
        "is",
        "so",
        "we",
        "add",
        "multiply",
        "and",
        "then",
        "subtract",
        "to",
        "get",
    ]
    texts = [" ".join(rng.choice(words, TOKENS)) for _ in rollouts]  # ~4 chars per token
    verdicts = [
        SampleResult(sample_id=f"s{i}", status=s, score=None if s == "INFRA" else float(s == "AC"))
        for i, s in enumerate(rng.choice(["AC", "WA", "INFRA"], len(rollouts), p=[0.4, 0.55, 0.05]))
    ]
    result = GenerateResult(
        unit_id=unit["unit_id"],
        version=12,
        rollouts=tuple(rollouts),
        generated_tokens=PROMPTS * G * TOKENS,
        elapsed_s=1.0,
    )
    return unit, prompt_ids, result, texts, verdicts


# --- RLXROLL1: the JSON record, as the driver built it and the log framed it ----------------
def _json_encode(
    unit: dict[str, Any],
    prompt_ids: list[list[int]],
    result: GenerateResult,
    texts: list[str],
    verdicts: list[SampleResult],
) -> bytes:
    samples = [
        {
            "tokens": list(r.token_ids),
            "text": text,
            "logp_f32": base64.b64encode(np.asarray(r.sampler_logprobs, "<f4").tobytes()).decode(),
            "finish": r.finish_reason,
            "status": v.status,
            "reward": None if v.excluded else float(v.score or 0.0),
        }
        for r, text, v in zip(result.rollouts, texts, verdicts, strict=True)
    ]
    payload = {
        "unit": unit,
        "prompt_ids": prompt_ids,
        "version": result.version,
        "generated_tokens": result.generated_tokens,
        "samples": samples,
    }
    body = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False
    ).encode()
    return b"RLXROLL1 " + f"{hashlib.sha256(body).hexdigest()} {len(body)}\n".encode() + body


def _json_decode(data: bytes) -> list[tuple[list[int], np.ndarray]]:
    head, _, body = data.partition(b"\n")
    _magic, digest, length = head.split(b" ")
    assert len(body) == int(length) and hashlib.sha256(body).hexdigest().encode() == digest
    payload = json.loads(body)
    return [
        (s["tokens"], np.frombuffer(base64.b64decode(s["logp_f32"]), "<f4"))
        for s in payload["samples"]
    ]


# --- RLXROLL2: the typed record, protobuf -----------------------------------------------
def _proto_encode(
    unit: dict[str, Any],
    prompt_ids: list[list[int]],
    result: GenerateResult,
    texts: list[str],
    verdicts: list[SampleResult],
) -> bytes:
    refs = [f"{p['dataset']}/{p['row']}" for p in unit["prompts"]]
    record = RolloutUnit.of(
        unit, prompts=refs, prompt_ids=prompt_ids, result=result, texts=texts, verdicts=verdicts
    )
    return encode_record(record)


def _proto_decode(data: bytes) -> list[tuple[tuple[int, ...], np.ndarray]]:
    record = decode_record(data)
    assert record is not None
    return [(s.tokens, s.logp) for g in record.groups for s in g.samples]


def _median_us(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    print(uptime())
    inputs = _reply()
    old, new = _json_encode(*inputs), _proto_encode(*inputs)
    # the same unit either way: RLXROLL1 reads into the very record RLXROLL2 holds
    assert decode_record(old) == decode_record(new)
    for (t1, l1), (t2, l2) in zip(_json_decode(old), _proto_decode(new), strict=True):
        assert list(t1) == list(t2) and l1.tobytes() == l2.tobytes()
    rows = [
        (
            "RLXROLL1 (JSON, base64 float32)",
            len(old),
            _median_us(lambda: _json_encode(*inputs), args.repeats),
            _median_us(lambda: _json_decode(old), args.repeats),
        ),
        (
            "RLXROLL2 (protobuf)",
            len(new),
            _median_us(lambda: _proto_encode(*inputs), args.repeats),
            _median_us(lambda: _proto_decode(new), args.repeats),
        ),
    ]
    legacy_us = _median_us(lambda: decode_record(old), args.repeats)
    print(f"one unit: {PROMPTS} prompts x {G} samples x {TOKENS} tokens, median of {args.repeats}")
    print(f"{'record':34} {'bytes':>9} {'encode us':>10} {'decode us':>10} {'enc+dec us':>11}")
    for name, size, enc, dec in rows:
        print(f"{name:34} {size:9d} {enc:10.0f} {dec:10.0f} {enc + dec:11.0f}")
    (_, b1, e1, d1), (_, b2, e2, d2) = rows
    print(
        f"{'ratio RLXROLL2 / RLXROLL1':34} {b2 / b1:9.2f} {e2 / e1:10.2f} {d2 / d1:10.2f} "
        f"{(e2 + d2) / (e1 + d1):11.2f}"
    )
    print(f"reading an RLXROLL1 record into a RolloutUnit (a resumed old run): {legacy_us:.0f} us")
    print(uptime())


if __name__ == "__main__":
    main()
