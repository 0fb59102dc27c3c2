"""`rlx status`, `rlx down`, `rlx snapshot take` (a run seen from another terminal), `--detach`.

While the run's controller runs on this machine it serves the Controller service on a loopback
port (`controller.json` in the work directory names it, with its token file): `rlx status` asks
it (step, phase, loaded versions, component health) and merges the answer with the run
directory; `rlx down` asks it to Stop (a snapshot, then its services stop) and waits for the
process to exit; `rlx snapshot take` asks for a snapshot now. When no controller answers, status
and down read the run directory and the pid files as they always did, and `snapshot take` says
so. `rlx up --detach` / `rlx resume --detach` start the run in its own process and session and
return once its service answers.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape as markup_escape
from rich.table import Table

from rlx_cli.terminal import one_line
from rlx_cli.up_cmd import RUN_HELP, WORK_DIR_HELP, _fail, _paths, _resume_command
from rlx_core.errors import NotFound, RlxError

if TYPE_CHECKING:
    from rlx_controller import LeaseHolder, RunPaths
    from rlx_core.clients import ControllerClient
    from rlx_core.processes import Process

__all__ = ["detach", "live_controller", "register", "run_status", "take_snapshot"]

STATUS_TIMEOUT_S = 3.0  # per inference worker (and the controller service) asked by `rlx status`
ETA_WINDOW = 20  # steps whose median time sets the ETA
DETACH_LOG = "rlx-detached.log"  # in the work directory: the output of a detached run
DETACH_WAIT_S = 600.0  # how long `--detach` waits for the run's service to answer


# --- the controller service of a run -------------------------------------------------------------


def live_controller(work: Path) -> tuple[dict[str, Any], ControllerClient] | None:
    """The controller service of the run whose work directory is `work`, and a client of it,
    while that process (pid and start time of `controller.json`) runs and answers; else None."""
    from rlx_controller import read_controller
    from rlx_core.clients import ControllerClient

    record = read_controller(work)
    if record is None:
        return None
    try:
        client = ControllerClient(
            record["address"], token_file=record["token_file"], timeout=STATUS_TIMEOUT_S
        )
    except RlxError:  # its token file is gone: it is ending
        return None
    try:
        client.status()
    except RlxError:
        client.close()
        return None
    return record, client


def _controller(work: Path, holder: LeaseHolder | None) -> Process | None:
    """The run's controller on this machine: the process `controller.pid` in `work` names, while
    `holder` (the run's lease, as read) names that pid on this host with the process's start time
    (`LeaseHolder.process`). A stale file may name a pid the system has since given to another
    program, an rlx of another run included: None then, and it is never signalled."""
    from rlx_controller import CONTROLLER_PID

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


def _live_status(work: Path) -> dict[str, Any] | None:
    """What the run's controller service answers (`ControllerStatus` as data, with its address),
    or None when none runs here or it does not answer."""
    live = live_controller(work)
    if live is None:
        return None
    record, client = live
    try:
        s = client.status()
    except RlxError:
        return None
    finally:
        client.close()
    return {**asdict(s), "address": record["address"]}


def run_status(paths: RunPaths) -> dict[str, Any]:
    """Everything `rlx status RUN` shows, as plain data (the `--json` output): the services and
    live metrics from the work directory, the config and snapshots from the run directory, and
    (`live`) what the run's controller service answers while it runs here (None otherwise)."""
    import tomllib
    from dataclasses import asdict

    from rlx_cli.plot_cmd import read_metrics, read_uploaded_metrics
    from rlx_controller import CONFIG_FILE, SnapshotStore, read_holder, read_text
    from rlx_launch import read_services, runs_service

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
    live = _live_status(run) if controller is not None else None
    last = trained[-1] if trained else {}
    numerics = {
        k: last[f"trainer/mismatch_{k}"]
        for k in ("mean", "p95", "max")
        if isinstance(last.get(f"trainer/mismatch_{k}"), (int, float))
    }
    return {
        "run": paths.uri,
        "work_dir": str(run),
        "controller": {
            "pid": pid,
            "alive": pid is not None,
            "address": None if live is None else live["address"],
        },
        # the controller service's answer: phase, loaded versions, component health, ...
        "live": live,
        # who holds the run (on any machine: the lease in the run directory)
        "lease": None if holder is None else {**asdict(holder), "alive": holder.alive(time.time())},
        "services": services,
        "workers": workers,
        "step": max(last.get("step", 0), live["step"] if live else 0),
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


def _safe(value: object) -> str:
    """Text from the run's files or a worker: shown, not obeyed."""
    return markup_escape(one_line(str(value)))


def _service_rows(table: Table, out: dict[str, Any]) -> None:
    """One row per service of `rlx status`: alive, address, pid or node, restarts, the version
    a worker holds and the state the controller sees it in."""
    live = out["live"]
    for name, s in out["services"].items():
        state = "[green]alive[/green]" if s["alive"] else "[red]dead[/red]"
        # a service on a TPU node (pid 0) names its node: its log is NODE:logs/NAME.log there
        where = f"pid {s['pid']}" if s["pid"] else f"on node {_safe(s['log'].split(':')[0])}"
        extra = ""
        if name in out["workers"]:
            w = out["workers"][name]
            extra = f", version {w['loaded_version']}" if "error" not in w else f", {w['error']}"
        if live is not None and name in live["components"]:
            extra += f", controller sees: {live['components'][name]}"
        table.add_row(
            _safe(name),
            f"{state} {_safe(s['address'])} {where} restarts {s['restarts']}{_safe(extra)}",
        )


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
    c, lease, live = out["controller"], out["lease"], out["live"]
    if c["alive"] and live is not None:
        table.add_row("controller", f"pid {c['pid']} alive, serving {_safe(c['address'])}")
        table.add_row("phase", _safe(live["phase"]))
    elif c["alive"]:
        table.add_row("controller", f"pid {c['pid']} alive")
    elif lease is not None and lease["alive"]:
        table.add_row(
            "controller", f"on host {_safe(lease['host'])} pid {lease['pid']} (its lease)"
        )
    else:
        table.add_row("controller", "not running")
    _service_rows(table, out)
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
    from rlx_launch import read_services, service_process

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


def _ask_to_stop(work: Path, controller: Process) -> bool:
    """Stop the run through its controller service (a snapshot, then its services stop); whether
    it was asked. The call returns once the snapshot is written."""
    live = live_controller(work)
    if live is None or live[0]["pid"] != controller.pid:
        return False
    record, client = live
    typer.echo(
        f"rlx: stopping the controller (pid {controller.pid}) through its service at "
        f"{record['address']}; it writes a snapshot first",
        err=True,
    )
    try:
        step = client.stop("rlx down", wait=True)
    except RlxError as e:  # it stopped answering: the signal does the rest
        typer.echo("rlx: " + one_line(f"its Stop failed ({type(e).__name__}: {e})"), err=True)
        return False
    finally:
        client.close()
    done = "no snapshot (no step trained)" if step is None else f"snapshot at step {step}"
    typer.echo(f"rlx: {done}; waiting for the controller to exit", err=True)
    return True


def _wait_exit(controller: Process, timeout_s: float) -> None:
    """Wait up to `timeout_s` for the controller to exit, then SIGKILL it."""
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


def down(
    run: str = typer.Argument(..., help=RUN_HELP),
    work_dir: Path | None = typer.Option(None, "--work-dir", help=WORK_DIR_HELP),
    timeout_s: float = typer.Option(
        120.0, "--timeout", help="Seconds to wait for the controller's snapshot before SIGKILL."
    ),
) -> None:
    """Stop RUN: ask its controller service to Stop (or SIGTERM the controller when it does not
    answer; either way it writes a snapshot and stops its services), then stop any service still
    running. Safe to repeat; `rlx resume RUN` continues the run. Only this run's processes are
    signalled (each recognised by pid, start time and run)."""
    from rlx_controller import read_holder

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
    if controller is not None:
        if _ask_to_stop(work, controller):
            _wait_exit(controller, timeout_s)
        elif controller.signal(signal.SIGTERM):
            typer.echo(
                f"rlx: stopping the controller (pid {pid}); it writes a snapshot first", err=True
            )
            _wait_exit(controller, timeout_s)
    stopped = _stop_services(work, grace_s=10.0)
    if pid is None and not stopped:
        typer.echo(f"rlx: {paths.uri} is already down")
        return
    left = f"; services stopped here: {', '.join(stopped)}" if stopped else ""
    typer.echo(f"rlx: {paths.uri} is down{left}")


def take_snapshot(paths: RunPaths, deadline_s: float) -> int:
    """`rlx snapshot take`: a committed snapshot of the running RUN now; its step. NotFound
    naming how to continue the run when no controller runs it here."""
    live = live_controller(paths.work)
    if live is None:
        raise NotFound(
            f"no controller is running {paths.uri} on this machine (it has no live "
            f"controller service); `{_resume_command(paths)}` continues it from its newest "
            "snapshot"
        )
    _record, client = live
    with client:
        return client.snapshot(deadline_s=deadline_s)


def detach(args: list[str], paths: RunPaths) -> None:
    """`rlx up --detach` / `rlx resume --detach`: run `rlx ARGS` in its own process and session,
    its output in the work directory's DETACH_LOG; return once its controller service answers
    (exit 1 with the log's end when the run ends first)."""
    paths.make_work_dir()
    log_path = paths.work / DETACH_LOG
    with open(log_path, "ab") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "rlx_cli", *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C or a closed terminal does not reach it
        )
    deadline = time.monotonic() + DETACH_WAIT_S
    live = None
    while live is None:
        if child.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            _fail(
                f"the run ended before its service answered (exit {child.returncode}); "
                f"{log_path}: " + " | ".join(tail)
            )
        if time.monotonic() > deadline:
            _fail(f"the run's service did not answer within {DETACH_WAIT_S:.0f} s; see {log_path}")
        time.sleep(0.2)
        found = live_controller(paths.work)
        if found is not None and found[0]["pid"] == child.pid:
            live = found
        elif found is not None:
            found[1].close()
    record, client = live
    client.close()
    run = _resume_command(paths).removeprefix("rlx resume ")  # RUN [--work-dir DIR]
    typer.echo(
        f"rlx: {paths.uri} runs in the background (pid {child.pid})\n"
        f"  controller         {record['address']}\n"
        f"  log                {log_path} (follow it: tail -f {log_path})\n"
        f"  status             rlx status {run}\n"
        f"  stop               rlx down {run}"
    )


def register(app: typer.Typer) -> None:
    app.command()(status)
    app.command()(down)
