"""Several processes forming one mesh (`rlx_core.distributed`, `rlx_model.distributed`): two
real processes with 4 CPU devices each, joined by jax.distributed over 127.0.0.1 (gloo
collectives), train like one process holding all 8 devices; and `rlx-trainer` served by
process 0 runs every call on both.

XLA_FLAGS must be set before JAX starts, so every mesh runs in fresh interpreters.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
from trainer_helpers import MODEL, rl_batch

from rlx_core.clients import LifecycleClient, TrainerClient
from rlx_core.distributed import DistributedConfig
from rlx_core.errors import ConfigError, InvalidArgument, Unavailable
from rlx_model.distributed import initialize
from rlx_testing import TOKEN, ChildProcesses, free_port
from rlx_trainer.server import main

HERE = Path(__file__).parent
WORKER = HERE / "multihost_worker.py"
WAIT_S = 240  # for all processes of a run; under a minute when nothing is wrong
# Two steps of Adam move each weight by about lr = 1e-3; the two meshes agree to 1e-5 (f32).
ATOL = 1e-5
_RLX_ENV = ("RLX_COORDINATOR", "RLX_NUM_PROCESSES", "RLX_PROCESS_ID")


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's RLX_* variables must not reach these tests."""
    for name in _RLX_ENV:
        monkeypatch.delenv(name, raising=False)


