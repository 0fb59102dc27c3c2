"""The session of a run's services, as the loop uses them (DESIGN §10a).

    services = open_services(cfg, paths, log=..., on_preempted=..., cancel=...)  # a launcher's
    session = start_session(services, deadline_s=60, log=print, progress=Progress())
    result = session.generate(worker, gen_unit)    # LoadVersion first when the version changes
    verdicts = session.verify(samples, key)
    session.restart(failure)                        # after ComponentFailed: restart, reconnect
    session.close()

Every call goes through `call`: retried with backoff while the service is unreachable, given up
(ComponentFailed) when it is dead or stops answering status calls for the component deadline
(rlx_controller.liveness). `base_model_session` is the session of a one-off command (`rlx eval`,
`rlx prefilter`): its services started with `[model] path` as version 0, stopped at the end.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rlx_controller.liveness import Liveness, NotAnswering
from rlx_controller.progress import Progress
from rlx_controller.rundir import RunPaths
from rlx_controller.service_set import Clients, OpenServices, ServiceSet
from rlx_core.clients import VerifySample
from rlx_core.clients import WorkUnit as GenUnit
from rlx_core.clients.paramserver import TensorSpec
from rlx_core.configs.run import RunConfig
from rlx_core.errors import DeadlineExceeded, FailedPrecondition, NotFound, RlxError, Unavailable

__all__ = [
    "ComponentFailed",
    "Session",
    "base_model_session",
    "params_hash",
    "retry",
    "start_session",
]

_TRANSIENT = (Unavailable, DeadlineExceeded)


def params_hash(manifest: Sequence[TensorSpec]) -> str:
    """sha256 over a version's manifest in name order: each tensor's name, dtype, shape and the
    digest (XXH3-128) the paramserver computed over its bytes when it received them. It
    identifies the params exactly without moving them (a snapshot at every reload boundary must
    not pull the whole model)."""
    h = hashlib.sha256()
    for t in sorted(manifest, key=lambda t: t.name):
        h.update(f"{t.name}|{t.dtype.str}|{t.shape}|{t.digest}\n".encode())
    return h.hexdigest()


class ComponentFailed(RlxError):
    """A service died or stopped answering: restart and resume from the newest snapshot.
    `service` names the one that stopped answering ("" when not known)."""

    def __init__(self, message: str, *, service: str = "") -> None:
        super().__init__(message, service=service)
        self.service = service


def _service_of(what: str) -> str:
    """The service a call's description names first ("trainer step" -> "trainer")."""
    return what.split(" ", 1)[0]


def _waits_on(service: str, live: Liveness) -> tuple[str, ...]:
    """The services a call to `service` waits on through it: the trainer pushes every version
    to the paramservers and a worker pulls from one, so a hung paramserver (SIGSTOPped) holds
    their calls while they still answer status calls themselves."""
    if service == "trainer" or service.startswith("inference"):
        return tuple(s for s in live.services if s.startswith("paramserver"))
    return ()


def retry(
    fn: Callable[[], Any],
    what: str,
    deadline_s: float,
    log: Callable[[str], None],
    dead: Callable[[], list[str]] = list,
) -> Any:
    """fn() with exponential backoff while it raises Unavailable / DeadlineExceeded; a dead
    local service ends the retries at once (it needs a restart, not patience). `what` starts
    with the name of the service called ("trainer step")."""
    start = time.monotonic()
    delay = 0.5
    while True:
        try:
            return fn()
        except _TRANSIENT as e:
            gone = dead()
            if gone:
                raise ComponentFailed(f"{what}: {', '.join(gone)} not running: {e}") from e
            if time.monotonic() - start + delay > deadline_s:
                raise ComponentFailed(
                    f"{what}: no answer within {deadline_s:.0f} s: {e}", service=_service_of(what)
                ) from e
            log(f"{what}: {type(e).__name__}; retrying in {delay:.1f} s")
            time.sleep(delay)
            delay = min(delay * 2, 8.0)


