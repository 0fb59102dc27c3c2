"""The gold answers rlx_data extracts from real datasets (GSM8K's `#### N`, MATH's last
`\\boxed{}`) are ones the verifier's math judge scores: a right response is AC, a wrong one WA."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlx_core.configs.run import DatasetConfig
from rlx_data import load_dataset
from rlx_verifier import Verifier
from rlx_verifier.config import JudgeConfig

DATA = Path(__file__).resolve().parents[1] / "testdata" / "math"


@pytest.fixture(scope="module")
def verifier() -> Iterator[Verifier]:
    v = Verifier(JudgeConfig(workers=1, math_workers=1, math_timeout_s=5.0))
    yield v
    v.close()


def test_extracted_golds_score_right_and_wrong_responses(verifier: Verifier) -> None:
    gsm_path, math_path = DATA / "gsm8k_test.jsonl", DATA / "math500_test.jsonl"
    gsm = load_dataset(
        DatasetConfig(
            name="gsm8k", path=str(gsm_path), prompt_field="question", answer_format="gsm8k"
        )
    )
    math = load_dataset(
        DatasetConfig(
            name="math",
            path=str(math_path),
            prompt_field="problem",
            answer_field="solution",
            answer_format="math",
        )
    )
    with open(gsm_path) as f:
        gsm_rows = [json.loads(line) for line in f]
    with open(math_path) as f:
        math_rows = [json.loads(line) for line in f]
    # rows 146 and 201 have thousands separators (#### 2,125); MATH row 422 has escaped braces
    # in its answer, 202 two \boxed{}s in its solution
    jobs = []
    for row in (0, 1, 146, 201):
        gold = gsm.prompt(row).answer
        assert gold is not None and "," not in gold
        jobs += [(gsm_rows[row]["answer"], gold, "AC"), (f"It is \\boxed{{{gold}}}.", gold, "AC")]
    for row in (0, 1, 202, 422):
        gold = math.prompt(row).answer
        assert gold == math_rows[row]["answer"]
        jobs += [(math_rows[row]["solution"], gold, "AC"), (f"So $\\boxed{{{gold}}}$.", gold, "AC")]
    jobs += [("The answer is 19.", gsm.prompt(0).answer, "WA")]  # gold 18
    jobs += [("\\boxed{\\frac{1}{3}}", math.prompt(202).answer, "WA")]  # gold \frac{2}{3}
    got = verifier.map(lambda j: verifier.math(j[0], j[1] or "").status, jobs)
    assert got == [j[2] for j in jobs]
