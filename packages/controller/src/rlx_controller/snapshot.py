"""Controller snapshots (DESIGN §4): everything needed to continue a run exactly, checksummed,
written atomically, the last K kept; loading takes the newest one that verifies.

A snapshot lives at `snapshots/s<step, 10 digits>[-n]/snapshot.json` under the run directory,
written through `Storage.atomic_commit` (it counts only once the commit marker, holding the size
and sha256 of the file, exists). The file is

    {"rlx_snapshot": 1, "checksum": "<sha256 of the canonical JSON of snapshot>", "snapshot": {...}}

so a snapshot verifies when it is committed, its file has the size and hash its marker records,
it parses, and its own checksum matches. Anything else (a truncated or altered file, a missing
marker, a foreign format) is reported by name and skipped.

    store = SnapshotStore(open_storage(run_dir), keep=5)
    store.write(snapshot)                       # -> "snapshots/s0000000012"
    found = store.latest(on_skip=print)         # Snapshot | None, newest that verifies
    store.entries()                             # every snapshot dir, with its status
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlx_controller.mixture import MixtureState
from rlx_controller.schedule import GroupRef, WorkUnit
from rlx_core.errors import AlreadyExists, Corrupt, NotFound
from rlx_core.storage import COMMIT_MARKER, Storage

__all__ = ["FORMAT", "Snapshot", "SnapshotEntry", "SnapshotStore", "decode_snapshot"]

log = logging.getLogger(__name__)

FORMAT = 1
_FILE = "snapshot.json"
_DIR = re.compile(r"^s(\d{10})(?:-(\d+))?$")
REASONS = ("reload", "sigterm", "final", "manual")


def _canonical(data: Any) -> bytes:
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False
    ).encode()


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """The controller's state after `step` training steps (DESIGN §4, issue 8 item 6)."""

    run_id: str  # the run's identity (fixed at `rlx up`)
    config_hash: str  # sha256 of the run config (run_config.config_hash): resume refuses others
    step: int  # training steps completed = the trainer's version
    version: int  # the newest weight version pushed to the paramserver
    checkpoint_step: int | None  # the trainer checkpoint it refers to (<= step); None = initial
    checkpoint_uri: str  # where that checkpoint is ("" with checkpoint_step None)
    params_hash: str  # hash of the params at `step` (driver.params_hash over its manifest)
    next_batch: int  # the first batch not yet trained on
    mixture: MixtureState  # prompt-mixture draws and per-dataset cursors before next_batch
    epochs: dict[str, int]  # per dataset, completed passes (derived from the cursors; for people)
    rng: dict[str, int]  # RNG counters: every draw is addressed by (seed, stream, counter)
    rollout_log: dict[str, Any]  # the log's position: {"records": n, "last_unit": unit id}
    outstanding: tuple[WorkUnit, ...]  # dispatched, not yet trained on
    pool: tuple[GroupRef, ...] = ()  # scored groups carried to later batches (prefer-newest)
    metrics: dict[str, float] = field(default_factory=dict)  # running totals
    reason: str = "reload"  # why it was taken: reload, sigterm, final, manual
    created_unix: float = 0.0  # wall-clock time it was written
    extra: dict[str, Any] = field(default_factory=dict)  # anything else the controller keeps

    def __post_init__(self) -> None:
        if self.step < 0 or self.version < 0 or self.next_batch < 0:
            raise Corrupt(f"snapshot has negative counters: step {self.step}")
        if self.checkpoint_step is not None and self.checkpoint_step > self.step:
            raise Corrupt(
                f"snapshot at step {self.step} refers to a later checkpoint {self.checkpoint_step}"
            )
        if self.reason not in REASONS:
            raise Corrupt(f"snapshot reason {self.reason!r} is not one of {REASONS}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "config_hash": self.config_hash,
            "step": self.step,
            "version": self.version,
            "checkpoint_step": self.checkpoint_step,
            "checkpoint_uri": self.checkpoint_uri,
            "params_hash": self.params_hash,
            "next_batch": self.next_batch,
            "mixture": self.mixture.to_dict(),
            "epochs": dict(self.epochs),
            "rng": dict(self.rng),
            "rollout_log": dict(self.rollout_log),
            "outstanding": [u.to_dict() for u in self.outstanding],
            "pool": [
                {
                    "version": g.version,
                    "batch": g.batch,
                    "round": g.round,
                    "slot": g.slot,
                    "unit_id": g.unit_id,
                }
                for g in self.pool
            ],
            "metrics": dict(self.metrics),
            "reason": self.reason,
            "created_unix": self.created_unix,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Snapshot:
        try:
            ckpt = data["checkpoint_step"]
            return cls(
                run_id=str(data["run_id"]),
                config_hash=str(data["config_hash"]),
                step=int(data["step"]),
                version=int(data["version"]),
                checkpoint_step=None if ckpt is None else int(ckpt),
                checkpoint_uri=str(data["checkpoint_uri"]),
                params_hash=str(data["params_hash"]),
                next_batch=int(data["next_batch"]),
                mixture=MixtureState.from_dict(data["mixture"]),
                epochs={str(k): int(v) for k, v in data["epochs"].items()},
                rng={str(k): int(v) for k, v in data["rng"].items()},
                rollout_log=dict(data["rollout_log"]),
                outstanding=tuple(WorkUnit.from_dict(u) for u in data["outstanding"]),
                pool=tuple(
                    GroupRef(
                        int(g["version"]),
                        int(g["batch"]),
                        int(g["round"]),
                        int(g["slot"]),
                        str(g["unit_id"]),
                    )
                    for g in data["pool"]
                ),
                metrics={str(k): float(v) for k, v in data["metrics"].items()},
                reason=str(data["reason"]),
                created_unix=float(data["created_unix"]),
                extra=dict(data["extra"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise Corrupt(f"snapshot is missing or mistypes a field: {e!r}") from None

    def encode(self) -> bytes:
        """The file's bytes: the snapshot with its own checksum."""
        body = self.to_dict()
        digest = hashlib.sha256(_canonical(body)).hexdigest()
        doc = {"rlx_snapshot": FORMAT, "checksum": digest, "snapshot": body}
        return json.dumps(doc, sort_keys=True, indent=1, allow_nan=False).encode() + b"\n"


def decode_snapshot(data: bytes, where: str = "snapshot") -> Snapshot:
    """Parse and verify a snapshot file; Corrupt naming `where` and the problem otherwise."""
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise Corrupt(f"{where}: not valid JSON ({len(data)} bytes; truncated?): {e}") from None
    if not isinstance(doc, dict) or doc.get("rlx_snapshot") != FORMAT:
        raise Corrupt(f"{where}: not an rlx snapshot of format {FORMAT}")
    body = doc.get("snapshot")
    if not isinstance(body, dict):
        raise Corrupt(f"{where}: has no snapshot body")
    digest = hashlib.sha256(_canonical(body)).hexdigest()
    if digest != doc.get("checksum"):
        raise Corrupt(
            f"{where}: checksum mismatch (stored {doc.get('checksum')}, computed {digest})"
        )
    try:
        return Snapshot.from_dict(body)
    except Corrupt as e:
        raise Corrupt(f"{where}: {e}") from None


@dataclass(frozen=True)
class SnapshotEntry:
    """One snapshot directory and whether it verifies."""

    key: str  # "snapshots/s0000000012"
    step: int
    ok: bool
    problem: str  # why it does not verify ("" when ok)
    snapshot: Snapshot | None  # the parsed snapshot when ok


class SnapshotStore:
    """The snapshots of one run directory."""

    def __init__(self, storage: Storage, *, prefix: str = "snapshots", keep: int = 5) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.storage = storage
        self.prefix = prefix.strip("/")
        self.keep = keep

    def _dirs(self) -> list[tuple[int, int, str]]:
        """(step, n, key) of every snapshot directory, committed or not, oldest first."""
        found: dict[str, tuple[int, int]] = {}
        for key in self.storage.list(self.prefix + "/"):
            name = key[len(self.prefix) + 1 :].split("/", 1)[0]
            m = _DIR.match(name)
            if m:
                found[f"{self.prefix}/{name}"] = (int(m[1]), int(m[2] or 0))
        return sorted((s, n, k) for k, (s, n) in found.items())

    def _verify(self, key: str, step: int) -> SnapshotEntry:  # noqa: PLR0911
        where = self.storage.key_uri(key)
        if not self.storage.committed(key):
            return SnapshotEntry(
                key, step, False, f"{where}: incomplete (no {COMMIT_MARKER})", None
            )
        try:
            manifest = self.storage.commit_manifest(key)
            data = self.storage.get(f"{key}/{_FILE}")
        except NotFound as e:
            return SnapshotEntry(key, step, False, f"{where}: {e}", None)
        except (ValueError, KeyError) as e:  # a damaged commit marker
            return SnapshotEntry(key, step, False, f"{where}: unreadable commit marker: {e}", None)
        expected = manifest.get(_FILE, {}) if isinstance(manifest, dict) else {}
        if expected.get("size") != len(data):
            return SnapshotEntry(
                key,
                step,
                False,
                f"{where}: truncated or altered ({len(data)} bytes, committed "
                f"{expected.get('size')})",
                None,
            )
        if expected.get("sha256") != hashlib.sha256(data).hexdigest():
            return SnapshotEntry(
                key, step, False, f"{where}: content differs from what was committed", None
            )
        try:
            snap = decode_snapshot(data, where)
        except Corrupt as e:
            return SnapshotEntry(key, step, False, str(e), None)
        if snap.step != step:
            return SnapshotEntry(
                key, step, False, f"{where}: holds step {snap.step}, its name says {step}", None
            )
        return SnapshotEntry(key, step, True, "", snap)

    def entries(self) -> list[SnapshotEntry]:
        """Every snapshot directory, oldest first, each verified."""
        return [self._verify(key, step) for step, _, key in self._dirs()]

    def write(self, snapshot: Snapshot) -> str:
        """Write `snapshot` atomically, then delete all but the newest `keep`; its key."""
        if not snapshot.created_unix:
            snapshot = Snapshot.from_dict({**snapshot.to_dict(), "created_unix": time.time()})
        data = snapshot.encode()
        n = 0
        while True:
            name = f"s{snapshot.step:010d}" + (f"-{n}" if n else "")
            key = f"{self.prefix}/{name}"
            try:
                with self.storage.atomic_commit(key) as tx:
                    tx.put(_FILE, data)
                break
            except AlreadyExists:
                n += 1
        self.prune()
        return key

    def prune(self) -> list[str]:
        """Delete snapshot directories older than the newest `keep` committed ones; the keys
        deleted. Uncommitted leftovers older than those are deleted too."""
        dirs = self._dirs()
        committed = [k for _, _, k in dirs if self.storage.committed(k)]
        if len(committed) <= self.keep:
            return []
        oldest_kept = committed[-self.keep]
        order = [k for _, _, k in dirs]
        doomed = order[: order.index(oldest_kept)]
        for key in doomed:
            self.storage.delete_prefix(key)
        return doomed

    def latest(self, *, on_skip: Callable[[str], None] | None = None) -> Snapshot | None:
        """The newest snapshot that verifies, or None if there is none. Each newer one that does
        not verify is named with its problem through `on_skip` (default: a logged warning)."""
        for step, _, key in reversed(self._dirs()):
            entry = self._verify(key, step)
            if entry.ok:
                return entry.snapshot
            message = f"skipping snapshot {entry.problem}"
            (on_skip or log.warning)(message)
        return None

    def load(self, step: int | None = None) -> Snapshot:
        """The newest verified snapshot at `step` (any step when None); NotFound if there is
        none, Corrupt (naming each) if every candidate fails to verify."""
        problems = []
        for s, _, key in reversed(self._dirs()):
            if step is not None and s != step:
                continue
            entry = self._verify(key, s)
            if entry.ok:
                assert entry.snapshot is not None
                return entry.snapshot
            problems.append(entry.problem)
        where = self.storage.key_uri(self.prefix)
        if problems:
            raise Corrupt("no snapshot verifies: " + "; ".join(problems))
        at = f" at step {step}" if step is not None else ""
        raise NotFound(f"no snapshot{at} under {where}")
