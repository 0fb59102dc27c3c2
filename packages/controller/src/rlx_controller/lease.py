"""One controller per run: a lease object in the run directory, renewed while the loop runs.

Two controllers on one run would both append to its rollout log, write its snapshots and push
versions to their own trainers: the run would no longer be one run. `rlx resume` on a run whose
controller is still alive (on this machine, or on another one sharing an s3:// / gs:// run
directory) is therefore refused, naming the holder:

    lease = Lease.acquire(storage, force=False)   # RunBusy when another controller holds it
    ...                                           # a thread renews it every RENEW_S
    lease.release()                               # deleted when the controller stops cleanly

`controller.lease` holds the host, pid, the process's start time (so a recycled pid is not
mistaken for the holder) and the time of the last renewal. It is the run's record of its
controller: `rlx status` and `rlx down` recognise the controller that `controller.pid` names only
when the lease names the same pid on this host with the process's start time
(`LeaseHolder.process`). A holder is alive while its
renewal is younger than STALE_S; on the same host it is alive exactly while that process is.
A controller killed without a chance to clean up (SIGKILL, a lost machine) leaves its lease,
which stops counting STALE_S after its last renewal, at once on the same host; `--force`
takes it over sooner (when you know the other machine is gone).

S3 and GCS have no cheap compare-and-swap shared by both backends, so two resumes started
within the same second could both pass the check; the lease guards against the mistakes that
happen (a second terminal, a restarted job while the first still runs), not that race.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass

from rlx_core.errors import FailedPrecondition, NotFound, RlxError
from rlx_core.processes import Process, identify, start_time
from rlx_core.storage import Storage

__all__ = ["LEASE_FILE", "RENEW_S", "STALE_S", "Lease", "LeaseHolder", "RunBusy"]

LEASE_FILE = "controller.lease"
RENEW_S = 10.0  # how often the holder renews its lease
STALE_S = 60.0  # a lease not renewed for this long no longer holds the run


class RunBusy(FailedPrecondition):
    """Another controller holds the run."""


@dataclass(frozen=True)
class LeaseHolder:
    host: str
    pid: int
    pid_start: int | None
    started_unix: float
    renewed_unix: float

    @classmethod
    def me(cls, started_unix: float) -> LeaseHolder:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, start_time(pid), started_unix, time.time())

    def is_me(self) -> bool:
        return self.host == socket.gethostname() and self.pid == os.getpid()

    def alive(self, now: float) -> bool:
        """Whether this holder still holds the run (see the module doc)."""
        if self.host == socket.gethostname():
            return self.process() is not None
        return now - self.renewed_unix < STALE_S

    def process(self) -> Process | None:
        """The holder's process when it runs on this host and is still that process (its pid's
        start time is the recorded one); None otherwise. The lease is the run's own record of
        its controller, so it is the run check (rlx_core.processes)."""
        if self.host != socket.gethostname() or self.pid_start is None:
            return None
        return identify(self.pid, self.pid_start, in_run=lambda _pid: True)

    def describe(self, now: float) -> str:
        return (
            f"host {self.host} pid {self.pid} (running since "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.started_unix))}, "
            f"renewed {max(0.0, now - self.renewed_unix):.0f} s ago)"
        )


def _seconds(value: object) -> bool:
    """Whether `value` is a finite number of seconds (not a bool; an int too large for a float,
    which `alive` could not subtract from the time, is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def read_holder(storage: Storage) -> LeaseHolder | None:
    """The lease's holder as recorded (None when there is no lease or it does not parse)."""
    try:
        data = json.loads(storage.get(LEASE_FILE))
        holder = LeaseHolder(**data)
    except NotFound:
        return None
    except (ValueError, TypeError, RecursionError):  # torn or foreign: nobody holds it
        return None
    typed = (
        isinstance(holder.host, str)
        and type(holder.pid) is int
        and (holder.pid_start is None or type(holder.pid_start) is int)
        and _seconds(holder.started_unix)
        and _seconds(holder.renewed_unix)
    )
    return holder if typed else None


class Lease:
    """This process's hold on a run (see the module doc)."""

    def __init__(self, storage: Storage, holder: LeaseHolder) -> None:
        self.storage = storage
        self.holder = holder
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, name="lease", daemon=True)
        self.error: RlxError | None = None  # the last renewal's failure (the next one retries)
        self.lost: LeaseHolder | None = None  # who took the run over (`--force` elsewhere)

    @classmethod
    def acquire(cls, storage: Storage, *, force: bool = False) -> Lease:
        """Take the run's lease and start renewing it; RunBusy naming the holder when another
        live controller has it (unless `force`)."""
        now = time.time()
        held = read_holder(storage)
        if held is not None and not held.is_me() and held.alive(now) and not force:
            wait = (
                ""
                if held.host == socket.gethostname()
                else f", or {max(0.0, STALE_S - (now - held.renewed_unix)):.0f} s more without a "
                "renewal if its machine is gone"
            )
            raise RunBusy(
                f"{storage.uri} is being run by {held.describe(now)}: stop it first "
                f"(`rlx down {storage.uri}` on that machine){wait}; --force takes the run over "
                "when you know it is dead"
            )
        lease = cls(storage, LeaseHolder.me(now))
        lease._write()
        lease._thread.start()
        return lease

    def _write(self) -> None:
        self.holder = LeaseHolder(**{**asdict(self.holder), "renewed_unix": time.time()})
        self.storage.put(LEASE_FILE, json.dumps(asdict(self.holder)).encode())

    def _renew_loop(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                held = read_holder(self.storage)
                if held is not None and not held.is_me():  # taken over: never write it back
                    self.lost = held
                    return
                self._write()
                self.error = None
            except RlxError as e:  # storage briefly unreachable: the next renewal retries
                self.error = e

    def check(self) -> None:
        """RunBusy when another controller has taken the run over (this one must stop)."""
        if self.lost is not None:
            raise RunBusy(
                f"{self.storage.uri}: the run was taken over by {self.lost.describe(time.time())}"
            )

    def release(self) -> None:
        """Stop renewing and delete the lease (only if it is still ours)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        held = read_holder(self.storage)
        if held is not None and held.is_me():
            with contextlib.suppress(RlxError):
                self.storage.delete(LEASE_FILE, missing_ok=True)
