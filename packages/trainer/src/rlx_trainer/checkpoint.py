"""Trainer checkpoints with Orbax: a state pytree (params, optimizer state, RNG, the reference
model) plus a JSON item (step, model config, counters), one directory per step.

Where they go:
- a local path or `gs://bucket/prefix`: Orbax's CheckpointManager writes there itself (GCS through
  TensorStore's gcs driver and gcsfs). A step counts once Orbax has finalised it: locally the
  temporary directory is renamed, on GCS `commit_success.txt` is written last. Orbax never lists
  an unfinalised step, so it is never restored.
- `s3://bucket/prefix`: Orbax cannot write to S3 here (DESIGN §10), so it writes to a local
  staging directory and the step directory is then uploaded through `rlx_core.storage` as one
  atomic commit: the `_COMMITTED` marker (with every file's size and sha256) goes last. Only
  committed steps are listed or restored, and downloads are checked against the marker. Every
  upload and download rides through a storage outage with `rlx_core.storage`'s one retry
  policy (`RLX_STORAGE_RETRY_S`).

The last `keep` steps are kept; older ones are deleted after each save. A store opened with
`read_only=True` (what `rlx export` reads through) creates, saves and deletes nothing, and
`restore_params` reads a step's params alone, not its optimizer state. A checkpoint may also hold
older versions' params (`past`: what π_old of the batches after it may need), read with
`restore_past`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from rlx_core.errors import Corrupt, FailedPrecondition, InvalidArgument, NotFound
from rlx_core.storage import COMMIT_MARKER, open_storage

__all__ = ["CheckpointStore"]

log = logging.getLogger(__name__)


def _options(keep: int | None, read_only: bool) -> ocp.CheckpointManagerOptions:
    # a reader: nothing created, nothing pruned (`CheckpointStore.save` refuses to write);
    # Orbax's own read_only option would say so in three warnings on every open
    return ocp.CheckpointManagerOptions(
        max_to_keep=None if read_only else keep,
        create=not read_only,
        enable_async_checkpointing=False,
    )


def _manager(
    directory: str, keep: int | None, *, read_only: bool = False, partial: bool = False
) -> ocp.CheckpointManager:
    """`partial`: a reader whose state item restores a part of the tree (PyTreeRestore with
    partial_restore; StandardRestore insists on the whole tree). Both read the same files."""
    # On GCS, plain zarr arrays rather than one OCDBT database: OCDBT's conditional manifest
    # writes failed against gcp-storage-emulator ("Malformed StorageGeneration").
    ocdbt = not directory.startswith("gs://")
    state = (
        ocp.PyTreeCheckpointHandler(use_ocdbt=ocdbt)
        if partial
        else ocp.StandardCheckpointHandler(use_ocdbt=ocdbt)
    )
    handlers = {
        "state": state,
        "meta": ocp.JsonCheckpointHandler(),
        "past": ocp.PyTreeCheckpointHandler(use_ocdbt=ocdbt),
    }
    return ocp.CheckpointManager(
        directory, item_handlers=handlers, options=_options(keep, read_only or partial)
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class CheckpointStore:
    """Save and restore trainer states under one root URI."""

    def __init__(
        self, uri: str, *, keep: int = 3, staging_dir: str = "", read_only: bool = False
    ) -> None:
        """`read_only`: only list and restore (nothing is created, saved or deleted)."""
        if not uri:
            raise InvalidArgument("checkpoint.uri is not set: nowhere to write checkpoints")
        self.uri = uri
        self.keep = keep
        self.read_only = read_only
        self._s3 = uri.startswith("s3://")
        if self._s3:
            self._storage = open_storage(uri)
            base = staging_dir or tempfile.mkdtemp(prefix="rlx-trainer-ckpt-")
            self._staging = Path(base)
            self._staging.mkdir(parents=True, exist_ok=True)
            self._manager: ocp.CheckpointManager | None = None
        else:
            if uri.startswith("file://"):
                uri = uri[len("file://") :]
            self._directory = uri
            self._manager = _manager(uri, keep, read_only=read_only)

    # --- listing --------------------------------------------------------------------------
    def steps(self) -> list[int]:
        """The committed steps, oldest first."""
        if self._manager is not None:
            self._manager.reload()
            return sorted(int(s) for s in self._manager.all_steps())
        return sorted(int(k) for k in self._storage.list_committed("") if k.isdigit())

    def latest(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def _resolve(self, step: int | None) -> int:
        steps = self.steps()
        if step is None:
            if not steps:
                raise NotFound(f"no committed checkpoint under {self.uri}")
            return steps[-1]
        if step not in steps:
            raise NotFound(
                f"step {step}: no committed checkpoint under {self.uri} "
                f"(committed: {steps or 'none'})"
            )
        return step

    # --- save -----------------------------------------------------------------------------
    def save(
        self, step: int, state: Any, meta: dict[str, Any], past: dict[str, Any] | None = None
    ) -> None:
        """Write `state` (a pytree of arrays), `meta` (JSON) and `past` (host arrays: older
        versions' params, read back with `restore_past`) as `step`; then prune to `keep`.
        A step that is already committed is left as it is (a replay writes identical bytes)."""
        if self.read_only:
            raise FailedPrecondition(f"{self.uri}: this checkpoint store was opened read-only")
        if step in self.steps():
            log.info("checkpoint %s/%d already committed; not rewritten", self.uri, step)
            return
        items = {"state": ocp.args.StandardSave(state), "meta": ocp.args.JsonSave(meta)}
        if past:
            items["past"] = ocp.args.PyTreeSave(past)
        args = ocp.args.Composite(**items)
        if self._manager is not None:
            self._manager.save(step, args=args, force=True)
            self._manager.wait_until_finished()
            return
        local = self._staging / "save"
        shutil.rmtree(local, ignore_errors=True)
        with _manager(str(local), None) as manager:
            manager.save(step, args=args, force=True)
            manager.wait_until_finished()
        step_dir = local / str(step)
        files = sorted(p for p in step_dir.rglob("*") if p.is_file())
        with self._storage.atomic_commit(str(step)) as tx:
            for path in files:
                tx.put_file(path.relative_to(step_dir).as_posix(), path)
        shutil.rmtree(local, ignore_errors=True)
        for old in self.steps()[: -self.keep]:
            self._storage.delete_prefix(str(old))

    # --- restore --------------------------------------------------------------------------
    def meta(self, step: int | None = None) -> tuple[int, dict[str, Any]]:
        """(step, the JSON item) of `step` (None = newest)."""
        step = self._resolve(step)
        args = ocp.args.Composite(meta=ocp.args.JsonRestore())
        if self._manager is not None:
            return step, dict(self._manager.restore(step, args=args).meta)
        with self._downloaded(step) as manager:
            return step, dict(manager.restore(step, args=args).meta)

    def restore(self, step: int | None, abstract_state: Any) -> Any:
        """The state pytree of `step`, laid out like `abstract_state` (shapes, dtypes, sharding)."""
        step = self._resolve(step)
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state))
        if self._manager is not None:
            return self._manager.restore(step, args=args).state
        with self._downloaded(step) as manager:
            return manager.restore(step, args=args).state

    def restore_params(self, step: int | None, abstract_params: Any) -> Any:
        """Only the params of `step` (None = newest), as numpy arrays on the host with the
        shapes and dtypes of `abstract_params` (a pytree of jax.ShapeDtypeStruct). The optimizer
        state and the reference model are not read."""
        return self._host_item(step, "state", {"params": abstract_params}, partial=True)["params"]

    def restore_past(self, step: int | None, abstract_past: Any) -> Any:
        """The `past` item `save` wrote with `step`, as numpy arrays on the host laid out like
        `abstract_past` (a pytree of jax.ShapeDtypeStruct)."""
        return self._host_item(step, "past", abstract_past, partial=False)

    def _host_item(self, step: int | None, name: str, item: Any, *, partial: bool) -> Any:
        step = self._resolve(step)
        restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item)
        restore = ocp.args.PyTreeRestore(
            item=item, restore_args=restore_args, partial_restore=partial
        )
        args = ocp.args.Composite(**{name: restore})
        if self._manager is not None:
            with _manager(self._directory, None, read_only=True, partial=partial) as reader:
                return reader.restore(step, args=args)[name]
        with self._downloaded(step, partial=partial) as reader:
            return reader.restore(step, args=args)[name]

    def _downloaded(self, step: int, *, partial: bool = False) -> ocp.CheckpointManager:
        """A manager over a local copy of committed `step`, every file checked against the
        commit marker."""
        root = self._staging / "restore"
        shutil.rmtree(root, ignore_errors=True)
        step_dir = root / str(step)
        manifest = self._storage.commit_manifest(str(step))
        for key, entry in manifest.items():
            target = step_dir / key
            target.parent.mkdir(parents=True, exist_ok=True)
            self._storage.get_file(f"{step}/{key}", target)
            if os.path.getsize(target) != entry["size"] or _sha256(target) != entry["sha256"]:
                raise Corrupt(
                    f"{self._storage.key_uri(f'{step}/{key}')} does not match its "
                    f"{COMMIT_MARKER} record (size or sha256)"
                )
        return _manager(str(root), None, partial=partial)

    def close(self) -> None:
        if self._manager is not None:
            self._manager.close()
