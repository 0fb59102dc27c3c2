"""`open_services`: the launcher a run's config picks, and the local service set it hands back,
started for real (the demo's services as processes on 127.0.0.1)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from rlx_controller.rundir import RunPaths
from rlx_controller.service_set import ServiceSet
from rlx_core.clients import InferenceClient, ParamServerClient, TrainerClient, VerifierClient
from rlx_core.configs.run import RunConfig, loads_run_config
from rlx_core.errors import ConfigError
from rlx_data import DEMO_TASK, base_model_dir, demo_config, write_addition_jsonl
from rlx_launch import open_services
from rlx_launch.local import read_services

TPU = """
run_dir = "gs://bucket/runs/r"
[model]
path = "/models/m"
[[datasets]]
name = "d"
path = "d.jsonl"
[services]
provider = "gcp-tpu"
[provision]
project = "proj"
zone = "us-east5-a"
token_secret = "rlx-token"
token_file = "{token}"
runtime_version = "v2-alpha-tpuv5"
[provision.trainer]
accelerator_type = "v5p-8"
[provision.inference]
accelerator_type = "v5p-8"
"""


def _demo(tmp_path: Path) -> tuple[RunConfig, RunPaths]:
    run = tmp_path / "run"
    train, _ = write_addition_jsonl(tmp_path / "data", DEMO_TASK)
    cfg = demo_config(str(run), train.parent, base_model_dir())
    return cfg, RunPaths.of(str(run))


def _open(cfg: RunConfig, paths: RunPaths, said: list[str]) -> ServiceSet:
    return open_services(
        cfg, paths, log=said.append, on_preempted=said.append, cancel=threading.Event()
    )


def test_a_local_run_gets_its_token_and_its_litter_swept(tmp_path: Path) -> None:
    cfg, paths = _demo(tmp_path)
    litter = tmp_path / "run" / "snapshots" / ".rlx-tmp-0123"
    litter.parent.mkdir(parents=True)
    litter.write_bytes(b"half a snapshot")
    said: list[str] = []
    first = _open(cfg, paths, said)
    token = tmp_path / "run" / "token"
    assert first.token_file == token and not litter.exists()
    assert said == ["removed 1 temporaries of interrupted writes: snapshots/.rlx-tmp-0123"]
    assert token.stat().st_mode & 0o777 == 0o600
    one = token.read_text()
    second = _open(cfg, paths, said)  # a restarted controller: its services keep the token
    assert second.token_file == token and token.read_text() == one
    assert second.addresses() == {} and second.dead() == []


def test_a_tpu_run_without_its_token_file_names_the_field(tmp_path: Path) -> None:
    missing = tmp_path / "no-token"
    cfg = loads_run_config(TPU.format(token=missing))
    paths = RunPaths.of(str(tmp_path))  # not read: the token is looked for first
    with pytest.raises(ConfigError, match=f"no token file {missing}") as e:
        _open(cfg, paths, [])
    assert e.value.field == "provision.token_file"


@pytest.mark.integration
@pytest.mark.slow
def test_the_local_set_starts_connects_and_names_a_dead_service(tmp_path: Path) -> None:
    cfg, paths = _demo(tmp_path)
    services = _open(cfg, paths, [])
    try:
        services.start()
        addresses = services.addresses()
        assert sorted(addresses) == ["inference-0", "paramserver-0", "trainer", "verifier-0"]
        assert {n: h.address for n, h in read_services(paths.work).items()} == addresses
        clients = services.connect()
        try:
            assert isinstance(clients.trainer, TrainerClient)
            assert [type(c) for c in clients.workers] == [InferenceClient]
            assert [type(c) for c in clients.verifiers] == [VerifierClient]
            assert [type(c) for c in clients.paramservers] == [ParamServerClient]
            # each client talks to the service of its name, with the run's token
            assert clients.paramservers[0].versions() == []
            assert clients.trainer.status().step == 0
            clients.verifiers[0].status()
            clients.workers[0].status()
        finally:
            clients.close()
        assert services.dead() == []
        pid = read_services(paths.work)["verifier-0"].pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30  # until the kernel has ended it; not a timing check
        while services.dead() != ["verifier-0"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert services.dead() == ["verifier-0"]
    finally:
        services.stop()
