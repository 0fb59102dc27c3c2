"""Inference as several processes forming one mesh: two real processes with 4 CPU devices each,
joined by jax.distributed over 127.0.0.1 (gloo collectives), generate with the engine split 8
ways (heads, KV cache, MLP, vocabulary) exactly as one process holding all 8 devices; served by
`rlx-inference`, process 0 hands every LoadVersion and Generate to the other, and each process
pulls from the paramserver only its half of every split weight.

The one-process reference also starts jax.distributed (a coordinator, one process): its
collectives are then gloo's too. Without it XLA sums the tensor axis's partial results in
another order, which changes the last bits of the log-probs (not the greedy tokens: checked
against the unsharded engine below). XLA_FLAGS must be set before JAX starts, so every mesh
runs in fresh interpreters.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from jax.sharding import AbstractMesh

from rlx_core.clients import InferenceClient, LifecycleClient, ParamServerClient
from rlx_core.clients.inference import GenerateResult
from rlx_core.config import from_dict
from rlx_core.errors import ConfigError, FailedPrecondition, InvalidArgument
from rlx_inference.engine import Engine
from rlx_inference.mesh import engine_mesh
from rlx_inference.server import main
from rlx_model import init_params, load_config, to_hf_config
from rlx_model.sharding import param_partition_specs
from rlx_paramserver import ParamServerConfig, ParamServerService
from rlx_paramserver.servicer import registrations as paramserver_registrations
from rlx_testing import TOKEN, ChildProcesses, free_port, serve_in_thread, write_token_file

from .multihost_worker import CFG, ENGINE, SEEDS, UNITS, arrays, flat_params, unit

HERE = Path(__file__).parent
_RLX_ENV = ("RLX_COORDINATOR", "RLX_NUM_PROCESSES", "RLX_PROCESS_ID", "RLX_TOKEN_FILE")


def _env(devices: int, **extra: str) -> dict[str, str]:
    """This process's environment for a child with `devices` CPU devices, without the provider's
    RLX_* variables of this machine (`extra` may set them)."""
    env = dict(
        os.environ,
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
        PYTHONUNBUFFERED="1",
        RLX_TOKEN=TOKEN,
    )
    for name in _RLX_ENV:
        env.pop(name, None)
    return env | extra


@dataclass
class Served:
    """A paramserver in this process holding the worker's versions, and the model's directory."""

    paramserver: str
    checkpoint: Path

    def server_args(self, *extra: str) -> list[str]:
        """`rlx-inference` with the worker's model and engine (tensor_parallel 0: all devices)."""
        engine = {
            f"engine.{name}": getattr(ENGINE, name)
            for name in ("slots", "block_size", "cache_mib", "max_context", "span_bucket")
        }
        engine |= {"engine.max_prefill_tokens": ENGINE.max_prefill_tokens}
        sets = [a for k, v in engine.items() for a in ("--set", f"{k}={v}")]
        return [
            "-m",
            "rlx_inference",
            "--port",
            "0",
            "--paramserver",
            self.paramserver,
            "--checkpoint",
            str(self.checkpoint),
            *sets,
            "--set",
            'engine.compile_cache_dir=""',
            "--set",
            "engine.tensor_parallel=0",
            *extra,
        ]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("served")
    token_file = write_token_file(tmp / "token")
    config = from_dict(
        ParamServerConfig, {"server": {"port": 0, "grace_s": 0.1, "token_file": str(token_file)}}
    )
    service = ParamServerService(config)
    address, thread = serve_in_thread(
        service.lifecycle, config.server, paramserver_registrations(service), timeout_s=60
    )
    with ParamServerClient(address, token=TOKEN) as client:
        for version, seed in SEEDS.items():
            client.push(version, flat_params(seed))
    checkpoint = tmp / "model"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(to_hf_config(CFG)))
    assert load_config(checkpoint) == CFG  # the servers run the worker's model
    yield Served(address, checkpoint)
    with LifecycleClient(address, token=TOKEN) as lifecycle:
        lifecycle.shutdown("test over", grace_s=0.1)
    thread.join(30)
    service.close()


def _generate_all(address: str) -> dict[str, GenerateResult]:
    """The worker's units through gRPC, each after loading its version."""
    results = {}
    with InferenceClient(address, token=TOKEN) as client:
        for name, (version, _) in UNITS.items():
            assert client.load_version(version).version == version
            results[name] = client.generate(unit(name))
    return results


@pytest.fixture(scope="module")
def reference(
    served: Served, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, GenerateResult]:
    """The units served by one process holding all 8 devices."""
    tmp = tmp_path_factory.mktemp("one-process")
    coordinator = f"127.0.0.1:{free_port()}"
    args = served.server_args("--coordinator", coordinator, "--num-processes", "1")
    with ChildProcesses(tmp) as children:
        children.start("server", args, _env(8))
        address = children.address("server")
        LifecycleClient(address, token=TOKEN).wait_ready(timeout=120)
        results = _generate_all(address)
        LifecycleClient(address, token=TOKEN).shutdown("reference taken", grace_s=0.1)
        children.wait()
    return results


def _bytes(flat: dict[str, np.ndarray]) -> int:
    return sum(a.nbytes for a in flat.values())


