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
written again. So does one whose checksum holds but whose content is not what rlx writes (a
work unit that is not one, a non-integer or negative batch, version, count or token id, groups
or samples that do not match the unit's prompts and seeds, nesting where a value belongs): the
reader checks every field after the checksum, logs one line naming the file and the field, and
`read` (what `rlx rollouts show` uses) raises Corrupt with that line instead. Regenerating loses
nothing and keeps resume exact: a unit's rollouts are a pure function of the schedule and the
weights, so the unit is generated again exactly as its genuine record held it. Appending a unit
that is already logged with a valid record is a no-op that returns the logged record
(idempotent by unit id), so a resumed run reuses what was logged and regenerates only what was
lost.

Temporaries of interrupted writes (`.rlx-tmp-*`) are never read: the storage's listing skips
them, and a starting controller deletes them (rlx_controller.rundir.sweep_temporaries).

    log = RolloutLog(open_storage(run_dir))
    stored = log.append(record)         # a RolloutUnit; its unit_id names the record
    log.get("b00000012.r0.u0000")      # the RolloutUnit, or None when missing or torn
    log.read("b00000012.r0.u0000")     # the same, but Corrupt naming a record rlx did not write
    log.scan()                         # LogScan(valid=[...], torn=[...])
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlx_controller.schedule import WorkUnit
from rlx_core.errors import AlreadyExists, Corrupt, InvalidArgument, NotFound, RlxError
from rlx_core.rollout import RolloutGroup, RolloutSample, RolloutUnit
from rlx_core.storage import Storage

__all__ = ["BadRecord", "LogScan", "RolloutLog", "check_record", "decode_record", "encode_record"]

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


class BadRecord(Exception):
    """A record whose checksum holds but whose content is not what rlx writes."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


def decode_record(data: bytes) -> RolloutUnit | None:
    """The record in `data` (either format), or None when it is torn, truncated or altered
    (its checksum fails, or its content is not a record rlx writes)."""
    try:
        return _decode(data)
    except BadRecord:
        return None


def _decode(data: bytes) -> RolloutUnit | None:
    """The record in `data`; None when its frame fails its check (torn), BadRecord naming the
    field when the frame checks but the content is not a record rlx writes."""
    checked = _checked(data)
    if checked is None:
        return None
    magic, body = checked
    try:
        record = RolloutUnit.from_bytes(body) if magic == _MAGIC else _from_json(json.loads(body))
    except RecursionError:
        raise BadRecord("unit", "nested deeper than a work unit is") from None
    except (Corrupt, ValueError) as e:
        raise BadRecord("payload", _short(str(e), 200)) from None
    check_record(record, ints=magic == _MAGIC)
    return record


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
    except (KeyError, TypeError, IndexError, OverflowError, RlxError) as e:  # a huge reward
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


# --- what a record may hold ----------------------------------------------------------------------

_INT64 = 2**63  # versions, counts and seeds are int64 fields (seeds are 63-bit, never negative)
_UNIT_KEYS = ("unit_id", "batch", "round", "index", "version", "prompts", "seeds", "first_slot")
_PROMPT_KEYS = ("dataset", "row", "epoch")


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shown(value: Any) -> str:
    """A value for an error line: scalars quoted (cut short), containers by kind only (a hostile
    one may be nested too deeply to print)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return _short(repr(value))


def _count(field: str, value: Any, top: int = _INT64) -> int:
    """`value` when it is an integer in [0, top), else BadRecord naming `field`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRecord(field, f"expected an integer >= 0, got {_shown(value)}")
    if value >= top:
        raise BadRecord(field, f"expected an integer below {top}, got {_shown(value)}")
    return value


def _seconds(field: str, value: Any) -> None:
    if not isinstance(value, float | int) or not math.isfinite(value) or value < 0:
        raise BadRecord(field, f"expected a finite number of seconds >= 0, got {_shown(value)}")


def _list(field: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise BadRecord(field, f"expected a list, got {_shown(value)}")
    return value


def _object(field: str, value: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """`value` when it is an object with exactly `keys`, else BadRecord naming `field` or the
    first missing or unknown key."""
    if not isinstance(value, dict):
        raise BadRecord(field, f"expected an object, got {_shown(value)}")
    for key in keys:
        if key not in value:
            raise BadRecord(f"{field}.{key}", "missing")
    for key in value:
        if key not in keys:
            raise BadRecord(f"{field}.{_short(str(key))}", "not a field of it")
    return value


def _check_unit(unit: Any) -> tuple[list[str], list[int]]:
    """The prompt ids ("<dataset>/<row>") and group sizes of a work unit as
    rlx_controller.schedule.WorkUnit.to_dict() writes it; BadRecord naming the first field that
    is not."""
    _object("unit", unit, _UNIT_KEYS)
    if not isinstance(unit["unit_id"], str) or not _UNIT_ID.match(unit["unit_id"]):
        raise BadRecord("unit.unit_id", f"not a work-unit id: {_shown(unit['unit_id'])}")
    for key in ("batch", "round", "index", "version", "first_slot"):
        _count(f"unit.{key}", unit[key])
    prompts = _list("unit.prompts", unit["prompts"])
    seeds = _list("unit.seeds", unit["seeds"])
    if not prompts or len(seeds) != len(prompts):
        raise BadRecord(
            "unit.seeds", f"{len(seeds)} seed lists for {len(prompts)} prompts (one each, >= 1)"
        )
    ids = []
    for p, ref in enumerate(prompts):
        where = f"unit.prompts[{p}]"
        _object(where, ref, _PROMPT_KEYS)
        if not isinstance(ref["dataset"], str) or not ref["dataset"]:
            raise BadRecord(f"{where}.dataset", f"expected a dataset name, got {_shown(ref)}")
        _count(f"{where}.row", ref["row"])
        _count(f"{where}.epoch", ref["epoch"])
        ids.append(f"{ref['dataset']}/{ref['row']}")
    sizes = []
    for p, group in enumerate(seeds):
        if not _list(f"unit.seeds[{p}]", group):
            raise BadRecord(f"unit.seeds[{p}]", "no seeds (a group has >= 1 sample)")
        for g, seed in enumerate(group):
            _count(f"unit.seeds[{p}][{g}]", seed)
        sizes.append(len(group))
    return ids, sizes


def _ids(field: str, ids: tuple[Any, ...], ints: bool) -> None:
    """Token ids: integers >= 0 (protobuf's int32 admits negative ones, RLXROLL1's JSON any
    value). `ints`: they are known to be ints (protobuf), so their minimum tells."""
    if not ids or (ints and min(ids) >= 0):
        return
    for i, x in enumerate(ids):
        if not isinstance(x, int) or isinstance(x, bool) or x < 0:
            raise BadRecord(f"{field}[{i}]", f"expected a token id >= 0, got {_shown(x)}")


def check_record(record: RolloutUnit, *, ints: bool = False) -> None:
    """BadRecord naming the first field of `record` that is not what rlx writes: its work unit
    (`_check_unit`), its version and counts (integers >= 0), one group per prompt of the unit
    (that prompt's id, non-negative token ids) holding one sample per seed, each with
    non-negative token ids, a finite reward or none, and judgement counts and times >= 0.
    `ints`: its token ids are known to be ints (decoded from protobuf)."""
    prompts, sizes = _check_unit(record.unit)
    _count("version", record.version)
    _count("generated_tokens", record.generated_tokens)
    _seconds("verify_s", record.verify_s)
    if len(record.groups) != len(prompts):
        raise BadRecord("groups", f"{len(record.groups)} groups for {len(prompts)} prompts")
    for p, group in enumerate(record.groups):
        where = f"groups[{p}]"
        if group.prompt != prompts[p]:
            raise BadRecord(
                f"{where}.prompt", f"{_shown(group.prompt)} for the unit's prompt {prompts[p]!r}"
            )
        _ids(f"{where}.prompt_ids", group.prompt_ids, ints)
        if len(group.samples) != sizes[p]:
            raise BadRecord(
                f"{where}.samples", f"{len(group.samples)} samples for {sizes[p]} seeds"
            )
        for g, sample in enumerate(group.samples):
            at = f"{where}.samples[{g}]"
            _ids(f"{at}.token_ids", sample.tokens, ints)
            if sample.reward is not None and not math.isfinite(sample.reward):
                raise BadRecord(f"{at}.reward", f"not a finite number: {sample.reward}")
            j = sample.judgement
            _count(f"{at}.judgement.tests_total", j.tests_total)
            _count(f"{at}.judgement.tests_passed", j.tests_passed, j.tests_total + 1)
            if j.first_failed is not None:
                _count(f"{at}.judgement.first_failed", j.first_failed, max(j.tests_total, 1))
            for key in ("compile_s", "run_s", "check_s"):
                _seconds(f"{at}.judgement.{key}", getattr(j, key))


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
        # of those, the ones whose checksum held around content rlx does not write: why
        self.bad: dict[str, str] = {}
        # unit ids with a record: one listing, then kept up to date by append (the controller
        # is the log's only writer), so a snapshot's position costs no listing of a long log
        self._ids: set[str] | None = None
        self._last = ""

    def _key(self, unit_id: str) -> str:
        if not _UNIT_ID.match(unit_id):
            raise InvalidArgument(f"bad work-unit id {unit_id!r}")
        return f"{self.prefix}/{unit_id}{_SUFFIX}"

    def _read(self, unit_id: str, *, warn: bool = True) -> tuple[bool, RolloutUnit | None]:
        """(present, record): present but record None means torn (or not rlx's: `bad`);
        `warn`: log a record found torn or bad (once per unit)."""
        key = self._key(unit_id)
        try:
            data = self.storage.get(key)
        except NotFound:
            return False, None
        try:
            record = _decode(data)
            if record is not None and record.unit_id != unit_id:
                raise BadRecord("unit.unit_id", f"{record.unit_id!r}, filed as {unit_id!r}")
        except BadRecord as e:
            record = None
            if unit_id not in self.bad:
                self.bad[unit_id] = f"{self.storage.key_uri(key)}: {e}"
                if warn:
                    log.warning(
                        "rollout log: %s (its checksum holds, its content is not a record rlx "
                        "writes); the unit will be regenerated",
                        self.bad[unit_id],
                    )
        else:
            if record is None and unit_id not in self.torn and warn:
                log.warning(
                    "rollout log: %s is torn or corrupt (%d bytes); the unit will be regenerated",
                    self.storage.key_uri(key),
                    len(data),
                )
        if record is None:
            self.torn.add(unit_id)
        return True, record

    def get(self, unit_id: str) -> RolloutUnit | None:
        """The logged record of `unit_id`, or None if it is not logged or its record is torn."""
        return self._read(unit_id)[1]

    def read(self, unit_id: str) -> RolloutUnit | None:
        """`get` for readers that show the log: None when missing or torn, Corrupt naming the
        file and the field when the record's checksum holds but its content is not what rlx
        writes (`rlx rollouts show` says so instead of showing it)."""
        record = self._read(unit_id, warn=False)[1]
        if record is None and unit_id in self.bad:
            raise Corrupt(
                f"{self.bad[unit_id]} (its checksum holds: not a record rlx writes; delete it "
                "and `rlx resume` regenerates the unit)"
            )
        return record

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
            self.bad.pop(unit_id, None)
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
