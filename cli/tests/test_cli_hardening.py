"""`rlx` against hostile and mistaken input: an export that would destroy a run is refused, a
hostile chat template or tokenizer is one line with no run directory left, untrusted text is
escaped on the terminal, and `rlx eval` checks its options before it starts anything."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_controller.rollout_log import RolloutLog
from rlx_core.config import to_toml
from rlx_core.rollout import Judgement, RolloutGroup, RolloutSample, RolloutUnit
from rlx_core.storage import open_storage
from rlx_data import DEMO_TASK, base_model_dir, demo_config, write_addition_jsonl
from rlx_testing import tree

runner = CliRunner()
ESC = "\x1b"
# a screen clear, a carriage return, a forged line and an OSC 52 clipboard write
HOSTILE_TEXT = "ok\x1b[2J\r\x1b[1Arlx: forged\x1b]52;c;cm0gLXJmIH4K\x07 \u202eevil\x9b1m"


def _one_line(args: Sequence[str]) -> str:
    """Run `rlx ARGS` expecting a refusal: exit code 1 and exactly one `rlx: ` line on stderr,
    free of control characters."""
    result = runner.invoke(app, list(args))
    assert isinstance(result.exception, SystemExit), (
        f"rlx {' '.join(args)} raised {result.exception!r}\n{result.output}"
    )
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip("\n").split("\n")
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rlx: "), lines[0]
    assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in lines[0]), repr(lines[0])
    return lines[0]


# --- rlx export: never over a run -------------------------------------------------------------


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run directory holding what a run holds: config.toml, run.json, checkpoints, rollouts,
    snapshots."""
    data = tmp_path / "data"
    write_addition_jsonl(data, DEMO_TASK)
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    cfg = demo_config(str(run), str(data), base_model_dir())
    (run / "config.toml").write_text(to_toml(cfg, comments=False))
    (run / "run.json").write_text(json.dumps({"run_id": "abc", "config_hash": "0" * 64}))
    for name, body in (
        ("checkpoints/3/params.bin", b"\x01" * 64),
        ("rollouts/b00000000.r0.u0000.json", b"{}"),
        ("snapshots/s0000000003/snapshot.json", b"{}"),
    ):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(body)
    return run


@pytest.mark.parametrize("force", [False, True], ids=["", "--force"])
@pytest.mark.parametrize(
    "where", ["RUN", "RUN/checkpoints", "RUN/new", "RUN/checkpoints/3", "parent", "grandparent"]
)
def test_export_refuses_an_out_that_is_holds_or_sits_in_the_run(
    where: str, force: bool, run: Path
) -> None:
    out = {
        "RUN": run,
        "RUN/checkpoints": run / "checkpoints",
        "RUN/new": run / "new",
        "RUN/checkpoints/3": run / "checkpoints" / "3",
        "parent": run.parent,
        "grandparent": run.parent.parent,
    }[where]
    before = tree(run.parent.parent)
    line = _one_line(["export", str(run), "--out", str(out), *(["--force"] if force else [])])
    assert line.startswith(f"rlx: InvalidArgument: --out {out}: "), line
    assert "run" in line.removeprefix(f"rlx: InvalidArgument: --out {out}: ")
    assert tree(run.parent.parent) == before  # nothing written, nothing removed


def test_export_refuses_another_run_and_a_symlink_into_one(run: Path, tmp_path: Path) -> None:
    """Not only the exported run: any run directory, reached directly or through a link."""
    other = tmp_path / "other"
    shutil.copytree(run, other)
    link = tmp_path / "link"
    link.symlink_to(other / "checkpoints")
    before = tree(other)
    for out in (other, link):
        line = _one_line(["export", str(run), "--out", str(out), "--force"])
        assert f"{other} is a run directory (it holds config.toml)" in line, line
    assert tree(other) == before and link.is_symlink()


def test_export_refuses_the_runs_base_model(run: Path, tmp_path: Path) -> None:
    """The base model ([model] path) is what a resume of the run starts from: not replaced."""
    base = tmp_path / "base"
    shutil.copytree(base_model_dir(), base)
    config = (run / "config.toml").read_text().replace(str(base_model_dir()), str(base))
    (run / "config.toml").write_text(config)
    before = tree(base)
    for out in (base, base / "sub"):
        line = _one_line(["export", str(run), "--out", str(out), "--force"])
        assert f"the run's base model ([model] path) is {base}" in line, line
    assert tree(base) == before


# --- rlx up: a hostile template or tokenizer, a bad dataset --------------------------------------


