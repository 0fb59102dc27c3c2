"""`rlx plot RUN [--out PATH]`: a PNG of a run's metrics per step.

Six panels from `RUN/metrics.jsonl`: the batch's mean reward (in a run mixing datasets, each
dataset's too, `reward/<name>`), the held-out accuracy (eval steps;
with `[eval] samples` also each eval dataset's sampled pass@1 and pass@k), the numerical
mismatch (|log π_sampler − log π_trainer| on the same version: `trainer/mismatch_mean`, `_p95`,
`_max`, nats, log scale), throughput (generated tokens/s, steps/s), and the policy lag between
the version that generated a batch and the params it trains (`trainer/lag_kl_k3`, and the IS
ratio range `trainer/lag_ratio_min` / `_max`), coloured by the batch's staleness. Drawn with
matplotlib's Agg canvas (no display, no pyplot state), written to `RUN/plot.png` unless `--out`
says otherwise.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from rlx_core.errors import Corrupt, InvalidArgument, NotFound

if TYPE_CHECKING:
    from rlx_core.storage import Storage

__all__ = ["PLOT_FILE", "read_metrics", "register", "write_plot"]

PLOT_FILE = "plot.png"
WIDTH_IN, HEIGHT_IN, DPI = 12, 11, 100  # a 1200 x 1100 PNG


def read_metrics(run: Path) -> list[dict[str, Any]]:
    """The records of `run/metrics.jsonl` in step order, the last line of a step winning (a resumed
    run writes the steps after its snapshot again).

    NotFound when the file is missing; InvalidArgument naming the file and line for a line that is
    not a JSON object with an integer `step`, Corrupt for a file that is not UTF-8, InvalidArgument
    naming `run` when it is not a directory. An unterminated last line that does not parse is a
    write cut short by a kill and is skipped.
    """
    from rlx_controller import METRICS_FILE

    path = run / METRICS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NotFound(f"{path}: no such file (has the run made a step yet?)") from None
    except NotADirectoryError:
        raise InvalidArgument(f"{run}: not a directory (the run directory)") from None
    except OSError as e:
        raise InvalidArgument(f"{path}: cannot read: {e.strerror}") from None
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise Corrupt(f"{path}: not UTF-8 text ({e.reason})") from None
    return parse_metrics(text, str(path))


def read_uploaded_metrics(storage: Storage) -> list[dict[str, Any]]:
    """`read_metrics` of a remote run's metrics.jsonl as uploaded with its snapshots."""
    from rlx_controller import METRICS_PARTS, read_uploaded

    data = read_uploaded(storage)
    where = storage.key_uri(METRICS_PARTS)
    if data is None:
        raise NotFound(f"{where}: no metrics uploaded (has the run made a snapshot yet?)")
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise Corrupt(f"{where}: not UTF-8 text ({e.reason})") from None
    return parse_metrics(text, where)


