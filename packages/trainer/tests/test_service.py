"""The trainer service: as a Service object and through a real gRPC server with TrainerClient,
pushing every version to a real `rlx-paramserver` process."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from trainer_helpers import config, rl_batch, sft_batch

from rlx_core.clients import LifecycleClient, ParamServerClient, TrainerClient
from rlx_core.errors import FailedPrecondition, InvalidArgument, Unavailable
from rlx_testing import TOKEN, ServiceProcess, console_script, serve_in_thread
from rlx_trainer import TrainerService
from rlx_trainer.servicer import registrations


@pytest.fixture
def paramserver(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("RLX_TOKEN", TOKEN)
    argv = [console_script("rlx-paramserver"), "--port", "0", "--max-versions", "3"]
    with ServiceProcess(argv, env={**os.environ, "RLX_TOKEN": TOKEN}) as server:
        yield server.address


def test_service_pushes_every_version_and_refuses_bad_batches(
    paramserver: str, tmp_path: Path
) -> None:
    service = TrainerService(
        config(paramserver={"addresses": [paramserver]}, checkpoint={"uri": str(tmp_path)})
    )
    service.lifecycle.set(service.lifecycle.state.READY)
    with pytest.raises(FailedPrecondition, match="Init first"):
        service.train_step(rl_batch(0))
    init = service.init(builtin="tiny", seed=1)
    assert (init.step, init.version) == (0, 0)
    ps = ParamServerClient(paramserver, token=TOKEN, shared_memory=False)
    assert ps.versions() == [0]

    result = service.train_step(rl_batch(0), expected_step=0)
    assert (result.step, result.version) == (1, 1)
    assert ps.versions() == [0, 1]
    _, pulled = ps.pull(1)
    trainer = service.trainer
    assert trainer is not None
    for name, value in trainer.host_params().items():
        assert pulled[name].tobytes() == value.tobytes(), name
    assert result.metrics["push_s"] > 0 and result.metrics["tokens_per_s"] > 0

    # a lost reply retried with the same expected_step: the recorded result, no second update
    assert service.train_step(rl_batch(0), expected_step=0) == result
    with pytest.raises(FailedPrecondition, match="expected_step"):
        service.train_step(rl_batch(0), expected_step=5)

    bad = dataclasses.replace(rl_batch(1, version=1), tokens=np.full((4, 4, 24), 999, np.int32))
    with pytest.raises(InvalidArgument, match=r"^tokens: id 999"):
        service.train_step(bad)
    assert service.status().step == 1 and ps.versions() == [0, 1]

    sft = service.train_step(sft_batch(0))
    assert sft.step == 2 and ps.versions() == [0, 1, 2]
    status = service.status()
    assert status.initialized and status.step == 2 and status.num_params > 0
    service.close()


@dataclasses.dataclass
class Running:
    service: TrainerService
    address: str
    thread: threading.Thread


def _serve(cfg: object) -> Running:
    service = TrainerService(cfg)  # type: ignore[arg-type]
    address, thread = serve_in_thread(
        service.lifecycle, service.config.server, registrations(service)
    )
    return Running(service, address, thread)


def test_grpc_init_step_checkpoint_restore_and_a_failed_push(
    paramserver: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLX_TOKEN", TOKEN)
    cfg = config(
        server={"port": 0, "grace_s": 0.1},
        paramserver={"addresses": [paramserver], "timeout_s": 20},
        checkpoint={"uri": str(tmp_path / "ckpt"), "every": 2, "keep": 2},
    )
    running = _serve(cfg)
    client = TrainerClient(running.address, token=TOKEN)
    try:
        assert not client.status().initialized
        init = client.init(builtin="tiny", seed=1)
        assert init.version == 0 and "qwen2" in init.model

        bad = dataclasses.replace(rl_batch(0), rewards=np.zeros((4, 3), np.float32))
        with pytest.raises(InvalidArgument, match=r"^rewards: expected shape"):
            client.train_step(bad)

        first = client.train_step(rl_batch(0), expected_step=0)
        second = client.train_step(rl_batch(1, version=1), expected_step=1)
        assert (first.step, second.step) == (1, 2)
        assert first.metrics["ratio_max_abs_dev"] == 0.0
        status = client.status()
        assert status.checkpoint_steps == (2,)  # checkpoint.every = 2
        assert status.last_metrics["loss"] == second.metrics["loss"]

        # a new trainer server starting from that checkpoint continues identically
        third = client.train_step(rl_batch(2, version=2), expected_step=2)
        assert client.restore(2) == (2, 2)
        again = client.train_step(rl_batch(2, version=2), expected_step=2)
        assert again.metrics["loss"] == third.metrics["loss"]
        assert again.metrics["grad_norm"] == third.metrics["grad_norm"]

        other = _serve(
            dataclasses.replace(cfg, paramserver=dataclasses.replace(cfg.paramserver, addresses=()))
        )
        with TrainerClient(other.address, token=TOKEN) as c2:
            assert c2.init(checkpoint="").step == 2
            replay = c2.train_step(rl_batch(2, version=2))
            assert replay.metrics["loss"] == third.metrics["loss"]
            LifecycleClient(other.address, token=TOKEN).shutdown("test over", grace_s=0.1)

        # the paramserver goes away: the step is refused and nothing is applied
        LifecycleClient(paramserver, token=TOKEN).shutdown("test", grace_s=0.1)
        with pytest.raises(Unavailable, match="step 4 not applied"):
            client.train_step(rl_batch(3, version=3), expected_step=3)
        assert client.status().step == 3
    finally:
        LifecycleClient(running.address, token=TOKEN).shutdown("test over", grace_s=0.1)
        running.thread.join(30)
        running.service.close()
