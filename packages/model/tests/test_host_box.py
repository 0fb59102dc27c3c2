"""`HostBox`, the part of a value one process holds, and `local_box`: placed by `put_global`
reading the box alone. (Two processes each placing their half: inference's test_multihost.)"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from rlx_model import make_mesh
from rlx_model.distributed import HostBox, local_box, put_global

VALUE = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)


def test_a_box_reads_the_value_at_its_place_transposed_indexed_and_cast() -> None:
    box = HostBox(VALUE[:, :, 4:], (0, 0, 4), VALUE.shape)
    np.testing.assert_array_equal(
        box.read((slice(0, 2), slice(1, 3), slice(5, 8))), VALUE[:, 1:3, 5:8]
    )
    layer = box[1]  # the second of the stacked [3, 8] values
    assert layer.shape == (3, 8) and layer.start == (0, 4)
    np.testing.assert_array_equal(layer.read((slice(None), slice(4, 8))), VALUE[1, :, 4:])
    t = layer.T.astype(np.float16)
    assert t.shape == (8, 3) and t.dtype == np.float16
    np.testing.assert_array_equal(t.read((slice(6, 8), slice(None))), VALUE[1, :, 6:8].T)
    # what lies outside the box is refused, naming the box
    with pytest.raises(
        ValueError, match=r"outside this process's box \[\(0, 2\), \(0, 3\), \(4, 8\)\]"
    ):
        box.read((slice(None), slice(None), slice(0, 8)))
    with pytest.raises(ValueError, match="does not fit"):
        HostBox(VALUE, (0, 0, 1), VALUE.shape)


def test_put_global_places_a_box_holding_what_the_devices_need() -> None:
    sharding = NamedSharding(make_mesh((1, 1, 1)), PartitionSpec(None, None, "tensor"))
    assert local_box(VALUE.shape, sharding) == ([0, 0, 0], [2, 3, 8])  # one process: all of it
    placed = put_global(HostBox(VALUE.copy(), (0, 0, 0), VALUE.shape), sharding)
    assert isinstance(placed, jax.Array) and placed.sharding == sharding
    np.testing.assert_array_equal(np.asarray(placed), VALUE)
    with pytest.raises(ValueError, match="outside this process's box"):
        put_global(HostBox(VALUE[:, :, :4], (0, 0, 0), VALUE.shape), sharding)
