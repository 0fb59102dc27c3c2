"""Real servers on 127.0.0.1:0 in this process (the Service objects plus the serving loop in a
thread): a paramserver to pull versions from, and inference workers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from rlx_core.clients import InferenceClient, LifecycleClient, ParamServerClient
from rlx_core.config import from_dict
from rlx_inference import InferenceConfig, InferenceService
from rlx_inference.servicer import registrations as inference_registrations
from rlx_paramserver import ParamServerConfig, ParamServerService
from rlx_paramserver.servicer import registrations as paramserver_registrations
from rlx_testing import TOKEN, serve_in_thread


@dataclass
class Running:
    service: Any
    address: str
    thread: threading.Thread

    def inference(self, **kwargs: Any) -> InferenceClient:
        return InferenceClient(self.address, token=TOKEN, **kwargs)

    def paramserver(self, **kwargs: Any) -> ParamServerClient:
        return ParamServerClient(self.address, token=TOKEN, **kwargs)


def _start(service: Any, server_cfg: Any, registrations: list) -> Running:
    address, thread = serve_in_thread(service.lifecycle, server_cfg, registrations, timeout_s=60)
    return Running(service, address, thread)


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Callable[..., Running]]]:
    """{"paramserver": make(**config), "inference": make(config_dict, model=...)}"""
    monkeypatch.setenv("RLX_TOKEN", TOKEN)
    started: list[Running] = []

    def paramserver(**config: Any) -> Running:
        cfg = from_dict(ParamServerConfig, {"server": {"port": 0, "grace_s": 0.1}, **config})
        service = ParamServerService(cfg)
        running = _start(service, cfg.server, paramserver_registrations(service))
        started.append(running)
        return running

    def inference(config: dict[str, Any], **kwargs: Any) -> Running:
        cfg = from_dict(InferenceConfig, {"server": {"port": 0, "grace_s": 0.1}, **config})
        service = InferenceService(cfg, **kwargs)
        running = _start(service, cfg.server, inference_registrations(service))
        started.append(running)
        return running

    yield {"paramserver": paramserver, "inference": inference}
    for running in reversed(started):
        with LifecycleClient(running.address, token=TOKEN) as client:
            client.shutdown("test over", grace_s=0.1)
        running.thread.join(30)
        close = getattr(running.service, "close", None)
        if close is not None:
            close()


def flat(params: dict, prefix: str = "") -> dict[str, np.ndarray]:
    """The params pytree as the paramserver holds it: '/'-path -> numpy array."""
    out: dict[str, np.ndarray] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            out |= flat(value, f"{prefix}{key}/")
        else:
            out[f"{prefix}{key}"] = np.asarray(value)
    return out
