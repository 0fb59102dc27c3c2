"""`rlx up`, `rlx resume`: run the whole system on this machine (`rlx status` and `rlx down`
are in run_cmd.py).

rlx up                                  # the built-in demo (2-digit addition), run dir ./rlx-run
rlx up --example code                   # the built-in code example (Python programs, sandboxed)
rlx up CONFIG.toml --run-dir DIR --set steps=50
rlx up CONFIG.toml --run-dir s3://bucket/runs/r1 [--work-dir DIR]
rlx up --detach                         # the same in the background; prints how to follow it
rlx resume RUN [--detach]               # continue from the newest snapshot that verifies

The process serves the run's Controller service on a loopback port while it runs (rlx_cli.run_cmd).

RUN is the run directory: a path, or an s3:// / gs:// URI whose machine-local files (logs, pid
files, token) live in a work directory (rlx_controller.rundir).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from rlx_cli.terminal import cell, one_line
from rlx_core.errors import RlxError

if TYPE_CHECKING:
    from rlx_controller import RunPaths

__all__ = ["register"]

console = Console(stderr=True)

PROVIDERS = ("local", "gcp-tpu")


def _fail(message: str) -> NoReturn:
    """One escaped line on stderr (the message may quote a config, a dataset or a template)."""
    typer.echo("rlx: " + one_line(message), err=True)
    raise typer.Exit(1)


def _paths(run_dir: str | Path, work_dir: Path | None) -> RunPaths:
    """RunPaths of a run directory (path or URI) and optional work directory; exits on a bad one."""
    from rlx_controller import RunPaths

    try:
        return RunPaths.of(run_dir, work_dir)
    except RlxError as e:
        _fail(str(e))


def _load_config(
    config: str | None, paths: RunPaths, overrides: list[str], example: str = "addition"
) -> Any:
    from rlx_core.config import to_toml
    from rlx_core.configs.run import load_run_config, loads_run_config
    from rlx_core.storage import join_uri
    from rlx_data import (
        CODE_TASK,
        DEMO_TASK,
        base_model_dir,
        code_demo_config,
        code_model_dir,
        demo_config,
        write_addition_jsonl,
        write_code_jsonl,
    )

    sets = [f"run_dir={paths.uri}", *overrides]
    if config is None:
        # the config (and its overrides) checked before the example's data is written
        if example == "code":
            base = code_demo_config(paths.uri, join_uri(paths.uri, "data"), code_model_dir())
        else:
            base = demo_config(paths.uri, join_uri(paths.uri, "data"), base_model_dir())
        cfg = loads_run_config(to_toml(base, comments=False), overrides=sets)
        if example == "code":
            train, heldout = write_code_jsonl(paths.work / "data", CODE_TASK)
        else:
            train, heldout = write_addition_jsonl(paths.work / "data", DEMO_TASK)
        if paths.remote:  # the data goes with the run, so a resume elsewhere finds it
            for local in (train, heldout):
                paths.storage.put_file(f"data/{local.name}", local)
        return cfg
    return load_run_config(config, overrides=tuple(sets))


def _view(progress: Any) -> Table:
    table = Table(title="rlx run", show_header=False, expand=False)
    table.add_column("k", style="bold")
    table.add_column("v")
    table.add_row("phase", cell(progress.phase))
    table.add_row("step", f"{progress.step} / {progress.steps}")
    table.add_row("reward", f"{progress.reward:.3f}")
    if progress.heldout:
        first = min(progress.heldout)
        last = max(progress.heldout)
        table.add_row(
            "held-out acc",
            f"{progress.heldout[first]:.3f} (step {first}) -> "
            f"{progress.heldout[last]:.3f} (step {last})",
        )
    table.add_row("gen tokens/s", f"{progress.tokens_per_s:.0f}")
    table.add_row("steps/s", f"{progress.steps_per_s:.2f}")
    table.add_row(
        "staleness", ", ".join(f"{k}: {v}" for k, v in sorted(progress.staleness.items())) or "-"
    )
    for name, state in sorted(progress.components.items()):
        table.add_row(cell(name), cell(state))
    for m in progress.messages[-3:]:
        table.add_row("", cell(m))
    return table


class _Log:
    """The controller's log: controller.log in the work directory once `open` is called (lines
    before that are kept and written then), and the console when stderr is not a terminal."""

    def __init__(self, echo: bool) -> None:
        self.echo = echo
        self.file: Any = None
        self.held: list[str] = []

    def __call__(self, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {message}\n"
        if self.file is None:
            self.held.append(line)
        else:
            self.file.write(line)
            self.file.flush()
        if self.echo:
            console.print(cell(message), soft_wrap=True)

    def open(self, work: Path) -> None:
        self.file = open(work / "controller.log", "a")  # noqa: SIM115 (closed by close())
        self.file.writelines(self.held)
        self.file.flush()
        self.held = []

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def _new_driver(cfg: Any, paths: RunPaths, log: _Log) -> Any:
    """The controller loop of `cfg`, its inputs loaded and checked: the tokenizer, every dataset,
    every prompt rendered and encoded. An RlxError naming what is wrong, before any service
    starts."""
    from rlx_controller import Driver, Progress
    from rlx_launch import open_services

    return Driver(
        cfg,
        paths.uri,
        open_services=open_services,
        work_dir=paths.work,
        progress=Progress(steps=cfg.steps),
        log=log,
    )


def _serve(driver: Any, paths: RunPaths) -> Any:
    """The run's Controller service, served by this process while it drives the run
    (`rlx_controller.serve_run`: controller.json in the work directory); close() it after."""
    from rlx_controller import serve_run

    return serve_run(driver, paths.work, run_dir=paths.uri)


def _drive(
    cfg: Any,
    paths: RunPaths,
    resume: bool,
    force: bool = False,
    *,
    prepared: tuple[Any, _Log] | None = None,
) -> None:
    """Run the controller loop (`prepared`: a Driver `up` has already made, with its _Log)."""
    if prepared is None:
        paths.make_work_dir()
        log = _Log(echo=not sys.stderr.isatty())
        log.open(paths.work)
        try:
            driver = _new_driver(cfg, paths, log)
        except RlxError as e:
            log.close()
            _fail(f"{type(e).__name__}: {e}")
        except BaseException:
            log.close()
            raise
    else:
        driver, log = prepared
        log.open(paths.work)
    progress = driver.progress
    served = _serve(driver, paths)  # rlx status, down and snapshot take ask it
    live_ok = sys.stderr.isatty()
    if paths.remote:
        log(f"run dir {paths.uri}; this machine's files in {paths.work}")
    try:
        if live_ok:
            with Live(_view(progress), console=console, refresh_per_second=2) as live:
                import threading

                done = threading.Event()

                def refresh() -> None:
                    while not done.wait(0.5):
                        live.update(_view(progress))

                t = threading.Thread(target=refresh, daemon=True)
                t.start()
                try:
                    summary = driver.run(resume=resume, force=force)
                finally:
                    done.set()
                    t.join()
                    live.update(_view(progress))
        else:
            summary = driver.run(resume=resume, force=force)
    except RlxError as e:
        _fail(f"{type(e).__name__}: {e}")
    finally:
        served.close()
        log.close()
    _finish(summary, paths)
    if cfg.services.provider == "gcp-tpu":
        typer.echo(
            f"  TPU nodes          still up: `rlx provision delete {paths.uri}` deletes them"
        )


def _first_missing(path: Path) -> Path | None:
    """The outermost directory of `path` (itself or an ancestor) that does not exist yet: what
    creating `path` would create first."""
    missing = None
    for d in (path, *path.parents):
        if d.exists():
            return missing
        missing = d
    return missing


def _resume_command(paths: RunPaths) -> str:
    from rlx_controller import default_work_dir

    if paths.remote and paths.work != default_work_dir(paths.uri):
        return f"rlx resume {paths.uri} --work-dir {paths.work}"
    return f"rlx resume {paths.uri}"


def _finish(summary: Any, paths: RunPaths) -> None:
    """Write the run's plot and print the final summary (stdout, one item per line)."""
    from rlx_cli.plot_cmd import PLOT_FILE, write_plot

    try:
        plot: str = str(write_plot(paths.work, name=paths.uri if paths.remote else ""))
        if paths.remote:
            paths.storage.put_file(PLOT_FILE, plot)
            plot = f"{plot} (and {paths.storage.key_uri(PLOT_FILE)})"
    except (RlxError, OSError) as e:  # a run stopped before its first step has nothing to plot
        plot = f"none ({e})"
    fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    state = "stopped" if summary.stopped else "finished"
    before, after = fmt(summary.heldout_before), fmt(summary.heldout_after)
    more = f"  continue with: {_resume_command(paths)}\n" if summary.stopped else ""
    work = f"  work dir           {paths.work}\n" if paths.remote else ""
    typer.echo(
        f"rlx: {state} at step {summary.steps}; held-out accuracy {before} -> {after}\n"
        f"  steps              {summary.steps}\n"
        f"  wall time          {summary.wall_s:.0f} s "
        f"({summary.train_s_per_step:.3f} s per train step, median)\n"
        f"  params hash        {summary.params_hash}\n"
        f"  plot               {plot}\n"
        f"  run dir            {paths.uri}\n{work}{more}",
        nl=False,
    )


