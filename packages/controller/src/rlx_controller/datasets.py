"""Datasets of the prompt mixture: JSONL files read through rlx_core.storage, rendered with the
config's template, optionally pre-filtered by base-model pass rates.

    ds = load_dataset(cfg.datasets[0], field_path="datasets[0]")
    ds.prompt(17)            # Prompt(id="math/17", text=..., answer=..., ...)
    sources = mixture_sources(cfg, datasets, load_prefilter(cfg.prefilter.file))

A bad line is an InvalidArgument naming the file, the line number and the missing field. The
pre-filter file (written by `rlx prefilter`) has one JSON object per line:
`{"dataset": "math", "row": 17, "pass_rate": 0.375}`. A dataset that appears in it keeps only the
rows listed with min_pass_rate < pass_rate < max_pass_rate; a dataset absent from it is kept whole.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlx_controller.mixture import MixtureSource
from rlx_controller.run_config import DatasetConfig, PrefilterConfig, RunConfig, split_uri
from rlx_core.errors import ConfigError, InvalidArgument
from rlx_core.storage import open_storage

__all__ = [
    "Dataset",
    "Prompt",
    "kept_rows",
    "load_dataset",
    "load_prefilter",
    "mixture_sources",
    "read_jsonl",
]


@dataclass(frozen=True)
class Prompt:
    """One prompt, ready to tokenize and to score."""

    id: str  # "<dataset>/<row>"
    dataset: str
    row: int
    text: str  # the template applied to the record
    reward: str  # "math" or "code"
    answer: str | None  # math: the gold answer
    tests: tuple[str, ...]  # code: links to the tests in the test-data repository
    language: str  # code: the programs' language
    math_extractor: str


def read_jsonl(uri: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (path or URI); blank lines are skipped but counted."""
    directory, name = split_uri(uri)
    data = open_storage(directory).get(name)
    records = []
    for number, line in enumerate(data.decode("utf-8", errors="strict").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            raise InvalidArgument(f"{uri}:{number}: not a JSON object: {e}") from None
        if not isinstance(record, dict):
            raise InvalidArgument(f"{uri}:{number}: expected a JSON object, got {line[:60]!r}")
        records.append(record)
    return records


class Dataset:
    """A loaded JSONL dataset and its config."""

    def __init__(self, config: DatasetConfig, records: Sequence[Mapping[str, Any]]) -> None:
        self.config = config
        self.records = list(records)

    @property
    def name(self) -> str:
        return self.config.name

    def __len__(self) -> int:
        return len(self.records)

    def prompt(self, row: int) -> Prompt:
        """The rendered prompt of record `row` (0-based among the file's records)."""
        cfg = self.config
        record = self.records[row]
        fields = dict(record)
        fields["prompt"] = record[cfg.prompt_field]
        text = cfg.template.format_map(fields)
        tests: tuple[str, ...] = ()
        answer = None
        if cfg.reward == "math":
            answer = str(record[cfg.answer_field])
        else:
            raw = record[cfg.tests_field]
            tests = (raw,) if isinstance(raw, str) else tuple(str(t) for t in raw)
        return Prompt(
            id=f"{cfg.name}/{row}",
            dataset=cfg.name,
            row=row,
            text=text,
            reward=cfg.reward,
            answer=answer,
            tests=tests,
            language=cfg.language,
            math_extractor=cfg.math_extractor,
        )


def load_dataset(cfg: DatasetConfig, *, field_path: str = "datasets") -> Dataset:
    """Read and check a dataset: every record has the prompt field, the fields the template
    names, and the answer (math) or tests (code) field. Errors name `field_path`, the file and
    the line."""
    try:
        records = read_jsonl(cfg.path)
    except InvalidArgument as e:
        raise ConfigError(str(e), field=f"{field_path}.path", value=cfg.path) from None
    if not records:
        raise ConfigError(f"{cfg.path} holds no records", field=f"{field_path}.path")
    needed = {cfg.prompt_field, cfg.answer_field if cfg.reward == "math" else cfg.tests_field}
    needed |= {f for _, f, _, _ in string.Formatter().parse(cfg.template) if f and f != "prompt"}
    for number, record in enumerate(records, 1):
        missing = sorted(n for n in needed if n not in record)
        if missing:
            raise ConfigError(
                f"{cfg.path}: record {number} has no field {', '.join(map(repr, missing))} "
                f"(it has {', '.join(map(repr, sorted(record)))})",
                field=field_path,
            )
        if not isinstance(record[cfg.prompt_field], str):
            raise ConfigError(
                f"{cfg.path}: record {number}: {cfg.prompt_field!r} must be a string",
                field=f"{field_path}.prompt_field",
            )
    return Dataset(cfg, records)


def load_prefilter(uri: str) -> dict[str, dict[int, float]]:
    """{dataset: {row: pass_rate}} from a pre-filter JSONL file ("" -> {})."""
    if not uri:
        return {}
    table: dict[str, dict[int, float]] = {}
    for number, record in enumerate(read_jsonl(uri), 1):
        try:
            dataset, row, rate = str(record["dataset"]), int(record["row"]), record["pass_rate"]
            rate = float(rate)
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                f"{uri}: record {number} needs dataset, row and pass_rate: {record!r}",
                field="prefilter.file",
            ) from None
        if not 0 <= rate <= 1:
            raise ConfigError(
                f"{uri}: record {number}: pass_rate {rate} is outside 0-1", field="prefilter.file"
            )
        table.setdefault(dataset, {})[row] = rate
    return table


def kept_rows(
    size: int, name: str, prefilter: Mapping[str, Mapping[int, float]], cfg: PrefilterConfig
) -> list[int]:
    """The rows of a dataset of `size` records that the pre-filter keeps."""
    rates = prefilter.get(name)
    if rates is None:
        return list(range(size))
    return [
        r for r in range(size) if r in rates and cfg.min_pass_rate < rates[r] < cfg.max_pass_rate
    ]


def mixture_sources(
    cfg: RunConfig,
    datasets: Sequence[Dataset],
    prefilter: Mapping[str, Mapping[int, float]] | None = None,
) -> list[MixtureSource]:
    """The mixture's sources for the run's datasets, pre-filtered; ConfigError naming the
    dataset when none of its prompts is left."""
    prefilter = prefilter or {}
    unknown = sorted(set(prefilter) - {d.name for d in datasets})
    if unknown:
        raise ConfigError(
            f"the pre-filter file names datasets the config does not have: {', '.join(unknown)}",
            field="prefilter.file",
        )
    sources = []
    for i, ds in enumerate(datasets):
        rows = kept_rows(len(ds), ds.name, prefilter, cfg.prefilter)
        if not rows:
            raise ConfigError(
                f"the pre-filter keeps none of {ds.name!r}'s {len(ds)} prompts (pass rate "
                f"strictly between {cfg.prefilter.min_pass_rate} and "
                f"{cfg.prefilter.max_pass_rate})",
                field=f"datasets[{i}]",
            )
        sources.append(MixtureSource(ds.name, ds.config.weight, rows))
    return sources
