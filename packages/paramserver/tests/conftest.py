"""A real paramserver on 127.0.0.1:0 in this process (the Service object plus the serving loop in a
thread), so tests can both call it over gRPC and look at the service behind it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from rlx_core.clients import LifecycleClient, ParamServerClient
from rlx_core.config import from_dict
from rlx_paramserver import ParamServerConfig, ParamServerService
from rlx_paramserver.servicer import registrations
from rlx_testing import TOKEN, serve_in_thread


@dataclass
class Running:
    service: ParamServerService
    address: str

    def client(self, **kwargs: Any) -> ParamServerClient:
        return ParamServerClient(self.address, token=TOKEN, **kwargs)


@pytest.fixture
def make_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Running]]:
    monkeypatch.setenv("RLX_TOKEN", TOKEN)
    started: list[tuple[Running, threading.Thread]] = []

    def make(**config: Any) -> Running:
        cfg = from_dict(
            ParamServerConfig,
            {"server": {"port": 0, "grace_s": 0.1}, "chunk_kib": 16, **config},
        )
        service = ParamServerService(cfg)
        address, thread = serve_in_thread(service.lifecycle, cfg.server, registrations(service))
        running = Running(service, address)
        started.append((running, thread))
        return running

    yield make
    for running, thread in started:
        if thread.is_alive():  # a test may have shut it down itself
            with LifecycleClient(running.address, token=TOKEN) as client:
                client.shutdown("test over", grace_s=0.1)
        thread.join(30)
        running.service.close()


@pytest.fixture
def server(make_server: Callable[..., Running]) -> Running:
    return make_server()