DETACH_HELP = (
    "Run in the background (its own process and session, output in the work directory's "
    "rlx-detached.log); return once its controller service answers, printing how to follow and "
    "stop it."
)
RUN_HELP = "The run directory: a path, or s3://bucket/prefix, gs://bucket/prefix."
EXAMPLES = ("addition", "code")
WORK_DIR_HELP = (
    "This machine's files of a remote run (logs, pid files, token); default "
    "~/.cache/rlx/runs/<scheme>/<bucket>/<prefix>. A local run directory is its own."
)


def up(
    config: str | None = typer.Argument(None, help="Run config TOML; none = the built-in demo."),
    run_dir: str | None = typer.Option(
        None,
        "--run-dir",
        help="Where the run keeps its state: a path, s3://bucket/prefix or gs://bucket/prefix; "
        "default: the config's run_dir, ./rlx-run for the demo.",
    ),
    work_dir: Path | None = typer.Option(None, "--work-dir", help=WORK_DIR_HELP),
    overrides: list[str] = typer.Option([], "--set", help="KEY=VALUE override of the config."),
    provider: str | None = typer.Option(
        None,
        "--provider",
        help="local: every service a process on this machine; gcp-tpu: on TPU VMs of the "
        "config's \\[provision] table (provisioned first, as `rlx provision apply` does); "
        "default: the config's services.provider (local).",
    ),
    example: str | None = typer.Option(
        None,
        "--example",
        help="The built-in example to run without CONFIG: addition (the demo, the default) or "
        "code (Python programs run in the sandbox on hidden tests).",
    ),
    detach: bool = typer.Option(False, "--detach", help=DETACH_HELP),
) -> None:
    """Start every service and train (the built-in demo without CONFIG)."""
    if example is not None and example not in EXAMPLES:
        _fail(f"--example {example!r}: one of {', '.join(EXAMPLES)}")
    if example is not None and config is not None:
        _fail("--example runs a built-in example: give it or CONFIG, not both")
    if provider is not None:
        if provider not in PROVIDERS:
            _fail(f"--provider {provider!r}: one of {', '.join(PROVIDERS)}")
        overrides = [*overrides, f"services.provider={provider}"]
    if run_dir is None and config is not None:
        from rlx_core.configs.run import load_run_config

        try:
            run_dir = load_run_config(config, overrides=tuple(overrides)).run_dir
        except RlxError as e:
            _fail(f"{type(e).__name__}: {e}")
    paths = _paths(run_dir or "rlx-run", work_dir)
    if detach:
        from rlx_cli.run_cmd import detach as run_detached

        args = ["up", *([] if config is None else [config]), "--run-dir", paths.uri]
        args += [] if work_dir is None else ["--work-dir", str(work_dir)]
        args += [x for o in overrides for x in ("--set", o)]
        run_detached(args + ([] if example is None else ["--example", example]), paths)
        return
    made = _first_missing(paths.work)  # removed again when `up` refuses
    try:
        cfg, prepared = _prepare_up(config, paths, overrides, example or "addition")
    except BaseException as e:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        if isinstance(e, RlxError):
            _fail(f"{type(e).__name__}: {e}")
        raise
    _drive(cfg, paths, resume=False, prepared=prepared)


