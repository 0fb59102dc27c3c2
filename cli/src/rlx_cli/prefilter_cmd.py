"""`rlx prefilter`: the base model's pass rate on every training prompt, for `prefilter.file`.

rlx prefilter                                     # the built-in demo's datasets
rlx prefilter --example code                      # the built-in code example's
rlx prefilter CONFIG.toml --out rates.jsonl --samples 8 --limit 500
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path

import typer

from rlx_cli.terminal import one_line

__all__ = ["prefilter"]


def prefilter(
    config: str | None = typer.Argument(None, help="Run config TOML; none = the built-in demo."),
    out: str = typer.Option(
        "",
        "--out",
        help="Where to write the JSONL (path or s3:// gs:// URI); default RUN_DIR/prefilter.jsonl.",
    ),
    run_dir: Path = typer.Option(
        Path("rlx-prefilter"), "--run-dir", help="Where the services keep their logs."
    ),
    samples: int = typer.Option(
        0, "--samples", min=0, help="Answers per prompt; 0 = the group size."
    ),
    limit: int = typer.Option(0, "--limit", min=0, help="First N prompts per dataset; 0 = all."),
    overrides: list[str] = typer.Option([], "--set", help="KEY=VALUE override of the config."),
    example: str | None = typer.Option(
        None, "--example", help="The built-in example without CONFIG: addition (default) or code."
    ),
) -> None:
    """Sample answers per training prompt with the base model and write each prompt's pass rate.

    A run config then keeps only prompts of partial success with
    `prefilter.file = "<out>"`, `prefilter.min_pass_rate`, `prefilter.max_pass_rate`.
    """
    from rlx_cli.up_cmd import EXAMPLES, _load_config, _paths
    from rlx_controller import write_pass_rates
    from rlx_launch import open_services

    if example is not None and (example not in EXAMPLES or config is not None):
        typer.echo(
            f"rlx: --example {example!r}: one of {', '.join(EXAMPLES)}, without CONFIG", err=True
        )
        raise typer.Exit(1)
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    out = out or str(run_dir / "prefilter.jsonl")
    # an RlxError is `rlx`'s one escaped error line (main._RlxGroup)
    cfg = _load_config(config, _paths(run_dir, None), overrides, example or "addition")
    # the pre-filter being computed must not filter the datasets it reads
    cfg = dataclasses.replace(cfg, prefilter=dataclasses.replace(cfg.prefilter, file=""))
    t0 = time.monotonic()
    result = write_pass_rates(
        cfg,
        run_dir,
        out,
        open_services=open_services,
        samples=samples,
        limit=limit,
        log=lambda m: print(one_line(m), file=sys.stderr, flush=True),
    )
    lo, hi = cfg.prefilter.min_pass_rate, cfg.prefilter.max_pass_rate
    mean = result["mean_pass_rate"]
    typer.echo(
        f"rlx: pass rates of {result['prompts']} prompts written to {result['out']} "
        f"in {time.monotonic() - t0:.0f} s: mean {'-' if math.isnan(mean) else f'{mean:.3f}'}, "
        f"never solved {result['never']}, always solved {result['always']}, "
        f"{result['kept']} with {lo} < pass rate < {hi} (what prefilter.file would keep)"
    )
