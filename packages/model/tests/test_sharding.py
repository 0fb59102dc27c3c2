"""A sharded forward equals the single-device forward on 8 fake CPU devices.

XLA_FLAGS must be set before JAX starts, so the check runs in a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import jax, jax.numpy as jnp, numpy as np
from dataclasses import replace
from rlx_model import tiny_config, init_params, forward, logits, token_logprobs, make_mesh
from rlx_model import shard_params, batch_sharding
from rlx_model.sharding import param_partition_specs
assert jax.device_count() == 8, jax.devices()
for family, extra in [("qwen2", {}), ("qwen3", {"qkv_bias": False, "qk_norm": True}),
                      ("llama", {"qkv_bias": False, "tie_word_embeddings": False})]:
    cfg = replace(tiny_config(vocab_size=256, hidden_size=64), family=family, **extra)
    params = init_params(cfg, seed=1)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, (8, 16)), jnp.int32)
    targets = jnp.roll(tokens, -1, 1)
    fn = jax.jit(lambda p, t, y: (logits(p, cfg, forward(p, cfg, t)[0]),
                                  token_logprobs(p, cfg, t, y)[0]))
    ref_logits, ref_lp = fn(params, tokens, targets)
    for shape in [(8, 1, 1), (2, 2, 2), (1, 1, 8)]:
        mesh = make_mesh(shape)
        specs = param_partition_specs(cfg, mesh)
        sharded = shard_params(params, cfg, mesh)
        t = jax.device_put(tokens, batch_sharding(mesh))
        y = jax.device_put(targets, batch_sharding(mesh))
        got_logits, got_lp = fn(sharded, t, y)
        if shape[2] == 8:
            assert specs["layers/q"] == jax.sharding.PartitionSpec(None, None, "tensor"), specs
            assert len(sharded["layers"]["q"].sharding.device_set) == 8
        np.testing.assert_allclose(got_logits, ref_logits, atol=1e-6, rtol=0)
        np.testing.assert_allclose(got_lp, ref_lp, atol=1e-6, rtol=0)
        print(family, shape, "max diff", float(jnp.abs(got_logits - ref_logits).max()))
print("OK")
"""


@pytest.mark.slow
def test_sharded_forward_equals_single_device_on_8_fake_devices() -> None:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("OK")
    assert result.stdout.count("max diff") == 9


def test_mesh_shape_must_match_devices() -> None:
    from rlx_core.errors import ConfigError
    from rlx_model import make_mesh

    with pytest.raises(ConfigError, match="needs 8 devices"):
        make_mesh((2, 2, 2))


def test_the_paramserver_chunks_each_tensor_along_the_axis_inference_splits() -> None:
    from dataclasses import replace

    from rlx_model import param_shapes, tiny_config
    from rlx_model.sharding import chunk_axes

    cfg = replace(tiny_config(), tie_word_embeddings=False)
    axes = chunk_axes(cfg)
    assert set(axes) == set(param_shapes(cfg))
    # [L, in, out] matrices split by their outputs (q, k, v, gate, up) or inputs (o, down); the
    # embedding [V, D] and the head [D, V] by the vocabulary; the biases [L, out] by outputs
    assert axes["layers/q"] == axes["layers/gate"] == 2 and axes["layers/down"] == 1
    assert axes["embed"] == 0 and axes["lm_head"] == 1 and axes["layers/q_bias"] == 1
    assert axes["final_norm"] == 0 and axes["layers/attn_norm"] == 0  # replicated
