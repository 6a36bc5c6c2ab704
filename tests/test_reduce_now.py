"""Reductions called on concrete arrays on the CPU device, computed at once by numpy up to
``ops.reductions.REDUCE_NOW_MAX`` elements (issue 25: numpy's single pass took less CPU
time than a launch on PoCL up to there)."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.ops import reductions

SHAPE = (40, 1003)  # (past the host path's limit: only REDUCE_NOW_MAX takes it)


def _values(dtype: type, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    h = rng.integers(-50, 50, SHAPE).astype(dtype)
    if np.dtype(dtype).kind == "f":
        h = h + rng.random(SHAPE).astype(dtype)
        h[3, 7] = np.nan  # (max and min propagate it, as numpy's)
    return h


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.bool_])
def test_reductions_of_concrete_arrays_are_numpys_now(host, fresh_stats, dtype):
    """sum, max and min (without keepdims) of a concrete array: numpy's values, dtypes and
    shapes, at once, with no kernel launched."""
    h = _values(dtype)
    x = fl.asarray(h)
    calls = 0
    for op in ("sum", "max", "min"):
        for axis in (None, 0, 1, -1, (0, 1)):
            got = getattr(x, op)(axis=axis)
            want = getattr(h, op)(axis=axis)
            assert got.shape == np.shape(want) and got.dtype == want.dtype, (op, axis)
            np.testing.assert_allclose(np.asarray(got.get()), want, rtol=1e-5)
            calls += 1
    np.testing.assert_allclose(fl.sum(x, axis=1, dtype=np.float64).get(),
                               h.sum(axis=1, dtype=np.float64), rtol=1e-12)
    assert fl.stats()["kernels_launched"] == 0
    assert fl.stats()["host_operations"] == calls + 1


def test_views_and_results_feed_lazy_work(host, fresh_stats):
    """A strided view is reduced by numpy too; its result is an array like any other,
    which later lazy work reads (one launch for the expression that uses it)."""
    h = _values(np.float32)
    x = fl.asarray(h)
    np.testing.assert_allclose(x[:, ::3].max(axis=0).get(), h[:, ::3].max(axis=0))
    assert fl.stats()["kernels_launched"] == 0
    top = x.max(axis=1, keepdims=True)
    np.testing.assert_allclose((x - top).get(), h - h.max(axis=1, keepdims=True))
    assert fl.stats()["kernels_launched"] == 1


def test_past_the_limit_lazy_inputs_and_composites_launch(host, fresh_stats, monkeypatch):
    """A concrete array past REDUCE_NOW_MAX, the reduction of an expression (fused with
    it), a composite built on a reduction (a mean inside its consumer's kernel) and a
    keepdims reduction take the kernels; numpy's errors stay the lazy path's."""
    h = _values(np.float32)
    x = fl.asarray(h)
    monkeypatch.setattr(reductions, "REDUCE_NOW_MAX", h.size - 1)
    np.testing.assert_allclose(x.sum(axis=1).get(), h.sum(axis=1), rtol=1e-5, atol=1e-3)
    assert fl.stats()["kernels_launched"] == 1
    monkeypatch.setattr(reductions, "REDUCE_NOW_MAX", h.size)
    np.testing.assert_allclose((x * 2).max(axis=0).get(), (h * 2).max(axis=0))
    assert fl.stats()["kernels_launched"] == 2
    np.testing.assert_allclose((x - x.mean(axis=1, keepdims=True)).get(),
                               h - h.mean(axis=1, keepdims=True), rtol=1e-4, atol=1e-5)
    assert fl.stats()["kernels_launched"] == 3
    # (keepdims: made to broadcast against x, fused into the kernel that does)
    np.testing.assert_allclose((x - x.max(axis=1, keepdims=True)).get(),
                               h - h.max(axis=1, keepdims=True))
    assert fl.stats()["kernels_launched"] == 4
    with pytest.raises(fl.errors.AxisError):  # (the lazy path's error, not numpy's)
        x.sum(axis=2)
    with pytest.raises(ValueError, match="identity"):
        fl.asarray(np.zeros((3, 0), np.float32)).max(axis=1)


def test_off_with_the_host_path(device_path, fresh_stats):
    """With the host path off (what a GPU's host pays), reductions launch kernels."""
    h = _values(np.float32)
    np.testing.assert_allclose(fl.asarray(h).sum(axis=0).get(), h.sum(axis=0), rtol=1e-5,
                               atol=1e-3)
    assert fl.stats()["kernels_launched"] >= 1
