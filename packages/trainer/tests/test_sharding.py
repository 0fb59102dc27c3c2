"""A sharded train step equals the single-device step on 8 fake CPU devices, and the same batch
twice from the same checkpoint gives bit-identical params.

XLA_FLAGS must be set before JAX starts, so the check runs in a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
import sys, tempfile
import jax, numpy as np
sys.path.insert(0, sys.argv[1])
from trainer_helpers import MODEL, config, flat, rl_batch
from rlx_model import init_params
from rlx_trainer.checkpoint import CheckpointStore
from rlx_trainer.trainer import Trainer
assert jax.device_count() == 8, jax.devices()
params = init_params(MODEL, 1)
batch = rl_batch(0, b=8, g=2)
ref = Trainer(config(), MODEL, params, seed=1)
ref.train_step(batch)
want = flat(ref.state.params)
for shape in [(2, 2, 2)]:  # data, fsdp and tensor all > 1 (more shapes: more compiles)
    mesh = dict(zip(("data", "fsdp", "tensor"), shape))
    t = Trainer(config(mesh=mesh), MODEL, params, seed=1)
    assert len(t.state.params["layers"]["q"].sharding.device_set) == 8
    t.train_step(batch)
    got = flat(t.state.params)
    worst = max(float(np.abs(got[k] - want[k]).max()) for k in want)
    # the difference is rounding (sharded sums add in another order) that Adam's first step
    # turns into a fraction of lr (1e-3) where a gradient is near its eps: 9.4e-6 and 1.02e-5
    # measured (before and after rms_norm's sums of squares became a matrix-vector product)
    assert worst <= 2e-5, (shape, worst)
    print(shape, "max diff", worst)
# determinism: the same batch twice from the same checkpoint (t: the sharded trainer at step 1)
store = CheckpointStore(tempfile.mkdtemp(), keep=2)
t.save(store)
runs = []
for _ in range(2):
    t.restore(store, 1)
    t.train_step(rl_batch(1, b=8, g=2, version=1))
    runs.append(flat(t.state.params))
for k in runs[0]:
    assert runs[0][k].tobytes() == runs[1][k].tobytes(), k
print("OK")
"""


@pytest.mark.slow
def test_sharded_step_equals_single_device_and_replays_bit_identically() -> None:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    assert result.stdout.strip().endswith("OK")
    assert result.stdout.count("max diff") == 1


def test_fsdp_zero_takes_the_devices_the_other_axes_leave() -> None:
    from rlx_core.errors import ConfigError
    from rlx_trainer.config import MeshConfig

    assert MeshConfig(fsdp=0).resolve(8) == (1, 8, 1)
    assert MeshConfig(data=2, fsdp=0, tensor=2).resolve(16) == (2, 4, 2)
    assert MeshConfig(fsdp=2).resolve(8) == (1, 2, 1)  # a given fsdp is kept as it is
    with pytest.raises(ConfigError, match="fsdp"):
        MeshConfig(data=3, fsdp=0).resolve(8)
    with pytest.raises(ConfigError, match="fsdp"):
        MeshConfig(fsdp=-1)
