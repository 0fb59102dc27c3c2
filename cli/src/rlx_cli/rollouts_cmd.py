"""`rlx rollouts show RUN [--step N] [--limit K] [--json]`: what a run generated and how each
response was scored, read from its rollout log.

RUN is the run directory (a path, file://, s3://bucket/prefix or gs://bucket/prefix). The log
holds one record per work unit; `show` reads the units of the batch training step N trained on
(steps count from 1, as in metrics.jsonl, `rlx status` and `rlx plot`: step N trains batch
N - 1, whose unit ids are `b<N-1>...`; default: the newest batch logged; dynamic-sampling refills
included) in unit order, and prints up to K
samples: for each prompt its id, the weight version it was generated with and the prompt as the
model saw it (its logged ids decoded with the run's tokenizer, special tokens kept, so the chat
template shows), then each sample's reward, verdict, finish reason, length and response text;
for code, the tests it passed of the prompt's, the first it failed, the verifier's message and
the compiler's output. A line above counts the step's verdicts (every sample of the batch).
`--json` prints one JSON object per sample and line instead, with the token ids as well.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import typer
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rlx_cli.terminal import cell, escape, escape_json
from rlx_core.errors import NotFound, RlxError

__all__ = ["rollouts_app"]

rollouts_app = typer.Typer(
    help="Read a run's rollout log: what was generated and how it was scored.",
    no_args_is_help=True,
)


def _warn(message: str) -> None:
    typer.echo("rlx rollouts: " + escape(message), err=True)


def _tokenizer(storage: Any) -> Any:
    """The run's tokenizer (config.toml's model.path), or None, said on stderr, when it cannot
    be loaded here (the prompts are then shown as ids)."""
    from rlx_controller import CONFIG_FILE, loads_run_config, read_text
    from rlx_core.tokenizer import load_tokenizer

    path = "?"
    try:
        cfg = loads_run_config(read_text(storage, CONFIG_FILE))
        path = cfg.model.path
        return load_tokenizer(path)
    except RlxError as e:
        _warn(f"prompts shown as ids: no tokenizer from model.path {path}: {type(e).__name__}: {e}")
        return None


def _samples(log: Any, unit_ids: list[str], tok: Any) -> Iterator[dict[str, Any]]:
    """One JSON-ready row per logged sample of the units, in unit, prompt and sample order (each
    record read when its first sample is wanted; a torn one is named and skipped)."""
    rendered: dict[tuple[int, ...], str | None] = {}
    for unit_id in unit_ids:
        record = log.read(unit_id)  # Corrupt: a record rlx did not write, named
        if record is None:
            _warn(f"{unit_id}: torn record, skipped (the run regenerates it on resume)")
            continue
        for group in record.groups:
            ids = group.prompt_ids
            if ids not in rendered:
                rendered[ids] = (
                    tok.decode(ids, skip_special_tokens=False) if tok is not None and ids else None
                )
            for g, s in enumerate(group.samples):
                j = s.judgement
                yield {
                    "step": int(record.unit.get("batch", 0)) + 1,  # the step that trains it
                    "batch": record.unit.get("batch"),
                    "unit_id": unit_id,
                    "round": record.unit.get("round"),
                    "prompt_id": group.prompt,
                    "version": group.version,
                    "sample": g,
                    "prompt": rendered[ids],
                    "prompt_ids": list(ids),
                    "response": s.text,
                    "response_ids": list(s.tokens),
                    "reward": s.reward,
                    "status": s.status,
                    "finish": s.finish,
                    "tokens": len(s.tokens),
                    "tests_passed": j.tests_passed,
                    "tests_total": j.tests_total,
                    "first_failed": j.first_failed,
                    "message": j.message,
                    "compile_output": j.compile_output,
                    "judge_s": round(j.judge_s, 6),
                }


def _verdict_counts(log: Any, unit_ids: list[str]) -> dict[str, int]:
    """{status: samples} over every sample of the units (torn records skipped)."""
    counts: dict[str, int] = {}
    for unit_id in unit_ids:
        record = log.read(unit_id)
        for group in record.groups if record is not None else ():
            for s in group.samples:
                counts[s.status] = counts.get(s.status, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _tests_cell(row: dict[str, Any]) -> str:
    if not row["tests_total"]:
        return "-"
    cell = f"{row['tests_passed']}/{row['tests_total']}"
    if row["first_failed"] is not None:
        cell += f" (#{row['first_failed']} failed)"
    return cell


def _response_cell(row: dict[str, Any]) -> Text:
    """The response, then the verifier's message and the compiler's output, dimmed; each
    escaped (`rlx_cli.terminal`: its lines kept, nothing in it steers the terminal)."""
    text = cell(row["response"], newlines=True)
    for extra in (row["message"], row["compile_output"]):
        if extra:
            text.append("\n" + escape(extra.rstrip(), newlines=True), style="dim")
    return text


def _print_tables(console: Console, rows: list[dict[str, Any]]) -> None:
    """A panel per prompt (id, version, unit, the prompt) holding a table of its samples."""
    at = 0
    while at < len(rows):
        first = rows[at]
        end = at
        while end < len(rows) and (rows[end]["unit_id"], rows[end]["prompt_id"]) == (
            first["unit_id"],
            first["prompt_id"],
        ):
            end += 1
        table = Table(expand=True, show_lines=True)
        table.add_column("#", justify="right")
        table.add_column("reward", justify="right")
        table.add_column("verdict")
        table.add_column("finish")
        table.add_column("tokens", justify="right")
        table.add_column("tests")
        table.add_column("response", ratio=1, overflow="fold")
        for row in rows[at:end]:
            reward = row["reward"]
            table.add_row(
                str(row["sample"]),
                Text("excluded", style="dim") if reward is None else f"{reward:g}",
                cell(row["status"], style="green" if row["status"] == "AC" else "red"),
                cell(row["finish"]),
                str(row["tokens"]),
                cell(_tests_cell(row)),
                _response_cell(row),
            )
        prompt = first["prompt"]
        shown = (
            cell(prompt, newlines=True)
            if prompt is not None
            else Text(f"ids {first['prompt_ids']}" if first["prompt_ids"] else "(ids not logged)")
        )
        title = f"{first['prompt_id']}  version {first['version']}  {first['unit_id']}"
        console.print(
            Panel(Group(shown, table), title=cell(title, style="bold"), title_align="left")
        )
        at = end


@rollouts_app.command()
def show(
    run: str = typer.Argument(..., help="Run directory: path, file://, s3:// or gs:// URI."),
    step: int | None = typer.Option(
        None,
        "--step",
        min=1,
        help="Training step (from 1, as in metrics.jsonl) whose batch to show; default: the "
        "newest logged.",
    ),
    limit: int = typer.Option(8, "--limit", min=1, help="Show at most this many samples."),
    json_output: bool = typer.Option(
        False, "--json", help="One JSON object per sample and line (token ids included)."
    ),
) -> None:
    """Show the logged rollouts of one training step of RUN: prompts, responses, rewards."""
    from rlx_controller import CONFIG_FILE, RolloutLog, RunPaths, parse_unit_id

    paths = RunPaths.of(run)
    if not paths.storage.exists(CONFIG_FILE):
        raise NotFound(f"{paths.uri}: no such run (no {CONFIG_FILE} there)")
    log = RolloutLog(paths.storage)
    batches: dict[int, list[str]] = {}
    for unit_id in log.unit_ids():
        parsed = parse_unit_id(unit_id)
        if parsed is not None:
            batches.setdefault(parsed[0] + 1, []).append(unit_id)  # by the step that trains it
    if not batches:
        raise NotFound(f"{paths.uri}: no rollouts logged yet (its rollouts/ holds no record)")
    if step is None:
        step = max(batches)
    if step not in batches:
        raise NotFound(
            f"{paths.uri}: no rollouts of step {step} logged ({len(batches)} steps logged, "
            f"{min(batches)} to {max(batches)})"
        )
    tok = _tokenizer(paths.storage)
    rows = []
    for row in _samples(log, batches[step], tok):
        rows.append(row)
        if len(rows) == limit:
            break
    if json_output:
        for row in rows:
            typer.echo(escape_json(json.dumps(row, ensure_ascii=False)))
        return
    console = Console()
    console.print(
        cell(
            f"step {step} of {paths.uri}: {len(batches[step])} work units logged; "
            f"{len(rows)} samples shown (--limit {limit})"
        ),
        soft_wrap=True,
    )
    counts = _verdict_counts(log, batches[step])
    line = "verdicts: " + ", ".join(f"{k} {v}" for k, v in counts.items())
    console.print(cell(line), soft_wrap=True)
    _print_tables(console, rows)