class Session:
    """Clients of a started service set, the calls' retries and liveness, and what each
    inference worker holds. `connect()` before use; `close()` closes the clients (the services
    keep running: `services.stop()` stops them)."""

    def __init__(
        self,
        services: ServiceSet,
        *,
        deadline_s: float,
        log: Callable[[str], None],
        progress: Progress,
    ) -> None:
        self.services = services
        self.deadline_s = deadline_s
        self.log = log
        self.progress = progress
        self._clients: Clients | None = None
        self._liveness: Liveness | None = None  # status pings of the services, once connected
        self._worker_locks: list[threading.Lock] = []
        self._loaded: list[int | None] = []

    # --- clients ------------------------------------------------------------------------------
    @property
    def clients(self) -> Clients:
        assert self._clients is not None, "Session.connect() first"
        return self._clients

    @property
    def trainer(self) -> Any:
        return self.clients.trainer

    @property
    def workers(self) -> Sequence[Any]:
        return self.clients.workers

    def connect(self) -> None:
        """Fresh clients of every service, liveness pings of those with an address, and every
        worker's version unknown."""
        s = self.services
        self._clients = s.connect()
        addresses = s.addresses()  # none: services with no address to ping (in-process)
        self._liveness = (
            Liveness(addresses, str(s.token_file), deadline_s=self.deadline_s)
            if addresses
            else None
        )
        self._worker_locks = [threading.Lock() for _ in self._clients.workers]
        self._loaded = [None] * len(self._clients.workers)
        self.progress.loaded.clear()
        for name, address in addresses.items():
            self.progress.components[name] = f"up {address}"

    def close(self) -> None:
        if self._liveness is not None:
            self._liveness.close()
            self._liveness = None
        if self._clients is not None:
            self._clients.close()
            self._clients = None

    def restart(self, failure: ComponentFailed) -> None:
        """After `failure`: restart the dead services (and the hung one it names), reconnect,
        and clear the paramservers for a resume in this process."""
        self.close()
        restarted = self.services.restart_dead(self.log)
        if failure.service and failure.service not in restarted:
            self.services.restart_hung(failure.service, self.log)
        self.connect()
        self.clear_paramservers()

    # --- calls --------------------------------------------------------------------------------
    def call(self, fn: Callable[[], Any], what: str) -> Any:
        """fn() through `retry`; a call to a service that stops answering status calls (it
        hangs) is given up after the component deadline (rlx_controller.liveness)."""
        live = self._liveness
        service = _service_of(what)
        watched = (
            fn
            if live is None
            else functools.partial(live.call, fn, service, through=_waits_on(service, live))
        )
        try:
            return retry(watched, what, self.deadline_s, self.log, self.services.dead)
        except NotAnswering as e:
            raise ComponentFailed(f"{what}: {e}", service=e.service) from e
        except ComponentFailed:
            raise
        except _TRANSIENT as e:
            raise ComponentFailed(f"{what}: {e}", service=_service_of(what)) from e

    def _set_loaded(self, worker: int, version: int | None) -> None:
        """Worker `worker` holds `version` (None: not known), for the loop and the live view."""
        self._loaded[worker] = version
        if version is None:
            self.progress.loaded.pop(f"inference-{worker}", None)
        else:
            self.progress.loaded[f"inference-{worker}"] = version

    def generate(self, worker: int, unit: GenUnit) -> Any:
        """`unit` generated on inference worker `worker`, its version loaded first when the
        worker holds another (one LoadVersion per change, not per unit); calls to one worker
        are serialised."""
        client = self.clients.workers[worker]
        with self._worker_locks[worker]:
            for attempt in (0, 1):
                if self._loaded[worker] != unit.version:
                    self.call(lambda: client.load_version(unit.version), f"inference-{worker} load")
                    self._set_loaded(worker, unit.version)
                    self.progress.components[f"inference-{worker}"] = f"up, version {unit.version}"
                try:
                    return self.call(lambda: client.generate(unit), f"inference-{worker} generate")
                except FailedPrecondition:
                    # the worker holds another version than we thought (restarted by someone
                    # else, or forced to reload): load again, once
                    self._set_loaded(worker, None)
                    if attempt:
                        raise
            raise AssertionError("unreachable")

    def verify(self, samples: list[VerifySample], key: int) -> list[Any]:
        """The verifier's verdicts on `samples`, from verifier `key` mod the verifiers."""
        verifiers = self.clients.verifiers
        i = key % len(verifiers)
        return list(self.call(lambda: verifiers[i].verify(samples), f"verifier-{i} verify"))

    def params_hash(self, version: int) -> str:
        """`params_hash` of `version`'s manifest (paramserver-0)."""
        paramserver = self.clients.paramservers[0]
        _, specs = self.call(lambda: paramserver.manifest(version), "paramserver-0 manifest")
        return params_hash(specs)

    def clear_paramservers(self) -> None:
        """Drop every version the live paramserver replicas hold before a resume in this process.
        The resume pushes the versions from its checkpoint on again (the same bytes); left in
        place, the newer ones would make each replayed version the oldest, evicted the moment it
        is committed, before the workers that need it pull it."""
        for i, client in enumerate(self.clients.paramservers):
            name = f"paramserver-{i}"
            info = self.call(client.versions_info, f"{name} versions")
            for version in sorted({*(v.version for v in info.versions), *info.staged}):
                with contextlib.suppress(NotFound):  # gone meanwhile (a failed push)
                    self.call(functools.partial(client.drop, version), f"{name} drop")


def start_session(
    services: ServiceSet,
    *,
    deadline_s: float,
    log: Callable[[str], None],
    progress: Progress,
) -> Session:
    """Start `services` (a line every 10 s per service still awaited) and connect to them."""
    progress.phase = "starting services"
    shown: dict[str, float] = {}

    def on_wait(name: str, t: float) -> None:
        if t - shown.get(name, 0.0) >= 10:
            shown[name] = t
            log(f"waiting for {name} ({t:.0f} s)")

    services.start(on_wait=on_wait)
    session = Session(services, deadline_s=deadline_s, log=log, progress=progress)
    session.connect()
    return session


@contextlib.contextmanager
def base_model_session(
    cfg: RunConfig,
    paths: RunPaths,
    open_services: OpenServices,
    *,
    log: Callable[[str], None],
    deadline_s: float = 60.0,
) -> Iterator[Session]:
    """The session of a one-off command (`rlx eval`, `rlx prefilter`): the run's services
    started with `[model] path` as version 0 (the trainer initialised from it pushes it), and
    stopped when the command ends."""
    cancel = threading.Event()  # a preempted node stops the wait for the services
    services: ServiceSet | None = None
    session: Session | None = None
    try:
        services = open_services(
            cfg, paths, log=log, on_preempted=lambda _reason: cancel.set(), cancel=cancel
        )
        session = start_session(services, deadline_s=deadline_s, log=log, progress=Progress())
        trainer = session.trainer
        session.call(lambda: trainer.init(seed=cfg.seed, hf_dir=cfg.model.path), "trainer init")
        yield session
    finally:
        if session is not None:
            session.close()
        if services is not None:
            services.stop()
