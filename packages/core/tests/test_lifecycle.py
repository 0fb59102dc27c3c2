"""The Lifecycle state machine (plain Python)."""

import pytest

from rlx_core.errors import FailedPrecondition
from rlx_core.lifecycle import Lifecycle, State


def test_normal_path_and_status_fields() -> None:
    lc = Lifecycle("paramserver", "1.2.3")
    assert lc.state is State.PENDING
    lc.set(State.STARTING, "loading")
    lc.set(State.READY)
    assert lc.accepting_work()
    st = lc.status()
    assert (st.service, st.version, st.state, st.message) == (
        "paramserver",
        "1.2.3",
        State.READY,
        "",
    )
    assert st.pid > 0 and len(st.instance_id) == 12 and st.uptime_s >= 0


def test_shutdown_drains_and_wakes_the_loop() -> None:
    lc = Lifecycle("trainer", "0")
    lc.set(State.READY)
    assert not lc.wait_for_shutdown(0)
    lc.request_shutdown("SIGTERM", grace_s=2.5)
    assert lc.wait_for_shutdown(0)
    assert lc.state is State.DRAINING and not lc.accepting_work()
    assert lc.status().message == "SIGTERM" and lc.shutdown_grace_s == 2.5
    lc.request_shutdown("again")  # idempotent: keeps the first reason
    assert lc.status().message == "SIGTERM"
    lc.set(State.STOPPED)


def test_stopped_is_terminal() -> None:
    lc = Lifecycle("verifier", "0")
    lc.drain("x")
    lc.set(State.STOPPED)
    with pytest.raises(FailedPrecondition, match="STOPPED to READY"):
        lc.set(State.READY)


def test_instance_ids_differ_between_instances() -> None:
    assert Lifecycle("a", "0").instance_id != Lifecycle("a", "0").instance_id
