"""Which services still answer: a hung service (SIGSTOPped, deadlocked, a wedged accelerator)
never fails the long call the controller has made to it (a Verify may take up to an hour), so
the controller asks each service for its status in the background, and gives up on a call to a
service that has not answered a status call for `deadline_s`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from rlx_core.clients import LifecycleClient
from rlx_core.errors import RlxError

__all__ = ["Liveness", "NotAnswering"]

T = TypeVar("T")


class NotAnswering(RlxError):
    """A service has not answered a status call for longer than the deadline."""

    def __init__(self, service: str, silent_s: float) -> None:
        super().__init__(
            f"{service} has not answered a status call for {silent_s:.0f} s", service=service
        )
        self.service = service


class Liveness:
    """Pings every service's Status every `interval_s` on one thread; `call` runs a call on a
    thread of its own and waits for it while its service keeps answering."""

    def __init__(
        self,
        addresses: Mapping[str, str],
        token_file: str,
        *,
        deadline_s: float,
        interval_s: float = 5.0,
    ) -> None:
        self.deadline_s = deadline_s
        self.interval_s = interval_s
        self._clients = {
            name: LifecycleClient(address, token_file=token_file, timeout=interval_s)
            for name, address in addresses.items()
        }
        now = time.monotonic()
        self._last_ok = dict.fromkeys(self._clients, now)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="liveness", daemon=True)
        # calls run here; one given up on stays until its service is restarted (its channel
        # breaks then) or answers
        self._pool = ThreadPoolExecutor(max_workers=128, thread_name_prefix="rpc")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for name, client in self._clients.items():
                if self._stop.is_set():
                    return
                try:
                    client.status(timeout=self.interval_s)
                except RlxError:
                    continue
                self._last_ok[name] = time.monotonic()
            self._stop.wait(self.interval_s)

    def silent_s(self, service: str) -> float:
        """Seconds since `service` last answered a status call (0 for a service not watched)."""
        last = self._last_ok.get(service)
        return 0.0 if last is None else time.monotonic() - last

    @property
    def services(self) -> list[str]:
        """The services watched, by name."""
        return list(self._clients)

    def call(self, fn: Callable[[], T], service: str, *, through: tuple[str, ...] = ()) -> T:
        """fn(), or NotAnswering once `service`, or a service the call waits on through it
        (`through`: a TrainStep waits on the paramservers it pushes to), has been silent for the
        deadline meanwhile (the NotAnswering names the silent one)."""
        watched = [s for s in (service, *through) if s in self._clients]
        if not watched:
            return fn()
        future: Future[Any] = self._pool.submit(fn)
        while True:
            try:
                return future.result(timeout=1.0)
            except FutureTimeout:
                for name in watched:
                    silent = self.silent_s(name)
                    if silent > self.deadline_s:
                        raise NotAnswering(name, silent) from None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self.interval_s * 2)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for client in self._clients.values():
            client.close()
