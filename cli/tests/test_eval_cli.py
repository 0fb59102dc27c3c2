"""`rlx eval`'s refusals: each bad option combination is one line on stderr naming the option,
exit code 1, before any service starts (no services needed)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from rlx_cli.eval_cmd import summary_tables
from rlx_cli.main import app
from rlx_controller.evaluation import EvalSample, summarize
from rlx_core.config import to_toml
from rlx_data import DEMO_TASK, base_model_dir, demo_config, write_addition_jsonl

runner = CliRunner()


def _fails(args: list[str]) -> str:
    """Run `rlx eval ARGS`; the one error line (exit code 1, no traceback; before it, at most
    progress lines)."""
    result = runner.invoke(app, ["eval", *args])
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, result.output
    *progress, line = result.stderr.strip().splitlines()
    assert all(p.startswith("rlx eval: ") for p in progress), result.stderr
    assert line.startswith("rlx: "), line
    assert not result.stdout
    return line


def test_step_needs_run(tmp_path: Path) -> None:
    line = _fails(["--step", "5", "--run-dir", str(tmp_path / "ev")])
    assert line == "rlx: InvalidArgument: --step needs --run (the run whose checkpoint it names)"
    assert not (tmp_path / "ev").exists()  # refused before anything is made


def test_run_and_model_together(tmp_path: Path) -> None:
    line = _fails(
        ["--run", str(tmp_path), "--model", str(base_model_dir()), "--run-dir", str(tmp_path)]
    )
    assert line == "rlx: InvalidArgument: give --run or --model, not both"


def test_model_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    line = _fails(["--model", str(tmp_path / "nope"), "--run-dir", str(tmp_path / "ev")])
    assert line == (
        f"rlx: NotFound: --model {tmp_path / 'nope'}: no config.json there (an HF checkpoint "
        "directory)"
    )


def test_run_that_is_not_a_run(tmp_path: Path) -> None:
    line = _fails(["--run", str(tmp_path / "none"), "--run-dir", str(tmp_path / "ev")])
    assert line == f"rlx: NotFound: --run {tmp_path / 'none'}: no such run (no config.toml there)"


def test_step_with_no_checkpoint(tmp_path: Path) -> None:
    """A run without the step's checkpoint: the error names --run and the committed steps, and
    the temporary export directory is gone."""
    run = tmp_path / "run"
    write_addition_jsonl(run / "data", DEMO_TASK)
    cfg = demo_config(str(run), run / "data", base_model_dir())
    (run / "config.toml").write_text(to_toml(cfg, comments=False))
    (run / "checkpoints").mkdir()
    ev = tmp_path / "ev"
    line = _fails(["--run", str(run), "--step", "7", "--run-dir", str(ev)])
    assert line.startswith(f"rlx: NotFound: --run {run}: step 7: no committed checkpoint under ")
    assert line.endswith("(committed: none)")
    assert not list(ev.glob(".export-*"))


def test_example_is_a_known_one_and_alone(tmp_path: Path) -> None:
    work = ["--run-dir", str(tmp_path / "ev")]
    assert _fails(["--example", "chess", *work]) == (
        "rlx: InvalidArgument: --example 'chess': one of addition, code"
    )
    assert _fails(["--example", "code", "--run", str(tmp_path), *work]) == (
        "rlx: InvalidArgument: --example evaluates a built-in example: not with CONFIG or --run"
    )


def test_negative_samples_in_the_config(tmp_path: Path) -> None:
    line = _fails(["--set", "eval.samples=-1", "--run-dir", str(tmp_path / "ev")])
    assert line == "rlx: ConfigError: eval.samples: must be >= 0"


def test_negative_samples_option(tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval", "--samples", "-1", "--run-dir", str(tmp_path)])
    assert result.exit_code == 2  # a usage error, before anything runs
    assert "--samples" in result.output


def test_config_without_eval_datasets(tmp_path: Path) -> None:
    write_addition_jsonl(tmp_path / "data", DEMO_TASK)
    cfg = demo_config(str(tmp_path / "r"), tmp_path / "data", base_model_dir())
    text = to_toml(cfg, comments=False)
    cut = text.index("[[eval.datasets]]")
    config = tmp_path / "no_eval.toml"
    config.write_text(text[:cut])
    line = _fails([str(config), "--run-dir", str(tmp_path / "ev")])
    assert line == "rlx: InvalidArgument: the config has no [[eval.datasets]] to evaluate on"


def _run_with_eval_metrics(run: Path) -> None:
    """Metrics of a run with `[eval] samples = 4` on one eval dataset, evaluated at 0 and 2."""
    run.mkdir()
    (run / "config.toml").write_text("steps = 2\n")
    lines = [
        {"step": 0, "heldout": 0.5, "eval/sums/greedy": 0.5, "eval/sums/pass@1": 0.25}
        | {"eval/sums/pass@4": 0.625, "eval/sums/avg@4": 0.25},
        {"step": 1, "reward": 0.4, "step_s": 1.0},
        {"step": 2, "reward": 0.6, "step_s": 1.0, "heldout": 0.75, "eval/sums/greedy": 0.75}
        | {"eval/sums/pass@1": 0.5, "eval/sums/pass@4": 0.875, "eval/sums/avg@4": 0.5},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_status_shows_the_newest_eval_figures(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _run_with_eval_metrics(run)
    result = runner.invoke(app, ["status", str(run), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["eval"] == {
        "step": 2,
        "figures": {
            "sums/greedy": 0.75,
            "sums/pass@1": 0.5,
            "sums/pass@4": 0.875,
            "sums/avg@4": 0.5,
        },
    }
    assert out["heldout"] == {"0": 0.5, "2": 0.75}
    result = runner.invoke(app, ["status", str(run)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "eval (step 2)" in result.stdout
    assert "sums: greedy 0.750, pass@1 0.500, pass@4 0.875, avg@4 0.500" in result.stdout
    from rlx_cli.run_cmd import _eval_figures

    assert _eval_figures({"b/avg@2": 0.5, "b/pass@2": None, "a/greedy": 1, "b/greedy": 0.25}) == (
        "a: greedy 1.000\nb: greedy 0.250, pass@2 -, avg@2 0.500"
    )


def test_status_without_eval_figures(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text("steps = 2\n")
    (run / "metrics.jsonl").write_text('{"step": 0, "heldout": 0.5}\n')
    result = runner.invoke(app, ["status", str(run), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["eval"] is None


def test_plot_draws_pass_at_k_beside_greedy(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    from rlx_cli.plot_cmd import _heldout, read_metrics

    run = tmp_path / "run"
    _run_with_eval_metrics(run)
    ax = Figure().subplots()
    _heldout(ax, read_metrics(run))
    drawn = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert drawn == {
        "greedy": [0.5, 0.75],
        "sums/pass@1": [0.25, 0.5],
        "sums/pass@4": [0.625, 0.875],
    }
    assert ax.get_title() == "held-out accuracy (greedy) and pass@k (sampled)"
    result = runner.invoke(app, ["plot", str(run)])
    assert result.exit_code == 0, result.output
    assert (run / "plot.png").read_bytes()[:4] == b"\x89PNG"


def _answer(ds: str, row: int, sample: int, status: str, tokens: int, greedy: bool) -> EvalSample:
    score = {"AC": 1.0, "WA": 0.0}.get(status)
    return EvalSample(
        dataset=ds,
        row=row,
        prompt_id=f"{ds}/{row}",
        sample=sample,
        greedy=greedy,
        text="",
        status=status,
        score=score,
        response_tokens=tokens,
        finish_reason="stop",
    )


def test_summary_tables_show_every_figure_and_verdict() -> None:
    # a: row 0 greedy AC, sampled AC WA WA WA (n 4, c 1); row 1 greedy ERROR, sampled WA INFRA
    # AC WA (n 3, c 1); b: one greedy WA
    sampled = ["AC", "WA", "WA", "WA", "WA", "INFRA", "AC", "WA"]
    samples = [
        _answer("a", 0, 0, "AC", 3, True),
        _answer("a", 1, 0, "ERROR", 5, True),
        *(_answer("a", i // 4, i % 4, st, i + 1, False) for i, st in enumerate(sampled)),
        _answer("b", 0, 0, "WA", 2, True),
    ]
    figures, verdicts = summary_tables(summarize(samples, 2))
    console = Console(record=True, width=160)
    console.print(figures)
    console.print(verdicts)
    text = console.export_text()
    assert "pass@2" in text and "avg@2" in text and "greedy acc" in text
    lines = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines()]
    # dataset, prompts, greedy acc, pass@1 (1/4 + 1/3) / 2, pass@2 (1/2 + 2/3) / 2, avg@2,
    # len greedy, len sampled, excluded
    assert ["a", "2", "1.000", "0.292", "0.583", "0.292", "4.0", "4.5", "2"] in lines
    assert ["b", "1", "0.000", "-", "-", "-", "2.0", "-", "0"] in lines
    # the verdict columns: AC ERROR INFRA WA
    assert ["a", "greedy", "1", "1", "0", "0"] in lines
    assert ["a", "sampled", "2", "0", "1", "5"] in lines
    assert ["b", "greedy", "0", "0", "0", "1"] in lines
