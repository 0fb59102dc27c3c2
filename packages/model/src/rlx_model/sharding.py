"""Meshes with named axes (data, fsdp, tensor) and the sharding of params and batches.

Each family declares one logical spec per parameter (`Family.specs`). Here a spec becomes a
`NamedSharding` on a concrete mesh; an axis that does not divide its dimension is dropped
(replicated) rather than failing, so the same declaration serves any device count.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlx_core.errors import ConfigError
from rlx_model.config import ModelConfig
from rlx_model.decoder import Params
from rlx_model.families import get_family

__all__ = [
    "AXES",
    "batch_sharding",
    "chunk_axes",
    "make_mesh",
    "paged_cache_sharding",
    "param_partition_specs",
    "param_shardings",
    "shard_params",
]

AXES = ("data", "fsdp", "tensor")


def make_mesh(shape: Sequence[int], devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A (data, fsdp, tensor) mesh; the product of `shape` must equal the number of devices."""
    devices = list(devices) if devices is not None else jax.devices()
    if len(shape) != len(AXES) or any(n < 1 for n in shape):
        raise ConfigError(
            f"mesh shape must be 3 positive sizes for {AXES}", field="mesh", value=tuple(shape)
        )
    if int(np.prod(shape)) != len(devices):
        raise ConfigError(
            f"mesh {tuple(shape)} needs {int(np.prod(shape))} devices, {len(devices)} available",
            field="mesh",
            value=tuple(shape),
        )
    return Mesh(np.asarray(devices).reshape(tuple(shape)), AXES)


def _fit(spec: tuple[str | None, ...], shape: tuple[int, ...], mesh: Mesh) -> PartitionSpec:
    axes = []
    for axis, dim in zip(spec, shape, strict=True):
        size = mesh.shape[axis] if axis is not None else 1
        axes.append(axis if axis is not None and size > 1 and dim % size == 0 else None)
    return PartitionSpec(*axes)


def param_partition_specs(cfg: ModelConfig, mesh: Mesh) -> dict[str, PartitionSpec]:
    """'/'-joined param path -> PartitionSpec on this mesh."""
    from rlx_model.decoder import param_shapes

    shapes = param_shapes(cfg)
    specs = get_family(cfg.family).specs_for(cfg)
    return {path: _fit(specs[path], shapes[path], mesh) for path in shapes}


def chunk_axes(cfg: ModelConfig) -> dict[str, int]:
    """'/'-joined param path -> the axis the paramserver should chunk it along: the one a
    tensor-parallel inference worker splits it on (the "tensor" axis of its spec), so a worker
    pulling its shard reads that shard's chunks alone; else the first axis the spec shards;
    else 0."""
    specs = get_family(cfg.family).specs_for(cfg)
    return {
        path: spec.index("tensor")
        if "tensor" in spec
        else next((i for i, a in enumerate(spec) if a is not None), 0)
        for path, spec in specs.items()
    }


def param_shardings(cfg: ModelConfig, mesh: Mesh) -> Params:
    """A pytree of NamedSharding matching the params pytree."""
    from rlx_model.decoder import unflatten

    return unflatten(
        {p: NamedSharding(mesh, s) for p, s in param_partition_specs(cfg, mesh).items()}
    )


def paged_cache_sharding(cfg: ModelConfig, mesh: Mesh) -> NamedSharding:
    """The paged KV cache's k and v [L, K, blocks, block_size, d]: the KV heads split over the
    tensor axis when its size divides them (each device then keeps the keys and values of the
    heads its k/v columns compute), else replicated."""
    tensor = mesh.shape["tensor"]
    split = tensor > 1 and cfg.num_kv_heads % tensor == 0
    return NamedSharding(mesh, PartitionSpec(None, "tensor" if split else None))


def shard_params(params: Params, cfg: ModelConfig, mesh: Mesh) -> Params:
    """Place params on the mesh according to the family's specs."""
    return jax.device_put(params, param_shardings(cfg, mesh))


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Batch-major arrays: the batch axis over (data, fsdp), the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(("data", "fsdp"), *([None] * (ndim - 1))))
