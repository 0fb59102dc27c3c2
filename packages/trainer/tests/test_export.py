"""Trainer checkpoints and pushed tensors as HF checkpoint directories (rlx_trainer.export): the
checkpoint's dtype kept (bfloat16 too), bit-exact against the trainer's params, a GCS checkpoint
(the emulator) the same as a local one, and the errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from trainer_helpers import MODEL, config, flat, rl_batch

from rlx_core.errors import FailedPrecondition, InvalidArgument, NotFound
from rlx_model import init_params, load_checkpoint
from rlx_model.safetensors_io import SafetensorsFile
from rlx_trainer.checkpoint import CheckpointStore
from rlx_trainer.export import export_checkpoint, export_tensors
from rlx_trainer.trainer import Trainer


def _bits(tree: object) -> dict[str, bytes]:
    return {k: np.ascontiguousarray(v).tobytes() for k, v in flat(tree).items()}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_checkpoint_exports_in_its_own_dtype_bit_for_bit(tmp_path: Path, dtype: str) -> None:
    trainer = Trainer(config(model={"param_dtype": dtype}), MODEL, init_params(MODEL, 1))
    store = CheckpointStore(str(tmp_path / "ckpt"))
    trainer.train_step(rl_batch(0))
    trainer.save(store)
    trainer.train_step(rl_batch(1, version=1))
    trainer.save(store)

    step, cfg = export_checkpoint(str(tmp_path / "ckpt"), tmp_path / "out")  # the newest
    assert step == 2 and cfg.param_dtype == dtype
    hf = json.loads((tmp_path / "out/config.json").read_text())
    assert (hf["torch_dtype"], hf["model_type"]) == (dtype, MODEL.family)
    weights = SafetensorsFile(tmp_path / "out/model.safetensors")
    assert {str(weights.get(n).dtype) for n in weights.names()} == {dtype}
    _, loaded = load_checkpoint(tmp_path / "out", param_dtype=dtype)
    assert _bits(loaded) == _bits(trainer.state.params)

    # an older step, and the same params pushed as '/'-path tensors give the same bytes
    assert export_checkpoint(str(tmp_path / "ckpt"), tmp_path / "old", step=1)[0] == 1
    assert (tmp_path / "old/model.safetensors").read_bytes() != (
        tmp_path / "out/model.safetensors"
    ).read_bytes()
    pushed = export_tensors(trainer.host_params(), MODEL, tmp_path / "pushed")
    assert pushed.param_dtype == dtype
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "pushed" / name).read_bytes() == (tmp_path / "out" / name).read_bytes()


def test_a_read_only_store_creates_nothing_and_names_the_steps(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    with pytest.raises(NotFound, match="no committed checkpoint under"):
        export_checkpoint(str(missing), tmp_path / "out")
    assert not missing.exists()

    trainer = Trainer(config(), MODEL, init_params(MODEL, 1))
    trainer.save(CheckpointStore(str(tmp_path / "ckpt")))
    with pytest.raises(NotFound, match=r"step 5: .*\(committed: \[0\]\)"):
        export_checkpoint(str(tmp_path / "ckpt"), tmp_path / "out", step=5)
    reader = CheckpointStore(str(tmp_path / "ckpt"), read_only=True)
    with pytest.raises(FailedPrecondition, match="read-only"):
        trainer.save(reader)


def test_tensors_that_are_not_the_model_are_refused(tmp_path: Path) -> None:
    tensors = Trainer(config(), MODEL, init_params(MODEL, 1)).host_params()
    with pytest.raises(FailedPrecondition, match=r"missing \['embed'\]"):
        export_tensors({k: v for k, v in tensors.items() if k != "embed"}, MODEL, tmp_path)
    with pytest.raises(FailedPrecondition, match="'final_norm' has shape"):
        export_tensors({**tensors, "final_norm": np.ones(3, np.float32)}, MODEL, tmp_path)
    mixed = {**tensors, "final_norm": tensors["final_norm"].astype(np.float16)}
    with pytest.raises(InvalidArgument, match="one dtype"):
        export_tensors(mixed, MODEL, tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_gcs_checkpoint_exports_the_same_bytes(gcs_uri: str, tmp_path: Path) -> None:
    trainer = Trainer(config(), MODEL, init_params(MODEL, 1))
    trainer.train_step(rl_batch(0))
    trainer.save(CheckpointStore(gcs_uri))
    trainer.save(CheckpointStore(str(tmp_path / "ckpt")))
    assert export_checkpoint(gcs_uri, tmp_path / "gcs")[0] == 1
    export_checkpoint(str(tmp_path / "ckpt"), tmp_path / "local")
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "gcs" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
