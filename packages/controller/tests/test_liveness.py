"""`Liveness.call`: a call is given up when its service, or a service the call waits on through
it, stops answering status calls; the NotAnswering names the silent one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rlx_controller.liveness import Liveness, NotAnswering
from rlx_core.rpc.auth import create_token_file


class Silence(Liveness):
    """Liveness whose services' silences are set by the test (no server answers here)."""

    silences: dict[str, float]

    def silent_s(self, service: str) -> float:
        return self.silences.get(service, 0.0)


@pytest.fixture
def live(tmp_path: Path):
    token = tmp_path / "token"
    create_token_file(token)
    names = ("trainer", "paramserver-0", "paramserver-1", "verifier-0")
    live = Silence(
        {n: f"127.0.0.1:{9 + i}" for i, n in enumerate(names)},
        str(token),
        deadline_s=0.5,
        interval_s=60.0,
    )
    yield live
    live.close()


def test_a_call_held_by_a_silent_service_it_waits_on_is_given_up(live: Silence) -> None:
    live.silences = {"paramserver-1": 5.0}  # the trainer answers; its push waits on replica 1
    start = time.monotonic()
    with pytest.raises(NotAnswering, match="paramserver-1 has not answered") as info:
        live.call(lambda: time.sleep(30), "trainer", through=("paramserver-0", "paramserver-1"))
    assert info.value.service == "paramserver-1"
    assert time.monotonic() - start < 10
    # without the dependency the same call would go on: a fast one returns its value
    assert live.call(lambda: 7, "trainer") == 7


def test_the_called_service_itself_and_unwatched_services(live: Silence) -> None:
    live.silences = {"trainer": 5.0}
    with pytest.raises(NotAnswering) as info:
        live.call(lambda: time.sleep(30), "trainer", through=("paramserver-0",))
    assert info.value.service == "trainer"
    assert live.call(lambda: "ok", "controller") == "ok"  # not watched: called directly
    assert sorted(live.services) == ["paramserver-0", "paramserver-1", "trainer", "verifier-0"]