def parse_metrics(text: str, path: str) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl's text (see `read_metrics`); `path` names it in errors."""
    lines = text.split("\n")
    by_step: dict[int, dict[str, Any]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        torn = number == len(lines)  # after the last "\n": never finished
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if torn:
                continue
            raise InvalidArgument(f"{path}:{number}: not JSON ({e.msg})", field="metrics") from None
        step = rec.get("step") if isinstance(rec, dict) else None
        if isinstance(step, bool) or not isinstance(step, int):
            raise InvalidArgument(
                f"{path}:{number}: expected a JSON object with an integer 'step'", field="metrics"
            )
        by_step[step] = rec
    return [by_step[s] for s in sorted(by_step)]


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for rec in records:
        value = rec.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            xs.append(rec["step"])
            ys.append(float(value))
    return xs, ys


def _smooth(ys: list[float]) -> list[float]:
    """Trailing mean over a window of about a twentieth of the run (at most 25 steps)."""
    w = max(1, min(25, len(ys) // 20))
    out, total = [], 0.0
    for i, y in enumerate(ys):
        total += y
        if i >= w:
            total -= ys[i - w]
        out.append(total / min(i + 1, w))
    return out


def _no_data(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in metrics.jsonl", ha="center", va="center", color="gray")


def _dataset_rewards(records: list[dict[str, Any]]) -> list[str]:
    """The per-dataset reward series (`reward/<name>`) of a run mixing two or more datasets, in
    name order ([] for a single dataset: its series is the batch mean)."""
    keys = sorted({k for r in records for k in r if k.startswith("reward/")})
    return keys if len(keys) > 1 else []


def _reward(ax: Any, records: list[dict[str, Any]]) -> None:
    ax.set_title("reward (batch mean)")
    xs, ys = _series(records, "reward")
    if not xs:
        return _no_data(ax, "reward")
    ax.plot(xs, ys, color="tab:blue", alpha=0.3, linewidth=0.8, label="per step")
    ax.plot(xs, _smooth(ys), color="tab:blue", label="trailing mean")
    for key in _dataset_rewards(records):  # a mixed run: each dataset's, smoothed
        dx, dy = _series(records, key)  # NaN (no scored sample of it this step) is skipped
        kept = [(x, y) for x, y in zip(dx, dy, strict=True) if not math.isnan(y)]
        if kept:
            ax.plot(
                [x for x, _ in kept],
                _smooth([y for _, y in kept]),
                linewidth=0.9,
                linestyle="--",
                label=key.removeprefix("reward/"),
            )
    ax.legend(loc="lower right", fontsize="small")


def _pass_keys(records: list[dict[str, Any]]) -> list[str]:
    """The sampled pass@k series of the eval datasets (`eval/<name>/pass@<k>`), in name order."""
    keys = {k for r in records for k in r if k.startswith("eval/") and "/pass@" in k}
    return sorted(keys)


def _heldout(ax: Any, records: list[dict[str, Any]]) -> None:
    ax.set_title("held-out accuracy (greedy)")
    xs, ys = _series(records, "heldout")
    if not xs:
        return _no_data(ax, "held-out accuracy")
    ax.plot(xs, ys, marker="o", color="tab:green", label="greedy")
    ax.set_ylim(0, 1.02)
    ax.annotate(f"{ys[-1]:.3f}", (xs[-1], ys[-1]), textcoords="offset points", xytext=(0, 6))
    passes = _pass_keys(records)  # with `[eval] samples` > 0: sampled pass@1 and pass@k
    for key in passes:
        px, py = _series(records, key)
        ax.plot(px, py, marker=".", linestyle="--", linewidth=0.9, label=key.removeprefix("eval/"))
    if passes:
        ax.set_title("held-out accuracy (greedy) and pass@k (sampled)")
        ax.legend(loc="lower right", fontsize="small")


def _mismatch(ax: Any, records: list[dict[str, Any]]) -> None:
    ax.set_title("numerical mismatch: sampler vs trainer, same version (nats)")
    found = False
    for key, color in (
        ("trainer/mismatch_mean", "tab:red"),
        ("trainer/mismatch_p95", "tab:brown"),
        ("trainer/mismatch_max", "tab:orange"),
    ):
        xs, ys = _series(records, key)
        pos = [(x, y) for x, y in zip(xs, ys, strict=True) if y > 0]  # log scale: 0 is exact
        if pos:
            ax.plot(*zip(*pos, strict=True), color=color, linewidth=0.9, label=key[8:])
            found = True
    if not found:
        return _no_data(ax, "trainer/mismatch_* above 0")
    ax.set_yscale("log")
    ax.legend(loc="upper right")


def _by_staleness(records: list[dict[str, Any]], key: str) -> dict[int, tuple[list, list]]:
    """`key`'s points per step, grouped by the batch's staleness (-1 where not recorded)."""
    groups: dict[int, tuple[list, list]] = {}
    for rec in records:
        value = rec.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            xs, ys = groups.setdefault(int(rec.get("staleness", -1)), ([], []))
            xs.append(rec["step"])
            ys.append(float(value))
    return groups


def _lag(ax: Any, records: list[dict[str, Any]]) -> None:
    ax.set_title("policy lag: KL(π_generating ‖ π_trained), k3 (nats)")
    groups = _by_staleness(records, "trainer/lag_kl_k3")
    if not groups:
        return _no_data(ax, "trainer/lag_kl_k3")
    for staleness, (xs, ys) in sorted(groups.items()):
        ax.plot(xs, ys, marker=".", linestyle="none", label=f"staleness {staleness}")
    ax.legend(loc="upper right", fontsize="small")


def _lag_ratio(ax: Any, records: list[dict[str, Any]]) -> None:
    ax.set_title("policy lag: π_trained / π_generating, min and max over tokens")
    lows, highs = (_by_staleness(records, f"trainer/lag_ratio_{x}") for x in ("min", "max"))
    if not highs:
        return _no_data(ax, "trainer/lag_ratio_*")
    for staleness in sorted(highs):
        (line,) = ax.plot(*highs[staleness], marker="^", linestyle="none", markersize=3)
        line.set_label(f"staleness {staleness}")
        if staleness in lows:
            ax.plot(
                *lows[staleness], marker="v", linestyle="none", markersize=3, color=line.get_color()
            )
    ax.axhline(1.0, color="gray", linewidth=0.6)
    ax.set_yscale("log")
    ax.legend(loc="upper right", fontsize="small")


def _throughput(ax: Any, records: list[dict[str, Any]]) -> None:
    ax.set_title("throughput (trailing means)")
    xs, ys = _series(records, "gen_tokens_per_s")
    sx, sy = _series(records, "step_s")
    handles = []
    if xs:
        ax.plot(xs, ys, color="tab:purple", alpha=0.2, linewidth=0.8)
        handles += ax.plot(xs, _smooth(ys), color="tab:purple", label="gen tokens/s")
        ax.set_ylabel("gen tokens/s", color="tab:purple")
    if sx:
        rate = ax.twinx()
        per_s = _smooth([1.0 / s if s > 0 else 0.0 for s in sy])
        handles += rate.plot(sx, per_s, color="black", linestyle="--", label="steps/s")
        rate.set_ylabel("steps/s")
    if not handles:
        return _no_data(ax, "gen_tokens_per_s or step_s")
    ax.legend(handles=handles, loc="lower right")


def write_plot(run: Path, out: Path | None = None, *, name: str = "") -> Path:
    """Draw the metrics of `run` into a PNG at `out` (default `run/plot.png`) titled with `name`
    (default the directory's name); return its path."""
    out = out if out is not None else run / PLOT_FILE
    return draw_plot(read_metrics(run), out, name or run.name)


def draw_plot(records: list[dict[str, Any]], out: Path, name: str) -> Path:
    """Draw metric records into a PNG at `out`, titled with the run's `name`; return `out`."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    (ax_r, ax_h), (ax_m, ax_t), (ax_l, ax_q) = fig.subplots(3, 2, sharex=True)
    last = max((r["step"] for r in records), default=0)
    fig.suptitle(f"rlx run {name}: {last} steps")
    _reward(ax_r, records)
    _heldout(ax_h, records)
    _mismatch(ax_m, records)
    _throughput(ax_t, records)
    _lag(ax_l, records)
    _lag_ratio(ax_q, records)
    ax_l.set_xlabel("step")
    ax_q.set_xlabel("step")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, format="png")
    except OSError as e:
        raise InvalidArgument(f"{out}: cannot write the plot: {e.strerror or e}") from None
    return out


def plot(
    run: str = typer.Argument(
        ..., help="The run directory (holds metrics.jsonl): a path, s3:// or gs:// URI."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Where to write the PNG [RUN/plot.png; ./plot.png for a remote RUN]."
    ),
) -> None:
    """Plot reward, held-out accuracy, numerical mismatch, throughput and policy lag per step as
    a PNG; print its path.

    A remote RUN is plotted from the metrics uploaded with its newest snapshot."""
    from rlx_controller import RunPaths

    paths = RunPaths.of(run)
    if not paths.remote:
        path = write_plot(paths.work, out.resolve() if out is not None else None)
    else:
        where = (out or Path(PLOT_FILE)).resolve()
        path = draw_plot(read_uploaded_metrics(paths.storage), where, paths.uri)
    typer.echo(str(path))


def register(app: typer.Typer) -> None:
    app.command()(plot)
