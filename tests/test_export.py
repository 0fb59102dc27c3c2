"""`rlx export`: a run's trained weights as an HF checkpoint directory, checked against the
trainer's own checkpoint bit for bit.

The run is built through the Python APIs a run uses: its config.toml as `rlx up` writes it (base
model: the committed qwen2 test checkpoint, which has tokenizer files), a real trainer
service taking 3 RL steps with a checkpoint after each into RUN/checkpoints and pushing every
version to a real paramserver process recorded in RUN/services.json with the run's token.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_core.clients import TrainBatch
from rlx_core.config import from_dict, to_toml
from rlx_core.configs.run import loads_run_config
from rlx_core.storage import open_storage
from rlx_launch.local import ServiceHandle, service_command, write_services
from rlx_testing import ServiceProcess, tree, write_token_file

ROOT = Path(__file__).resolve().parents[1]
QWEN2 = ROOT / "packages/model/tests/testdata/qwen2"
RLX = [sys.executable, "-c", "from rlx_cli.main import app; app()"]
STEPS = 3
TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


@dataclass
class Run:
    dir: Path
    base: Path
    service: object  # the TrainerService, still holding the state of step STEPS


def _config_toml(run_dir: str, base: Path) -> bytes:
    """The run's config.toml as `rlx up` writes it: the config loaded, every default written."""
    text = (
        f"run_dir = {json.dumps(run_dir)}\n"
        f"[model]\npath = {json.dumps(str(base))}\n"
        f'[[datasets]]\nname = "addition"\npath = {json.dumps(run_dir + "/data/train.jsonl")}\n'
    )
    return to_toml(loads_run_config(text), comments=False).encode()


