"""`rlx export RUN --out DIR`: a run's trained weights as an HF checkpoint directory that
transformers, vLLM and the next training stage read.

rlx export RUN --out DIR                # the newest trainer checkpoint in RUN/checkpoints
rlx export RUN --step 40 --out DIR      # the checkpoint of step 40
rlx export RUN --version 42 --out DIR   # version 42, pulled from the run's live paramserver

DIR gets `config.json` and `model.safetensors` (HF tensor names, in the dtype the trainer holds
params in), and the tokenizer files of the run's base model (`[model] path`) that it has. It is
written under a temporary name beside DIR and renamed at the end, so a failed export leaves
nothing; a DIR that is not empty is replaced only with --force, in one atomic exchange of the two
directories (through a symlink: the directory it points to; the link stays). DIR may not be,
contain or lie inside a run directory (one holding `config.toml` or `run.json`), the run's own
directory, its work directory or its base model directory, with or without --force: that is
refused before anything is written. JAX is imported inside the command, so `rlx --help` stays fast.
"""

from __future__ import annotations

import ctypes
import errno
import math
import os
import shutil
import tempfile
import tomllib
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from rlx_core.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)

if TYPE_CHECKING:
    import numpy as np

    from rlx_controller import RunConfig, RunPaths

__all__ = ["register"]

PULL_TIMEOUT_S = 600.0  # one pull of a whole version from the paramserver


def _run_config(paths: RunPaths) -> tuple[RunConfig, dict[str, Any]]:
    """The run's config (validated) and its raw tables; NotFound when RUN is not a run."""
    from rlx_controller import CONFIG_FILE, loads_run_config, read_text

    if not paths.storage.exists(CONFIG_FILE):
        raise NotFound(f"{paths.uri}: no such run (no {CONFIG_FILE} there)")
    text = read_text(paths.storage, CONFIG_FILE)
    return loads_run_config(text), tomllib.loads(text)


def _run_mark(directory: Path) -> str | None:
    """What marks `directory` as a run directory (rlx_controller.rundir: `rlx up` writes its
    config.toml first, the controller its run.json), or None."""
    from rlx_controller import CONFIG_FILE, RUN_INFO

    for name in (CONFIG_FILE, RUN_INFO):
        if (directory / name).is_file():
            return name
    return None


def _check_not_a_run(out: Path, paths: RunPaths) -> None:
    """InvalidArgument when `out` (symlinks resolved) is, contains or lies inside a run
    directory, the run's own directory or its work directory: replacing it would destroy a run."""
    target = out.resolve()
    own = [Path(paths.work).resolve()]
    if not paths.remote:
        own.append(Path(paths.uri).resolve())
    for root in own:
        if target.is_relative_to(root) or root.is_relative_to(target):
            raise InvalidArgument(
                f"--out {out}: the run's own directory is {root}; an export may not replace, "
                "hold or sit inside it"
            )
    for d in (target, *target.parents):
        mark = _run_mark(d)  # a file or a missing path holds no marker
        if mark is not None:
            raise InvalidArgument(
                f"--out {out}: {d} is a run directory (it holds {mark}); an export may not "
                "replace it or sit inside it"
            )
    if target.is_dir():
        for top, dirs, _ in os.walk(target):  # symlinked directories are not followed
            for name in dirs:
                mark = _run_mark(Path(top, name))
                if mark is not None:
                    raise InvalidArgument(
                        f"--out {out}: it holds the run directory {Path(top, name)} (with "
                        f"{mark}); replacing it would delete that run"
                    )


def _check_out(out: Path, force: bool, paths: RunPaths, base: str) -> None:
    """Everything refused about --out, before anything is written (`base`: the run's
    `[model] path`, which a resume of the run needs and whose tokenizer files are copied)."""
    if out.exists() and not out.is_dir():
        raise InvalidArgument(f"--out {out}: exists and is not a directory")
    _check_not_a_run(out, paths)
    if base and "://" not in base.removeprefix("file://"):
        model, target = Path(base.removeprefix("file://")).resolve(), out.resolve()
        if target.is_relative_to(model) or model.is_relative_to(target):
            raise InvalidArgument(
                f"--out {out}: the run's base model ([model] path) is {model}; an export may "
                "not replace, hold or sit inside it"
            )
    if out.is_dir() and any(out.iterdir()) and not force:
        raise AlreadyExists(f"--out {out}: not empty (--force replaces it)")


_RENAME_EXCHANGE = 2  # renameat2's flag: swap two paths atomically (Linux >= 3.15)
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap the directories `a` and `b` in one step; False where the system cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):  # a file system without it
        return False
    raise OSError(code, os.strerror(code), str(b))


def _publish(staged: Path, out: Path) -> None:
    """Put the finished `staged` directory at `out` (through a symlink: where it points),
    replacing what is there in one exchange; `staged` is gone afterwards, or, on an error,
    whatever was at `out` is still there."""
    target = out.resolve()
    if not target.exists():
        staged.rename(target)
        return
    if _exchange(staged, target):
        shutil.rmtree(staged)  # now the old directory
        return
    old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
    target.rename(old)
    try:
        staged.rename(target)
    except BaseException:
        old.rename(target)
        raise
    shutil.rmtree(old)


def _copy_tokenizer(base: str, target: Path) -> list[str]:
    """Copy the base model's tokenizer files into `target`; the names copied."""
    from rlx_core.storage import open_storage
    from rlx_core.tokenizer import TOKENIZER_FILES

    storage = open_storage(base)
    if not storage.exists("config.json"):
        raise NotFound(
            f"{base}: the run's base model directory ([model] path) is not there (its tokenizer "
            "files go with the export)"
        )
    copied = []
    for name in TOKENIZER_FILES:
        if storage.exists(name):
            storage.get_file(name, target / name)
            copied.append(name)
    return copied


