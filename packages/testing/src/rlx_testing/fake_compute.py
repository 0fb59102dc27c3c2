"""A local fake of the Compute Engine API (instances) for tests and offline trials of `rlx
provision`; never a stand-in in production.

`FakeComputeApi` is a real HTTP server on 127.0.0.1 that answers the REST calls of the v1 API
with the JSON of `google.cloud.compute_v1`'s messages, so tests drive the real client library
(its REST transport: URL and body encoding, error mapping) end to end. Set
`RLX_COMPUTE_API_ENDPOINT` to its `endpoint` ("http://127.0.0.1:PORT").

It serves, under /compute/v1/projects/{project}/zones/{zone}/: `instances` insert (POST), list
(GET), `instances/{name}` get (GET) and delete (DELETE), `operations/{operation}` get (GET) and
`operations/{operation}/wait` (POST). Anything else is 404; the request bodies are parsed
strictly (an unknown field is a 400).

The life of an instance here:

- inserted PROVISIONING; it becomes STAGING, then RUNNING as `get` calls on it come in: RUNNING
  on the call after `running_after` calls (0: RUNNING at once; None: it stays until a test calls
  `set_status`), STAGING on the one before;
- its one network interface has the internal IP 127.0.0.1 (and so has its external access
  config), so the services of a test's "VMs" run on this machine;
- a status set by a test sticks (TERMINATED: a preempted spot VM);
- deleting removes it at once.

Insert and delete return an operation that is RUNNING; its first get or wait completes it (DONE,
with the error of `fail_next_insert` if a test set one: that insert made no instance).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import threading
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from google.cloud import compute_v1

__all__ = ["METHODS", "Call", "FakeComputeApi"]

# The calls the fake serves (the names of `requests`, `fail_next`).
METHODS = (
    "instances.insert",
    "instances.get",
    "instances.list",
    "instances.delete",
    "zoneOperations.get",
    "zoneOperations.wait",
)

_IP = "127.0.0.1"
_BASE = "https://www.googleapis.com/compute/v1/"
_PATH = re.compile(r"/compute/v1/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/(?P<rest>.*)")
_ROUTES = (
    ("POST", re.compile(r"instances"), "instances.insert"),
    ("GET", re.compile(r"instances"), "instances.list"),
    ("GET", re.compile(r"instances/(?P<name>[^/]+)"), "instances.get"),
    ("DELETE", re.compile(r"instances/(?P<name>[^/]+)"), "instances.delete"),
    ("GET", re.compile(r"operations/(?P<name>[^/]+)"), "zoneOperations.get"),
    ("POST", re.compile(r"operations/(?P<name>[^/]+)/wait"), "zoneOperations.wait"),
)
# Resource names as Compute Engine takes them (RFC 1035 labels).
_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_STATUSES = tuple(s for s in compute_v1.Instance.Status.__members__ if s != "UNDEFINED_STATUS")
# proto-plus enums are IntEnums at runtime, but mypy sees their members as plain ints; calling the
# enum class gives the same member with its enum type
_DONE = compute_v1.Operation.Status(compute_v1.Operation.Status.DONE)
_RUNNING_OP = compute_v1.Operation.Status(compute_v1.Operation.Status.RUNNING)


class _Refusal(Exception):
    """A call answered with an HTTP error."""

    def __init__(self, code: int, message: str, reason: str = "invalid") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Call:
    """One request the fake received: its method (a name in METHODS), path parameters, query
    and, for an insert, the Instance of its body."""

    method: str
    project: str
    zone: str
    name: str = ""  # the instance or operation of the path
    query: dict[str, str] = dataclasses.field(default_factory=dict)
    body: compute_v1.Instance | None = None


@dataclasses.dataclass(kw_only=True)
class _Vm:
    vm: compute_v1.Instance
    gets: int = 0  # get calls answered while the status policy waited
    pinned: bool = False  # a test set the status; the policy leaves this instance alone


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _invalid(field: str, message: str) -> _Refusal:
    return _Refusal(400, f"Invalid value for field '{field}': {message}")


class FakeComputeApi:
    """The fake Compute Engine API: state, test hooks and the HTTP server that serves them.

    `running_after`: get calls on a new instance before it turns RUNNING (0: at once; None: never
    by itself); a plain attribute a test may change later, for instances inserted from then on.
    """

    def __init__(self, running_after: int | None = 1) -> None:
        if running_after is not None and running_after < 0:
            raise ValueError(f"running_after must be >= 0 or None, got {running_after}")
        self.running_after = running_after
        # Every request received, in order.
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._vms: dict[tuple[str, str, str], _Vm] = {}  # (project, zone, name), creation order
        self._operations: dict[tuple[str, str, str], compute_v1.Operation] = {}
        # the error an operation ends with once it is done (code, message), by operation
        self._op_errors: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._faults: dict[str, collections.deque[_Refusal]] = collections.defaultdict(
            collections.deque
        )
        self._insert_errors: collections.deque[tuple[str, str]] = collections.deque()
        self._count = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- the server ---

    def start(self) -> str:
        """Serve on a free port of 127.0.0.1; returns the endpoint ("http://127.0.0.1:PORT")."""
        if self._server is not None:
            raise RuntimeError(f"the fake Compute Engine API already serves on {self.endpoint}")
        server = ThreadingHTTPServer((_IP, 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="fake-compute", daemon=True
        )
        self._thread.start()
        return self.endpoint

    def stop(self) -> None:
        """Stop serving. The state stays readable."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    @property
    def endpoint(self) -> str:
        """Where the fake serves ("http://127.0.0.1:PORT"); only while started."""
        if self._server is None:
            raise RuntimeError("the fake Compute Engine API is not started")
        return f"http://{_IP}:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- test hooks ---

    def set_status(self, name: str, status: str) -> None:
        """Put the instance `name` in `status` (an Instance.Status name: TERMINATED is a
        preempted spot VM); the status policy no longer applies to it."""
        if status not in _STATUSES:
            raise ValueError(f"status {status!r}: one of {_STATUSES}")
        with self._lock:
            entry = self._find(name)
            entry.pinned = True
            entry.vm.status = status

    def fail_next(self, method: str, code: int, message: str, reason: str = "invalid") -> None:
        """Answer the next call of `method` (a name in METHODS) with HTTP status `code` and
        `message`, without acting on it. Several calls queue up, one error per call."""
        if method not in METHODS:
            raise ValueError(f"method {method!r}: one of {METHODS}")
        if code < 400:
            raise ValueError(f"an injected error needs an HTTP error status, not {code}")
        with self._lock:
            self._faults[method].append(_Refusal(code, message, reason))

    def fail_next_insert(self, message: str, code: str = "ZONE_RESOURCE_POOL_EXHAUSTED") -> None:
        """Accept the next insert, but end its operation with this error and no instance (as
        the API does when the zone has no capacity or the quota is used up)."""
        with self._lock:
            self._insert_errors.append((code, message))

    def requests(self, method: str) -> list[Call]:
        """The calls of `method` (a name in METHODS), in order."""
        if method not in METHODS:
            raise ValueError(f"method {method!r}: one of {METHODS}")
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def instances(self) -> list[compute_v1.Instance]:
        """Copies of the instances that exist, in creation order."""
        with self._lock:
            return [compute_v1.Instance(e.vm) for e in self._vms.values()]

    # --- state ---

    def _find(self, name: str) -> _Vm:
        found = [e for key, e in self._vms.items() if key[2] == name]
        if len(found) != 1:
            known = [key[2] for key in self._vms]
            what = "no" if not found else "more than one"
            raise KeyError(f"{what} instance {name!r}; known: {known}")
        return found[0]

    def _operation(
        self, project: str, zone: str, kind: str, target: str, error: tuple[str, str] | None
    ) -> compute_v1.Operation:
        self._count += 1
        zone_url = f"{_BASE}projects/{project}/zones/{zone}"
        name = f"operation-{self._count}"
        op = compute_v1.Operation(
            name=name,
            id=self._count,
            kind="compute#operation",
            operation_type=kind,
            status=_RUNNING_OP,
            progress=0,
            insert_time=_now(),
            start_time=_now(),
            zone=zone_url,
            target_link=f"{zone_url}/instances/{target}",
            self_link=f"{zone_url}/operations/{name}",
        )
        self._operations[(project, zone, name)] = op
        if error is not None:
            self._op_errors[(project, zone, name)] = error
        return compute_v1.Operation(op)

    # --- the calls ---

    def _insert(self, call: Call) -> compute_v1.Operation:
        vm = call.body
        if vm is None:
            raise _Refusal(400, "Required field 'resource' not specified")
        _check_instance(vm, call.zone)
        key = (call.project, call.zone, vm.name)
        if key in self._vms:
            raise _Refusal(
                409,
                f"The resource 'projects/{call.project}/zones/{call.zone}/instances/{vm.name}' "
                "already exists",
                "alreadyExists",
            )
        error = self._insert_errors.popleft() if self._insert_errors else None
        if error is None:
            self._vms[key] = _Vm(vm=self._new_instance(call, vm))
        return self._operation(call.project, call.zone, "insert", vm.name, error)

    def _new_instance(self, call: Call, spec: compute_v1.Instance) -> compute_v1.Instance:
        """The instance an insert makes: the request's fields, and the output-only ones."""
        self._count += 1
        vm = compute_v1.Instance(spec)
        zone_url = f"{_BASE}projects/{call.project}/zones/{call.zone}"
        vm.id = self._count
        vm.kind = "compute#instance"
        vm.creation_timestamp = _now()
        vm.zone = zone_url
        vm.self_link = f"{zone_url}/instances/{vm.name}"
        vm.machine_type = f"{zone_url}/machineTypes/{vm.machine_type.rsplit('/', 1)[-1]}"
        vm.status = "RUNNING" if self.running_after == 0 else "PROVISIONING"
        for i, nic in enumerate(vm.network_interfaces):
            nic.name = f"nic{i}"
            nic.network_i_p = _IP
            for access in nic.access_configs:
                access.nat_i_p = _IP
        return vm

    def _vm(self, call: Call) -> _Vm:
        key = (call.project, call.zone, call.name)
        if key not in self._vms:
            raise _Refusal(
                404,
                f"The resource 'projects/{call.project}/zones/{call.zone}/instances/{call.name}' "
                "was not found",
                "notFound",
            )
        return self._vms[key]

    def _get(self, call: Call) -> compute_v1.Instance:
        entry = self._vm(call)
        vm = entry.vm
        waiting = vm.status in ("PROVISIONING", "STAGING")
        if waiting and not entry.pinned and self.running_after is not None:
            if entry.gets >= self.running_after:
                vm.status = "RUNNING"
                vm.last_start_timestamp = _now()
            elif entry.gets == self.running_after - 1:
                vm.status = "STAGING"
            entry.gets += 1
        return compute_v1.Instance(vm)

    def _list(self, call: Call) -> compute_v1.InstanceList:
        if call.query.get("filter"):
            raise _invalid("filter", "filters are not served by the fake")
        mine = [e.vm for k, e in self._vms.items() if k[:2] == (call.project, call.zone)]
        size = int(call.query.get("maxResults", "500") or 500)
        token = call.query.get("pageToken", "")
        if token and (not token.isdigit() or int(token) > len(mine)):
            raise _invalid("pageToken", f"{token!r} was not issued by this server")
        start = int(token or 0)
        end = min(len(mine), start + size)
        return compute_v1.InstanceList(
            kind="compute#instanceList",
            items=mine[start:end],
            next_page_token=str(end) if end < len(mine) else "",
        )

    def _delete(self, call: Call) -> compute_v1.Operation:
        self._vm(call)
        del self._vms[(call.project, call.zone, call.name)]
        return self._operation(call.project, call.zone, "delete", call.name, None)

    def _get_operation(self, call: Call) -> compute_v1.Operation:
        key = (call.project, call.zone, call.name)
        if key not in self._operations:
            raise _Refusal(404, f"The resource 'operations/{call.name}' was not found", "notFound")
        op = self._operations[key]
        if op.status != _DONE:
            op.status = _DONE
            op.progress = 100
            op.end_time = _now()
            if key in self._op_errors:
                code, message = self._op_errors.pop(key)
                op.error = compute_v1.Error(errors=[compute_v1.Errors(code=code, message=message)])
                op.http_error_status_code = 503
                op.http_error_message = "SERVICE UNAVAILABLE"
        return compute_v1.Operation(op)

    def handle(self, verb: str, url: str, body: bytes) -> tuple[int, str]:
        """One HTTP request: (status, JSON text)."""
        parts = urllib.parse.urlsplit(url)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(parts.query).items()}
        m = _PATH.fullmatch(parts.path)
        route = None
        if m is not None:
            for method_verb, pattern, method in _ROUTES:
                r = pattern.fullmatch(m["rest"])
                if r is not None and method_verb == verb:
                    route = (method, r.groupdict().get("name", ""))
                    break
        if m is None or route is None:
            return _error(_Refusal(404, f"{verb} {parts.path}: not served by the fake", "notFound"))
        method, name = route
        try:
            instance = None
            if method == "instances.insert":
                try:
                    instance = compute_v1.Instance.from_json(body.decode() or "{}")
                except Exception as e:  # json_format.ParseError: an unknown or mistyped field
                    raise _Refusal(400, f"Invalid JSON payload received. {e}") from e
            call = Call(method, m["project"], m["zone"], name, query, instance)
        except _Refusal as refusal:
            return _error(refusal)
        handlers: dict[str, Callable[[Call], Any]] = {
            "instances.insert": self._insert,
            "instances.get": self._get,
            "instances.list": self._list,
            "instances.delete": self._delete,
            "zoneOperations.get": self._get_operation,
            "zoneOperations.wait": self._get_operation,
        }
        with self._lock:
            self.calls.append(call)
            try:
                if self._faults[method]:
                    raise self._faults[method].popleft()
                answer = handlers[method](call)
            except _Refusal as refusal:
                return _error(refusal)
        return 200, type(answer).to_json(answer, use_integers_for_enums=False)


