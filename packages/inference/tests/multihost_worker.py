"""One process of `test_multihost.py`: the engine on a tensor-parallel mesh of 8 devices generates
the test's units (two weight versions, the three sampling modes) and writes what it drew.

    RLX_COORDINATOR=HOST:PORT RLX_NUM_PROCESSES=N RLX_PROCESS_ID=I python multihost_worker.py OUT

The process joins the others (`rlx_model.distributed.initialize`) as a provider's variables say
and the mesh spans them. XLA_FLAGS and JAX_PLATFORMS come from the parent too. Every process
writes OUT.<process index>.npz (`arrays`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlx_core.clients.inference import Rollout, Sampling, WorkUnit
from rlx_inference.config import EngineConfig
from rlx_model import tiny_config

# 8 heads and 8 KV heads of 8 dims: the tensor axis of 8 splits heads, KV cache, MLP and the
# vocabulary (an untied head: the engine's [V, D] copy of it is split too)
CFG = tiny_config(
    vocab_size=128,
    hidden_size=64,
    num_layers=2,
    num_heads=8,
    num_kv_heads=8,
    head_dim=8,
    tie_word_embeddings=False,
)
SEEDS = {1: 3, 2: 4}  # weight version -> init_params seed
# one decode shape (span = max_context), prefill of 4 rows x 16 or 32 positions
ENGINE = EngineConfig(
    slots=4,
    block_size=4,
    cache_mib=1,
    max_context=64,
    span_bucket=64,
    max_prefill_tokens=64,
    compile_cache_dir="",
    tensor_parallel=0,
)
_RNG = np.random.default_rng(0)
PROMPTS = tuple(tuple(int(t) for t in _RNG.integers(1, 128, n)) for n in (3, 11, 6, 15, 1))
# name -> (version, sampling): greedy, then sampling (top-k, top-p) with the next version
UNITS = {
    "greedy": (1, Sampling(greedy=True)),
    "sampled": (2, Sampling(temperature=1.3, top_k=40, top_p=0.9)),
}


def unit(name: str) -> WorkUnit:
    version, sampling = UNITS[name]
    return WorkUnit(
        unit_id=name,
        version=version,
        prompts=PROMPTS,
        samples_per_prompt=2,
        sampling=sampling,
        seeds=tuple(range(100, 100 + 2 * len(PROMPTS))),
        max_new_tokens=10,
    )


def arrays(name: str, rollouts: Sequence[Rollout]) -> dict[str, np.ndarray]:
    """A unit's rollouts as arrays: NAME/i/{tokens, sampler, model}."""
    out = {}
    for i, r in enumerate(rollouts):
        out[f"{name}/{i}/tokens"] = np.asarray(r.token_ids, np.int64)
        out[f"{name}/{i}/sampler"] = np.asarray(r.sampler_logprobs, np.float64)
        out[f"{name}/{i}/model"] = np.asarray(r.model_logprobs, np.float64)
    return out


def flat_params(seed: int) -> dict[str, np.ndarray]:
    """init_params(CFG, seed) as the paramserver holds it: '/'-path -> array."""
    import jax

    from rlx_model import init_params

    leaves = jax.tree_util.tree_flatten_with_path(init_params(CFG, seed))[0]
    return {"/".join(str(k.key) for k in path): np.asarray(v) for path, v in leaves}


def main(argv: list[str]) -> None:
    from rlx_core.distributed import DistributedConfig
    from rlx_model.distributed import initialize

    initialize(DistributedConfig.from_env())  # before anything touches a device

    import jax
    from jax.sharding import PartitionSpec

    from rlx_inference.engine import Engine, params_from_flat
    from rlx_inference.mesh import engine_mesh
    from rlx_model import init_params

    assert jax.device_count() == 8, jax.devices()
    mesh = engine_mesh(ENGINE.tensor_parallel)
    assert mesh is not None and dict(mesh.shape) == {"data": 1, "fsdp": 1, "tensor": 8}
    engine = Engine(CFG, init_params(CFG, SEEDS[1]), ENGINE, version=1, mesh=mesh)
    q = engine.params["layers"][0]["q_t"]  # [out, in]: split by its output (heads)
    cache = engine.cache.k.sharding
    assert q.sharding.spec == PartitionSpec("tensor", None), q.sharding
    assert cache.spec == PartitionSpec(None, "tensor"), cache
    assert engine.params["head_vd"].sharding.spec == PartitionSpec("tensor", None)
    held = {d.process_index for d in q.sharding.device_set}
    assert held == set(range(jax.process_count())), held
    if jax.process_count() > 1:  # this process holds only its part of the weights and cache
        assert not q.is_fully_addressable and not engine.cache.k.is_fully_addressable
    results: dict[str, Any] = {}
    for name, (version, _) in UNITS.items():
        if version != engine.version:  # a new version, as LoadVersion places it
            engine.set_params(
                params_from_flat(CFG, flat_params(SEEDS[version]), mesh=mesh), version
            )
        results |= arrays(name, engine.generate(unit(name)).rollouts)
    assert engine.cache.k.sharding == cache  # the cache kept its layout through every call
    np.savez(f"{argv[0]}.{jax.process_index()}.npz", **results)
    print(f"process {jax.process_index()} done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