def _live_paramservers(paths: RunPaths) -> list[tuple[str, str]]:
    """(name, address) of the run's paramserver replicas that run (from the work directory's
    services.json); Unavailable when there are none."""
    from rlx_launch import read_services, runs_service

    handles = [h for h in read_services(paths.work).values() if h.kind == "paramserver"]
    # pid 0: a replica on another machine (a TPU node), asked directly
    live = [(h.name, h.address) for h in handles if h.pid == 0 or runs_service(h, paths.work)]
    if not live:
        where = "recorded" if handles else "none recorded"
        raise Unavailable(
            f"{paths.uri}: no live paramserver ({where} in {paths.work / 'services.json'}); "
            "--version needs the run's services up: export a checkpoint with --step instead"
        )
    return live


def _pull(paths: RunPaths, tables: dict[str, Any], version: int) -> dict[str, np.ndarray]:
    """Version `version`'s tensors ('/'-paths) from a replica that holds it; NotFound listing
    the versions the replicas hold."""
    from rlx_cli.run_cmd import _token_file
    from rlx_core.clients import ParamServerClient

    token = str(_token_file(paths.work, tables))
    held: list[str] = []
    for name, address in _live_paramservers(paths):
        with ParamServerClient(address, token_file=token, timeout=30) as client:
            versions = client.versions()
            if version in versions:
                return client.pull(version, timeout=PULL_TIMEOUT_S)[1]
        held.append(f"{name} at {address} holds {versions or 'none'}")
    raise NotFound(
        f"version {version}: not held by the paramserver of {paths.uri} ({'; '.join(held)})"
    )


def _base_architecture(cfg: RunConfig) -> Any:
    """The ModelConfig of the run's base model (the trainer starts from it; training changes
    the weights, not the architecture)."""
    from rlx_model import load_config

    if not cfg.model.path:
        raise FailedPrecondition(
            "--version: the run's [model] path is empty, so the architecture of the pulled "
            "tensors is unknown here; export a checkpoint with --step instead"
        )
    return load_config(cfg.model.path.removeprefix("file://"))


def export(
    run: str = typer.Argument(
        ..., help="The run directory: a path, or s3://bucket/prefix, gs://bucket/prefix."
    ),
    out: Path = typer.Option(..., "--out", help="The HF checkpoint directory to write."),
    step: int | None = typer.Option(
        None, "--step", min=0, help="The trainer checkpoint of this step (default: the newest)."
    ),
    version: int | None = typer.Option(
        None,
        "--version",
        min=0,
        help="This weight version, pulled from the run's live paramserver instead.",
    ),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty --out."),
    work_dir: Path | None = typer.Option(
        None,
        "--work-dir",
        help="This machine's files of a remote run (services.json, token); default "
        "~/.cache/rlx/runs/<scheme>/<bucket>/<prefix>.",
    ),
) -> None:
    """Write RUN's trained weights as an HF checkpoint directory for transformers and vLLM.

    From RUN's newest trainer checkpoint, the one of --step, or weight version --version of the
    run's live paramserver: config.json, model.safetensors (in the dtype the trainer holds
    params in) and the tokenizer files of the run's base model.
    """
    from rlx_controller import RunPaths
    from rlx_core.storage import join_uri

    if step is not None and version is not None:
        raise InvalidArgument("give --step or --version, not both")
    out = out.absolute()
    paths = RunPaths.of(run, work_dir)
    cfg, tables = _run_config(paths)
    _check_out(out, force, paths, cfg.model.path)
    target = out.resolve()  # through a symlink: the new tree is built beside where it points
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.partial-{uuid.uuid4().hex[:8]}")
    staged.mkdir()
    try:
        # a run config without [model] path (a random-init built-in model) has no tokenizer
        copied = _copy_tokenizer(cfg.model.path, staged) if cfg.model.path else []
        try:
            from rlx_model import param_shapes
            from rlx_trainer.export import export_checkpoint, export_tensors
        except ImportError as e:  # rlx-cli alone has no JAX
            raise FailedPrecondition(
                f"rlx export reads checkpoints with JAX and Orbax: install rlx-trainer ({e})"
            ) from None

        if version is None:
            with tempfile.TemporaryDirectory(prefix=".rlx-export-", dir=target.parent) as staging:
                step, model = export_checkpoint(
                    join_uri(paths.uri, "checkpoints"), staged, step=step, staging_dir=staging
                )
            source = f"checkpoint step {step}"
        else:
            tensors = _pull(paths, tables, version)
            model = export_tensors(tensors, _base_architecture(cfg), staged)
            source = f"version {version} (from the paramserver)"
        _check_out(out, force, paths, cfg.model.path)  # nothing appeared there meanwhile
        _publish(staged, out)
    except BaseException:  # an error or Ctrl-C: no half directory
        shutil.rmtree(staged, ignore_errors=True)
        raise
    params = sum(math.prod(s) for s in param_shapes(model).values())
    typer.echo(
        f"rlx: exported {source} of {paths.uri} to {out}\n"
        f"  weights    model.safetensors: {model.param_dtype}, {params:,} params "
        f"({model.family} L{model.num_layers} d{model.hidden_size} V{model.vocab_size})\n"
        f"  config     config.json (torch_dtype {model.param_dtype})\n"
        f"  tokenizer  {', '.join(copied) or 'none'} (from the base model {cfg.model.path})"
    )


def register(app: typer.Typer) -> None:
    app.command()(export)
