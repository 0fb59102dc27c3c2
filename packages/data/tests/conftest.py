"""Fixtures of the data suite: dataset-file roots on each storage backend (a local directory,
moto's S3 server, gcp-storage-emulator, all on 127.0.0.1, from rlx_testing.plugin) and small
datasets."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(params=["local", "s3", "gcs"])
def run_root(request: pytest.FixtureRequest, new_root: Callable[[str, str], str]) -> str:
    """A fresh, empty directory URI on each backend."""
    return new_root(request.param, "runs/r1")


@pytest.fixture
def math_jsonl(tmp_path: Path) -> Path:
    """A 10-record math dataset."""
    path = tmp_path / "math.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(10))
    )
    return path


@pytest.fixture
def code_jsonl(tmp_path: Path) -> Path:
    """A 4-record code dataset with inline stdin/stdout tests."""
    path = tmp_path / "code.jsonl"
    path.write_text(
        "".join(
            json.dumps({"question": f"print {i}", "tests": [{"input": "", "output": f"{i}\n"}]})
            + "\n"
            for i in range(4)
        )
    )
    return path
