"""`rlx up` with a user's own checkpoint and dataset, the path a real model takes (DESIGN §10).

The checkpoint is an HF-format Qwen2 directory with a BPE tokenizer trained by
tools/make_goldens and a ChatML chat template (packages/model/tests/testdata/qwen2, whose
tokenizer transformers itself checked), not the demo's; its generation_config.json stops at two
ids, and its `lm_head` row of `<|im_end|>` is scaled so that generation stops there often
enough to be seen. The datasets are mixed in one run: a slice of the real GSM8K test split
(question, and an answer ending `#### N`), and two code datasets judged in the verifier's sandbox,
one with inline stdin/stdout tests and one with tests by link into a local test repository made
by `rlx verifier upload`, where one problem has a testlib-protocol checker. The model is random,
so its responses are taken whole as programs (`program = "whole"`): they reach the sandbox and
fail there. Then:

- every logged prompt's ids equal the chat-template rendering of its question, encoded;
- every logged response text is the tokenizer's decoding of its logged ids;
- generation stopped at the checkpoint's EOS ids (and only there);
- every code sample's verdict is a code verdict from the sandbox, judged on its problem's tests
  (the linked problem with the checker among them), never a math comparison;
- the metrics carry each dataset's reward, the verdicts and the verifier's cost, and a code
  eval set's greedy accuracy and sampled pass@k;
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
GSM8K = ROOT / "testdata" / "math" / "gsm8k_test.jsonl"
STOPS = [511, 509]  # <|im_end|>, <|endoftext|>
STEPS = 4
P, R = 128, 16  # GSM8K questions are 93-375 tokens with this 512-token vocabulary
CODE_VERDICTS = {"AC", "WA", "PE", "TLE", "MLE", "RE", "CE"}
# a testlib-protocol checker (argv: input output answer; exit 0 AC, 1 WA): any two
# non-negative integers that sum to the input's n are right
CHECKER = """import sys
n = int(open(sys.argv[1]).read())
try:
    a, b = map(int, open(sys.argv[2]).read().split())
except ValueError:
    print("expected two integers"); sys.exit(1)
sys.exit(0 if a >= 0 and b >= 0 and a + b == n else 1)
"""
LINKED = [
    {
        "id": "split",
        "tests": [{"stdin": "10\n", "answer": "5 5\n"}, {"stdin": "7\n", "answer": "3 4\n"}],
        "checker": {"language": "python", "source": CHECKER},
    },
    {"id": "double", "tests": [{"stdin": "2\n", "answer": "4\n"}]},
]


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


def _code_datasets(tmp: Path) -> tuple[Path, Path, str]:
    """(inline-test dataset, linked dataset, its manifest's link): the linked tests uploaded into
    a local test repository with `rlx verifier upload`, as a user would."""
    inline = tmp / "code.jsonl"
    rows = [
        {
            "prompt": f"Read n and print {k} * n.",
            "tests": [{"input": "3\n", "output": f"{3 * k}\n"}],
        }
        for k in range(2, 8)
    ]
    inline.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = tmp / "problems.jsonl"
    problems.write_text("".join(json.dumps(r) + "\n" for r in LINKED))
    up = subprocess.run(
        [*CLI, "verifier", "upload", str(problems), str(tmp / "test-repo"), "--json"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert up.returncode == 0, up.stderr.decode(errors="replace")
    manifest = json.loads(up.stdout.decode().strip().splitlines()[-1])["manifest"]
    linked = tmp / "linked.jsonl"
    rows = [
        {"statement": "Split n into two non-negative integers.", "problem": "split"},
        {"statement": "Print twice n.", "problem": "double"},
    ]
    linked.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return inline, linked, manifest


def _config(tmp: Path) -> Path:
    rows = [json.loads(line) for line in GSM8K.read_text().splitlines()[:120]]
    (tmp / "gsm8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ckpt = _checkpoint(tmp / "qwen2-ckpt")
    inline, linked, manifest = _code_datasets(tmp)
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

[[datasets]]
name = "code"
path = {json.dumps(str(inline))}
reward = "code"
program = "whole"

[[datasets]]
name = "linked"
path = {json.dumps(str(linked))}
reward = "code"
prompt_field = "statement"
tests_manifest = {json.dumps(manifest)}
problem_field = "problem"
program = "whole"
time_limit_s = 1.0
weight = 2.0

[trainer.objective]
preset = "grpo"

[trainer.optimizer]
lr = 1e-3

[batch]
prompts = 4
group_size = 4
prompts_per_unit = 2
max_prompt_tokens = {P}
max_new_tokens = {R}

[snapshots]
checkpoint_every = 2

[eval]
every = 2
samples = 2
max_prompts = 3

[[eval.datasets]]
name = "code-heldout"
path = {json.dumps(str(inline))}
reward = "code"
program = "whole"
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
    code: dict[str, list[Any]] = {"code": [], "linked": []}
    for unit_id in units:
        record = log.get(unit_id)
        assert record is not None
        for group in record.groups:
            dataset, row = group.prompt.split("/")[0], int(group.prompt.split("/")[1])
            if dataset != "gsm8k":
                code[dataset].extend((row, s) for s in group.samples)
                continue
            # math: compared as an answer, no tests
            assert all(s.judgement.tests_total == 0 for s in group.samples)
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

    # the code samples reached the sandbox: code verdicts on their problem's tests
    checked = ran = 0
    for dataset, samples in code.items():
        assert samples, f"no {dataset} prompt was drawn"
        for row, s in samples:
            assert s.status in CODE_VERDICTS and s.reward == (1.0 if s.status == "AC" else 0.0), s
            total = 1 if dataset == "code" else len(LINKED[row]["tests"])
            assert s.judgement.tests_total == total
            ran += s.judgement.run_s > 0  # 0 only for a verdict the verifier had cached
            checked += dataset == "linked" and row == 0
    assert checked, "the problem with a checker was never judged"
    # the first judging of a program is never cached: the sandbox's run time is logged
    assert ran, "no code sample's run time reached the log"
    metrics = [json.loads(line) for line in (clean / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "reward" in m]
    keys = set().union(*steps)
    assert {"reward/gsm8k", "reward/code", "reward/linked", "verdicts", "verifier/wait_s"} <= keys
    assert any("verifier/run_s" in m for m in steps)
    assert sum(sum(m["verdicts"].values()) for m in steps) == STEPS * 4 * 4  # B 4, G 4
    # evaluation of a code dataset through the same checkpoint: greedy and sampled pass@k, the
    # random model's programs failing in the sandbox (0, not a missing figure)
    evals = [m for m in metrics if "eval/code-heldout/pass@2" in m]
    assert [m["step"] for m in evals] == [0, 2, 4]
    assert all(m["eval/code-heldout/greedy"] == m["heldout"] == 0.0 for m in evals)

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