def _model(tmp_path: Path, template: str | None = None, regex: str | None = None) -> Path:
    """The demo's base model with another chat template or a pre-tokenizer regex."""
    model = tmp_path / "model"
    shutil.copytree(base_model_dir(), model)
    if template is not None:
        (model / "chat_template.jinja").write_text(template)
    if regex is not None:
        body = json.loads((model / "tokenizer.json").read_text())
        body["pre_tokenizer"] = {
            "type": "Split",
            "pattern": {"Regex": regex},
            "behavior": "Isolated",
            "invert": False,
        }
        (model / "tokenizer.json").write_text(json.dumps(body))
    return model


def _up_config(tmp_path: Path, model: Path, prompts: Sequence[str] = ()) -> Path:
    """A run config on `model`; its training data the demo's, or one row per prompt given."""
    data = tmp_path / "data"
    write_addition_jsonl(data, DEMO_TASK)
    if prompts:
        rows = [{"prompt": p, "answer": "1"} for p in prompts]
        (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = demo_config("unused", data, base_model_dir())  # sized with the demo's own model
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=str(model)))
    path = tmp_path / "run.toml"
    path.write_text(to_toml(cfg, comments=False))
    return path


def _refused_up(args: Sequence[str], run: Path) -> str:
    line = _one_line(["up", *args, "--run-dir", str(run)])
    assert not run.exists(), sorted(p.name for p in run.iterdir())  # no run directory left
    return line


@pytest.mark.parametrize(
    ("template", "words"),
    [
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "range(100000) has 100000 numbers",
        ),
        (
            "{% for i in range(9999) %}{% for j in range(9999) %}{% for k in range(9999) %}"
            "{% endfor %}{% endfor %}{% endfor %}",
            "ran past 2 s",
        ),
        (
            "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "the operator '~' would make a value of",
        ),
        ("{% for i in range(10 ** 8) %}{% endfor %}", "100000000 numbers"),
        ("{{ messages|random }}", "|random, which renders differently"),
        ("{{ lipsum() }}", "lipsum, which renders differently"),
    ],
    ids=["nested-range", "nested-in-cap", "doubling", "huge-range", "random", "lipsum"],
)
def test_up_with_a_hostile_template_is_one_line_and_no_run_dir(
    template: str, words: str, tmp_path: Path
) -> None:
    model = _model(tmp_path, template=template)
    line = _refused_up([str(_up_config(tmp_path, model))], tmp_path / "run")
    assert line.startswith("rlx: ConfigError: datasets[0]: addition row 0: "), line
    assert f"{model}: chat template " in line and words in line, line


def test_a_template_message_with_escapes_is_printed_escaped(tmp_path: Path) -> None:
    model = _model(tmp_path, template="{{ raise_exception('" + HOSTILE_TEXT + "') }}")
    line = _refused_up([str(_up_config(tmp_path, model))], tmp_path / "run")
    # (jinja reads a template's carriage return as a newline: one space on the line)
    assert line.endswith(
        f"{model}: chat template: ok\\x1b[2J \\x1b[1Arlx: forged\\x1b]52;c;cm0gLXJmIH4K\\x07 "
        "\\u202eevil\\x9b1m"
    ), line
    assert line.count("rlx:") == 2  # the forged one stays inside the one line


def test_prefilter_prints_a_template_message_escaped(tmp_path: Path) -> None:
    model = _model(tmp_path, template="{{ raise_exception('" + HOSTILE_TEXT + "') }}")
    config = _up_config(tmp_path, model)
    line = _one_line(["prefilter", str(config), "--run-dir", str(tmp_path / "pf")])
    escaped = "ok\\x1b[2J \\x1b[1Arlx: forged\\x1b]52;c;cm0gLXJmIH4K\\x07 \\u202eevil\\x9b1m"
    assert line.endswith(f"chat template: {escaped}"), line


def test_a_tokenizer_that_panics_in_rust_is_one_line(tmp_path: Path) -> None:
    """The tokenizers crate panics (pyo3_runtime.PanicException, a BaseException) when `(a+)+b`
    exhausts oniguruma's retry limit on a prompt of many a's."""
    model = _model(tmp_path, regex="(a+)+b")
    config = _up_config(tmp_path, model, prompts=["a" * 60 + "c"])
    line = _refused_up([str(config)], tmp_path / "run")
    assert line.startswith(
        f"rlx: ConfigError: datasets[0]: addition row 0: {model}/tokenizer.json fails to "
    )
    assert "PanicException" in line and "retry-limit-in-match" in line


