"""`rlx provision`: the nodes of a run: TPU VMs through the Cloud TPU API (queued resources),
and the CPU VMs of machine_type pools through Compute Engine (instances).

rlx provision plan CONFIG       # what would be created (a table); calls nothing
rlx provision apply CONFIG      # create what is missing, wait until every node is ACTIVE
rlx provision list CONFIG       # the run's nodes and their states (--all: every run)
rlx provision delete CONFIG     # delete them (asks first; --yes does not)

CONFIG is a run config with a [provision] table, or a run directory `rlx up` made (its saved
config is read). `rlx up CONFIG --provider gcp-tpu` runs `apply` itself.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from rlx_cli.up_cmd import _fail
from rlx_core.errors import RlxError

__all__ = ["load_tpu_config", "provision_app"]

console = Console(stderr=True)

provision_app = typer.Typer(
    help="Create, list and delete a run's TPU VMs (Cloud TPU API, queued resources) and CPU VMs "
    "(Compute Engine).",
    no_args_is_help=True,
)

TARGET_HELP = "A run config TOML with a \\[provision] table, or the run directory of `rlx up`."


def load_tpu_config(target: str, overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """The RunConfig of a config file or a run directory, as a gcp-tpu run (so every check of
    that provider applies); exits with the error naming the field."""
    from rlx_controller import CONFIG_FILE, load_run_config, loads_run_config
    from rlx_core.storage import open_storage

    sets = ("services.provider=gcp-tpu", *overrides)
    try:
        if target.endswith(".toml"):
            return load_run_config(target, overrides=sets)
        storage = open_storage(target)
        if not storage.exists(CONFIG_FILE):
            _fail(f"{target}: neither a .toml config nor a run directory (no {CONFIG_FILE})")
        return loads_run_config(storage.get(CONFIG_FILE).decode(), overrides=sets)
    except RlxError as e:
        _fail(f"{type(e).__name__}: {e}")


def _plan(target: str, overrides: list[str]) -> Any:
    from rlx_launch import make_plan

    cfg = load_tpu_config(target, overrides)
    try:
        return make_plan(cfg)
    except RlxError as e:
        _fail(f"{type(e).__name__}: {e}")


def _count(plan: Any) -> str:
    """What the plan's nodes are: "5 queued resources", "3 queued resources and 1 instance"."""
    vms = sum(n.is_vm for n in plan.nodes)
    qrs = len(plan.nodes) - vms
    text = f"{qrs} queued resource{'s' * (qrs != 1)}"
    return text + (f" and {vms} instance{'s' * (vms != 1)}" if vms else "")


def plan_table(plan: Any) -> Table:
    vms = any(n.is_vm for n in plan.nodes)
    table = Table(
        title=f"rlx provision: run {plan.name} in {plan.project}/{plan.zone}",
        caption=f"run directory {plan.run_dir}; {_count(plan)}",
    )
    columns = ("node", "pool", "accelerator / machine", "capacity", "runtime / image", "network")
    if not vms:
        columns = (
            "queued resource / node",
            "pool",
            "accelerator",
            "capacity",
            "runtime",
            "network",
        )
    table.add_column(columns[0], no_wrap=True)  # node ids whole: `--script NODE` takes one
    for col in columns[1:]:
        table.add_column(col)
    table.add_column("services (port)")
    for n in plan.nodes:
        capacity = n.capacity if n.capacity != "reserved" else f"reserved {n.reservation}"
        network = n.network + (f"/{n.subnetwork}" if n.subnetwork else "")
        services = ", ".join(f"{s.name} ({s.port})" for s in n.services)
        machine = f"{n.machine_type} (VM)" if n.is_vm else n.accelerator_type
        # an image's last part ("debian-12" of .../images/family/debian-12): `--script` shows it all
        image = f"{n.image.rsplit('/', 1)[-1]}, {n.disk_gb} GB" if n.is_vm else n.runtime_version
        table.add_row(n.node_id, n.pool, machine, capacity, image, network, services)
    return table


OVERRIDES_OPT = typer.Option([], "--set", help="KEY=VALUE override of the config.")


