"""The README's code-dataset config is true: this very block (between its marker and the end of
the code block) loads as run-config datasets, and records in the layouts its comments name load
into the tests, language and manifest links it says, with a manifest written by the real
`rlx verifier upload` in place of the S3 one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from up_helpers import CLI

from rlx_core.clients.verifier import InlineTest
from rlx_core.configs.run import loads_run_config
from rlx_data import base_model_dir, load_dataset

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- readme-example: code-datasets -->"
S3_MANIFEST = "s3://bucket/tests/manifests/cf-3f2a9c1b0e4d.json"


def _example() -> str:
    text = (ROOT / "README.md").read_text()
    after = text[text.index(MARKER) + len(MARKER) :]
    return after.split("```toml\n", 1)[1].split("\n```", 1)[0] + "\n"


def test_the_readme_code_datasets_load_as_documented(tmp_path: Path) -> None:
    text = _example()
    apps = tmp_path / "apps_train.jsonl"
    apps.write_text(
        json.dumps({"question": "Sum.", "tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}}) + "\n"
    )
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "1850A", "tests": [{"stdin": "5\n", "answer": "5\n"}]}))
    up = subprocess.run(
        [*CLI, "verifier", "upload", str(problems), str(tmp_path / "repo"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert up.returncode == 0, up.stderr
    manifest = json.loads(up.stdout.strip().splitlines()[-1])["manifest"]
    cf = tmp_path / "cf_train.jsonl"
    cf.write_text(json.dumps({"statement": "Print n.", "id": "1850A"}) + "\n")
    for old, new in (
        ("apps_train.jsonl", str(apps)),
        ("cf_train.jsonl", str(cf)),
        (S3_MANIFEST, manifest),
    ):
        assert f'"{old}"' in text
        text = text.replace(f'"{old}"', json.dumps(new))
    head = f"run_dir = {json.dumps(str(tmp_path / 'run'))}\n"
    head += f"[model]\npath = {json.dumps(str(base_model_dir()))}\n"
    cfg = loads_run_config(head + text)
    inline, linked = (load_dataset(d) for d in cfg.datasets)
    task = inline.prompt(0).code
    assert task is not None and task.tests == (InlineTest("1 2\n", "3\n"),)
    assert inline.prompt(0).messages[0]["role"] == "system"  # its system_prompt
    task = linked.prompt(0).code
    assert task is not None and task.language == "cpp" and len(task.links) == 1
    assert linked.config.weight == 2.0
