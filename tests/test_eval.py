"""`rlx eval` end to end through real services: the demo base model on a slice of the demo's
held-out sums, a greedy answer and 2 sampled ones a prompt. Every verdict is the demo's answer
rule applied to the logged text, and the printed tables are the figures of the samples logged."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from up_helpers import CLI

from rlx_controller.evaluation import EvalSample, summarize
from rlx_data import addition_answer_correct, base_model_dir, read_jsonl

PROMPTS = 8


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(240)
def test_eval_demo_base_model_prints_both_tables(tmp_path: Path) -> None:
    out = tmp_path / "samples.jsonl"
    proc = subprocess.run(
        [
            *CLI,
            "eval",
            "--model",
            str(base_model_dir()),
            "--samples",
            "2",
            "--set",
            f"eval.max_prompts={PROMPTS}",
            "--run-dir",
            str(tmp_path / "ev"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # progress on stderr
    assert "eval v0 addition-heldout: 8 prompts, greedy" in proc.stderr
    assert "eval v0 addition-heldout: 8 prompts, 2 samples" in proc.stderr

    samples = [EvalSample(**json.loads(line)) for line in out.read_text().splitlines()]
    assert len(samples) == PROMPTS * 3
    greedy = [s for s in samples if s.greedy]
    sampled = [s for s in samples if not s.greedy]
    assert [s.row for s in greedy] == list(range(PROMPTS))
    assert sorted((s.row, s.sample) for s in sampled) == [
        (r, g) for r in range(PROMPTS) for g in range(2)
    ]
    # every verdict is the demo's rule on the text (the gold answers of the held-out file)
    heldout = read_jsonl(str(tmp_path / "ev" / "data" / "heldout.jsonl"))
    for s in samples:
        right = addition_answer_correct(s.text, heldout[s.row]["answer"])
        assert (s.status, s.score) == (("AC", 1.0) if right else ("WA", 0.0)), s
        assert 1 <= s.response_tokens <= 4 and s.finish_reason in ("stop", "length")

    a = summarize(samples, 2)["addition-heldout"]
    # the base model solves some sums and not others
    assert a.greedy is not None and 0 < a.greedy < 1
    assert a.pass_at_1 is not None and a.pass_at_k is not None
    assert a.pass_at_1 <= a.pass_at_k <= 1 and a.avg_at_k == a.pass_at_1  # 0/1 scores
    # the figures table: the figures of the logged samples
    lines = [[c.strip() for c in line.split("│")[1:-1]] for line in proc.stdout.splitlines()]
    assert [
        "addition-heldout",
        str(PROMPTS),
        f"{a.greedy:.3f}",
        f"{a.pass_at_1:.3f}",
        f"{a.pass_at_k:.3f}",
        f"{a.avg_at_k:.3f}",
        f"{a.greedy_tokens:.1f}",
        f"{a.sampled_tokens:.1f}",
        "0",
    ] in lines, proc.stdout
    # the verdict table: counts per kind of answer
    ac_g = sum(s.status == "AC" for s in greedy)
    ac_s = sum(s.status == "AC" for s in sampled)
    assert ["addition-heldout", "greedy", str(ac_g), str(PROMPTS - ac_g)] in lines
    assert ["addition-heldout", "sampled", str(ac_s), str(2 * PROMPTS - ac_s)] in lines
    assert f"rlx: {3 * PROMPTS} answers judged in " in proc.stdout
