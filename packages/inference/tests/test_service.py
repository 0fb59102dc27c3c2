"""The service twice: the InferenceService object, and through a real gRPC server with the typed
client; versions come from a real paramserver on loopback."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import jax
import pytest

from rlx_core.clients import InferenceClient, Sampling, WorkUnit
from rlx_core.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, Unauthenticated
from rlx_model import init_params, tiny_config
from rlx_testing import WRONG_TOKEN

from .conftest import flat

CFG = tiny_config()  # the built-in "tiny": byte vocabulary, 2 layers, d 64
V1 = init_params(CFG, seed=1)
V2 = jax.tree.map(lambda x: x * 1.05, V1)
ENGINE = {"slots": 4, "block_size": 8, "cache_mib": 4, "max_context": 512, "span_bucket": 512}


def config(addresses: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "model": {"builtin": "tiny"},
        "engine": {**ENGINE, **extra.pop("engine", {})},
        "paramserver": {"addresses": addresses},
        **extra,
    }


def work(version: int, n: int = 3, g: int = 2, max_new: int = 12, **kw: Any) -> WorkUnit:
    prompts = tuple(tuple(range(10 + i, 14 + 2 * i)) for i in range(n))
    return WorkUnit(
        unit_id=f"unit-{version}",
        version=version,
        prompts=prompts,
        samples_per_prompt=g,
        sampling=kw.pop("sampling", Sampling(temperature=0.9)),
        seeds=tuple(range(n * g)),
        max_new_tokens=max_new,
        **kw,
    )


def test_worker_pulls_from_replica_i_mod_r_and_refuses_other_versions(servers) -> None:
    a, b = servers["paramserver"](replica_id=0), servers["paramserver"](replica_id=1)
    with a.paramserver() as ca, b.paramserver() as cb:
        ca.push(1, flat(V1))
        cb.push(1, flat(V2))  # replica 1 holds different bytes under the same version
    worker1 = servers["inference"](config([a.address, b.address], worker_index=3))
    service = worker1.service
    assert service.replica_address == b.address  # 3 mod 2 = 1
    with pytest.raises(FailedPrecondition, match="no version is loaded"):
        service.generate(work(1))
    loaded = service.load_version(1)
    assert (loaded.version, loaded.previous) == (1, None) and loaded.nbytes > 0
    got = service.generate(work(1))
    worker0 = servers["inference"](config([a.address, b.address], worker_index=2))
    worker0.service.load_version(1)
    other = worker0.service.generate(work(1))
    # different weights, same seeds: the log-probs tell which replica each worker pulled
    assert [r.model_logprobs for r in got.rollouts] != [r.model_logprobs for r in other.rollouts]
    with pytest.raises(FailedPrecondition, match="needs version 2, but version 1 is loaded"):
        service.generate(work(2))
    assert service.load_version(1).pull_s == 0.0  # already loaded: nothing pulled


def test_grpc_generate_load_status_auth_and_field_errors(servers) -> None:
    ps = servers["paramserver"]()
    with ps.paramserver() as c:
        c.push(1, flat(V1))
        c.push(2, flat(V2))
    worker = servers["inference"](config([ps.address]))
    with worker.inference() as client:
        status = client.status()
        assert status.loaded_version is None and status.free_blocks == status.total_blocks
        assert client.load_version(1).version == 1
        over_grpc = client.generate(work(1))
        direct = worker.service.engine.generate(work(1))
        assert over_grpc.rollouts == direct.rollouts  # floats survive the wire exactly (f32)
        assert all(r.versions == (1,) * len(r.token_ids) for r in over_grpc.rollouts)
        assert [r.sample_index for r in over_grpc.rollouts] == [0, 1] * 3
        assert client.load_version(2).previous == 1
        status = client.status()
        assert status.loaded_version == 2 and status.units_done == 2
        assert status.free_blocks == status.total_blocks and status.active == 0
        for unit, field in [
            (work(2, max_new=600), "max_new_tokens"),
            (WorkUnit(unit_id="x", version=2, prompts=((1,), ()), seeds=(1, 2)), r"prompts\[1\]"),
            (WorkUnit(unit_id="x", version=2, prompts=((1, 300),), seeds=(1,)), "vocabulary"),
            (work(2, g=0), "samples_per_prompt"),
        ]:
            with pytest.raises(InvalidArgument, match=field):
                client.generate(unit)
        with pytest.raises(FailedPrecondition, match="version 2 is loaded"):
            client.generate(work(1))
    with (
        InferenceClient(worker.address, token=WRONG_TOKEN) as bad,
        pytest.raises(Unauthenticated),
    ):
        bad.status()


def _generate_in_thread(client: InferenceClient, unit: WorkUnit) -> dict[str, Any]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = client.generate(unit)
        except Exception as e:
            box["error"] = e

    box["thread"] = threading.Thread(target=run)
    box["thread"].start()
    return box


def _wait_active(client: InferenceClient) -> None:
    deadline = time.monotonic() + 60
    while client.status().active == 0:
        assert time.monotonic() < deadline, "the unit never started"
        time.sleep(0.01)


@pytest.mark.parametrize("interruptible", [False, True])
def test_forced_reload_mid_unit(servers, interruptible: bool) -> None:
    ps = servers["paramserver"]()
    with ps.paramserver() as c:
        c.push(1, flat(V1))
        c.push(2, flat(V2))
    worker = servers["inference"](config([ps.address], engine={"interruptible": interruptible}))
    with worker.inference() as client, worker.inference() as loader:
        client.load_version(1)
        # long enough that the (millisecond) pull of version 2 lands mid-unit
        long_unit = work(1, n=4, g=2, max_new=300, sampling=Sampling(greedy=True))
        box = _generate_in_thread(client, long_unit)
        _wait_active(client)
        assert loader.load_version(2, force=True).version == 2
        box["thread"].join(120)
        status = client.status()
        assert status.loaded_version == 2 and status.free_blocks == status.total_blocks
        if not interruptible:
            assert isinstance(box.get("error"), FailedPrecondition)
            assert "partial rollouts of version 1 were discarded" in str(box["error"])
            assert status.discarded_partial >= 1
        else:
            result = box["result"]
            assert result.recomputed >= 1 and result.version == 2
            tags = {v for r in result.rollouts for v in r.versions}
            assert tags == {1, 2}
            assert all(len(r.token_ids) == 300 for r in result.rollouts)


def test_units_past_the_configured_caps_are_refused_naming_field_and_cap(servers) -> None:
    ps = servers["paramserver"]()
    with ps.paramserver() as c:
        c.push(1, flat(V1))
    limits = {"max_prompts": 4, "max_samples_per_prompt": 3, "max_samples": 8}
    worker = servers["inference"](config([ps.address], limits=limits))
    with worker.inference() as client:
        client.load_version(1)
        for unit, match in [
            (work(1, n=5, g=1), r"prompts: 5 prompts, more than this worker's max_prompts \(4;"),
            (work(1, n=1, g=4), r"samples_per_prompt: 4, more than .* \(3;"),
            (work(1, n=3, g=3), r"samples_per_prompt: 3 prompts x 3 = 9 samples, more than"),
            (work(1, sampling=Sampling(temperature=float("inf"))), "sampling.temperature"),
        ]:
            with pytest.raises(InvalidArgument, match=match):
                client.generate(unit)
        assert len(client.generate(work(1, n=4, g=2)).rollouts) == 8  # at the caps
    # the defaults refuse the unit of the report (G = 200000) before it waits or runs
    default = servers["inference"](config([ps.address]))
    g = 200_000
    huge = work(1, n=1, g=g)
    with pytest.raises(InvalidArgument, match=r"samples_per_prompt: 200000, more than"):
        default.service.generate(replace(huge, seeds=tuple(range(g))))


def test_a_unit_whose_caller_gave_up_stops_and_the_next_unit_is_served(servers) -> None:
    """A unit of 8 x 1024 samples (minutes of work here) with a 1 s deadline: the worker stops
    it at its next boundary once the call is gone, so a valid unit right after is served within
    a generous deadline, with the same tokens as before the cancelled unit ran."""
    ps = servers["paramserver"]()
    with ps.paramserver() as c:
        c.push(1, flat(V1))
    worker = servers["inference"](config([ps.address]))
    with worker.inference() as client:
        client.load_version(1)
        before = client.generate(work(1))
        big = work(1, n=8, g=1024, max_new=400)
        with pytest.raises(DeadlineExceeded):
            client.generate(replace(big, seeds=tuple(range(8 * 1024))), timeout=1.0)
        after = client.generate(work(1), timeout=60)
        assert after.rollouts == before.rollouts
        status = client.status()
        assert status.free_blocks == status.total_blocks and status.active == 0
        assert worker.service.engine.cancelled_units == 1
        assert worker.service.lifecycle.info["units_cancelled"] == "1"


def test_the_model_source_sets_params_and_compute_dtypes_apart() -> None:
    from rlx_core.configs.inference import InferenceConfig, ModelSource
    from rlx_inference.service import load_model

    def dtypes(**source: str) -> tuple[str, str]:
        cfg, _ = load_model(InferenceConfig(model=ModelSource(builtin="tiny", **source)))
        return cfg.param_dtype, cfg.compute_dtype

    assert dtypes() == ("float32", "float32")
    assert dtypes(dtype="bfloat16") == ("bfloat16", "bfloat16")  # compute follows, unset
    assert dtypes(compute_dtype="bfloat16") == ("float32", "bfloat16")
