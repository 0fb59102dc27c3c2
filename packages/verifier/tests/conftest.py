"""One Verifier (real bubblewrap, real compilers) shared by the verifier tests."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlx_verifier import Verifier
from rlx_verifier.config import JudgeConfig

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"


def load_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session")
def verifier() -> Iterator[Verifier]:
    v = Verifier(JudgeConfig(workers=2, math_workers=1, math_timeout_s=3.0))
    yield v
    v.close()
