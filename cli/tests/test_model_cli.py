"""`rlx model score` and `rlx model generate` reproduce the HF goldens (a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
QWEN2 = ROOT / "packages/model/tests/testdata/qwen2"
RLX = Path(sys.executable).parent / "rlx"


def rlx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RLX), "model", *args], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.integration
def test_score_reproduces_golden_logprobs(tmp_path: Path) -> None:
    g = np.load(QWEN2 / "goldens.npz")
    lines = []
    for row in g["input_ids"]:
        ids = row.tolist()
        lines.append(json.dumps({"prompt_ids": ids[:5], "completion_ids": ids[5:]}))
    lines.append(json.dumps({"prompt": "Hello,", "completion": " world!"}))
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    result = rlx("score", str(QWEN2), "--input", str(tmp_path / "in.jsonl"))
    assert result.returncode == 0, result.stderr
    out = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(out) == 3
    for row, golden in zip(out[:2], g["logprobs"], strict=True):
        np.testing.assert_allclose(row["logprobs"], golden[4:], atol=1e-4, rtol=0)
    assert len(out[2]["logprobs"]) >= 1 and all(v <= 0 for v in out[2]["logprobs"])


@pytest.mark.integration
def test_generate_greedy_json_reproduces_golden_tokens() -> None:
    g = np.load(QWEN2 / "goldens.npz")
    prompt = ",".join(map(str, g["prompt_ids"][0]))
    result = rlx(
        "generate",
        str(QWEN2),
        "--prompt-ids",
        prompt,
        "--max-new-tokens",
        "24",
        "--greedy",
        "--json",
        "--no-stop-at-eos",
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["ids"] == g["greedy_ids"][0].tolist()
    assert isinstance(out["text"], str)  # the qwen2 golden checkpoint has a tokenizer


@pytest.mark.integration
def test_generate_without_tokenizer_needs_ids(tmp_path: Path) -> None:
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((QWEN2 / name).read_bytes())
    result = rlx("generate", str(tmp_path), "--prompt", "hi", "--max-new-tokens", "2")
    assert result.returncode == 2
    assert "no tokenizer.json; use --prompt-ids" in result.stderr
    ok = rlx(
        "generate",
        str(tmp_path),
        "--prompt-ids",
        "1,2,3",
        "--max-new-tokens",
        "4",
        "--greedy",
        "--json",
    )
    assert ok.returncode == 0, ok.stderr
    assert len(json.loads(ok.stdout)["ids"]) <= 4 and json.loads(ok.stdout)["text"] is None


def test_bad_input_line_is_named(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text('{"prompt_ids": [1], "completion_ids": [2]}\nnot json\n')
    result = rlx("score", str(QWEN2), "--input", str(tmp_path / "in.jsonl"))
    assert result.returncode == 2
    assert "in.jsonl:2: not JSON" in result.stderr
