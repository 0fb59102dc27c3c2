"""`rlx up` with a user's own checkpoint and dataset, the path a real model takes (DESIGN §10).

The checkpoint is an HF-format Qwen2 directory with a BPE tokenizer trained by
tools/make_goldens and a ChatML chat template (packages/model/tests/testdata/qwen2, whose
tokenizer transformers itself checked), not the demo's; its generation_config.json stops at two
ids, and its `lm_head` row of `<|im_end|>` is scaled so that generation stops there often
enough to be seen. The dataset is a slice of the real GSM8K test split (question, and an answer
ending `#### N`). Then:

- every logged prompt's ids equal the chat-template rendering of its question, encoded;
- every logged response text is the tokenizer's decoding of its logged ids;
- generation stopped at the checkpoint's EOS ids (and only there);
- SIGKILL of the controller, then `rlx resume`, ends bit-identical to the uninterrupted run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from up_helpers import CLI, consumed, steps_done

from rlx_controller.rollout_log import RolloutLog
from rlx_core.storage import open_storage
from rlx_core.tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
QWEN2 = ROOT / "packages" / "model" / "tests" / "testdata" / "qwen2"
GSM8K = ROOT.parent / "shared" / "data" / "math" / "gsm8k_test.jsonl"
STOPS = [511, 509]  # <|im_end|>, <|endoftext|>
STEPS = 4
P, R = 128, 16  # GSM8K questions are 93-375 tokens with this 512-token vocabulary


def _checkpoint(out: Path) -> Path:
    from rlx_model.safetensors_io import SafetensorsFile, write_safetensors

    out.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(QWEN2 / name, out / name)
    gen = json.loads((QWEN2 / "generation_config.json").read_text())
    gen["eos_token_id"] = STOPS
    (out / "generation_config.json").write_text(json.dumps(gen))
    weights = SafetensorsFile(QWEN2 / "model.safetensors")
    tensors = {n: np.array(weights.get(n)) for n in weights.names()}
    tensors["lm_head.weight"][511] *= 3.0  # <|im_end|> likely at some steps, not all
    write_safetensors(out / "model.safetensors", tensors, {"format": "pt"})
    return out


def _config(tmp: Path) -> Path:
    rows = [json.loads(line) for line in GSM8K.read_text().splitlines()[:120]]
    (tmp / "gsm8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ckpt = _checkpoint(tmp / "qwen2-ckpt")
    text = f"""
seed = 3
steps = {STEPS}

[model]
path = {json.dumps(str(ckpt))}

[[datasets]]
name = "gsm8k"
path = {json.dumps(str(tmp / "gsm8k.jsonl"))}
prompt_field = "question"
answer_field = "answer"
answer_format = "gsm8k"

[trainer.objective]
preset = "grpo"

[trainer.optimizer]
lr = 1e-3

[batch]
prompts = 2
group_size = 4
prompts_per_unit = 2
max_prompt_tokens = {P}
max_new_tokens = {R}

[snapshots]
checkpoint_every = 2
"""
    path = tmp / "run.toml"
    path.write_text(text)
    return path


def _up(config: Path, run_dir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*CLI, "up", str(config), "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _finish(proc: subprocess.Popen[bytes]) -> str:
    out, _ = proc.communicate(timeout=400)
    text = out.decode(errors="replace")
    assert proc.returncode == 0 and f"finished at step {STEPS}" in text, text
    return text


def _summary(run: Path) -> dict[str, Any]:
    return dict(json.loads((run / "summary.json").read_text()))


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_a_qwen2_checkpoint_on_gsm8k_through_rlx_up(tmp_path: Path) -> None:
    config = _config(tmp_path)
    clean = tmp_path / "clean"
    text = _finish(_up(config, clean))
    assert "longer than batch.max_prompt_tokens" in text  # the overlong questions are named

    tok = load_tokenizer(str(tmp_path / "qwen2-ckpt"))
    questions = [json.loads(line)["question"] for line in (tmp_path / "gsm8k.jsonl").open()]
    log = RolloutLog(open_storage(str(clean)))
    units = log.unit_ids()
    assert len(units) >= STEPS
    stopped = capped = 0
    for unit_id in units:
        record = log.get(unit_id)
        assert record is not None
        for group in record.groups:
            row = int(group.prompt.split("/")[1])
            # the prompt as the chat template renders it: system turn, user turn, assistant cue
            rendered = tok.render([{"role": "user", "content": questions[row]}])
            assert rendered.startswith("<|im_start|>system\n") and rendered.endswith(
                "<|im_start|>assistant\n"
            )
            assert list(group.prompt_ids) == tok.encode(rendered, add_special_tokens=False)
            assert len(group.prompt_ids) <= P
            for sample in group.samples:
                ids = list(sample.tokens)
                assert sample.text == tok.decode(ids)
                # the checkpoint's EOS ids end generation, and nothing else does before R
                assert not any(i in STOPS for i in ids[:-1])
                if sample.finish == "stop":
                    assert ids[-1] in STOPS
                    stopped += 1
                else:
                    assert len(ids) == R and ids[-1] not in STOPS
                    capped += 1
    assert stopped and capped, (stopped, capped)

    # killed without a chance to snapshot, then resumed: the same params, the same prompts
    killed = tmp_path / "killed"
    proc = _up(config, killed)
    while steps_done(killed) < 2:
        assert proc.poll() is None, proc.communicate()[0].decode(errors="replace")
        time.sleep(0.05)
    os.kill(int((killed / "controller.pid").read_text()), signal.SIGKILL)
    proc.wait(timeout=60)
    assert steps_done(killed) < STEPS
    resumed = subprocess.run(
        [*CLI, "resume", str(killed)], capture_output=True, timeout=400, check=False
    )
    assert resumed.returncode == 0, resumed.stdout.decode(errors="replace")
    assert _summary(killed)["params_hash"] == _summary(clean)["params_hash"]
    assert consumed(killed) == consumed(clean)