def _batch(seed: int, version: int, vocab: int) -> TrainBatch:
    """4 prompts x 4 samples of 24 tokens, the response after position 10, random rewards."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, (4, 4, 24)).astype(np.int32)
    mask = np.zeros((4, 4, 24), np.float32)
    mask[..., 10:] = 1
    sampler = np.where(mask > 0, -rng.random(mask.shape) * 4, 0).astype(np.float32)
    rewards = rng.integers(0, 2, (4, 4)).astype(np.float32)
    return TrainBatch.rl(tokens, mask, sampler, rewards, version=version)


def _trainer_config(run_dir: Path, paramserver: str) -> object:
    from rlx_trainer import TrainerConfig

    return from_dict(
        TrainerConfig,
        {
            "optimizer": {"lr": 1e-2, "schedule": "constant"},
            "objective": {"preset": "grpo", "beta": 0.0},
            "checkpoint": {"uri": str(run_dir / "checkpoints"), "every": 1, "keep": 5},
            "paramserver": {"addresses": [paramserver], "token_file": str(run_dir / "token")},
            "compile_cache_dir": "",
        },
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    from rlx_trainer import TrainerService

    root = tmp_path_factory.mktemp("export")
    base = root / "base"
    shutil.copytree(QWEN2, base)
    (base / "chat_template.jinja").write_text(TEMPLATE)
    run_dir = root / "run"
    run_dir.mkdir()
    token = write_token_file(run_dir / "token")
    (run_dir / "config.toml").write_bytes(_config_toml(str(run_dir), base))

    cmd = service_command(sys.executable, "paramserver", 0, str(token), ("--max-versions", "8"))
    ps = ServiceProcess(cmd)
    address = ps.address
    handle = ServiceHandle(
        name="paramserver-0",
        kind="paramserver",
        address=address,
        pid=ps.proc.pid,
        log=str(run_dir / "paramserver-0.log"),
        port=int(address.rsplit(":", 1)[1]),
    )
    write_services(run_dir, {"paramserver-0": handle}, lambda _: True)

    service = TrainerService(_trainer_config(run_dir, address))
    service.lifecycle.set(service.lifecycle.state.READY)
    vocab = json.loads((base / "config.json").read_text())["vocab_size"]
    try:
        service.init(hf_dir=str(base), seed=0)
        for step in range(STEPS):
            service.train_step(_batch(step, step, vocab), expected_step=step)
        yield Run(run_dir, base, service)
    finally:
        service.close()
        ps.stop()


def rlx(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*RLX, *args], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return result


def _checkpoint(run: Run, step: int) -> tuple[object, dict[str, np.ndarray]]:
    """(model config, '/'-path params on the host) of checkpoint `step`, restored the way the
    trainer restores itself (the whole state)."""
    from rlx_trainer.checkpoint import CheckpointStore
    from rlx_trainer.trainer import Trainer, flatten

    store = CheckpointStore(str(run.dir / "checkpoints"), read_only=True)
    config = run.service.config  # type: ignore[attr-defined]
    trainer = Trainer.from_checkpoint(config, store, step)
    assert trainer.state.step == step
    return trainer.cfg, {k: np.asarray(v) for k, v in flatten(trainer.state.params).items()}


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


@pytest.mark.slow
@pytest.mark.integration
def test_checkpoint_export_round_trips_bit_for_bit(run: Run, tmp_path: Path) -> None:
    import jax
    import jax.numpy as jnp

    from rlx_model import load_checkpoint, token_logprobs
    from rlx_model.decoder import unflatten
    from rlx_model.safetensors_io import SafetensorsFile
    from rlx_trainer.trainer import flatten

    out = tmp_path / "exported"
    text = rlx("export", str(run.dir), "--out", str(out)).stdout
    assert f"exported checkpoint step {STEPS} of {run.dir} to {out}" in text
    assert "model.safetensors: float32" in text

    # the files: weights, config, and exactly the tokenizer files the base model has
    expected = {"config.json", "model.safetensors", "chat_template.jinja", *TOKENIZER}
    assert {p.name for p in out.iterdir()} == expected
    for name in (*TOKENIZER, "chat_template.jinja"):
        assert (out / name).read_bytes() == (run.base / name).read_bytes(), name
    assert not list(out.parent.glob(".exported*"))  # no temporary left beside it

    # config.json as transformers' AutoConfig reads it
    config = json.loads((out / "config.json").read_text())
    base = json.loads((run.base / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["torch_dtype"] == "float32"
    for key in (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "tie_word_embeddings",
        "rms_norm_eps",
        "max_position_embeddings",
        "bos_token_id",
        "eos_token_id",
    ):
        assert config[key] == base[key], key

    # HF tensor names: those transformers saved in the base model, in float32
    weights = SafetensorsFile(out / "model.safetensors")
    assert sorted(weights.names()) == sorted(
        SafetensorsFile(run.base / "model.safetensors").names()
    )
    assert {str(weights.get(n).dtype) for n in weights.names()} == {"float32"}

    # every tensor equals the Orbax checkpoint's, which training moved away from the base
    model, params = _checkpoint(run, STEPS)
    cfg, loaded = load_checkpoint(out)
    exported = {k: np.asarray(v) for k, v in flatten(loaded).items()}
    assert exported.keys() == params.keys()
    for name, value in params.items():
        assert exported[name].dtype == value.dtype, name
        assert _bits(exported[name]) == _bits(value), name
    _, start = load_checkpoint(run.base)
    assert _bits(np.asarray(flatten(start)["embed"])) != _bits(params["embed"])

    # `rlx model score` on the export gives the log-probs of the checkpoint's own params
    rng = np.random.default_rng(5)
    records = [
        {
            "prompt_ids": rng.integers(0, cfg.vocab_size, n).tolist(),
            "completion_ids": rng.integers(0, cfg.vocab_size, m).tolist(),
        }
        for n, m in ((3, 9), (17, 30), (40, 50))
    ]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    scored = rlx("model", "score", str(out), "--input", str(tmp_path / "in.jsonl")).stdout
    got = [json.loads(line)["logprobs"] for line in scored.splitlines()]

    direct_params = unflatten({k: jnp.asarray(v) for k, v in params.items()})
    scorer = jax.jit(token_logprobs, static_argnums=(1,))
    assert model == cfg  # the same architecture and dtypes as the trainer's own model
    for record, line in zip(records, got, strict=True):
        seq = record["prompt_ids"] + record["completion_ids"]
        tokens = np.zeros((1, -(-len(seq) // 64) * 64), np.int32)
        tokens[0, : len(seq)] = seq
        logp, _ = scorer(direct_params, model, jnp.asarray(tokens), jnp.roll(tokens, -1, 1))
        want = np.asarray(logp[0, len(record["prompt_ids"]) - 1 : len(seq) - 1])
        assert _bits(np.asarray(line, np.float32)) == _bits(want)


@pytest.mark.slow
@pytest.mark.integration
def test_version_from_the_paramserver_equals_the_checkpoint(run: Run, tmp_path: Path) -> None:
    for step in (2, STEPS):
        by_step, by_version = tmp_path / f"step{step}", tmp_path / f"version{step}"
        rlx("export", str(run.dir), "--step", str(step), "--out", str(by_step))
        text = rlx("export", str(run.dir), "--version", str(step), "--out", str(by_version))
        assert f"exported version {step} (from the paramserver)" in text.stdout
        assert {p.name for p in by_version.iterdir()} == {p.name for p in by_step.iterdir()}
        for p in by_step.iterdir():
            assert (by_version / p.name).read_bytes() == p.read_bytes(), p.name
    assert (tmp_path / "step2/model.safetensors").read_bytes() != (
        tmp_path / f"step{STEPS}/model.safetensors"
    ).read_bytes()


def _fails(args: list[str], *named: str) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for text in named:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.mark.slow
@pytest.mark.integration
def test_bad_inputs_are_one_line_and_leave_nothing(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _fails(["export", str(tmp_path / "nope"), "--out", str(out)], "rlx: NotFound:", "no such run")
    _fails(
        ["export", str(run.dir), "--step", "1", "--version", "1", "--out", str(out)],
        "rlx: InvalidArgument:",
        "--step or --version, not both",
    )
    _fails(
        ["export", str(run.dir), "--step", "7", "--out", str(out)],
        "rlx: NotFound: step 7",
        "[1, 2, 3]",
    )
    _fails(
        ["export", str(run.dir), "--version", "9", "--out", str(out)],
        "rlx: NotFound: version 9",
        "paramserver-0",
        "[0, 1, 2, 3]",
    )
    assert not out.exists() and list(tmp_path.iterdir()) == []

    # a non-empty --out only with --force; an empty one is fine
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    _fails(["export", str(run.dir), "--out", str(out)], "rlx: AlreadyExists:", str(out))
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    result = CliRunner().invoke(app, ["export", str(run.dir), "--out", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert not (out / "mine.txt").exists() and (out / "model.safetensors").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(app, ["export", str(run.dir), "--step", "1", "--out", str(empty)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "out"]


@pytest.mark.slow
@pytest.mark.integration
def test_s3_run_exports_the_same_bytes(run: Run, tmp_path: Path, new_root: object) -> None:
    from rlx_trainer.checkpoint import CheckpointStore

    uri = new_root("s3", "runs/r1")  # type: ignore[operator]
    storage = open_storage(uri)
    storage.put("config.toml", _config_toml(uri, run.base))
    trainer = run.service.trainer  # type: ignore[attr-defined]
    assert trainer.save(CheckpointStore(f"{uri}/checkpoints")) == STEPS
    assert not (tmp_path / "s3").exists()

    remote, local = tmp_path / "from-s3", tmp_path / "local"
    text = rlx("export", uri, "--out", str(remote), "--work-dir", str(tmp_path / "work")).stdout
    assert f"exported checkpoint step {STEPS} of {uri}" in text
    rlx("export", str(run.dir), "--step", str(STEPS), "--out", str(local))
    assert sorted(p.name for p in remote.iterdir()) == sorted(p.name for p in local.iterdir())
    for p in local.iterdir():
        assert (remote / p.name).read_bytes() == p.read_bytes(), p.name
    # nothing but the export was left on this machine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["from-s3", "local"]


@pytest.mark.slow
@pytest.mark.integration
def test_an_out_that_is_holds_or_sits_in_a_run_is_refused(run: Run, tmp_path: Path) -> None:
    """--out the run itself, its checkpoints, or a directory holding it: refused with or
    without --force before anything is written; the run keeps every file, byte for byte."""
    copy = tmp_path / "runs" / "r1"
    shutil.copytree(run.dir, copy)
    before = tree(tmp_path)
    for out in (copy, copy / "checkpoints", copy / "checkpoints" / "new", copy.parent, tmp_path):
        for force in (["--force"], []):
            line = _fails(["export", str(copy), "--out", str(out), *force], "rlx: InvalidArgument:")
            assert line.startswith(f"rlx: InvalidArgument: --out {out}: "), line
            assert tree(tmp_path) == before, (out, force)
    # the copy is a run that exports: the refusals were about --out alone
    rlx("export", str(copy), "--out", str(tmp_path / "exported"))
    assert (tmp_path / "exported" / "model.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.integration
def test_force_through_a_symlink_replaces_where_it_points(run: Run, tmp_path: Path) -> None:
    """The new tree is built beside the link's target and swapped in: the link stays, the old
    contents go, and nothing (`.NAME.old-*`, `.NAME.partial-*`) is left beside either."""
    target = tmp_path / "models" / "latest-v1"
    target.mkdir(parents=True)
    (target / "old.txt").write_text("the previous export")
    link = tmp_path / "latest"
    link.symlink_to(target)
    text = rlx("export", str(run.dir), "--out", str(link), "--force").stdout
    assert f"to {link}" in text
    assert link.is_symlink() and link.resolve() == target
    assert {p.name for p in target.iterdir()} == {
        "config.json",
        "model.safetensors",
        "chat_template.jinja",
        *TOKENIZER,
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "models"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["latest-v1"]
