"""Several processes forming one JAX mesh (multi-controller JAX, DESIGN §9): the trainer's and the
inference worker's.

Every process runs the same program on its own devices; `jax.devices()` then lists the devices of
all of them, and a mesh built from it spans the processes. What changes for the code:

- `initialize(cfg)` must run before anything touches a device. It starts (process 0) or joins
  the coordination service at `cfg.coordinator`; on CPU the collectives between processes go
  through gloo over TCP.
- A host array becomes a global array with `put_global`: every process holds the same value and
  copies only the shards its own devices hold. A process that needs only its part of a large
  value (a tensor-parallel worker's weights) reads `local_box(shape, sharding)` of it and hands
  `put_global` a `HostBox`: the rest never reaches it. (`jax.device_put` does the same but first
  all-gathers the whole value to check it is equal everywhere, `multihost_utils.assert_equal`;
  the services' inputs are equal by construction: the same seed, the same broadcast call.)
- A global array comes back to the host with `to_host`: fully addressable or fully replicated
  arrays are read directly, sharded ones are all-gathered (`process_allgather`) so every process
  gets the whole value.
- Every process must run the same sequence of computations. A gRPC server runs only on process 0,
  so `Lockstep` hands each call it serves to the other processes (over the coordination
  service's key-value store) and every process runs it; a decision only process 0 can make (is
  the server draining, did the push to the paramserver work) is shared with `Lockstep.decide`.

The config (`DistributedConfig`: coordinator, process count and id, from a provider's RLX_*
variables or the servers' flags) is JAX-free and lives in `rlx_core.distributed`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import ipaddress
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Sharding

from rlx_core.distributed import AUTO, DistributedConfig
from rlx_core.errors import FailedPrecondition, Internal, RlxError, error_class_for

__all__ = [
    "HostBox",
    "Lockstep",
    "initialize",
    "lead_or_follow",
    "local_box",
    "on_every_process",
    "put_global",
    "to_host",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def _is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_STARTED: list[DistributedConfig] = []  # the config `initialize` started, once per process


def initialize(cfg: DistributedConfig) -> None:
    """Join the mesh's processes; a no-op without a coordinator (a single process), and for a
    second call with the same config. Call it before anything touches a JAX device.

    On CPU the collectives between processes use gloo over TCP. A loopback coordinator
    (127.0.0.1:PORT, tests) binds the coordination service to that address only; any other
    binds every interface on its port (JAX's default), as the other hosts must reach it.
    """
    if not cfg.multi_process:
        return
    if _STARTED:
        if _STARTED[0] != cfg:
            raise FailedPrecondition(
                f"jax.distributed is already initialized with {_STARTED[0]}, not {cfg}"
            )
        return
    platforms = str(getattr(jax.config, "jax_platforms", None) or "").split(",")
    collectives = getattr(jax.config, "jax_cpu_collectives_implementation", None)
    if (platforms == [""] or "cpu" in platforms) and collectives in (None, "none"):
        # CPU devices of different processes need a collectives backend (gloo is JAX's default
        # today; older versions had none); an explicit choice (mpi) is kept
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        if cfg.coordinator == AUTO:
            jax.distributed.initialize()
        else:
            host = cfg.coordinator.rpartition(":")[0]
            jax.distributed.initialize(
                coordinator_address=cfg.coordinator,
                num_processes=cfg.num_processes,
                process_id=cfg.process_id,
                coordinator_bind_address=cfg.coordinator if _is_loopback(host) else None,
            )
    except (RuntimeError, ValueError) as e:  # a JAX computation ran before; auto found nothing
        raise FailedPrecondition(
            f"jax.distributed.initialize({cfg.coordinator or 'auto'}, process {cfg.process_id} of "
            f"{cfg.num_processes}) failed: {e}; it must run before any JAX computation"
        ) from e
    _STARTED.append(cfg)
    log.info(
        "process %d of %d; %d local of %d devices",
        jax.process_index(),
        jax.process_count(),
        jax.local_device_count(),
        jax.device_count(),
    )


# --- arrays across processes --------------------------------------------------------------------
class HostBox:
    """The part of a host array one process holds: `data` is `value[start : start + data.shape]`
    of a value of `shape`. Transposing it (`.T`), taking an index along its first axis (`box[i]`)
    and casting it (`astype`) give the box of the transposed value, of `value[i]` and of the cast
    value; `put_global` places it, reading only the parts its process's devices hold, which must
    lie inside the box."""

    def __init__(self, data: np.ndarray, start: Sequence[int], shape: Sequence[int]) -> None:
        self.data = data
        self.start = tuple(int(a) for a in start)
        self.shape = tuple(int(d) for d in shape)
        if not (len(self.start) == len(self.shape) == data.ndim) or any(
            a < 0 or a + n > d for a, n, d in zip(self.start, data.shape, self.shape, strict=True)
        ):
            raise ValueError(
                f"a box of shape {list(data.shape)} at {list(self.start)} does not fit in "
                f"{list(self.shape)}"
            )

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def T(self) -> HostBox:  # noqa: N802 (numpy's name)
        return HostBox(self.data.T, self.start[::-1], self.shape[::-1])

    def __getitem__(self, i: int) -> HostBox:
        local = i - self.start[0]
        if not 0 <= local < self.data.shape[0]:
            raise IndexError(f"index {i} lies outside this box of {self.box_text()}")
        return HostBox(self.data[local], self.start[1:], self.shape[1:])

    def astype(self, dtype: Any, copy: bool = False) -> HostBox:
        return HostBox(self.data.astype(dtype, copy=copy), self.start, self.shape)

    def read(self, index: tuple[slice, ...] | None) -> np.ndarray:
        """`value[index]` (step-1 slices, as `jax.make_array_from_callback` asks; None: all of
        it), from the box."""
        index = index or tuple(slice(None) for _ in self.shape)
        local = []
        for s, a, n, d in zip(index, self.start, self.data.shape, self.shape, strict=True):
            lo, hi, step = s.indices(d)
            if step != 1 or lo < a or hi > a + n:
                raise ValueError(
                    f"part {[(x.start, x.stop) for x in index]} of a {list(self.shape)} value lies "
                    f"outside this process's box {self.box_text()}"
                )
            local.append(slice(lo - a, hi - a))
        return np.ascontiguousarray(self.data[tuple(local)])

    def box_text(self) -> str:
        return str([(a, a + n) for a, n in zip(self.start, self.data.shape, strict=True)])


def local_box(shape: Sequence[int], sharding: Sharding) -> tuple[list[int], list[int]]:
    """(start, stop) of the smallest box of a value of `shape` holding every part that this
    process's devices hold when it is laid out by `sharding`: the whole value when it is
    replicated, this process's shard when it is split."""
    shape = tuple(shape)
    start, stop = list(shape), [0] * len(shape)
    for index in sharding.addressable_devices_indices_map(shape).values():
        for axis, s in enumerate(index or (slice(None),) * len(shape)):
            lo, hi, _ = s.indices(shape[axis])
            start[axis], stop[axis] = min(start[axis], lo), max(stop[axis], hi)
    return start, stop


def put_global(tree: Any, shardings: Any) -> Any:
    """Host arrays (the same value on every process) as arrays laid out by `shardings` (one
    Sharding, or a matching pytree of them), each process filling only its own devices; an
    array already laid out so is kept as it is. A `HostBox` leaf is placed from its box alone."""

    def put(x: Any, sharding: Sharding) -> jax.Array:
        if isinstance(x, jax.Array) and x.sharding == sharding:
            return x
        if isinstance(x, HostBox):
            return jax.make_array_from_callback(x.shape, sharding, x.read)
        if sharding.is_fully_addressable:  # one process: what it always was
            return jax.device_put(x, sharding)
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    if isinstance(shardings, Sharding):
        return jax.tree.map(lambda x: put(x, shardings), tree)
    return jax.tree.map(put, tree, shardings)


def to_host(tree: Any) -> Any:
    """Every array of `tree` as a numpy array holding the whole value, on every process. Sharded
    arrays spanning processes are all-gathered, one at a time (each is briefly replicated on
    every device): every process must call this together."""

    def get(x: Any) -> np.ndarray:
        if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
            return np.asarray(x)
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(get, tree)


# --- the same calls on every process ------------------------------------------------------------
# A call and its arguments travel as JSON plus an .npz of the arrays (no pickle: whatever reaches
# the coordination service's port must not run code). Dataclasses are rebuilt by name from the
# types the Lockstep is given, tuples as tuples (a replayed call gets equal arguments).


def _encode(value: Any) -> bytes:
    arrays: list[np.ndarray] = []

    def enc(v: Any) -> Any:
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, np.ndarray):
            arrays.append(v)
            return {"__array__": len(arrays) - 1}
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            fields = {f.name: enc(getattr(v, f.name)) for f in dataclasses.fields(v)}
            return {"__dataclass__": type(v).__name__, "fields": fields}
        if isinstance(v, tuple):
            return {"__tuple__": [enc(x) for x in v]}
        if isinstance(v, list):
            return [enc(x) for x in v]
        if isinstance(v, dict):
            return {"__dict__": {str(k): enc(x) for k, x in v.items()}}
        raise TypeError(f"cannot send a {type(v).__name__} to the other processes")

    header = json.dumps(enc(value)).encode()
    buffer = io.BytesIO()
    np.savez(buffer, *arrays)
    return len(header).to_bytes(8, "little") + header + buffer.getvalue()