def _env(devices: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _RLX_ENV}
    return {
        **env,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "JAX_PLATFORMS": "cpu",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """The worker's two steps in one process holding all 8 devices."""
    tmp = tmp_path_factory.mktemp("single")
    out = tmp / "single.npz"
    with ChildProcesses(tmp, wait_s=WAIT_S) as children:
        children.start("single", [str(WORKER), str(out)], _env(8))
        children.wait()
    with np.load(out) as data:
        return dict(data)


@pytest.mark.slow
@pytest.mark.timeout(900)  # above WAIT_S twice over, so a hang shows the processes' output
def test_two_processes_train_like_one_process_with_all_8_devices(
    reference: dict[str, np.ndarray], tmp_path: Path
) -> None:
    out = tmp_path / "multi.npz"
    coordinator = f"127.0.0.1:{free_port()}"
    with ChildProcesses(tmp_path, wait_s=WAIT_S) as children:
        for i in range(2):
            children.start(f"p{i}", [str(WORKER), str(out), coordinator, "2", str(i)], _env(4))
        children.wait()
    with np.load(out) as data:
        got = dict(data)
    assert got.keys() == reference.keys()
    from rlx_model import init_params
    from rlx_trainer.trainer import flatten

    start = {k: np.asarray(v) for k, v in flatten(init_params(MODEL, 1)).items()}
    # every tensor really trained: Adam moves weights by about lr = 1e-3 per step
    moved = min(float(np.abs(reference[k] - start[k]).max()) for k in start)
    assert moved > 100 * ATOL, moved
    # Not bit for bit: the in-process all-reduce of the gradients adds the 8 devices' partial
    # sums one after another in device order, gloo's across the processes in another order, so
    # float rounding differs for some gradient entries (an 8-way sum of random numbers: 40% of
    # the entries differ); Adam's first step g/(|g| + eps) magnifies that for tiny entries.
    # Measured max difference after two steps: 2.4e-6.
    for name in start:
        assert got[name].dtype == reference[name].dtype, name
        np.testing.assert_allclose(got[name], reference[name], atol=ATOL, rtol=0, err_msg=name)
    for name in (k for k in reference if k.startswith("metric/")):
        assert float(got[name]) == pytest.approx(float(reference[name]), rel=1e-5, abs=1e-7), name


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_grpc_served_by_process_0_runs_every_call_on_both_processes(
    reference: dict[str, np.ndarray], tmp_path: Path
) -> None:
    (tmp_path / "trainer.toml").write_text(
        f"""compile_cache_dir = ""
[mesh]
fsdp = 4
tensor = 2
[optimizer]
lr = 1e-3
schedule = "constant"
[objective]
preset = "grpo"
beta = 0.0
[checkpoint]
uri = "{tmp_path / "ckpt"}"
"""
    )
    coordinator = f"127.0.0.1:{free_port()}"
    server = ["-m", "rlx_trainer", "--config", str(tmp_path / "trainer.toml")]
    env = _env(4, RLX_TOKEN=TOKEN)
    # process 0 gets flags; process 1 the environment variables a provider sets
    leader = [*server, "--port", "0", "--coordinator", coordinator, "--num-processes", "2"]
    provider = {"RLX_COORDINATOR": coordinator, "RLX_NUM_PROCESSES": "2", "RLX_PROCESS_ID": "1"}
    with ChildProcesses(tmp_path, wait_s=WAIT_S) as children:
        children.start("p0", leader, env)
        children.start("p1", server, env | provider)
        try:
            address = children.address("p0")
            LifecycleClient(address, token=TOKEN).wait_ready(timeout=60)
            with TrainerClient(address, token=TOKEN) as client:
                init = client.init(builtin="tiny", seed=1)
                assert init.step == 0
                steps = [
                    client.train_step(rl_batch(0, b=8, g=2), expected_step=0),
                    client.train_step(rl_batch(1, b=8, g=2, version=1), expected_step=1),
                ]
                for step, result in enumerate(steps, 1):  # the worker's steps, through gRPC
                    assert result.step == step
                    for name in ("loss", "grad_norm", "entropy", "mismatch_max"):
                        want = float(reference[f"metric/{step}/{name}"])
                        assert result.metrics[name] == pytest.approx(want, rel=1e-5, abs=1e-7), name
                # refused on both processes alike; both carry on with the next call
                bad = dataclasses.replace(
                    rl_batch(2, b=8, g=2, version=2), tokens=np.full((8, 2, 24), 999, np.int32)
                )
                with pytest.raises(InvalidArgument, match=r"^tokens: id 999"):
                    client.train_step(bad)
                status = client.status()
                assert status.step == 2 and status.mesh_shape == (1, 4, 2)
                # an Orbax checkpoint written by both processes, restored by both: the replayed
                # step gives the same result bit for bit
                assert client.save_checkpoint() == (2, str(tmp_path / "ckpt"))
                third = client.train_step(rl_batch(2, b=8, g=2, version=2), expected_step=2)
                assert client.restore(2) == (2, 2)
                again = client.train_step(rl_batch(2, b=8, g=2, version=2), expected_step=2)
                assert again.metrics["loss"] == third.metrics["loss"]
                assert again.metrics["grad_norm"] == third.metrics["grad_norm"]
                assert client.status().checkpoint_steps == (2,)
                # what only process 0 knows (it is draining) refuses the step on both processes
                lifecycle = LifecycleClient(address, token=TOKEN)
                lifecycle.drain("test")
                with pytest.raises(Unavailable, match="DRAINING"):
                    client.train_step(rl_batch(3, b=8, g=2, version=3))
                assert client.status().step == 3
            lifecycle.shutdown("test over", grace_s=0.1)
        except BaseException:
            print(children.output())
            raise
        children.wait()  # both exit 0: process 1 returns when process 0 stops
    follower = children.stderr("p1")
    assert "(train_step) failed here as on process 0: tokens: id 999" in follower
    assert "(train_step) failed here as on process 0: the trainer is DRAINING" in follower
    assert "stopped the lockstep" in follower


# --- the configuration, in this process (no JAX device is touched) ------------------------------
def test_config_from_environment_and_flags() -> None:
    env = {"RLX_COORDINATOR": "10.0.0.2:1234", "RLX_NUM_PROCESSES": "4", "RLX_PROCESS_ID": "3"}
    cfg = DistributedConfig.from_env(env)
    assert cfg == DistributedConfig(coordinator="10.0.0.2:1234", num_processes=4, process_id=3)
    assert cfg.multi_process
    assert DistributedConfig.from_env(env, process_id=0).process_id == 0  # a flag wins
    assert DistributedConfig.from_env({}) == DistributedConfig()
    assert not DistributedConfig().multi_process
    assert DistributedConfig.from_env({"RLX_COORDINATOR": "auto"}).multi_process
    initialize(DistributedConfig())  # one process: nothing to do


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_processes": 2}, r"^coordinator: must be host:port .* num_processes is 2"),
        ({"coordinator": "10.0.0.2", "num_processes": 2}, r"^coordinator: must be host:port"),
        ({"coordinator": "h:99999", "num_processes": 2}, r"^coordinator: must be host:port"),
        ({"coordinator": "h:1", "num_processes": 2, "process_id": 2}, r"^process_id: must be"),
        ({"coordinator": "h:1", "num_processes": 2, "process_id": -1}, r"^process_id: must be"),
        ({"num_processes": 0}, r"^num_processes: must be >= 1"),
        ({"coordinator": "auto", "num_processes": 2}, r"^coordinator: \"auto\" lets JAX"),
    ],
)
def test_config_errors_name_the_field(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DistributedConfig(**fields)  # type: ignore[arg-type]


def test_bad_environment_and_flags_refuse_to_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RLX_NUM_PROCESSES", "two")
    assert main([]) == 2
    assert "RLX_NUM_PROCESSES: must be an integer" in capsys.readouterr().err
    monkeypatch.setenv("RLX_NUM_PROCESSES", "2")
    monkeypatch.delenv("RLX_COORDINATOR", raising=False)
    assert main(["--process-id", "1"]) == 2
    assert "coordinator: must be host:port" in capsys.readouterr().err
