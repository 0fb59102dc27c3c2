"""`rlx eval`: a checkpoint's figures on a config's eval datasets, through the same services.

rlx eval                                          # the built-in demo's base model
rlx eval --example code --samples 8               # the built-in code example's base model
rlx eval --model DIR --samples 8                  # an HF checkpoint directory, pass@8
rlx eval --run runs/r1 --step 600 --samples 8     # a run's trainer checkpoint (its config)
rlx eval CONFIG.toml --model DIR --json --out samples.jsonl

Per eval dataset: greedy accuracy, pass@1 and pass@k (the unbiased estimator of Chen et al.
2021 over k sampled answers a prompt), avg@k, the mean response length, and the verdict counts
(rlx_controller.evaluation). `--run` exports the checkpoint to a temporary HF directory first
(as `rlx export` does) and removes it at the end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from rlx_cli.terminal import cell, one_line
from rlx_core.errors import FailedPrecondition, InvalidArgument, NotFound

if TYPE_CHECKING:
    from rlx_controller import EvalSample, EvalSummary
    from rlx_core.configs.run import RunConfig

__all__ = ["eval_command", "register", "summary_tables"]


def _say(message: str) -> None:
    """Progress: on stderr, so that --json's stdout stays one object."""
    print(one_line(message), file=sys.stderr, flush=True)


def _check_options(run: str | None, step: int | None, model: Path | None) -> None:
    """The option combinations `rlx eval` refuses, each naming the option."""
    if step is not None and run is None:
        raise InvalidArgument("--step needs --run (the run whose checkpoint it names)")
    if run is not None and model is not None:
        raise InvalidArgument("give --run or --model, not both")
    if model is not None and not (model / "config.json").is_file():
        raise NotFound(f"--model {model}: no config.json there (an HF checkpoint directory)")


def _check_out(out: Path | None) -> None:
    """--out: a file that can be written (not a directory, nothing on its way a file, its
    nearest existing directory writable), checked before anything runs."""
    if out is None:
        return
    if out.is_dir():
        raise InvalidArgument(f"--out {out}: is a directory (the JSONL file of every sample)")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InvalidArgument(f"--out {out}: {parent} is not a directory")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise InvalidArgument(f"--out {out}: {parent} is not writable here")
            break
    if out.exists() and not os.access(out, os.W_OK):
        raise InvalidArgument(f"--out {out}: not writable here")


def _check_samples(k: int, cfg: RunConfig, given: bool) -> None:
    """The sampled answers a prompt gets must fit the inference workers' limits (they would
    refuse the first unit, after every service has started)."""
    limits = cfg.inference.limits
    what = "--samples" if given else "eval.samples"
    for name, cap in (
        ("max_samples_per_prompt", limits.max_samples_per_prompt),
        ("max_samples", limits.max_samples),
    ):
        if k > cap:
            raise InvalidArgument(
                f"{what} {k}: more than inference.limits.{name} = {cap} answers per prompt"
            )


def _run_config_text(run: str) -> str:
    from rlx_controller import CONFIG_FILE, RunPaths, read_text

    paths = RunPaths.of(run)
    if not paths.storage.exists(CONFIG_FILE):
        raise NotFound(f"--run {paths.uri}: no such run (no {CONFIG_FILE} there)")
    return read_text(paths.storage, CONFIG_FILE)


def _config(
    config: str | None, run: str | None, work: Path, overrides: list[str], example: str | None
) -> RunConfig:
    """CONFIG; without it, the run's own config with --run, else the built-in example's."""
    from rlx_cli.up_cmd import EXAMPLES, _load_config, _paths
    from rlx_core.configs.run import loads_run_config

    if example is not None:
        if example not in EXAMPLES:
            raise InvalidArgument(f"--example {example!r}: one of {', '.join(EXAMPLES)}")
        if config is not None or run is not None:
            raise InvalidArgument(
                "--example evaluates a built-in example: not with CONFIG or --run"
            )
    if config is None and run is not None:
        sets = (f"run_dir={work}", *overrides)
        return loads_run_config(_run_config_text(run), overrides=sets)
    return _load_config(config, _paths(work, None), overrides, example or "addition")


def _run_base_model(run: str, cfg: RunConfig, config: str | None) -> str:
    """The run's base model (`[model] path` of its config.toml; its tokenizer goes with the
    export): `cfg`'s when cfg is the run's own config."""
    from rlx_core.configs.run import loads_run_config

    if config is None:
        return cfg.model.path
    return loads_run_config(_run_config_text(run)).model.path