def _decode(data: bytes, types: Mapping[str, type]) -> Any:
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    with np.load(io.BytesIO(data[8 + size :]), allow_pickle=False) as npz:
        arrays = [npz[f"arr_{i}"] for i in range(len(npz.files))]

    def dec(v: Any) -> Any:
        if isinstance(v, list):
            return [dec(x) for x in v]
        if not isinstance(v, dict):
            return v
        if "__array__" in v:
            return arrays[v["__array__"]]
        if "__tuple__" in v:
            return tuple(dec(x) for x in v["__tuple__"])
        if "__dict__" in v:
            return {k: dec(x) for k, x in v["__dict__"].items()}
        cls = types[v["__dataclass__"]]
        return cls(**{k: dec(x) for k, x in v["fields"].items()})

    return dec(header)


def _error_bytes(error: BaseException | None) -> bytes:
    if error is None:
        return b"ok"
    if isinstance(error, RlxError):
        record = [error.grpc_code, type(error).__name__, str(error)]
    else:
        record = [Internal.grpc_code, "Internal", f"{type(error).__name__}: {error}"]
    return json.dumps(record).encode()


def _error_from(data: bytes) -> RlxError | None:
    if data == b"ok":
        return None
    code, name, message = json.loads(data)
    return error_class_for(code, name)(message)