def _prepare_up(
    config: str | None, paths: RunPaths, overrides: list[str], example: str
) -> tuple[Any, tuple[Any, _Log]]:
    """Everything `rlx up` checks and writes before it starts a service: the config, the
    datasets, the tokenizer and every prompt (`_new_driver`), then the run's config.toml."""
    from rlx_controller import CONFIG_FILE, SnapshotStore, read_holder
    from rlx_core.config import to_toml

    # refused before its config.toml is touched: a run with snapshots, or one starting up
    if any(SnapshotStore(paths.storage).entries()):
        _fail(f"{paths.uri} already holds a run: `{_resume_command(paths)}` continues it")
    holder = read_holder(paths.storage)
    if holder is not None and not holder.is_me() and holder.alive(time.time()):
        _fail(f"{paths.uri} is being run by {holder.describe(time.time())}")
    # a config file is checked before the run directory is created; the demo's is made in it
    cfg = _load_config(config, paths, overrides) if config is not None else None
    paths.make_work_dir()
    if cfg is None:
        cfg = _load_config(config, paths, overrides, example)
    # the run's config.toml is written once its inputs load: a refusal leaves no run behind
    log = _Log(echo=not sys.stderr.isatty())
    driver = _new_driver(cfg, paths, log)
    paths.storage.put(CONFIG_FILE, to_toml(cfg, comments=False).encode())
    return cfg, (driver, log)


