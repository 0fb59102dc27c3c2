"""The README's GSM8K + Qwen2.5 run config is true: this very block (between its marker and the
end of the code block) loads, its inputs check out, and the controller renders, tokenizes and
filters its prompts, with a Qwen2-family test checkpoint (BPE tokenizer, ChatML template) in
place of the downloaded Qwen2.5 directory and the real GSM8K rows in place of its files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rlx_controller.driver import Driver
from rlx_core.configs.run import check_run_inputs, loads_run_config
from rlx_launch import open_services

ROOT = Path(__file__).resolve().parents[1]
QWEN2 = ROOT / "packages" / "model" / "tests" / "testdata" / "qwen2"
GSM8K = ROOT / "testdata" / "math" / "gsm8k_test.jsonl"
MARKER = "<!-- readme-example: gsm8k-qwen2.5 -->"


def _example() -> str:
    text = (ROOT / "README.md").read_text()
    after = text[text.index(MARKER) + len(MARKER) :]
    body = after.split("```toml\n", 1)[1]
    return body.split("```", 1)[0]


def test_the_readme_gsm8k_example_runs_the_real_path(tmp_path: Path) -> None:
    text = _example()
    model = tmp_path / "models" / "qwen2.5-0.5b-instruct"
    shutil.copytree(QWEN2, model)
    data = tmp_path / "data" / "gsm8k"
    data.mkdir(parents=True)
    rows = GSM8K.read_text().splitlines()
    (data / "train.jsonl").write_text("\n".join(rows[:300]) + "\n")
    (data / "test.jsonl").write_text("\n".join(rows[300:400]) + "\n")
    for old in ("models/qwen2.5-0.5b-instruct", "data/gsm8k/train.jsonl", "data/gsm8k/test.jsonl"):
        assert f'"{old}"' in text
        text = text.replace(f'"{old}"', json.dumps(str(tmp_path / old)))
    text = text.replace('"runs/gsm8k-qwen2.5-0.5b"', json.dumps(str(tmp_path / "run")))
    cfg = loads_run_config(text)
    check_run_inputs(cfg)
    lines: list[str] = []
    driver = Driver(cfg, tmp_path / "run", open_services=open_services, log=lines.append)

    first = json.loads(rows[0])
    prompt = driver.datasets["gsm8k"].prompt(0)
    assert prompt.answer == "18" and prompt.chat  # "#### 18", extracted
    system = cfg.datasets[0].system_prompt
    assert prompt.messages == (
        {"role": "system", "content": system},
        {"role": "user", "content": first["question"]},
    )
    rendered = driver.tokenizer.render(prompt.messages)
    assert rendered == (
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{first['question']}"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = driver.prompt_tokens.ids("gsm8k", 0)
    assert list(ids) == driver.tokenizer.encode(rendered, add_special_tokens=False)
    # the questions longer than max_prompt_tokens are left out of the mixture, and said so
    fitting = driver.prompt_tokens.fitting("gsm8k")
    long_rows = [r for r in range(300) if len(driver.prompt_tokens.ids("gsm8k", r)) > 256]
    assert long_rows and set(fitting) == set(range(300)) - set(long_rows)
    assert f"gsm8k: {len(long_rows)} of 300 prompts are longer" in "\n".join(lines)
    assert driver.tokenizer.stop_ids == (511,)
