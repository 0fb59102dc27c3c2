"""One process of `test_multihost.py`: two train steps of the tiny model on a (1, 4, 2) mesh of 8
devices, through the real `Trainer`, then the params (and a few metrics) to an .npz.

    python multihost_worker.py OUT.npz [COORDINATOR NUM_PROCESSES PROCESS_ID]

With a coordinator, this process joins the others with `rlx_model.distributed.initialize` and
the mesh spans them; without, one process holds all 8 devices. XLA_FLAGS and JAX_PLATFORMS come
from the parent. Only process 0 writes OUT.npz.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # trainer_helpers

MESH = {"data": 1, "fsdp": 4, "tensor": 2}  # fsdp crosses the processes: params really split


def main(argv: list[str]) -> None:
    from rlx_core.distributed import DistributedConfig
    from rlx_model.distributed import initialize

    out = argv[0]
    if len(argv) > 1:
        initialize(
            DistributedConfig(
                coordinator=argv[1], num_processes=int(argv[2]), process_id=int(argv[3])
            )
        )

    import jax
    import numpy as np
    from trainer_helpers import MODEL, config, rl_batch

    from rlx_model import init_params
    from rlx_trainer.trainer import Trainer

    assert jax.device_count() == 8, jax.devices()
    trainer = Trainer(config(mesh=MESH), MODEL, init_params(MODEL, 1), seed=1)
    q = trainer.state.params["layers"]["q"]
    held = {d.process_index for d in q.sharding.device_set}
    assert held == set(range(jax.process_count())), held
    if jax.process_count() > 1:  # this process holds only its part of the weights
        assert not q.is_fully_addressable
        mine = sum(s.data.size for s in q.addressable_shards)
        assert mine < q.size, (mine, q.size)
    # two steps on batches of the current version (π_old from the training forward itself):
    # the second starts from params the first updated across the processes
    first = trainer.train_step(rl_batch(0, b=8, g=2))
    second = trainer.train_step(rl_batch(1, b=8, g=2, version=1))
    params = trainer.host_params()
    if jax.process_index() == 0:
        metrics = {
            f"metric/{step}/{name}": np.float64(result.metrics[name])
            for step, result in ((1, first), (2, second))
            for name in ("loss", "grad_norm", "mismatch_max", "entropy")
        }
        np.savez(out, **params, **metrics)
    print(f"process {jax.process_index()} done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
