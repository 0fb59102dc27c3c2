"""`rlx plot` on synthetic metrics.jsonl files: a PNG of the promised size, and errors that name the
file and line."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_cli.plot_cmd import read_metrics

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _write_run(run: Path, steps: int = 60) -> None:
    run.mkdir(parents=True, exist_ok=True)
    lines = [{"step": 0, "heldout": 0.46}]
    for s in range(1, steps + 1):
        rec = {
            "step": s,
            "reward": min(1.0, 0.2 + s / steps),
            "staleness": s % 2,
            "excluded": 0,
            "dropped_stale": 0,
            "prompt_ids": [f"b{s:08d}.r0.u0000:{i}" for i in range(4)],
            "step_s": 0.5 + 0.01 * (s % 5),
            "gen_tokens_per_s": 2000.0 + s,
            "trainer/loss": 0.01,
            "trainer/mismatch_mean": 0.006,
            "trainer/mismatch_max": 0.17,
            "trainer/mismatch_p95": 0.0 if s < 3 else 0.01,  # 0 is exact: not on a log scale
            "trainer/lag_kl_k3": 0.002 * (s % 2),
            "trainer/lag_ratio_min": 1.0 - 0.1 * (s % 2),
            "trainer/lag_ratio_max": 1.0 + 0.3 * (s % 2),
        }
        if s % 20 == 0:
            rec["heldout"] = 0.46 + s / steps / 2
        lines.append(rec)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))


def test_plot_writes_a_png_in_the_run_dir_and_prints_its_path(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(run)
    result = runner.invoke(app, ["plot", str(run)])
    assert result.exit_code == 0, result.output
    path = run / "plot.png"
    assert result.stdout.strip() == str(path)
    assert _png_size(path) == (1200, 1100)


def test_plot_out_option_and_metrics_without_optional_series(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    # only rewards: the other panels say "no data" instead of failing
    (run / "metrics.jsonl").write_text('{"reward": 0.5, "step": 1}\n{"reward": 0.75, "step": 2}\n')
    out = tmp_path / "figs" / "mine.png"
    result = runner.invoke(app, ["plot", str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    assert _png_size(out) == (1200, 1100)
    assert not (run / "plot.png").exists()


def test_missing_metrics_file_is_named(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plot", str(tmp_path)])
    assert result.exit_code == 1
    assert f"{tmp_path / 'metrics.jsonl'}: no such file" in result.stderr
    assert not (tmp_path / "plot.png").exists()


def test_a_bad_line_is_named_with_its_number(tmp_path: Path) -> None:
    _write_run(tmp_path, steps=5)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write("{not json\n")
        f.write('{"step": 7}\n')
    result = runner.invoke(app, ["plot", str(tmp_path)])
    assert result.exit_code == 1
    assert f"{tmp_path / 'metrics.jsonl'}:7: not JSON" in result.stderr


def test_a_line_without_a_step_is_named(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward": 0.1}\n[1, 2]\n')
    result = runner.invoke(app, ["plot", str(tmp_path)])
    assert result.exit_code == 1
    assert f"{tmp_path / 'metrics.jsonl'}:2: expected a JSON object with an integer 'step'" in (
        result.stderr
    )


def test_read_metrics_keeps_the_last_line_of_a_step_and_skips_a_torn_tail(tmp_path: Path) -> None:
    # a resumed run wrote steps 2 and 3 again; the controller was then killed mid-line
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "reward": 0.1}\n{"step": 2, "reward": 0.2}\n{"step": 3, "reward": 0.3}\n'
        '{"step": 2, "reward": 0.25}\n{"step": 3, "reward": 0.35}\n{"step": 4, "rew'
    )
    records = read_metrics(tmp_path)
    assert [(r["step"], r["reward"]) for r in records] == [(1, 0.1), (2, 0.25), (3, 0.35)]


def test_plot_is_in_the_help_and_loads_no_jax() -> None:
    code = (
        "import sys; from rlx_cli.main import app; from typer.testing import CliRunner; "
        "r = CliRunner().invoke(app, ['--help']); print(r.output); "
        "print('JAX LOADED' if 'jax' in sys.modules else 'no jax')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert " plot " in out and "no jax" in out


def test_a_mixed_run_draws_each_datasets_reward(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    from rlx_cli.plot_cmd import _reward

    nan = float("nan")
    records = [
        {"step": s, "reward": 0.5, "reward/gsm8k": 0.25, "reward/code": nan if s == 2 else 0.75}
        for s in (1, 2, 3)
    ]
    ax = Figure().add_subplot()
    _reward(ax, records)
    assert ax.get_legend_handles_labels()[1] == ["per step", "trailing mean", "code", "gsm8k"]
    code = ax.get_lines()[2]
    assert list(code.get_xdata()) == [1, 3]  # the step with no scored code sample is skipped
    ax = Figure().add_subplot()
    _reward(ax, [{"step": 1, "reward": 0.5, "reward/addition": 0.5}])  # one dataset: the mean
    assert ax.get_legend_handles_labels()[1] == ["per step", "trailing mean"]
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = runner.invoke(app, ["plot", str(run)])
    assert result.exit_code == 0, result.output


def test_the_policy_lag_is_drawn_per_staleness() -> None:
    from rlx_cli.plot_cmd import _by_staleness

    records = [
        {"step": 1, "staleness": 0, "trainer/lag_kl_k3": 0.0},
        {"step": 2, "staleness": 1, "trainer/lag_kl_k3": 0.02},
        {"step": 3, "staleness": 1, "trainer/lag_kl_k3": 0.03},
        {"step": 4, "trainer/lag_kl_k3": 0.01},  # a record from before staleness was logged
        {"step": 5, "staleness": 2},
    ]
    assert _by_staleness(records, "trainer/lag_kl_k3") == {
        0: ([1], [0.0]),
        1: ([2, 3], [0.02, 0.03]),
        -1: ([4], [0.01]),
    }
