"""The engine on a mesh of devices, which may span several processes (tensor parallel).

Without a mesh the engine runs on one device, as it always did. With one, the weights are laid
out by the model family's specs (`rlx_model.sharding`: q/k/v/gate/up split by columns, o/down
by rows, the embedding and head by vocabulary, norms replicated; an axis that does not divide
its dimension is dropped) and the paged KV cache by KV heads when the tensor axis divides them.
The scheduler stays on the host, the same on every process; what it hands the compiled calls
(tokens, block tables, keys, sampling knobs) becomes replicated arrays, and what comes back is
replicated, so every process reads the same tokens.

A process pulls from the paramserver only the part of each tensor its devices hold
(`pull_boxes`): at a tensor split 8 ways over 2 processes, half of every split weight.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlx_core.errors import ConfigError
from rlx_model import ModelConfig, Params, make_mesh, param_shapes
from rlx_model.distributed import local_box, put_global
from rlx_model.paged import PagedKVCache, init_paged_cache
from rlx_model.sharding import paged_cache_sharding, param_partition_specs

__all__ = ["engine_mesh", "init_cache", "on_mesh", "place_params", "pull_boxes"]

F = TypeVar("F", bound=Callable[..., Any])


def engine_mesh(tensor_parallel: int) -> Mesh | None:
    """The (data, fsdp, tensor) mesh the engine computes on, the tensor axis `tensor_parallel`
    wide (0: every device): None (one device) for a split of 1 in a single process; otherwise
    every device of every process, those the split leaves as data replicas that compute the same
    (every process must take part in every call)."""
    devices = jax.device_count()
    tensor = tensor_parallel or devices
    if tensor == 1 and jax.process_count() == 1:
        return None
    if devices % tensor:
        raise ConfigError(
            f"must divide the {devices} devices of the mesh ({jax.process_count()} processes)",
            field="engine.tensor_parallel",
            value=tensor_parallel,
        )
    return make_mesh((devices // tensor, 1, tensor))


def place_params(cfg: ModelConfig, form: Params, mesh: Mesh | None) -> Params:
    """Params in the form the engine computes with (`engine.engine_form`) laid out on `mesh`
    (None: as they are): each by its family spec, a layer's without the stacked layer axis and
    transposed for a matrix held output-major (`q_t`: [out, in] split like `q` [in, out]), the
    head held as [V, D] (`head_vd`) split by vocabulary like `lm_head` [D, V]."""
    if mesh is None:
        return form
    specs = param_partition_specs(cfg, mesh)

    def sharding(path: tuple[Any, ...], _: Any) -> NamedSharding:
        names = [str(getattr(k, "key", getattr(k, "idx", k))) for k in path]
        if names[0] == "layers":  # ("layers", i, name), a matrix output-major as name_t
            name = names[-1].removesuffix("_t")
            spec = specs[f"layers/{name}"][1:]
            return NamedSharding(mesh, PartitionSpec(*(spec if name == names[-1] else spec[::-1])))
        if names[0] == "head_vd":
            return NamedSharding(mesh, PartitionSpec(*reversed(specs["lm_head"])))
        return NamedSharding(mesh, specs["/".join(names)])

    return put_global(form, jax.tree_util.tree_map_with_path(sharding, form))


def pull_boxes(cfg: ModelConfig, mesh: Mesh | None) -> dict[str, tuple[list[int], list[int]]]:
    """'/'-path -> (start, stop) of the part of that tensor (as the paramserver holds it) this
    process's devices hold on `mesh`, for every tensor it holds only part of: what it pulls.
    Empty without a mesh or when every device is this process's. `place_params` lays the engine
    form out by the same specs (a layer's matrix transposed, the head as [V, D]), so the parts
    it reads lie inside these boxes."""
    if mesh is None or all(d.process_index == jax.process_index() for d in mesh.devices.flat):
        return {}
    shapes = param_shapes(cfg)
    boxes = {}
    for path, spec in param_partition_specs(cfg, mesh).items():
        start, stop = local_box(shapes[path], NamedSharding(mesh, spec))
        if start != [0] * len(start) or stop != list(shapes[path]):
            boxes[path] = (start, stop)
    return boxes


def init_cache(
    cfg: ModelConfig, num_blocks: int, block_size: int, mesh: Mesh | None
) -> PagedKVCache:
    """An all-zero paged KV cache; on a mesh, each device allocates only its part."""
    if mesh is None:
        return init_paged_cache(cfg, num_blocks, block_size)
    # one sharding for both k and v
    make = jax.jit(
        init_paged_cache, static_argnums=(0, 1, 2), out_shardings=paged_cache_sharding(cfg, mesh)
    )
    return cast(PagedKVCache, make(cfg, num_blocks, block_size))


@functools.cache
def _replicate(mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    return jax.jit(lambda x: x, out_shardings=NamedSharding(mesh, PartitionSpec()))


def on_mesh(call: F) -> F:
    """A jitted engine call (params first) that also runs when the params lie on a mesh: host
    arguments (numpy arrays and scalars) become replicated arrays on it (jit refuses host arrays
    once a mesh spans processes) and results other than the KV cache come back replicated
    (XLA picks the results' layout; a replicated one reads on every process). Params on one
    device: the call as it is."""

    @functools.wraps(call)
    def wrapper(params: Params, *args: Any, **kwargs: Any) -> Any:
        # every family has a final norm; its layout tells the params' (one lookup per call)
        sharding = getattr(params["final_norm"], "sharding", None)
        if not isinstance(sharding, NamedSharding):
            return call(params, *args, **kwargs)
        mesh = sharding.mesh
        replicated = NamedSharding(mesh, PartitionSpec())
        args, kwargs = jax.tree.map(  # static arguments (the config, Python ints) stay as they are
            lambda a: put_global(a, replicated) if isinstance(a, (np.ndarray, np.generic)) else a,
            (args, kwargs),
        )
        out = call(params, *args, **kwargs)
        return jax.tree.map(
            lambda a: (
                a if isinstance(a, PagedKVCache) or a.is_fully_replicated else _replicate(mesh)(a)
            ),
            out,
            is_leaf=lambda a: isinstance(a, PagedKVCache),
        )

    return cast(F, wrapper)
