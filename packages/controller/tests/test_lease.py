"""One controller per run (rlx_controller.lease), on each storage backend."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from rlx_controller import lease as lease_mod
from rlx_controller.lease import LEASE_FILE, STALE_S, Lease, LeaseHolder, RunBusy, read_holder
from rlx_core.processes import start_time
from rlx_core.storage import Storage, open_storage


def _write(storage: Storage, holder: LeaseHolder) -> None:
    storage.put(LEASE_FILE, json.dumps(asdict(holder)).encode())


def _other_host(renewed_ago: float) -> LeaseHolder:
    now = time.time()
    return LeaseHolder("another-machine", 4242, 12345, now - 3600, now - renewed_ago)


def test_a_lease_is_taken_renewed_and_released(
    run_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_mod, "RENEW_S", 0.05)
    storage = open_storage(run_root)
    lease = Lease.acquire(storage)
    first = read_holder(storage)
    assert first is not None and first.is_me() and first.pid == os.getpid()
    deadline = time.monotonic() + 10
    while (held := read_holder(storage)) is not None and held.renewed_unix == first.renewed_unix:
        assert time.monotonic() < deadline, "the lease was not renewed"
        time.sleep(0.05)
    lease.release()
    assert read_holder(storage) is None and not storage.exists(LEASE_FILE)


def test_a_live_controller_on_another_host_holds_the_run_until_it_goes_stale(
    run_root: str,
) -> None:
    storage = open_storage(run_root)
    _write(storage, _other_host(renewed_ago=5))
    with pytest.raises(RunBusy, match=r"host another-machine pid 4242 .*renewed 5 s ago.*--force"):
        Lease.acquire(storage)
    assert read_holder(storage).host == "another-machine"  # type: ignore[union-attr]
    Lease.acquire(storage, force=True).release()  # --force takes it over
    _write(storage, _other_host(renewed_ago=STALE_S + 1))
    lease = Lease.acquire(storage)  # not renewed for STALE_S: its machine is gone
    assert read_holder(storage).is_me()  # type: ignore[union-attr]
    lease.release()


def test_on_this_host_the_holder_is_alive_exactly_while_its_process_is(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "run"))
    other = subprocess.Popen(["sleep", "60"])
    try:
        holder = replace(
            LeaseHolder.me(time.time()), pid=other.pid, pid_start=start_time(other.pid)
        )
        _write(storage, replace(holder, renewed_unix=time.time() - 10 * STALE_S))
        with pytest.raises(RunBusy, match=f"pid {other.pid}") as e:
            Lease.acquire(storage)  # alive however old its renewal
        assert "without a renewal" not in str(e.value)
        # the same pid with another start time is another process: the recorded one is gone
        _write(storage, replace(holder, pid_start=(holder.pid_start or 0) + 1))
        Lease.acquire(storage).release()
        _write(storage, holder)
    finally:
        other.kill()
        other.wait()
    Lease.acquire(storage).release()  # its process ended without releasing


def test_a_controller_whose_run_was_taken_over_stops_renewing_and_is_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_mod, "RENEW_S", 0.05)
    storage = open_storage(str(tmp_path / "run"))
    lease = Lease.acquire(storage)
    lease.check()
    _write(storage, _other_host(renewed_ago=0))  # taken over with --force elsewhere
    deadline = time.monotonic() + 10
    while lease.lost is None:
        assert time.monotonic() < deadline, "the takeover was not noticed"
        time.sleep(0.05)
    with pytest.raises(RunBusy, match="taken over by host another-machine"):
        lease.check()
    lease.release()
    assert read_holder(storage) is not None and read_holder(storage).host == "another-machine"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "field, value",
    [("renewed_unix", 10**400), ("started_unix", 10**400), ("renewed_unix", True)],
)
def test_a_lease_whose_times_are_no_finite_seconds_is_held_by_nobody(
    tmp_path: Path, field: str, value: object
) -> None:
    storage = open_storage(str(tmp_path / "run"))
    data = {**asdict(_other_host(renewed_ago=0)), field: value}
    storage.put(LEASE_FILE, json.dumps(data).encode())
    assert read_holder(storage) is None
    Lease.acquire(storage).release()  # nobody holds it: taken without --force