def _check_instance(vm: compute_v1.Instance, zone: str) -> None:
    """What the API requires of an insert's Instance (the fields rlx sets)."""
    if not _NAME.fullmatch(vm.name):
        raise _invalid("resource.name", f"{vm.name!r}: must match [a-z]([-a-z0-9]*[a-z0-9])?")
    machine = re.fullmatch(r"(?:.*/)?zones/([^/]+)/machineTypes/([^/]+)", vm.machine_type)
    if machine is None or machine.group(1) != zone:
        raise _invalid("resource.machineType", f"{vm.machine_type!r}: zones/{zone}/machineTypes/T")
    boot = [d for d in vm.disks if d.boot]
    if len(boot) != 1 or not boot[0].initialize_params.source_image:
        raise _invalid("resource.disks", "one boot disk with initializeParams.sourceImage")
    if not vm.network_interfaces:
        raise _invalid("resource.networkInterfaces", "at least one network interface")
    for key, value in vm.labels.items():
        if not (_LABEL_KEY.fullmatch(key) and _LABEL_VALUE.fullmatch(value)):
            raise _invalid(f"resource.labels.{key}", f"{value!r} is not a valid label")
    s = vm.scheduling
    if s.provisioning_model == "SPOT" and not s.instance_termination_action:
        raise _invalid("resource.scheduling.instanceTerminationAction", "required for SPOT")
    if s.provisioning_model == "SPOT" and s.automatic_restart:
        raise _invalid("resource.scheduling.automaticRestart", "must be false for SPOT")
    affinity = vm.reservation_affinity
    if affinity.consume_reservation_type == "SPECIFIC_RESERVATION" and not affinity.values:
        raise _invalid("resource.reservationAffinity.values", "the reservation's name")
    keys = [item.key for item in vm.metadata.items]
    if len(set(keys)) != len(keys):
        raise _invalid("resource.metadata", f"duplicate keys in {keys}")


def _error(refusal: _Refusal) -> tuple[int, str]:
    """The error body of the Google APIs, which the client maps to an exception by status."""
    error = {
        "code": refusal.code,
        "message": refusal.message,
        "errors": [{"message": refusal.message, "domain": "global", "reason": refusal.reason}],
    }
    return refusal.code, json.dumps({"error": error})


def _handler(api: FakeComputeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client's session reuses connections

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, text = api.handle(self.command, self.path, body)
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # the names http.server calls
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def do_DELETE(self) -> None:
            self._serve()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the calls are in `api.calls`

    return Handler