def _export(run: str, step: int | None, base: str, into: Path) -> tuple[Path, int]:
    """RUN's trainer checkpoint of `step` (newest when None) as an HF directory in `into`, with
    the tokenizer files of the run's base model; (the directory, its step)."""
    from rlx_cli.export_cmd import _copy_tokenizer
    from rlx_controller import RunPaths
    from rlx_core.storage import join_uri

    try:
        from rlx_trainer.export import export_checkpoint
    except ImportError as e:  # rlx-cli alone has no JAX
        raise FailedPrecondition(
            f"rlx eval --run reads checkpoints with JAX and Orbax: install rlx-trainer ({e})"
        ) from None
    out = into / "model"
    out.mkdir()
    if base:
        _copy_tokenizer(base, out)
    uri = join_uri(RunPaths.of(run).uri, "checkpoints")
    staging = into / "staging"  # where a remote run's checkpoint is downloaded to
    staging.mkdir()
    try:
        got, _ = export_checkpoint(uri, out, step=step, staging_dir=str(staging))
    except NotFound as e:
        raise NotFound(f"--run {run}: {e}") from None
    return out, got


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def summary_tables(summaries: dict[str, EvalSummary], *, title: str = "") -> tuple[Table, Table]:
    """The figures table (a row per dataset) and the verdict-count table (a row per dataset and
    kind of answer, a column per verdict), for a Rich console."""
    ks = sorted({s.k for s in summaries.values() if s.k})
    k_label = str(ks[0]) if len(ks) == 1 else "k"
    figures = Table(title=cell(title) if title else None)
    for col in (
        "dataset",
        "prompts",
        "greedy acc",
        "pass@1",
        f"pass@{k_label}",
        f"avg@{k_label}",
        "len greedy",
        "len sampled",
        "excluded",
    ):
        figures.add_column(col, justify="left" if col == "dataset" else "right", no_wrap=True)
    for s in summaries.values():
        figures.add_row(
            cell(s.dataset),
            str(s.prompts),
            _fmt(s.greedy),
            _fmt(s.pass_at_1),
            _fmt(s.pass_at_k),
            _fmt(s.avg_at_k),
            _fmt(s.greedy_tokens, 1),
            _fmt(s.sampled_tokens, 1),
            str(s.excluded),
        )
    statuses = sorted({v for s in summaries.values() for c in s.verdicts.values() for v in c})
    verdicts = Table(title="verdicts")
    verdicts.add_column("dataset", no_wrap=True)
    verdicts.add_column("answers", no_wrap=True)
    for status in statuses:
        verdicts.add_column(cell(status), justify="right")
    for s in summaries.values():
        for kind, counts in s.verdicts.items():
            verdicts.add_row(
                cell(s.dataset), cell(kind), *(str(counts.get(v, 0)) for v in statuses)
            )
    return figures, verdicts


def _write_jsonl(path: Path, samples: list[EvalSample]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text("".join(json.dumps(s.to_dict(), sort_keys=True) + "\n" for s in samples))
    tmp.replace(path)


def eval_command(
    config: str | None = typer.Argument(
        None,
        help="Run config TOML (its \\[\\[eval.datasets]], \\[sampling], \\[batch] token limits); "
        "none = "
        "the run's config with --run, else the built-in demo's.",
    ),
    run: str | None = typer.Option(
        None, "--run", help="Evaluate a trainer checkpoint of this run (a path or s3:// gs://)."
    ),
    step: int | None = typer.Option(
        None, "--step", min=0, help="With --run: the checkpoint of this step (default: newest)."
    ),
    model: Path | None = typer.Option(
        None, "--model", help="Evaluate this HF checkpoint directory (default: \\[model] path)."
    ),
    samples: int | None = typer.Option(
        None,
        "--samples",
        min=0,
        help="Sampled answers per prompt for pass@1, pass@K, avg@K; 0 = greedy only "
        "(default: the config's eval.samples).",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead."),
    out: Path | None = typer.Option(None, "--out", help="Write every sample as JSONL here."),
    overrides: list[str] = typer.Option([], "--set", help="KEY=VALUE override of the config."),
    run_dir: Path = typer.Option(
        Path("rlx-eval"), "--run-dir", help="Where the services keep their logs."
    ),
    example: str | None = typer.Option(
        None,
        "--example",
        help="Without CONFIG: the built-in example's config, addition (default) or code.",
    ),
) -> None:
    """Greedy accuracy, pass@1, pass@K, avg@K, response length and verdict counts of a checkpoint
    on each eval dataset, through the same services as training."""
    from rich.console import Console

    from rlx_controller import evaluate_model, heldout_accuracy, summarize
    from rlx_launch import open_services

    _check_options(run, step, model)
    _check_out(out)
    work = run_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    cfg = _config(config, run, work, overrides, example)
    if not cfg.eval.datasets:
        raise InvalidArgument("the config has no [[eval.datasets]] to evaluate on")
    k = cfg.eval.samples if samples is None else samples
    _check_samples(k, cfg, given=samples is not None)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=work)) if run is not None else None
    try:
        if run is not None and staging is not None:
            _say(f"rlx eval: exporting the checkpoint of {run} ...")
            path, got = _export(run, step, _run_base_model(run, cfg, config), staging)
            source = f"{run} step {got}"
        else:
            path = model.resolve() if model is not None else Path(cfg.model.path)
            source = str(path)
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=str(path)))
        t0 = time.monotonic()
        records = evaluate_model(cfg, work, open_services=open_services, samples=k, log=_say)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    wall = time.monotonic() - t0
    figures = summarize(records, k)
    if out is not None:
        _write_jsonl(out, records)
    if json_output:
        doc: dict[str, Any] = {
            "model": source,
            "samples": k,
            "heldout": heldout_accuracy(records),
            "datasets": {name: s.to_dict() for name, s in figures.items()},
            "wall_s": round(wall, 3),
        }
        if out is not None:
            doc["out"] = str(out)
        typer.echo(json.dumps(doc, sort_keys=True))
        return
    table, verdicts = summary_tables(figures, title=f"rlx eval {source}")
    # not a terminal (a pipe, a log): wide enough that no column is cut
    console = Console() if sys.stdout.isatty() else Console(width=160)
    console.print(table)
    console.print(verdicts)
    where = f"; every sample in {out}" if out is not None else ""
    typer.echo(f"rlx: {len(records)} answers judged in {wall:.0f} s{where}")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
