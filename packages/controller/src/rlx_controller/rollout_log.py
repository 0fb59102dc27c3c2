"""The rollout log: every scored work unit, in the run directory, before it counts.

One record per work unit, at `<prefix>/<unit_id>.rec`, written with one atomic put (local:
temporary name then rename; S3/GCS: a single object upload), so the log works the same on every
backend and needs no append operation. Each record checks itself:

    RLXROLL2 <sha256 of payload> <payload length>\\n<payload: RolloutUnit.to_bytes(), protobuf>

Records of the first format, `RLXROLL1` with a canonical-JSON payload (log-probs as base64 of
float32, or a JSON list before that), are still read, into the same `RolloutUnit`, so a run
logged before the change resumes; only RLXROLL2 is written.

A record that fails its check (torn by a crash on a filesystem without atomic rename, truncated
or edited by hand) reads as missing: it is reported in `torn`, and the unit is regenerated and
written again. Appending a unit that is already logged with a valid record is a no-op that
returns the logged record (idempotent by unit id), so a resumed run reuses what was logged and
regenerates only what was lost.

    log = RolloutLog(open_storage(run_dir))
    stored = log.append(record)         # a RolloutUnit; its unit_id names the record
    log.get("b00000012.r0.u0000")      # the RolloutUnit, or None when missing or torn
    log.scan()                         # LogScan(valid=[...], torn=[...])
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlx_controller.schedule import WorkUnit
from rlx_core.errors import AlreadyExists, Corrupt, InvalidArgument, NotFound, RlxError
from rlx_core.rollout import RolloutGroup, RolloutSample, RolloutUnit
from rlx_core.storage import Storage

__all__ = ["LogScan", "RolloutLog", "decode_record", "encode_record"]

log = logging.getLogger(__name__)

_MAGIC = b"RLXROLL2"
_MAGIC_JSON = b"RLXROLL1"  # read only: the first format, canonical JSON
_SUFFIX = ".rec"
_UNIT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _frame(magic: bytes, body: bytes) -> bytes:
    return magic + f" {hashlib.sha256(body).hexdigest()} {len(body)}\n".encode() + body


def encode_record(record: RolloutUnit) -> bytes:
    """The bytes of one self-checking record."""
    return _frame(_MAGIC, record.to_bytes())


def _checked(data: bytes) -> tuple[bytes, bytes] | None:
    """(magic, body) of a record whose frame checks, else None."""
    head, sep, body = data.partition(b"\n")
    parts = head.split(b" ")
    if not sep or len(parts) != 3 or parts[0] not in (_MAGIC, _MAGIC_JSON):
        return None
    try:
        length = int(parts[2])
    except ValueError:
        return None
    if len(body) != length or hashlib.sha256(body).hexdigest().encode() != parts[1]:
        return None
    return parts[0], body


def decode_record(data: bytes) -> RolloutUnit | None:
    """The record in `data` (either format), or None when it is torn, truncated or altered."""
    checked = _checked(data)
    if checked is None:
        return None
    magic, body = checked
    try:
        if magic == _MAGIC:
            return RolloutUnit.from_bytes(body)
        return _from_json(json.loads(body))
    except (Corrupt, ValueError):
        return None


def _from_json(payload: Any) -> RolloutUnit:
    """The record of an RLXROLL1 payload: {"unit", "version", "generated_tokens", "samples":
    [{"tokens", "logp_f32" (base64 of float32) or "logp" (list), "finish", "status", "reward",
    "text"?}], "prompt_ids"?}, samples prompt-major. ValueError when it is not one."""
    try:
        unit = WorkUnit.from_dict(payload["unit"])
        samples = payload["samples"]
        P = len(unit.prompts)
        if not P or len(samples) % P:
            raise ValueError(f"{len(samples)} samples for {P} prompts")
        G = len(samples) // P
        prompt_ids = payload.get("prompt_ids") or [()] * P
        version = int(payload["version"])
        groups = tuple(
            RolloutGroup(
                prompt=ref.id,
                prompt_ids=tuple(prompt_ids[p]),
                version=version,
                samples=tuple(_sample_from_json(s) for s in samples[p * G : (p + 1) * G]),
            )
            for p, ref in enumerate(unit.prompts)
        )
        return RolloutUnit(
            unit=payload["unit"],
            version=version,
            generated_tokens=int(payload["generated_tokens"]),
            groups=groups,
        )
    except (KeyError, TypeError, IndexError, RlxError) as e:
        raise ValueError(f"not an RLXROLL1 payload: {e!r}") from None


def _sample_from_json(s: dict[str, Any]) -> RolloutSample:
    packed = s.get("logp_f32")
    if packed is not None:
        logp = base64.b64decode(packed, validate=True)
    else:
        logp = np.asarray(s["logp"], "<f4").tobytes()
    reward = s["reward"]
    return RolloutSample(
        tokens=tuple(s["tokens"]),
        logp_f32=logp,
        finish=str(s["finish"]),
        text=str(s.get("text", "")),
        status=str(s["status"]),
        reward=None if reward is None else float(reward),
    )


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

    def _read(self, unit_id: str) -> tuple[bool, RolloutUnit | None]:
        """(present, record): present but record None means torn."""
        try:
            data = self.storage.get(self._key(unit_id))
        except NotFound:
            return False, None
        record = decode_record(data)
        if record is not None and record.unit_id != unit_id:
            record = None  # a record copied under another unit's name
        if record is None:
            if unit_id not in self.torn:
                log.warning(
                    "rollout log: %s is torn or corrupt (%d bytes); the unit will be regenerated",
                    self.storage.key_uri(self._key(unit_id)),
                    len(data),
                )
            self.torn.add(unit_id)
        return True, record

    def get(self, unit_id: str) -> RolloutUnit | None:
        """The logged record of `unit_id`, or None if it is not logged or its record is torn."""
        return self._read(unit_id)[1]

    def contains(self, unit_id: str) -> bool:
        """Whether `unit_id` has a valid record."""
        return self.get(unit_id) is not None

    def append(self, record: RolloutUnit, *, known_absent: bool = False) -> RolloutUnit:
        """Log `record` under its unit id and return what the log holds for that unit.

        Idempotent: if a valid record exists, nothing is written and the logged record is
        returned (a resumed run trains on what it logged before). A torn record is replaced.
        `append_strict` also checks that an existing record equals `record`.

        `known_absent=True` (the only writer has just looked the unit up and found no valid
        record) skips the read before the write. A freshly written record is returned as given:
        records are immutable and decode to what was encoded, value for value.
        """
        unit_id = record.unit_id
        key = self._key(unit_id)
        present = False
        if not known_absent:
            present, existing = self._read(unit_id)
            if existing is not None:
                return existing
        elif unit_id in self.torn:
            present = True
        self.storage.put(key, encode_record(record))
        if self._ids is not None:
            self._ids.add(unit_id)
            self._last = max(self._last, unit_id)
        if present:
            log.warning("rollout log: rewrote torn record %s", unit_id)
            self.torn.discard(unit_id)
        return record

    def append_strict(self, record: RolloutUnit) -> RolloutUnit:
        """`append`, but AlreadyExists when a valid record differs from `record` (for checking
        that regenerated work is bit-identical to what was logged)."""
        stored = self.append(record)
        if stored != record:
            raise AlreadyExists(
                f"rollout log: {self.storage.key_uri(self._key(record.unit_id))} holds a "
                "different record for this work unit"
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
