"""Where a run keeps its state: the run directory (durable, a path or an s3:// / gs:// URI) and the
work directory (this machine's disk).

The run directory holds everything resume needs and nothing tied to one machine: `config.toml`,
`run.json`, `snapshots/`, `rollouts/`, `checkpoints/`, `metrics/` (metrics.jsonl, uploaded in
parts with every snapshot), `summary.json` and `plot.png`. The work directory holds what belongs
to the processes running here: the token, `services.json`, service configs and logs,
`controller.pid`, `controller.log`, the live `metrics.jsonl` and the TensorBoard files.

For a local run directory both are the same directory. For a remote one the work directory is
`--work-dir`, by default `$XDG_CACHE_HOME/rlx/runs/<scheme>/<bucket>/<prefix>` (`~/.cache/...`), so
`rlx resume s3://b/p` on a fresh machine starts from an empty work directory and loses nothing.

    paths = RunPaths.of("s3://bucket/runs/r1")  # work dir defaulted
    paths.storage.get("config.toml"); paths.work / "token"

A local run directory that is not a directory (a regular file, a path through one) is refused
when it is named, and the files read from a run directory (`read_text`, `read_run_info`) fail with
an RlxError naming them when they are not what rlx wrote.

A write interrupted by a signal can leave its temporary (`.rlx-tmp-*`, rlx_core.storage's local
backend) in `rollouts/`, `snapshots/` or `checkpoints/`; every reader's listing skips them, and
`sweep_temporaries` removes them when a controller of the run starts, before it writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from rlx_core.errors import Corrupt, InvalidArgument
from rlx_core.storage import TMP_PREFIX, Storage, open_storage

__all__ = [
    "CONFIG_FILE",
    "CONTROLLER_PID",
    "RUN_INFO",
    "SUMMARY_FILE",
    "RunPaths",
    "check_local_dir",
    "default_work_dir",
    "is_remote",
    "read_run_info",
    "read_text",
    "sweep_temporaries",
]

CONFIG_FILE = "config.toml"  # the run's config as `rlx up` resolved it (`rlx resume` reads it)
RUN_INFO = "run.json"  # run id and config hash
SUMMARY_FILE = "summary.json"  # the last `rlx up` / `rlx resume`'s summary
CONTROLLER_PID = "controller.pid"  # in the work directory: the running controller's pid
# the folders whose interrupted writes a starting controller sweeps
SWEPT = ("rollouts", "snapshots", "checkpoints")

_REMOTE = re.compile(r"^(s3|gs)://", re.IGNORECASE)


def is_remote(uri: str | os.PathLike[str]) -> bool:
    """True for s3:// and gs:// URIs (a plain path or file:// is local)."""
    return bool(_REMOTE.match(os.fspath(uri)))


def default_work_dir(uri: str) -> Path:
    """The work directory of a run directory given by its normalised URI (`RunPaths.uri`,
    `Storage.uri`): the directory itself when it is local, else a directory under the user's
    cache named after the URI. Pure: nothing is opened (a GCS client needs credentials)."""
    if not is_remote(uri):
        return Path(uri)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    scheme, rest = uri.split("://", 1)
    parts = [p for p in rest.split("/") if p]
    return Path(cache, "rlx", "runs", scheme, *parts)


def check_local_dir(path: Path, what: str = "run directory") -> None:
    """InvalidArgument naming `path` unless it is a directory or could become one (nothing on
    its way to it is a file)."""
    if path.exists() and not path.is_dir():
        raise InvalidArgument(f"{path}: not a directory (the {what})")
    for parent in path.parents:
        if parent.is_dir():
            return
        if parent.exists():
            raise InvalidArgument(f"{path}: {parent} is not a directory (the {what})")


def read_text(storage: Storage, key: str) -> str:
    """The UTF-8 text of a run-directory file; Corrupt naming it when it is not UTF-8."""
    data = storage.get(key)
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise Corrupt(f"{storage.key_uri(key)}: not UTF-8 text ({e.reason})") from None


def read_run_info(storage: Storage) -> dict[str, str] | None:
    """`run.json` ({"run_id", "config_hash"}), or None when there is none; Corrupt naming it when
    it is truncated, not UTF-8 or not that object."""
    if not storage.exists(RUN_INFO):
        return None
    where = storage.key_uri(RUN_INFO)
    try:
        info = json.loads(read_text(storage, RUN_INFO))
    except ValueError as e:
        raise Corrupt(f"{where}: not valid JSON (truncated?): {e}") from None
    if not (isinstance(info, dict) and all(isinstance(info.get(k), str) for k in _RUN_INFO_KEYS)):
        raise Corrupt(f"{where}: expected a JSON object with string {' and '.join(_RUN_INFO_KEYS)}")
    return info


_RUN_INFO_KEYS = ("run_id", "config_hash")


def sweep_temporaries(run_dir: str | os.PathLike[str]) -> list[str]:
    """Delete the temporaries of interrupted writes (`.rlx-tmp-*`) under the `SWEPT` folders of
    a local run directory; return them, relative to it. Only the run's one controller may call
    this (it holds the lease, and no service of the run is left writing): a temporary is a
    write in progress until then. A remote run directory has none (its writes are single
    uploads)."""
    if is_remote(run_dir):
        return []
    root = Path(run_dir)
    swept = []
    for folder in SWEPT:
        for dirpath, _dirs, files in os.walk(root / folder):
            for name in files:
                if name.startswith(TMP_PREFIX):
                    path = Path(dirpath, name)
                    # one that cannot be deleted stays: every reader skips it anyway
                    with contextlib.suppress(OSError):
                        path.unlink()
                        swept.append(path.relative_to(root).as_posix())
    return sorted(swept)


@dataclass(frozen=True)
class RunPaths:
    """The run directory's normalised URI and storage, and the local work directory."""

    uri: str  # an absolute local path, or s3://bucket/prefix, gs://bucket/prefix
    storage: Storage
    work: Path

    @property
    def remote(self) -> bool:
        return is_remote(self.uri)

    @classmethod
    def of(
        cls, run_dir: str | os.PathLike[str], work_dir: str | os.PathLike[str] | None = None
    ) -> RunPaths:
        """RunPaths of a run directory; `work_dir` only matters for a remote one (a local run
        directory is its own work directory, and a different `work_dir` is refused).
        InvalidArgument naming a local run or work directory that cannot be a directory."""
        storage = open_storage(os.fspath(run_dir))
        if not is_remote(storage.uri):
            work = Path(storage.uri)
            check_local_dir(work)
            if work_dir is not None and Path(work_dir).resolve() != work:
                raise InvalidArgument(
                    f"work_dir: {work_dir}: a local run directory ({work}) is its own work "
                    "directory; --work-dir is for s3:// and gs:// run directories",
                    field="work_dir",
                )
        else:
            work = (
                Path(work_dir).resolve() if work_dir is not None else default_work_dir(storage.uri)
            )
            check_local_dir(work, f"work directory of {storage.uri}")
        return cls(uri=storage.uri, storage=storage, work=work)

    def make_work_dir(self) -> Path:
        """Create the work directory (the run directory, when local); InvalidArgument naming it
        when that fails."""
        try:
            self.work.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            what = "run directory" if not self.remote else f"work directory of {self.uri}"
            raise InvalidArgument(f"{self.work}: cannot create the {what}: {e.strerror}") from None
        return self.work