@provision_app.command("plan")
def plan_cmd(
    target: str = typer.Argument(..., help=TARGET_HELP),
    overrides: list[str] = OVERRIDES_OPT,
    show_script: str | None = typer.Option(
        None, "--script", help="Also print the startup script of this node."
    ),
) -> None:
    """Print what `apply` would create (a queued resource or VM per node), calling nothing."""
    from rlx_launch import startup_script

    plan = _plan(target, overrides)
    Console(width=max(140, Console().width)).print(plan_table(plan))
    if show_script is not None:
        try:
            node = plan.node(show_script)
        except KeyError:
            _fail(
                f"no node {show_script!r} in the plan: {', '.join(n.node_id for n in plan.nodes)}"
            )
        typer.echo(startup_script(plan, node))


@provision_app.command("apply")
def apply_cmd(
    target: str = typer.Argument(..., help=TARGET_HELP),
    overrides: list[str] = OVERRIDES_OPT,
    poll_s: float = typer.Option(10.0, "--poll", help="Seconds between state checks."),
    timeout_s: float | None = typer.Option(
        None, "--timeout", help="Give up waiting after this many seconds (nothing is deleted)."
    ),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until every node is ACTIVE."),
) -> None:
    """Create what is missing, re-create what was preempted or failed, wait until ACTIVE.

    Names derive from the run: running it twice creates nothing new."""
    from rlx_launch import GcpApi, state_lines

    plan = _plan(target, overrides)
    try:
        with GcpApi.connect(plan) as api:
            done = api.apply(
                plan,
                on_progress=state_lines(console.print),
                poll_s=poll_s,
                timeout_s=timeout_s,
                wait=wait,
            )
    except RlxError as e:
        _fail(f"{type(e).__name__}: {e}")
    for node_id, what in done.items():
        typer.echo(f"{node_id}: {what}")
    state = "ACTIVE" if wait else "requested"
    typer.echo(f"rlx: {len(done)} nodes of run {plan.name} {state}")


@provision_app.command("list")
def list_cmd(
    target: str = typer.Argument(..., help=TARGET_HELP),
    every_run: bool = typer.Option(
        False,
        "--all",
        help="Every rlx run's nodes in the zone, not only this one's (instances too when the "
        "config has machine_type pools).",
    ),
) -> None:
    """The run's queued resources (and instances) and their states (--all: every rlx run's)."""
    from rlx_launch import GcpApi

    plan = _plan(target, [])
    try:
        with GcpApi.connect(plan) as api:
            rows = api.list_run("" if every_run else plan.name)
    except RlxError as e:
        _fail(f"{type(e).__name__}: {e}")
    vms = any(n.is_vm for n in plan.nodes)
    what = "queued resources and instances" if vms else "queued resources"
    table = Table(title=f"rlx {what} in {plan.project}/{plan.zone}")
    columns = ("node", "run", "pool", "accelerator / machine", "state")
    if not vms:
        columns = ("queued resource", "run", "pool", "accelerator", "state")
    table.add_column(columns[0], no_wrap=True)
    for col in columns[1:]:
        table.add_column(col)
    for s in rows:
        labels = s.labels or {}
        state = s.state + (f" {s.reason}" if s.reason else "")
        table.add_row(
            s.node_id,
            labels.get("rlx-run", ""),
            labels.get("rlx-pool", ""),
            s.accelerator_type or f"{s.machine_type} (VM)",
            state,
        )
    Console(width=max(120, Console().width)).print(table)
    if not rows:
        typer.echo("rlx: none")


@provision_app.command("delete")
def delete_cmd(
    target: str = typer.Argument(..., help=TARGET_HELP),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask."),
) -> None:
    """Delete the run's queued resources and their TPU VMs, and its instances (asks first).

    The run directory stays: `rlx resume` provisions them again."""
    from rlx_launch import GcpApi

    plan = _plan(target, [])
    ids = [n.node_id for n in plan.nodes]
    if not yes:
        if not sys.stdin.isatty():
            _fail("delete asks before it deletes: pass --yes to run it without a terminal")
        typer.confirm(f"delete {_count(plan)} of run {plan.name}?", abort=True)
    try:
        with GcpApi.connect(plan) as api:
            gone = api.delete(ids)
    except RlxError as e:
        _fail(f"{type(e).__name__}: {e}")
    for node_id in ids:
        typer.echo(f"{node_id}: {'deleted' if node_id in gone else 'did not exist'}")
