"""`rlx prefilter`: each training prompt's pass rate under the base model, written as JSONL.

    summary = write_pass_rates(cfg, run_dir, out, open_services=open_services)  # a launcher's

The services start with `[model] path` as version 0; `samples` answers (default: the group size)
per training prompt are sampled with the run's `[sampling]` and scored, and each prompt's pass
rate goes to `out` (a path or URI) as {"dataset", "row", "pass_rate", "scored"}. Samples the
verifier could not score (INFRA) do not count; a prompt with none scored is left out (so
`prefilter.file` drops it). Seeds are a pure function of (seed, dataset, row, sample): the same
file every time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlx_controller.inputs import load_datasets, run_tokenizer
from rlx_controller.prompts import PromptIds
from rlx_controller.rundir import RunPaths
from rlx_controller.service_set import OpenServices
from rlx_controller.session import base_model_session
from rlx_controller.units import UnitRunner
from rlx_core.clients import Sampling
from rlx_core.configs.run import RunConfig
from rlx_core.rng import sample_seed
from rlx_core.storage import open_storage
from rlx_data import Dataset

__all__ = ["write_pass_rates"]


@dataclass(frozen=True)
class _Rates:
    """The pass rates of one dataset's prompts, a unit of `unit_prompts` prompts at a time."""

    runner: UnitRunner
    cfg: RunConfig
    prompt_tokens: PromptIds
    data: Dataset
    d: int  # the dataset's index among the training datasets
    samples: int  # answers per prompt

    def unit(self, k: int, rows: list[int]) -> list[tuple[float, int]]:
        """Chunk k (`rows`) as one unit through inference worker k mod W: each prompt's
        (pass rate, samples scored)."""
        data, G = self.data, self.samples
        s = self.cfg.sampling
        unit = self.runner.gen_unit(
            f"prefilter.{data.name}.{k}",
            0,
            [self.prompt_tokens.ids(data.name, r) for r in rows],
            G,
            Sampling(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k),
            [sample_seed(self.cfg.seed, "prefilter", self.d, r, g) for r in rows for g in range(G)],
        )
        prompts = [data.prompt(r) for r in rows]
        judged = self.runner.run(k % self.runner.workers, unit, prompts, k)
        rates: list[tuple[float, int]] = []
        for i in range(len(rows)):
            scored = [v for v in judged.verdicts[i * G : (i + 1) * G] if not v.excluded]
            ok = sum(1 for v in scored if (v.score or 0) >= 1.0)
            rates.append((ok / len(scored) if scored else 0.0, len(scored)))
        return rates

    def records(self, limit: int, log: Callable[[str], None]) -> list[dict[str, Any]]:
        """The lines of the dataset's first `limit` prompts that fit (all when 0)."""
        name = self.data.name
        todo = self.prompt_tokens.fitting(name)
        todo = todo[:limit] if limit else todo
        n, per = len(todo), self.cfg.batch.unit_prompts
        chunks = [todo[i : i + per] for i in range(0, n, per)]
        out: list[dict[str, Any]] = []
        done, t_shown = 0, time.monotonic()
        with ThreadPoolExecutor(max(1, self.runner.workers) * 2) as pool:
            for rows, rates in zip(
                chunks, pool.map(self.unit, range(len(chunks)), chunks), strict=True
            ):
                for r, (rate, scored) in zip(rows, rates, strict=True):
                    if scored:
                        out.append({"dataset": name, "row": r, "pass_rate": rate, "scored": scored})
                done += len(rows)
                if time.monotonic() - t_shown >= 5 or done == n:
                    t_shown = time.monotonic()
                    log(f"pre-filter {name}: {done}/{n} prompts")
        return out


def write_pass_rates(
    cfg: RunConfig,
    run_dir: str | Path,
    out: str,
    *,
    open_services: OpenServices,
    samples: int = 0,
    limit: int = 0,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Write the pass rates of the training prompts to `out` (the module docstring); its
    summary: prompts written, never / always solved, kept by the config's bounds, the mean."""
    paths = RunPaths.of(run_dir, None)
    paths.work.mkdir(parents=True, exist_ok=True)
    tokenizer = run_tokenizer(cfg, paths.storage)
    datasets = load_datasets(cfg)
    prompt_tokens = PromptIds(tokenizer, datasets, max_tokens=cfg.batch.max_prompt_tokens, log=log)
    records: list[dict[str, Any]] = []
    with base_model_session(cfg, paths, open_services, log=log) as session:
        runner = UnitRunner(session, tokenizer, max_new_tokens=cfg.batch.max_new_tokens, log=log)
        for d, ds in enumerate(cfg.datasets):
            rates = _Rates(
                runner, cfg, prompt_tokens, datasets[ds.name], d, samples or cfg.batch.group_size
            )
            records += rates.records(limit, log)
    parent, _, name = out.rstrip("/").rpartition("/")
    body = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    open_storage(parent or ".").put(name, body.encode())
    pass_rates = [r["pass_rate"] for r in records]
    lo, hi = cfg.prefilter.min_pass_rate, cfg.prefilter.max_pass_rate
    return {
        "prompts": len(records),
        "never": sum(1 for x in pass_rates if x == 0.0),
        "always": sum(1 for x in pass_rates if x == 1.0),
        "kept": sum(1 for x in pass_rates if lo < x < hi),
        "mean_pass_rate": float(np.mean(pass_rates)) if pass_rates else float("nan"),
        "out": out,
    }
