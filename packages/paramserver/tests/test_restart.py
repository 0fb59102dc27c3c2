"""A replica restarted on the same address (the controller restarts a killed paramserver on its old
port) has a new, empty store: clients that negotiated the old one keep working."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlx_core.clients import LifecycleClient
from rlx_testing import TOKEN

Running = Any  # conftest.Running: a service and its address


def test_a_client_follows_a_replica_restarted_on_its_port(
    make_server: Callable[..., Running],
) -> None:
    first = make_server()
    port = int(first.address.rsplit(":", 1)[1])
    data = {"w": np.arange(64, dtype=np.float32).reshape(8, 8)}
    with first.client() as pusher, first.client() as puller:
        pusher.push(1, data)
        assert puller.pull(1)[1]["w"].tobytes() == data["w"].tobytes()
        assert puller.last_transport == "shm"
        old_root = first.service.store_root
        with LifecycleClient(first.address, token=TOKEN) as lifecycle:
            lifecycle.shutdown("killed", grace_s=0.1)
        first.service.close()  # its store goes, as with a SIGKILLed process's

        second = make_server(server={"port": port, "grace_s": 0.1})
        assert second.address == first.address and second.service.store_root != old_root
        pusher.push(2, {"w": data["w"] * 2})
        version, out = puller.pull(2)  # before: Corrupt, store directory outside the store
        assert version == 2 and out["w"].tobytes() == (data["w"] * 2).tobytes()
        assert puller.last_transport == "shm"
