"""`rlx-inference` as a real process: it loads a version pushed to a real `rlx-paramserver`
process and generates with it (the HF goldens' greedy tokens, so the weights made it intact)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rlx_core.clients import InferenceClient, ParamServerClient, Sampling, WorkUnit
from rlx_core.errors import FailedPrecondition
from rlx_model import load_checkpoint
from rlx_testing import TOKEN, ServiceProcess, console_script

from .conftest import flat

DATA = Path(__file__).resolve().parents[2] / "model" / "tests" / "testdata" / "qwen2"


def start(name: str, *args: str) -> ServiceProcess:
    """`NAME --port 0 ARGS`, READY."""
    argv = [console_script(name), "--port", "0", *args]
    return ServiceProcess(argv, env={**os.environ, "RLX_TOKEN": TOKEN}, ready_s=120)


@pytest.fixture
def processes() -> Iterator[list[ServiceProcess]]:
    started: list[ServiceProcess] = []
    yield started
    for p in reversed(started):
        p.stop(60)


@pytest.mark.integration
@pytest.mark.slow
def test_worker_process_loads_a_pushed_version_and_generates(
    processes: list[ServiceProcess], tmp_path: Path
) -> None:
    # the worker sees only the architecture (config.json): every weight comes from the paramserver
    shutil.copy(DATA / "config.json", tmp_path / "config.json")
    _, params = load_checkpoint(DATA)
    goldens = np.load(DATA / "goldens.npz")
    processes.append(start("rlx-paramserver"))
    ps = processes[0].address
    with ParamServerClient(ps, token=TOKEN) as client:
        client.push(5, flat(params))
    processes.append(
        start(
            "rlx-inference",
            "--paramserver",
            ps,
            "--checkpoint",
            str(tmp_path),
            "--set",
            "engine.slots=4",
            "--set",
            "engine.cache_mib=8",
            "--set",
            "engine.max_context=256",
        )
    )
    prompt = tuple(goldens["prompt_ids"][0].tolist())
    unit = WorkUnit(
        unit_id="golden",
        version=5,
        prompts=(prompt,),
        samples_per_prompt=2,
        sampling=Sampling(greedy=True),
        seeds=(1, 2),
        max_new_tokens=24,
    )
    with InferenceClient(processes[1].address, token=TOKEN) as worker:
        with pytest.raises(FailedPrecondition, match="no version is loaded"):
            worker.generate(unit)
        assert worker.load_version(5).version == 5
        result = worker.generate(unit)
        status = worker.status()
    expected = goldens["greedy_ids"][0].tolist()
    assert [list(r.token_ids) for r in result.rollouts] == [expected, expected]
    assert result.version == 5 and all(set(r.versions) == {5} for r in result.rollouts)
    assert status.loaded_version == 5 and status.free_blocks == status.total_blocks
    assert processes[1].stop(60) == 0  # SIGTERM drains and exits cleanly
