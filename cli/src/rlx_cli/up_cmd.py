"""`rlx up`, `rlx resume`, `rlx status`, `rlx down`: run the whole system on this machine.

rlx up                                  # the built-in demo (2-digit addition), run dir ./rlx-run
rlx up --example code                   # the built-in code example (Python programs, sandboxed)
rlx up CONFIG.toml --run-dir DIR --set steps=50
rlx up CONFIG.toml --run-dir s3://bucket/runs/r1 [--work-dir DIR]
rlx resume RUN                          # continue from the newest snapshot that verifies
rlx status RUN [--json]                 # from another terminal: components, versions, ETA
rlx down RUN                            # SIGTERM the controller (it snapshots), stop services

RUN is the run directory: a path, or an s3:// / gs:// URI whose machine-local files (logs, pid
files, token) live in a work directory (rlx_controller.rundir).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape as markup_escape
from rich.table import Table

from rlx_cli.terminal import cell, one_line
from rlx_core.errors import NotFound, RlxError

if TYPE_CHECKING:
    from rlx_controller.lease import LeaseHolder
    from rlx_controller.processes import Process
    from rlx_controller.rundir import RunPaths

__all__ = ["register"]

console = Console(stderr=True)

PROVIDERS = ("local", "gcp-tpu")
STATUS_TIMEOUT_S = 3.0  # per inference worker asked by `rlx status`
ETA_WINDOW = 20  # steps whose median time sets the ETA


def _fail(message: str) -> NoReturn:
    """One escaped line on stderr (the message may quote a config, a dataset or a template)."""
    typer.echo("rlx: " + one_line(message), err=True)
    raise typer.Exit(1)


def _paths(run_dir: str | Path, work_dir: Path | None) -> RunPaths:
    """RunPaths of a run directory (path or URI) and optional work directory; exits on a bad one."""
    from rlx_controller.rundir import RunPaths

    try:
        return RunPaths.of(run_dir, work_dir)
    except RlxError as e:
        _fail(str(e))


def _load_config(
    config: str | None, paths: RunPaths, overrides: list[str], example: str = "addition"
) -> Any:
    from rlx_controller.code_demo import (
        CODE_TASK,
        code_demo_config,
        code_model_dir,
        write_code_jsonl,
    )
    from rlx_controller.demo import DEMO_TASK, base_model_dir, demo_config, write_addition_jsonl
    from rlx_controller.run_config import load_run_config, loads_run_config
    from rlx_core.config import to_toml
    from rlx_core.storage import join_uri

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
    from rlx_controller.driver import Driver, Progress

    return Driver(cfg, paths.uri, work_dir=paths.work, progress=Progress(steps=cfg.steps), log=log)


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
    from rlx_controller.rundir import default_work_dir

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
        from rlx_controller.run_config import load_run_config

        try:
            run_dir = load_run_config(config, overrides=tuple(overrides)).run_dir
        except RlxError as e:
            _fail(f"{type(e).__name__}: {e}")
    paths = _paths(run_dir or "rlx-run", work_dir)
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
    from rlx_controller.lease import read_holder
    from rlx_controller.rundir import CONFIG_FILE
    from rlx_controller.snapshot import SnapshotStore
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
    from rlx_controller.run_config import loads_run_config
    from rlx_controller.rundir import CONFIG_FILE, read_run_info, read_text

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
) -> None:
    """Continue RUN from its newest snapshot that verifies (a remote RUN on any machine: an
    empty work directory loses nothing). Refused while another controller runs it."""
    paths = _paths(run, work_dir)
    cfg = _run_config(paths)
    _drive(cfg, paths, resume=True, force=force)


def _controller(work: Path, holder: LeaseHolder | None) -> Process | None:
    """The run's controller on this machine: the process `controller.pid` in `work` names, while
    `holder` (the run's lease, as read) names that pid on this host with the process's start time
    (`LeaseHolder.process`). A stale file may name a pid the system has since given to another
    program, an rlx of another run included: None then, and it is never signalled."""
    from rlx_controller.rundir import CONTROLLER_PID

    try:
        pid = int((work / CONTROLLER_PID).read_text().strip())
    except (OSError, ValueError):
        return None
    if holder is None or holder.pid != pid:
        return None
    return holder.process()


def _worker_status(address: str, token_file: Path) -> dict[str, Any]:
    from rlx_core.clients import InferenceClient

    client = InferenceClient(address, token_file=str(token_file))
    try:
        s = client.status(timeout=STATUS_TIMEOUT_S)
    except RlxError as e:
        return {"loaded_version": None, "error": f"{type(e).__name__}: {e}"}
    finally:
        client.close()
    return {
        "loaded_version": s.loaded_version,
        "queue_depth": s.queue_depth,
        "active": s.active,
        "units_done": s.units_done,
        "tokens_per_s": s.tokens_per_s,
    }


def _token_file(run: Path, config: dict[str, Any]) -> Path:
    """The token of a run's services: the work directory's (local runs), or the controller's copy
    named by `provision.token_file` (gcp-tpu runs)."""
    from rlx_core.rpc.auth import default_token_path

    if (run / "token").exists():
        return run / "token"
    named = config.get("provision", {}).get("token_file", "")
    return Path(named).expanduser() if named else default_token_path()


def _answers(address: str, token_file: Path) -> bool:
    from rlx_core.clients import LifecycleClient

    try:
        with LifecycleClient(address, token_file=str(token_file)) as client:
            client.status(timeout=STATUS_TIMEOUT_S)
    except RlxError:
        return False
    return True


def _eta(records: list[dict[str, Any]], steps: int | None) -> dict[str, Any]:
    """Seconds per step (median of the last ETA_WINDOW steps) and the seconds left at that pace."""
    times = [r["step_s"] for r in records if isinstance(r.get("step_s"), (int, float))]
    recent = sorted(times[-ETA_WINDOW:])
    if not recent:
        return {"s_per_step": None, "eta_s": None}
    median = recent[len(recent) // 2]
    step = max((r["step"] for r in records), default=0)
    left = None if steps is None else max(0, steps - step) * median
    return {"s_per_step": median, "eta_s": left}


def run_status(paths: RunPaths) -> dict[str, Any]:
    """Everything `rlx status RUN` shows, as plain data (the `--json` output): the services and
    live metrics from the work directory, the config and snapshots from the run directory."""
    import tomllib
    from dataclasses import asdict

    from rlx_cli.plot_cmd import read_metrics, read_uploaded_metrics
    from rlx_controller.lease import read_holder
    from rlx_controller.rundir import CONFIG_FILE, read_text
    from rlx_controller.snapshot import SnapshotStore
    from rlx_launch.local import read_services, runs_service

    run = paths.work
    if not run.is_dir() and not (paths.remote and paths.storage.exists(CONFIG_FILE)):
        where = f"{paths.uri} (work dir {run})" if paths.remote else str(run)
        raise NotFound(f"{where}: no such run directory")
    steps: int | None = None
    config: dict[str, Any] = {}
    with contextlib.suppress(RlxError, tomllib.TOMLDecodeError):
        config = tomllib.loads(read_text(paths.storage, CONFIG_FILE))
        steps = config.get("steps")
    services: dict[str, Any] = {}
    workers: dict[str, Any] = {}
    token = _token_file(run, config)
    for name, h in sorted(read_services(run).items()):
        # pid 0: a service on another machine (a TPU node), alive when it answers; a local one
        # is alive while its pid, start time and run are the recorded ones
        alive = runs_service(h, run) if h.pid else _answers(h.address, token)
        services[name] = {
            "kind": h.kind,
            "pid": h.pid,
            "address": h.address,
            "alive": alive,
            "restarts": h.restarts,
            "log": h.log,
        }
        if h.kind == "inference":
            workers[name] = (
                _worker_status(h.address, token)
                if alive
                else {"loaded_version": None, "error": "not running"}
            )
    try:
        records = read_metrics(run)
    except NotFound:
        records = []
        if paths.remote:  # from a machine not running it: the metrics uploaded with snapshots
            with contextlib.suppress(NotFound):
                records = read_uploaded_metrics(paths.storage)
    trained = [r for r in records if r["step"] > 0]
    staleness: dict[str, int] = {}
    for r in trained:
        if isinstance(r.get("staleness"), int):
            key = str(r["staleness"])
            staleness[key] = staleness.get(key, 0) + 1
    heldout = {
        str(r["step"]): r["heldout"] for r in records if isinstance(r.get("heldout"), (int, float))
    }
    # the newest evaluation's per-dataset figures (eval/<name>/greedy, pass@1, pass@k, avg@k)
    evals = [r for r in records if any(k.startswith("eval/") for k in r)]
    newest_eval = (
        {
            "step": evals[-1]["step"],
            "figures": {
                k.removeprefix("eval/"): v for k, v in evals[-1].items() if k[:5] == "eval/"
            },
        }
        if evals
        else None
    )
    snap = SnapshotStore(paths.storage).latest()
    holder = read_holder(paths.storage)
    controller = _controller(run, holder)
    pid = None if controller is None else controller.pid
    last = trained[-1] if trained else {}
    numerics = {
        k: last[f"trainer/mismatch_{k}"]
        for k in ("mean", "p95", "max")
        if isinstance(last.get(f"trainer/mismatch_{k}"), (int, float))
    }
    return {
        "run": paths.uri,
        "work_dir": str(run),
        "controller": {"pid": pid, "alive": pid is not None},
        # who holds the run (on any machine: the lease in the run directory)
        "lease": None if holder is None else {**asdict(holder), "alive": holder.alive(time.time())},
        "services": services,
        "workers": workers,
        "step": last.get("step", 0),
        "steps": steps,
        "reward": last.get("reward"),
        "heldout": heldout,
        "eval": newest_eval,
        "staleness": staleness,
        # sampler vs trainer on the same version, the newest step's (nats)
        "numerical_mismatch": numerics or None,
        "policy_lag": _policy_lag(trained[-LAG_STEPS:]),
        **_eta(trained, steps),
        "last_snapshot": None
        if snap is None
        else {
            "step": snap.step,
            "version": snap.version,
            "reason": snap.reason,
            "created_unix": snap.created_unix,
        },
    }


LAG_STEPS = 100  # `rlx status` sums up the policy lag of the newest steps


def _policy_lag(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per staleness, over `records`: steps, the mean KL(π_generating ‖ π_trained) k3, and the
    range of the ratio π_trained / π_generating (the trainer's `lag_*` metrics)."""
    out: dict[str, dict[str, float]] = {}
    for r in records:
        kl, stale = r.get("trainer/lag_kl_k3"), r.get("staleness")
        if not isinstance(kl, (int, float)) or not isinstance(stale, int):
            continue
        g = out.setdefault(
            str(stale), {"steps": 0, "kl_k3": 0.0, "ratio_min": math.inf, "ratio_max": -math.inf}
        )
        g["steps"] += 1
        g["kl_k3"] += (kl - g["kl_k3"]) / g["steps"]
        g["ratio_min"] = min(g["ratio_min"], r.get("trainer/lag_ratio_min", math.inf))
        g["ratio_max"] = max(g["ratio_max"], r.get("trainer/lag_ratio_max", -math.inf))
    return out


def _hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _eval_figures(figures: dict[str, float | None]) -> str:
    """One line per eval dataset: "NAME greedy 0.968, pass@1 0.951, pass@8 0.998, avg@8 0.951"."""
    by_ds: dict[str, list[str]] = {}
    order = {"greedy": 0, "pass@1": 1}  # then pass@k, then avg@k

    def rank(key: str) -> tuple[str, int]:
        name, _, what = key.rpartition("/")
        return name, order.get(what, 2 if what.startswith("pass@") else 3)

    for key, value in sorted(figures.items(), key=lambda kv: rank(kv[0])):
        name, _, what = key.rpartition("/")
        shown = f"{value:.3f}" if isinstance(value, (int, float)) else "-"
        by_ds.setdefault(name, []).append(f"{what} {shown}")
    return "\n".join(f"{name}: {', '.join(parts)}" for name, parts in by_ds.items())


def status(
    run: str = typer.Argument(..., help=RUN_HELP),
    work_dir: Path | None = typer.Option(None, "--work-dir", help=WORK_DIR_HELP),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead."),
) -> None:
    """Components, loaded version per inference worker, step and ETA, staleness histogram and
    last snapshot of RUN (from any terminal; dead components are shown, not errors)."""
    try:
        out = run_status(_paths(run, work_dir))
    except RlxError as e:
        _fail(str(e))
    if json_output:
        typer.echo(json.dumps(out, sort_keys=True))
        return
    table = Table(title=f"rlx run {out['run']}", show_header=False)
    table.add_column("k", style="bold")
    table.add_column("v")
    c, lease = out["controller"], out["lease"]

    def safe(value: object) -> str:  # text from the run's files or a worker: shown, not obeyed
        return markup_escape(one_line(str(value)))

    if c["alive"]:
        table.add_row("controller", f"pid {c['pid']} alive")
    elif lease is not None and lease["alive"]:
        table.add_row("controller", f"on host {safe(lease['host'])} pid {lease['pid']} (its lease)")
    else:
        table.add_row("controller", "not running")
    for name, s in out["services"].items():
        state = "[green]alive[/green]" if s["alive"] else "[red]dead[/red]"
        # a service on a TPU node (pid 0) names its node: its log is NODE:logs/NAME.log there
        where = f"pid {s['pid']}" if s["pid"] else f"on node {safe(s['log'].split(':')[0])}"
        extra = ""
        if name in out["workers"]:
            w = out["workers"][name]
            extra = f", version {w['loaded_version']}" if "error" not in w else f", {w['error']}"
        table.add_row(
            safe(name),
            f"{state} {safe(s['address'])} {where} restarts {s['restarts']}{safe(extra)}",
        )
    total = out["steps"] if out["steps"] is not None else "?"
    table.add_row("step", f"{out['step']} / {total}")
    s_per_step = out["s_per_step"]
    pace = "-" if s_per_step is None else f"{s_per_step:.2f} s/step"
    table.add_row("ETA", f"{_hms(out['eta_s'])} ({pace})")
    if out["reward"] is not None:
        table.add_row("reward", f"{out['reward']:.3f}")
    heldout = sorted(out["heldout"].items(), key=lambda kv: int(kv[0]))
    table.add_row("held-out", ", ".join(f"{k}: {v:.3f}" for k, v in heldout[-6:]) or "-")
    if out["eval"] is not None:
        table.add_row(f"eval (step {out['eval']['step']})", _eval_figures(out["eval"]["figures"]))
    hist = sorted(out["staleness"].items(), key=lambda kv: int(kv[0]))
    table.add_row("staleness", ", ".join(f"{k}: {v} steps" for k, v in hist) or "-")
    num = out["numerical_mismatch"]
    table.add_row(
        "numerical mismatch",
        "-"
        if not num
        else ", ".join(f"{k} {v:.2g}" for k, v in num.items())
        + " nats (sampler vs trainer, same version)",
    )
    lag = sorted(out["policy_lag"].items(), key=lambda kv: int(kv[0]))
    table.add_row(
        "policy lag",
        "\n".join(
            f"staleness {k}: KL k3 {g['kl_k3']:.3g}, ratio {g['ratio_min']:.3g}-"
            f"{g['ratio_max']:.3g} ({g['steps']} steps)"
            for k, g in lag
        )
        or "-",
    )
    snap = out["last_snapshot"]
    table.add_row(
        "last snapshot",
        "-"
        if snap is None
        else f"step {snap['step']} ({snap['reason']}, "
        f"{time.strftime('%H:%M:%S', time.localtime(snap['created_unix']))})",
    )
    Console().print(table)


def _stop_services(run: Path, grace_s: float) -> list[str]:
    """SIGTERM the process group of every live service of RUN, SIGKILL what is left after
    `grace_s`; return the names stopped. Only a recorded process that is still that service of
    this run (pid, start time and run: `service_process`) is touched, through the group it
    leads."""
    from rlx_launch.local import read_services, service_process

    live = {}
    for name, h in read_services(run).items():
        proc = service_process(h, run) if h.pid else None  # pid 0: on a TPU node
        if proc is not None and proc.signal_group(signal.SIGTERM):
            live[name] = proc
    deadline = time.monotonic() + grace_s
    while any(p.alive() for p in live.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for proc in live.values():
        proc.signal_group(signal.SIGKILL)  # nothing when it has exited (or its pid is reused)
    return sorted(live)


def down(
    run: str = typer.Argument(..., help=RUN_HELP),
    work_dir: Path | None = typer.Option(None, "--work-dir", help=WORK_DIR_HELP),
    timeout_s: float = typer.Option(
        120.0, "--timeout", help="Seconds to wait for the controller's snapshot before SIGKILL."
    ),
) -> None:
    """Stop RUN: SIGTERM the controller (it writes a snapshot and stops its services), then stop
    any service still running. Safe to repeat; `rlx resume RUN` continues the run. Only this
    run's processes are signalled (each recognised by pid, start time and run)."""
    from rlx_controller.lease import read_holder

    paths = _paths(run, work_dir)
    work = paths.work
    if not work.is_dir():
        _fail(
            f"{work}: no such run directory"
            + (f" (work dir of {paths.uri})" if paths.remote else "")
        )
    try:
        holder = read_holder(paths.storage)
    except RlxError:  # the run directory cannot be read: the controller cannot be told apart
        holder = None
    controller = _controller(work, holder)
    pid = None if controller is None else controller.pid
    if controller is not None and controller.signal(signal.SIGTERM):
        typer.echo(
            f"rlx: stopping the controller (pid {pid}); it writes a snapshot first", err=True
        )
        start = time.monotonic()
        next_note = start + 10
        while controller.alive() and time.monotonic() - start < timeout_s:
            time.sleep(0.2)
            if time.monotonic() >= next_note:
                typer.echo(
                    f"rlx: waiting for the controller ({time.monotonic() - start:.0f} s)", err=True
                )
                next_note += 10
        if controller.alive():
            typer.echo(f"rlx: controller still running after {timeout_s:.0f} s: SIGKILL", err=True)
            controller.signal(signal.SIGKILL)
    stopped = _stop_services(work, grace_s=10.0)
    if pid is None and not stopped:
        typer.echo(f"rlx: {paths.uri} is already down")
        return
    left = f"; services stopped here: {', '.join(stopped)}" if stopped else ""
    typer.echo(f"rlx: {paths.uri} is down{left}")


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(resume)
    app.command()(status)
    app.command()(down)
