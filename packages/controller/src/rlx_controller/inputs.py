"""A run's inputs, loaded and checked before any service starts: its tokenizer, datasets and
every prompt's token ids (rlx_controller.prompts), for training and for evaluation."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlx_controller.mixture import MixtureSource, PromptMixture, mixture_sources
from rlx_controller.prompts import PromptIds
from rlx_controller.rundir import read_run_info
from rlx_controller.schedule import Schedule
from rlx_core.configs.run import RunConfig
from rlx_core.errors import ConfigError, RlxError
from rlx_core.tokenizer import Tokenizer, load_tokenizer
from rlx_data import Dataset, load_dataset, load_prefilter

__all__ = [
    "RunInputs",
    "eval_prompts",
    "fitting_sources",
    "load_datasets",
    "load_run_inputs",
    "run_tokenizer",
]


def run_tokenizer(cfg: RunConfig, storage: Any) -> Tokenizer:
    """The tokenizer of the run's checkpoint, its chat template's date fixed to the run's first
    start (run.json's `chat_date`; now, for a new run)."""
    now = None
    with contextlib.suppress(RlxError, ValueError):  # a damaged run.json is reported later
        info = read_run_info(storage)
        if info is not None and info.get("chat_date"):
            now = datetime.datetime.fromisoformat(info["chat_date"])
    return load_tokenizer(cfg.model.path, now=now)


def load_datasets(cfg: RunConfig) -> dict[str, Dataset]:
    """The training datasets by name, every limit and link checked against the verifier's caps."""
    judge = cfg.verifier.judge
    return {
        d.name: load_dataset(d, field_path=f"datasets[{i}]", judge=judge)
        for i, d in enumerate(cfg.datasets)
    }


def eval_prompts(
    cfg: RunConfig, tokenizer: Tokenizer, log: Callable[[str], None]
) -> tuple[list[Dataset], PromptIds]:
    """The eval datasets and their prompts' token ids."""
    judge = cfg.verifier.judge
    eval_sets = [
        load_dataset(d, field_path=f"eval.datasets[{i}]", judge=judge)
        for i, d in enumerate(cfg.eval.datasets)
    ]
    ids = PromptIds(
        tokenizer,
        {d.name: d for d in eval_sets},
        max_tokens=cfg.batch.max_prompt_tokens,
        field_path="eval.datasets",
        log=log,
    )
    return eval_sets, ids


def fitting_sources(sources: list[MixtureSource], table: PromptIds) -> list[MixtureSource]:
    """The mixture's sources without the rows whose prompt is longer than max_prompt_tokens."""
    out = []
    for src in sources:
        fits = set(table.fitting(src.name))
        rows = [r for r in src.rows if r in fits]
        if not rows:
            raise ConfigError(
                f"no prompt of {src.name!r} that the pre-filter keeps fits in "
                f"batch.max_prompt_tokens = {table.max_tokens}",
                field="batch.max_prompt_tokens",
            )
        out.append(MixtureSource(src.name, src.weight, rows))
    return out


@dataclass
class RunInputs:
    """What a training run reads before its services start."""

    tokenizer: Tokenizer
    datasets: dict[str, Dataset]
    prompt_tokens: PromptIds  # every training prompt's token ids
    mixture: PromptMixture
    schedule: Schedule
    eval_sets: list[Dataset]
    eval_ids: PromptIds


def load_run_inputs(cfg: RunConfig, storage: Any, log: Callable[[str], None]) -> RunInputs:
    """The run's tokenizer (once: every prompt's token ids are computed here and travel with the
    work; a chat template's date is the run's first start, so a resume renders what the run it
    continues rendered), its datasets and prompt tokens, the prompt mixture over the prompts
    that fit (and that the pre-filter keeps), the schedule, and the eval prompts."""
    tokenizer = run_tokenizer(cfg, storage)
    datasets = load_datasets(cfg)
    prompt_tokens = PromptIds(tokenizer, datasets, max_tokens=cfg.batch.max_prompt_tokens, log=log)
    pre = load_prefilter(cfg.prefilter.file) if cfg.prefilter.file else None
    sources = mixture_sources(cfg, list(datasets.values()), pre)
    mixture = PromptMixture(fitting_sources(sources, prompt_tokens), seed=cfg.seed)
    schedule = Schedule.from_config(cfg, mixture)
    eval_sets, eval_ids = eval_prompts(cfg, tokenizer, log)
    return RunInputs(tokenizer, datasets, prompt_tokens, mixture, schedule, eval_sets, eval_ids)