def _half_of_the_split(flat: dict[str, np.ndarray]) -> int:
    """The bytes one of 2 processes holds of `flat` split 8 ways (4 devices each): half of each
    tensor the tensor axis splits, the others whole."""
    specs = param_partition_specs(CFG, AbstractMesh((1, 1, 8), ("data", "fsdp", "tensor")))
    return sum(a.nbytes // (2 if "tensor" in specs[k] else 1) for k, a in flat.items())


def _same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key].dtype == value.dtype and np.array_equal(got[key], value), key


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_two_processes_generate_like_one_process_with_all_8_devices(
    reference: dict[str, GenerateResult], tmp_path: Path
) -> None:
    coordinator = f"127.0.0.1:{free_port()}"
    out = tmp_path / "rollouts"
    with ChildProcesses(tmp_path) as children:
        for i in range(2):  # joined by the variables a provider sets
            provider = {
                "RLX_COORDINATOR": coordinator,
                "RLX_NUM_PROCESSES": "2",
                "RLX_PROCESS_ID": str(i),
            }
            children.start(
                f"p{i}", [str(HERE / "multihost_worker.py"), str(out)], _env(4, **provider)
            )
        children.wait()
    want = {k: v for name, r in reference.items() for k, v in arrays(name, r.rollouts).items()}
    for i in range(2):  # both processes drew every token, bit for bit as the one process did
        with np.load(f"{out}.{i}.npz") as data:
            _same(dict(data), want)


@pytest.mark.slow
@pytest.mark.integration
def test_greedy_tokens_equal_the_single_device_engine(
    reference: dict[str, GenerateResult],
) -> None:
    engine = Engine(CFG, init_params(CFG, SEEDS[1]), replace(ENGINE, tensor_parallel=1), version=1)
    assert engine.mesh is None  # one device: nothing is split
    mine = engine.generate(unit("greedy")).rollouts
    theirs = reference["greedy"].rollouts
    assert [r.token_ids for r in mine] == [r.token_ids for r in theirs]
    for a, b in zip(mine, theirs, strict=True):
        np.testing.assert_allclose(a.model_logprobs, b.model_logprobs, atol=1e-5, rtol=0)
    assert {r.finish_reason for r in theirs} == {"length"}  # 10 tokens each, all compared


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_grpc_served_by_process_0_runs_every_call_on_both_processes(
    served: Served, reference: dict[str, GenerateResult], tmp_path: Path
) -> None:
    coordinator = f"127.0.0.1:{free_port()}"
    with ChildProcesses(tmp_path) as children:
        # process 0 gets flags; process 1 the environment variables a provider sets
        leader = served.server_args("--coordinator", coordinator, "--num-processes", "2")
        children.start("p0", leader, _env(4))
        follower_env = {
            "RLX_COORDINATOR": coordinator,
            "RLX_NUM_PROCESSES": "2",
            "RLX_PROCESS_ID": "1",
        }
        children.start("p1", served.server_args(), _env(4, **follower_env))
        address = children.address("p0")
        LifecycleClient(address, token=TOKEN).wait_ready(timeout=120)
        with InferenceClient(address, token=TOKEN) as client:
            # refused alike on both processes (nothing loaded; another version loaded), which
            # both carry on from, or on process 0 before the lockstep (a token outside the
            # vocabulary)
            with pytest.raises(FailedPrecondition, match="no version is loaded"):
                client.generate(unit("greedy"))
            loaded = client.load_version(1)
            assert loaded.version == 1
            # process 0 pulled only its half of every split tensor, and the norms whole
            assert (
                loaded.nbytes
                == _half_of_the_split(flat_params(SEEDS[1]))
                < _bytes(flat_params(SEEDS[1]))
            )
            bad = replace(unit("greedy"), prompts=((5, 999),) * len(unit("greedy").prompts))
            with pytest.raises(InvalidArgument, match=r"prompts\[0\]: ids \[999\]"):
                client.generate(bad)
            with pytest.raises(FailedPrecondition, match="needs version 2, but version 1"):
                client.generate(unit("sampled"))
            results = _generate_all(address)
            status = client.status()
        for name, result in results.items():
            assert result.rollouts == reference[name].rollouts, name
        assert status.loaded_version == 2 and status.free_blocks == status.total_blocks
        assert status.units_done == len(UNITS)
        LifecycleClient(address, token=TOKEN).shutdown("test over", grace_s=0.1)
        children.wait()  # both exit 0: process 1 returns when process 0 stops
        follower = children.stderr("p1")
    assert "(_generate) failed here as on process 0: work unit 'greedy'" in follower
    # a malformed unit is refused on process 0 before it enters the lockstep: process 1 never
    # runs it
    assert "ids [999]" not in follower
    assert "(_generate) failed here as on process 0: work unit 'sampled'" in follower
    assert "stopped the lockstep" in follower


# --- in this process (one device) ---------------------------------------------------------------
def test_the_mesh_takes_every_device_or_none(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert engine_mesh(1) is None and engine_mesh(0) is None  # one device: no mesh
    with pytest.raises(ConfigError, match=r"^engine.tensor_parallel: must divide the 1 devices"):
        engine_mesh(2)
    with pytest.raises(ConfigError, match=r"^tensor_parallel: must be >= 1, or 0"):
        replace(ENGINE, tensor_parallel=-1)
    for name in _RLX_ENV:
        monkeypatch.delenv(name, raising=False)
    assert main(["--num-processes", "2"]) == 2  # refused before anything starts
    assert "rlx-inference: ConfigError: coordinator: must be host:port" in capsys.readouterr().err
