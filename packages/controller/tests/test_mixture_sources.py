"""A run's mixture sources: its datasets, each kept to the rows its pre-filter file keeps; a
pre-filter that names an unknown dataset, or keeps none of one, is a ConfigError naming the
field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlx_controller.mixture import mixture_sources
from rlx_core.configs.run import RunConfig, loads_run_config
from rlx_core.errors import ConfigError
from rlx_data import Dataset, load_dataset, load_prefilter


def _run(tmp_path: Path) -> tuple[RunConfig, list[Dataset]]:
    math = tmp_path / "math.jsonl"
    math.write_text(
        "".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(4))
    )
    other = tmp_path / "other.jsonl"
    other.write_text(
        "".join(json.dumps({"prompt": f"{i}", "answer": "0"}) + "\n" for i in range(3))
    )
    cfg = loads_run_config(
        f'run_dir = "{tmp_path}/run"\n[model]\npath = "{tmp_path}/model"\n'
        f'[[datasets]]\nname = "m"\npath = "{math}"\nweight = 2.0\n'
        f'[[datasets]]\nname = "o"\npath = "{other}"\n'
    )
    return cfg, [load_dataset(d) for d in cfg.datasets]


def _prefilter(tmp_path: Path, rows: dict[tuple[str, int], float]) -> dict[str, dict[int, float]]:
    pf = tmp_path / "pass.jsonl"
    pf.write_text(
        "".join(
            json.dumps({"dataset": d, "row": r, "pass_rate": v}) + "\n"
            for (d, r), v in rows.items()
        )
    )
    return load_prefilter(str(pf))


def test_sources_keep_the_prefiltered_rows_and_weights(tmp_path: Path) -> None:
    cfg, datasets = _run(tmp_path)
    whole = mixture_sources(cfg, datasets)
    assert [(s.name, s.weight, list(s.rows)) for s in whole] == [
        ("m", 2.0, [0, 1, 2, 3]),
        ("o", 1.0, [0, 1, 2]),
    ]
    # m keeps the rows with 0 < rate < 1 (the default bounds); o is not in the file: kept whole
    table = _prefilter(tmp_path, {("m", 0): 0.0, ("m", 1): 0.5, ("m", 2): 1.0, ("m", 3): 0.125})
    sources = mixture_sources(cfg, datasets, table)
    assert [list(s.rows) for s in sources] == [[1, 3], [0, 1, 2]]


def test_a_prefilter_naming_an_unknown_dataset_or_keeping_nothing_is_refused(
    tmp_path: Path,
) -> None:
    cfg, datasets = _run(tmp_path)
    with pytest.raises(ConfigError, match="zz") as info:
        mixture_sources(cfg, datasets, _prefilter(tmp_path, {("zz", 0): 0.5}))
    assert info.value.field == "prefilter.file"
    with pytest.raises(ConfigError, match="keeps none of 'm'") as info:
        mixture_sources(cfg, datasets, _prefilter(tmp_path, {("m", 0): 1.0}))
    assert info.value.field == "datasets[0]"
