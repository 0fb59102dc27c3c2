"""Checkpoint directories: save/load round trips and errors that name what is wrong."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest

from rlx_core.errors import ConfigError, Corrupt, InvalidArgument, NotFound
from rlx_model import RopeScaling, init_params, load_checkpoint, save_checkpoint, tiny_config
from rlx_model.safetensors_io import SafetensorsFile, write_safetensors

DATA = Path(__file__).parent / "testdata"


@pytest.mark.parametrize(
    "cfg",
    [
        tiny_config(vocab_size=50, hidden_size=32),
        replace(
            tiny_config(vocab_size=50, hidden_size=32),
            family="qwen3",
            qkv_bias=False,
            qk_norm=True,
            head_dim=16,
        ),
        replace(
            tiny_config(vocab_size=50, hidden_size=32),
            family="llama",
            qkv_bias=False,
            tie_word_embeddings=False,
            rope_scaling=RopeScaling(original_max_position_embeddings=64),
        ),
    ],
    ids=["qwen2", "qwen3", "llama"],
)
def test_save_then_load_round_trips_config_and_params(tmp_path: Path, cfg) -> None:
    params = init_params(cfg, seed=5)
    save_checkpoint(tmp_path, cfg, params)
    cfg2, params2 = load_checkpoint(tmp_path)
    assert cfg2 == cfg
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params2), strict=True):
        np.testing.assert_array_equal(a, b)


def test_safetensors_round_trip_every_dtype(tmp_path: Path) -> None:
    tensors = {
        "bf16": np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16),
        "f32": np.linspace(0, 1, 7, dtype=np.float32),
        "i64": np.array([-(2**40), 3], dtype=np.int64),
        "bool": np.array([True, False]),
        "scalar": np.array(2.5, dtype=np.float16),
    }
    write_safetensors(tmp_path / "x.safetensors", tensors, {"format": "pt"})
    f = SafetensorsFile(tmp_path / "x.safetensors")
    assert sorted(f.names()) == sorted(tensors) and f.metadata == {"format": "pt"}
    for name, value in tensors.items():
        got = f.get(name)
        assert got.dtype == value.dtype and got.shape == value.shape
        assert got.tobytes() == value.tobytes()


def test_missing_directory_and_config(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="does not exist"):
        load_checkpoint(tmp_path / "nope")
    with pytest.raises(NotFound, match=r"config\.json does not exist"):
        load_checkpoint(tmp_path)


def test_missing_weights_lists_what_is_there(tmp_path: Path) -> None:
    shutil.copy(DATA / "qwen2" / "config.json", tmp_path)
    with pytest.raises(NotFound, match=r"neither model\.safetensors .* holds: config\.json"):
        load_checkpoint(tmp_path)


def test_unknown_architecture_is_named(tmp_path: Path) -> None:
    hf = json.loads((DATA / "qwen2" / "config.json").read_text())
    hf["architectures"] = ["MixtralForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(hf))
    with pytest.raises(ConfigError, match=r"MixtralForCausalLM.*supported: Qwen2ForCausalLM"):
        load_checkpoint(tmp_path)


def test_wrong_shape_names_the_tensor(tmp_path: Path) -> None:
    shutil.copytree(DATA / "qwen2", tmp_path / "c")
    hf = json.loads((tmp_path / "c" / "config.json").read_text())
    hf["intermediate_size"] = 96
    (tmp_path / "c" / "config.json").write_text(json.dumps(hf))
    with pytest.raises(InvalidArgument, match=r"mlp\.gate_proj\.weight' has shape \(128, 64\)"):
        load_checkpoint(tmp_path / "c")


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    f = SafetensorsFile(DATA / "qwen2" / "model.safetensors")
    kept = {n: f.get(n) for n in f.names() if n != "model.layers.1.self_attn.k_proj.bias"}
    (tmp_path / "c").mkdir()
    shutil.copy(DATA / "qwen2" / "config.json", tmp_path / "c")
    write_safetensors(tmp_path / "c" / "model.safetensors", kept)
    with pytest.raises(NotFound, match=r"model\.layers\.1\.self_attn\.k_proj\.bias"):
        load_checkpoint(tmp_path / "c")


def test_truncated_safetensors_is_corrupt(tmp_path: Path) -> None:
    data = (DATA / "qwen2" / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(Corrupt, match="bad byte range"):
        SafetensorsFile(tmp_path / "model.safetensors")


def test_unsupported_rope_scaling_is_named(tmp_path: Path) -> None:
    hf = json.loads((DATA / "llama" / "config.json").read_text())
    hf.pop("rope_parameters", None)
    hf["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    with pytest.raises(ConfigError, match="'yarn' is not supported"):
        load_checkpoint(tmp_path)
