"""Reductions over neighbouring axes of one role, merged before lowering on CPU devices
(``fuseloop.passes.axis_merge``): the kernel of a reduction is the one of the array with
those axes joined, and its results are numpy's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from matmul_source import fake_h100

import fuseloop as fl
from fuseloop.ops import reductions
from fuseloop.passes.axis_merge import merged_reductions


def _rand(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.random(shape).astype(dtype)
    return rng.integers(-1000, 1000, shape).astype(dtype)


# (shape, axes, keepdims, the same reduction of the merged array: shape and axes)
CASES = [
    ((32, 16, 8), 0, False, (32, 128), 0),
    ((32, 16, 8), (0,), True, (32, 128), 0),
    ((8, 16, 32), (1, 2), False, (8, 512), 1),
    ((8, 16, 32), (1, 2), True, (8, 512), 1),
    ((4, 6, 8, 10), (0, 1), False, (24, 80), 0),
    ((4, 6, 8, 10), (2, 3), True, (24, 80), 1),
]


@pytest.fixture(autouse=True)
def lazy(monkeypatch):
    """Reductions of concrete arrays stay kernels (numpy computes small ones at once)."""
    monkeypatch.setattr(reductions, "REDUCE_NOW_MAX", 0)


@pytest.mark.parametrize("shape,axes,keepdims,flat_shape,flat_axis", CASES)
def test_the_kernel_is_the_merged_arrays(device, shape, axes, keepdims, flat_shape, flat_axis):
    h = _rand(shape)
    x = fl.asarray(h)
    merged = fl.program(x.sum(axis=axes, keepdims=keepdims)).compile().source
    flat = fl.program(fl.asarray(h.reshape(flat_shape)).sum(axis=flat_axis)).compile().source
    if device.type == "cpu":  # (a GPU keeps its layouts: test_gpus_keep_their_column_layout)
        assert merged == flat
    got = x.sum(axis=axes, keepdims=keepdims).eval()
    np.testing.assert_allclose(got.get(), h.sum(axis=axes, keepdims=keepdims), rtol=1e-5)


@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
def test_results_are_numpys(device, op, dtype):
    if dtype is np.float64 and not device.has_fp64:
        pytest.skip("no fp64 on this device")
    h = _rand((6, 40, 5, 3), dtype, seed=1)
    if op == "prod":
        h = (h % 3 + 1).astype(dtype) if h.dtype.kind == "i" else (h * 0.1 + 0.95).astype(dtype)
    x = fl.asarray(h)
    for axes in [(0,), (2, 3), (0, 1), (1, 2), (0, 2, 3), (0, 1, 3)]:
        for keepdims in (False, True):
            want = getattr(np, op)(h, axis=axes, keepdims=keepdims)
            got = getattr(fl, op)(x * 1, axis=axes, keepdims=keepdims).get()
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5 if op == "prod" else 1e-6)


def test_argmax_of_merged_kept_axes(device):
    h = _rand((50, 12, 16), seed=2)
    x = fl.asarray(h)
    np.testing.assert_array_equal(fl.argmax(x * 1, axis=0).get(), h.argmax(axis=0))
    np.testing.assert_array_equal(fl.argmin(x * 1, axis=0).get(), h.argmin(axis=0))


def test_axes_that_are_not_neighbours_in_memory_stay_apart(device):
    """A view whose kept axes do not follow each other in memory keeps its layout (and
    numpy's results)."""
    h = _rand((40, 16, 24), seed=3)
    x = fl.asarray(h)[:, :, :12]
    strided = fl.program(x.sum(axis=0))
    assert "computed as" not in strided.as_text().splitlines()[0]
    np.testing.assert_allclose(x.sum(axis=0).get(), h[:, :, :12].sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(x.sum(axis=(1, 2)).get(), h[:, :, :12].sum(axis=(1, 2)),
                               rtol=1e-5)
    every_other = fl.asarray(h)[:, :, ::2]  # (these do: one stride of 2 elements)
    if device.type == "cpu":
        assert "computed as (192,)" in fl.program(every_other.sum(axis=0)).as_text()


def test_the_two_step_cpu_sum_over_axes_0_and_2(device):
    """``X.sum(axis=(0, 2))`` (the suite's sum-axes02): its first step (axis 0, keeping
    ``(b, c)``) is the column reduction of ``(a, b*c)``."""
    h = _rand((64, 32, 64), seed=4)
    x = fl.asarray(h)
    with fl.evaluate.capturing_sources() as sources:  # (records, runs nothing)
        fl.sum(x, axis=(0, 2)).eval()
    np.testing.assert_allclose(fl.sum(x, axis=(0, 2)).get(), h.sum(axis=(0, 2)), rtol=1e-5)
    if device.type == "cpu":
        first = fl.program(fl.asarray(h.reshape(64, 2048)).sum(axis=0)).compile().source
        assert first in sources


def test_gpus_keep_their_column_layout(device):
    """Not on a GPU: there the column recipe's layout of the unmerged axes won one shape
    and lost another (see ``fuseloop.passes.axis_merge``)."""
    x = fl.asarray(_rand((64, 32, 48), seed=5))
    node = x.sum(axis=0)._node
    gpu, cpu = fake_h100(device), dataclasses.replace(device, type="cpu")
    assert merged_reductions([node], node.shape, [None], gpu) is None
    roots, shape, _ = merged_reductions([node], node.shape, [None], cpu)
    assert shape == (32 * 48,) and roots[0].child.shape == (64, 32 * 48)