def test_up_with_a_bad_dataset_or_override_leaves_no_run_dir(tmp_path: Path) -> None:
    config = _up_config(tmp_path, base_model_dir())
    (tmp_path / "data" / "train.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n{"pro')
    line = _refused_up([str(config)], tmp_path / "run")
    assert "train.jsonl" in line, line
    # the demo with an override no prompt fits: its data was written, and is gone again
    line = _refused_up(["--set", "batch.max_prompt_tokens=2"], tmp_path / "a" / "b" / "run")
    assert "batch.max_prompt_tokens" in line, line
    assert not (tmp_path / "a").exists()


def test_up_of_a_remote_demo_with_a_bad_override_uploads_nothing(
    tmp_path: Path, new_root: Callable[[str, str], str]
) -> None:
    uri = new_root("s3", "runs/r1")
    work = tmp_path / "w"
    line = _one_line(["up", "--run-dir", uri, "--work-dir", str(work), "--set", "steps=-1"])
    assert line.startswith("rlx: ConfigError: steps"), line
    assert open_storage(uri).list() == [] and not work.exists()


# --- escaped terminal output --------------------------------------------------------------------


def test_rollouts_show_prints_hostile_text_escaped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    storage = open_storage(run)
    storage.put(
        "config.toml",
        f'run_dir = "{run}"\n[model]\npath = "{base_model_dir()}"\n'
        '[[datasets]]\nname = "d"\npath = "d.jsonl"\n'.encode(),
    )
    unit = {
        "unit_id": "b00000000.r0.u0000",
        "batch": 0,
        "round": 0,
        "index": 0,
        "version": 0,
        "prompts": [{"dataset": "d", "row": 0, "epoch": 0}],
        "seeds": [[1]],
        "first_slot": 0,
    }
    sample = RolloutSample(
        tokens=(5, 6),
        logp_f32=np.full(2, -0.5, "<f4").tobytes(),
        finish="stop",
        text="first line\n" + HOSTILE_TEXT,
        status="WA" + ESC + "[2J",
        reward=0.0,
        judgement=Judgement(message="verifier said " + HOSTILE_TEXT),
    )
    group = RolloutGroup(prompt="d/0", prompt_ids=(1, 2, 3), version=0, samples=(sample,))
    RolloutLog(storage).append(
        RolloutUnit(unit=unit, version=0, generated_tokens=2, groups=(group,))
    )

    # a terminal wide enough that no cell is folded
    result = runner.invoke(app, ["rollouts", "show", str(run)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert ESC not in out and "\r" not in out and "\x07" not in out and "\x9b" not in out
    assert "\u202e" not in out
    assert "\\x1b[2J" in out and "\\x1b]52;c;cm0gLXJmIH4K\\x07" in out and "\\x0d" in out
    assert "WA\\x1b[2J" in out
    # every line is inside the table's box: nothing forged at the start of a line
    assert not any(line.startswith("rlx:") for line in out.splitlines())
    assert "first line" in out  # a response's own lines are kept

    rows = runner.invoke(app, ["rollouts", "show", str(run), "--json"])
    assert rows.exit_code == 0
    assert not any(c in rows.stdout for c in (ESC, "\r", "\x07", "\x9b", "\u202e"))
    assert json.loads(rows.stdout)["response"] == "first line\n" + HOSTILE_TEXT


# --- rlx eval: its options first ----------------------------------------------------------------


def test_eval_checks_out_and_samples_before_starting_anything(tmp_path: Path) -> None:
    ev = tmp_path / "ev"
    taken = tmp_path / "taken"
    taken.mkdir()
    line = _one_line(["eval", "--out", str(taken), "--run-dir", str(ev)])
    assert (
        line
        == f"rlx: InvalidArgument: --out {taken}: is a directory (the JSONL file of every sample)"
    )
    blob = tmp_path / "blob"
    blob.write_text("x")
    line = _one_line(["eval", "--out", str(blob / "s.jsonl"), "--run-dir", str(ev)])
    assert line == f"rlx: InvalidArgument: --out {blob / 's.jsonl'}: {blob} is not a directory"
    assert not ev.exists()  # refused before anything was made

    line = _one_line(["eval", "--samples", "5000", "--run-dir", str(ev)])
    assert line == (
        "rlx: InvalidArgument: --samples 5000: more than "
        "inference.limits.max_samples_per_prompt = 1024 answers per prompt"
    )
    # no service was started: none recorded, no log
    assert not (ev / "services.json").exists() and not list(ev.glob("*.log"))