def _run_config(paths: RunPaths) -> Any:
    """The config `rlx up` saved in the run directory, after checking its run.json; exits naming
    what is missing or damaged, before anything is started or written."""
    from rlx_controller import CONFIG_FILE, read_run_info, read_text
    from rlx_core.configs.run import loads_run_config

    try:
        if not paths.storage.exists(CONFIG_FILE):
            _fail(f"{paths.uri}: no {CONFIG_FILE} (not a run directory of `rlx up`)")
        cfg = loads_run_config(read_text(paths.storage, CONFIG_FILE))
        read_run_info(paths.storage)
    except RlxError as e:
        _fail(f"{type(e).__name__}: {e}")
    return cfg


def resume(
    run: str = typer.Argument(..., help=RUN_HELP),
    work_dir: Path | None = typer.Option(None, "--work-dir", help=WORK_DIR_HELP),
    force: bool = typer.Option(
        False,
        "--force",
        help="Take the run over from a controller that still holds its lease (only when you "
        "know that controller is dead, e.g. its machine is gone).",
    ),
    detach: bool = typer.Option(False, "--detach", help=DETACH_HELP),
) -> None:
    """Continue RUN from its newest snapshot that verifies (a remote RUN on any machine: an
    empty work directory loses nothing). Refused while another controller runs it."""
    paths = _paths(run, work_dir)
    cfg = _run_config(paths)
    if detach:
        from rlx_cli.run_cmd import detach as run_detached

        where = [] if work_dir is None else ["--work-dir", str(work_dir)]
        run_detached(["resume", paths.uri, *where, *(["--force"] if force else [])], paths)
        return
    _drive(cfg, paths, resume=True, force=force)


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(resume)