class Lockstep:
    """Process 0 (the leader) runs the calls it serves and hands each to the other processes
    (followers), which run the same call in the same order: JAX programs spanning processes
    only work if every process enqueues the same ones.

    Calls travel through the key-value store of the coordination service `initialize` started
    (JAX has no public handle on it; `jax._src.distributed.global_state.client` is the one
    Orbax uses too). After each call every process waits at a barrier, then the leader deletes
    the call's keys. A follower that fails a call with an RlxError carries on (the leader fails
    it the same way: the code is deterministic); any other exception ends the follower.
    """

    def __init__(
        self,
        types: tuple[type, ...] = (),
        *,
        prefix: str = "rlx/lockstep",
        poll_s: float = 1.0,
        timeout_s: float = 3600.0,
    ) -> None:
        """`types`: the dataclasses calls may carry; `timeout_s`: how long a process waits for
        the others at a barrier or for a decision before giving up."""
        from jax._src.distributed import global_state

        if global_state.client is None:
            raise FailedPrecondition("Lockstep needs jax.distributed: call initialize first")
        self._client = global_state.client
        self._types = {t.__name__: t for t in types}
        self._prefix = prefix
        self._poll_ms = int(poll_s * 1000)
        self._timeout_ms = int(timeout_s * 1000)
        self.process = jax.process_index()
        self.count = jax.process_count()
        self.leader = self.process == 0
        self._order = threading.RLock()  # leader: one call at a time, in publication order
        self._seq = 0  # the current (or last) call
        self._step = 0  # decisions made within the current call
        self._inside = False  # leader: a call is running (its thread holds _order)

    def _key(self, *parts: object) -> str:
        return "/".join([self._prefix, *(str(p) for p in parts)])

    def _get(self, key: str, *, forever: bool = False) -> bytes:
        """The value of `key` once it is set; a follower waits `forever` for the next call."""
        waited = 0
        while True:
            try:
                return bytes(self._client.blocking_key_value_get_bytes(key, self._poll_ms))
            except jax.errors.JaxRuntimeError as e:
                if "DEADLINE_EXCEEDED" not in str(e):
                    raise
            waited += self._poll_ms
            if not forever and waited >= self._timeout_ms:
                raise Internal(f"process {self.process}: no value for {key} after {waited} ms")

    def _finish(self, seq: int) -> None:
        self._client.wait_at_barrier(self._key("done", seq), self._timeout_ms)
        if self.leader:
            self._client.key_value_delete(self._key(seq))

    def call(self, name: str, kwargs: dict[str, Any], run: Callable[[], T]) -> T:
        """Leader: publish call `name(**kwargs)`, `run()` it here, wait for the followers."""
        if not self.leader:  # a follower replaying the call
            return run()
        with self._order:  # re-entrant: a call within a call (same thread) is part of it
            if self._inside:
                return run()
            self._seq += 1
            self._step = 0
            seq = self._seq
            self._client.key_value_set_bytes(self._key(seq, "call"), _encode([name, kwargs]))
            self._inside = True
            try:
                return run()
            finally:
                self._inside = False
                self._finish(seq)

    def stop(self) -> None:
        """Leader: tell the followers to return from `follow`."""
        if self.leader:
            with self._order:
                self._seq += 1
                self._client.key_value_set_bytes(self._key(self._seq, "call"), _encode(None))

    def follow(self, target: object) -> None:
        """Follower: run each call the leader publishes on `target` until the leader stops."""
        assert not self.leader
        while True:
            self._seq += 1
            self._step = 0
            message = _decode(self._get(self._key(self._seq, "call"), forever=True), self._types)
            if message is None:
                log.info("process 0 stopped the lockstep after call %d", self._seq - 1)
                return
            name, kwargs = message
            try:
                getattr(target, name)(**kwargs)
            except RlxError as e:
                log.info("call %d (%s) failed here as on process 0: %s", self._seq, name, e)
            self._finish(self._seq)

    def decide(self, run: Callable[[], T]) -> T | None:
        """Within a call: the leader runs `run()` and every process learns whether it raised.
        The leader gets its value, followers None; an error is raised on every process (the
        same RlxError class and message)."""
        self._step += 1
        key = self._key(self._seq, "decide", self._step)
        if not self.leader:
            error = _error_from(self._get(key))
            if error is not None:
                raise error
            return None
        try:
            value = run()
        except BaseException as e:
            self._client.key_value_set_bytes(key, _error_bytes(e))
            raise
        self._client.key_value_set_bytes(key, _error_bytes(None))
        return value

    def agree(self, run: Callable[[], T]) -> T:
        """Within a call: every process runs `run()`; if it raised anywhere, the first failing
        process's error is raised on every process."""
        self._step += 1
        error: BaseException | None = None
        value: Any = None
        try:
            value = run()
        except Exception as e:
            error = e
        key = self._key(self._seq, "agree", self._step)
        self._client.key_value_set_bytes(f"{key}/{self.process}", _error_bytes(error))
        for process in range(self.count):
            theirs = _error_from(self._get(f"{key}/{process}"))
            if theirs is not None:
                if process == self.process and error is not None:
                    raise error
                raise theirs
        return value


