"""The rollout log: every scored work unit, in the run directory, before it counts.

One record per work unit, at `<prefix>/<unit_id>.rec`, written with one atomic put (local:
temporary name then rename; S3/GCS: a single object upload), so the log works the same on every
backend and needs no append operation. Each record checks itself:

    RLXROLL1 <sha256 of payload> <payload length>\\n<payload: canonical JSON>

A record that fails that check (torn by a crash on a filesystem without atomic rename, truncated
or edited by hand) reads as missing: it is reported in `torn`, and the unit is regenerated and
written again. Appending a unit that is already logged with a valid record is a no-op that
returns the logged payload (idempotent by unit id), so a resumed run reuses what was logged and
regenerates only what was lost.

    log = RolloutLog(open_storage(run_dir))
    stored = log.append("b00000012.r0.u0000", {"unit": ..., "samples": [...]})
    log.get("b00000012.r0.u0000")      # the payload, or None when missing or torn
    log.scan()                         # LogScan(valid=[...], torn=[...])
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlx_core.errors import AlreadyExists, InvalidArgument, NotFound
from rlx_core.storage import Storage

__all__ = ["LogScan", "RolloutLog", "decode_record", "encode_record"]

log = logging.getLogger(__name__)

_MAGIC = b"RLXROLL1"
_SUFFIX = ".rec"
_UNIT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _canonical(payload: Mapping[str, Any]) -> bytes:
    try:
        return json.dumps(
            payload, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False
        ).encode()
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"rollout payload is not JSON-serialisable: {e}") from None


def _frame(body: bytes) -> bytes:
    return _MAGIC + f" {hashlib.sha256(body).hexdigest()} {len(body)}\n".encode() + body


def encode_record(payload: Mapping[str, Any]) -> bytes:
    """The bytes of one self-checking record."""
    return _frame(_canonical(payload))


def decode_record(data: bytes) -> dict[str, Any] | None:
    """The payload of a record, or None when the record is torn, truncated or altered."""
    head, sep, body = data.partition(b"\n")
    if not sep:
        return None
    parts = head.split(b" ")
    if len(parts) != 3 or parts[0] != _MAGIC:
        return None
    try:
        length = int(parts[2])
    except ValueError:
        return None
    if len(body) != length or hashlib.sha256(body).hexdigest().encode() != parts[1]:
        return None
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


@dataclass(frozen=True)
class LogScan:
    """What the log holds: unit ids of valid records, and of records that failed their check."""

    valid: tuple[str, ...]
    torn: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.valid)

    @property
    def last(self) -> str:
        """The greatest valid unit id ("" if none): unit ids sort by batch, round, index."""
        return self.valid[-1] if self.valid else ""


class RolloutLog:
    """Scored work units under `<prefix>/` of a run directory's storage."""

    def __init__(self, storage: Storage, prefix: str = "rollouts") -> None:
        self.storage = storage
        self.prefix = prefix.strip("/")
        self.torn: set[str] = set()  # unit ids found torn since this object was made
        # unit ids with a record: one listing, then kept up to date by append (the controller
        # is the log's only writer), so a snapshot's position costs no listing of a long log
        self._ids: set[str] | None = None
        self._last = ""

    def _key(self, unit_id: str) -> str:
        if not _UNIT_ID.match(unit_id):
            raise InvalidArgument(f"bad work-unit id {unit_id!r}")
        return f"{self.prefix}/{unit_id}{_SUFFIX}"

    def _read(self, unit_id: str) -> tuple[bool, dict[str, Any] | None]:
        """(present, payload): present but payload None means torn."""
        try:
            data = self.storage.get(self._key(unit_id))
        except NotFound:
            return False, None
        payload = decode_record(data)
        if payload is None:
            if unit_id not in self.torn:
                log.warning(
                    "rollout log: %s is torn or corrupt (%d bytes); the unit will be regenerated",
                    self.storage.key_uri(self._key(unit_id)),
                    len(data),
                )
            self.torn.add(unit_id)
        return True, payload

    def get(self, unit_id: str) -> dict[str, Any] | None:
        """The logged payload of `unit_id`, or None if it is not logged or its record is torn."""
        return self._read(unit_id)[1]

    def contains(self, unit_id: str) -> bool:
        """Whether `unit_id` has a valid record."""
        return self.get(unit_id) is not None

    def append(
        self, unit_id: str, payload: Mapping[str, Any], *, known_absent: bool = False
    ) -> dict[str, Any]:
        """Log `payload` for `unit_id` and return what the log holds for it.

        Idempotent: if a valid record exists, nothing is written and the logged payload is
        returned (a resumed run trains on what it logged before). A torn record is replaced.
        `append_strict` also checks that an existing record equals `payload`.

        `known_absent=True` (the only writer has just looked the unit up and found no valid
        record) skips the second read and returns `payload` itself, which must then be
        JSON-native (dicts with str keys, lists, str, int, float, bool, None: what reading the
        record back gives, value for value); otherwise a freshly written payload is returned
        decoded from the record's own body, without re-reading storage.
        """
        present = False
        if not known_absent:
            present, existing = self._read(unit_id)
            if existing is not None:
                return existing
        elif unit_id in self.torn:
            present = True
        body = _canonical(payload)
        self.storage.put(self._key(unit_id), _frame(body))
        if self._ids is not None:
            self._ids.add(unit_id)
            self._last = max(self._last, unit_id)
        if present:
            log.warning("rollout log: rewrote torn record %s", unit_id)
            self.torn.discard(unit_id)
        if known_absent:  # the writer's own fresh payload, JSON-native: what a read would give
            return dict(payload)
        result: dict[str, Any] = json.loads(body)
        return result

    def append_strict(self, unit_id: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """`append`, but AlreadyExists when a valid record differs from `payload` (for checking
        that regenerated work is bit-identical to what was logged)."""
        stored = self.append(unit_id, payload)
        if _canonical(stored) != _canonical(payload):
            raise AlreadyExists(
                f"rollout log: {self.storage.key_uri(self._key(unit_id))} holds a different "
                "payload for this work unit"
            )
        return stored

    def unit_ids(self) -> list[str]:
        """Unit ids that have a record (valid or not), sorted (one listing of the storage)."""
        out = []
        for key in self.storage.list(self.prefix + "/"):
            name = key[len(self.prefix) + 1 :]
            if "/" not in name and name.endswith(_SUFFIX):
                out.append(name[: -len(_SUFFIX)])
        out.sort()
        self._ids, self._last = set(out), out[-1] if out else ""
        return out

    def scan(self) -> LogScan:
        """Read every record and sort them into valid and torn (reads the whole log)."""
        valid: list[str] = []
        torn: list[str] = []
        for unit_id in self.unit_ids():
            (valid if self.get(unit_id) is not None else torn).append(unit_id)
        return LogScan(tuple(valid), tuple(torn))

    def position(self) -> dict[str, Any]:
        """The log's position for a snapshot: record count and the greatest unit id (no reads;
        one listing the first time, then what this object appended since)."""
        if self._ids is None:
            self.unit_ids()
        assert self._ids is not None
        return {"records": len(self._ids), "last_unit": self._last}