def on_every_process(method: F) -> F:
    """A service method that, with several processes, process 0 hands to the others, which run it
    too (`Lockstep.call`); the instance's `lockstep` attribute is its Lockstep, None for one
    process. The arguments travel by name (see the wire format above)."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        lockstep: Lockstep | None = self.lockstep
        if lockstep is None:
            return method(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs).arguments
        named = {k: v for k, v in bound.items() if k != "self"}
        return lockstep.call(method.__name__, named, lambda: method(self, **named))

    return cast(F, wrapper)


class _Service(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=_Service)


def lead_or_follow(
    distributed: DistributedConfig | None,
    make: Callable[[Lockstep | None], S],
    lead: Callable[[S], int],
    *,
    name: str,
    types: tuple[type, ...] = (),
) -> int:
    """A service process's life, alone or among several forming one mesh: join the others
    (`initialize`), build the service with `make(lockstep)` (None alone; `types`: the dataclasses
    its calls carry), then process 0 (or the only process) runs `lead(service)`, the gRPC server,
    and when it returns tells the others to stop; any other process runs the calls process 0
    hands it until then, and returns 0. The service is closed in the end."""
    dist = distributed or DistributedConfig()
    initialize(dist)  # before anything touches a device
    lockstep = Lockstep(types, prefix=f"rlx/{name}") if dist.multi_process else None
    service = make(lockstep)
    try:
        if lockstep is not None and not lockstep.leader:
            log.info(
                "process %d of %d: running the calls process 0 serves",
                lockstep.process,
                lockstep.count,
            )
            lockstep.follow(service)
            return 0
        try:
            return lead(service)
        finally:
            if lockstep is not None:
                lockstep.stop()
    finally:
        service.close()
