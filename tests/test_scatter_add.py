"""Scatters with atomics: fl.add.at (and subtract/maximum/minimum), bincount, histogram,
against numpy (repeated indices accumulate)."""

from __future__ import annotations

import numpy as np
import pytest
from launch_counts import launches

import fuseloop as fl
from fuseloop import splits
from fuseloop.errors import DTypeError, IndexOutOfBoundsError, ShapeError

DTYPES = [np.float32, np.float64, np.int32, np.int64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_at_repeated_indices(device, dtype):
    rng = np.random.default_rng(1)
    a = (rng.random(7) * 10).astype(dtype)
    idx = rng.integers(-7, 7, 5000)  # (negative ones count from the end)
    v = (rng.random(5000) * 10).astype(dtype)
    x, vd = fl.asarray(a), fl.asarray(v)
    # host indices: checked on the host; the values' expression fuses into the scatter
    assert launches(lambda: fl.add.at(x, idx, vd * 2 + 1)) == 1
    ref = a.copy()
    np.add.at(ref, idx, v * 2 + 1)
    if np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(x.get(), ref, rtol=1e-5)
    else:
        np.testing.assert_array_equal(x.get(), ref)


@pytest.mark.parametrize("op", ["subtract", "maximum", "minimum"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_other_ops_with_device_indices(device, op, dtype):
    rng = np.random.default_rng(2)
    a = (rng.random(9) * 50).astype(dtype)
    idx = rng.integers(0, 9, 300)
    v = (rng.random(300) * 100).astype(dtype)
    x = fl.asarray(a)
    # a device index is checked by a kernel of its own first (as for a[idx] = v)
    assert launches(lambda: getattr(fl, op).at(x, fl.asarray(idx), fl.asarray(v))) == 2
    ref = a.copy()
    getattr(np, op).at(ref, idx, v)
    np.testing.assert_allclose(x.get(), ref, rtol=1e-5)


def test_multi_axis_and_rows(device):
    rng = np.random.default_rng(3)
    m = np.zeros((4, 5), np.int32)
    i, j = rng.integers(0, 4, 200), rng.integers(0, 5, 200)
    x = fl.asarray(m)
    fl.add.at(x, (i, j), 1)
    np.add.at(m, (i, j), 1)
    np.testing.assert_array_equal(x.get(), m)
    r = np.zeros((3, 4))
    y = fl.asarray(r)
    fl.add.at(y, [0, 2, 0], np.arange(4.0))  # whole rows, row 0 twice
    np.add.at(r, [0, 2, 0], np.arange(4.0))
    np.testing.assert_array_equal(y.get(), r)
    # through a strided view, an index array on its second axis
    g = np.zeros((4, 6))
    gd = fl.asarray(g)
    k = np.array([0, 2, 2, 1])
    fl.add.at(gd[1:, ::2], (slice(None), k), np.arange(4.0))
    np.add.at(g[1:, ::2], (slice(None), k), np.arange(4.0))
    np.testing.assert_array_equal(gd.get(), g)
    s = np.arange(6.0)
    z = fl.asarray(s)
    fl.add.at(z, slice(1, 4), 10.0)  # a basic index: no repeats possible
    np.add.at(s, slice(1, 4), 10.0)
    np.testing.assert_array_equal(z.get(), s)


def test_values_reading_the_target(device):
    # the values are computed before the scatter writes (numpy: values are evaluated first)
    h = np.arange(6.0)
    a = fl.asarray(h)
    idx = np.array([0, 0, 5, 2])
    fl.add.at(a, idx, a[[5, 4, 0, 1]] * 10)
    ref = h.copy()
    np.add.at(ref, idx, h[[5, 4, 0, 1]] * 10)
    np.testing.assert_array_equal(a.get(), ref)
    keep = a * 1  # a lazy reader of a keeps the values it was built from
    before = a.get()
    fl.maximum.at(a, [1, 1], 100.0)
    np.testing.assert_array_equal(keep.get(), before)


def test_add_at_errors(device):
    x = fl.asarray(np.arange(4, dtype=np.int32))
    with pytest.raises(DTypeError, match="same_kind"):
        fl.add.at(x, [0, 1], 1.5)
    for dtype in (np.int8, np.uint32, np.uint64, np.bool_):
        with pytest.raises(DTypeError, match="int32, int64, float32 and float64"):
            fl.add.at(fl.zeros(4, dtype), [0], 1)
    with pytest.raises(IndexOutOfBoundsError, match="index 4 is out of bounds"):
        fl.add.at(x, [0, 4], 1)
    with pytest.raises(IndexOutOfBoundsError):
        fl.add.at(x, fl.asarray(np.array([1, -5])), 1)
    np.testing.assert_array_equal(x.get(), np.arange(4))  # nothing written
    with pytest.raises(ShapeError):
        fl.add.at(x, [0, 1], np.ones(3, np.int32))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_bincount(device, dtype):
    d = np.random.default_rng(4).integers(0, 25, 3000).astype(dtype)
    x = fl.asarray(d)
    got = fl.bincount(x)
    assert got.dtype == np.bincount(d).dtype
    np.testing.assert_array_equal(got.get(), np.bincount(d))
    w = np.linspace(0, 1, 3000)
    np.testing.assert_allclose(fl.bincount(x, weights=fl.asarray(w), minlength=40).get(),
                               np.bincount(d, w, 40))
    assert fl.bincount(fl.asarray(np.zeros(0, np.int64)), minlength=3).get().tolist() == [0] * 3


@pytest.mark.parametrize("bins", [3, 1000, 5000])
def test_bincount_counts_in_local_memory(device, fresh_stats, bins):
    """Few bins: one launch counting in each group's local counters (besides the two
    reductions that find the range); more bins than fit: the atomic scatter."""
    from fuseloop.ops.bincount_kernel import MAX_BINS

    d = np.random.default_rng(9).integers(0, bins, 200_001).astype(np.int32)
    x = fl.asarray(d).eval()
    x[::2].eval()
    fl.reset_stats()
    np.testing.assert_array_equal(fl.bincount(x).get(), np.bincount(d))
    if bins <= MAX_BINS:  # min and max (two stages each), then one counting launch
        assert fl.stats()["kernels_launched"] == (3 if splits.ONE_LAUNCH else 5)
    np.testing.assert_array_equal(fl.bincount(x[::2]).get(), np.bincount(d[::2]))
    np.testing.assert_array_equal(fl.bincount(x[::3] + 1, minlength=bins + 9).get(),
                                  np.bincount(d[::3] + 1, minlength=bins + 9))


def test_bincount_errors(device):
    with pytest.raises(ValueError, match="non-negative"):
        fl.bincount(fl.asarray(np.array([1, -2, 3])))
    with pytest.raises(ShapeError):
        fl.bincount(fl.asarray(np.zeros((2, 2), np.int64)))
    with pytest.raises(DTypeError):
        fl.bincount(fl.asarray(np.zeros(3)))
    with pytest.raises(ShapeError):
        fl.bincount(fl.asarray(np.zeros(3, np.int64)), weights=np.ones(4))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_histogram_counts_and_edges(device, dtype):
    rng = np.random.default_rng(5)
    h = (rng.normal(size=20000) * 10).astype(dtype)
    x = fl.asarray(h)
    n = launches(lambda: fl.histogram(x, bins=20)[0].get())
    assert n == 3  # min and max in one kernel, the zeroed counts, the counting kernel
    hist, edges = fl.histogram(x, bins=20)
    want, want_edges = np.histogram(h, bins=20)
    np.testing.assert_array_equal(edges, want_edges)
    assert edges.dtype == want_edges.dtype
    np.testing.assert_array_equal(hist.get(), want)
    # values on the edges: the last bin is closed, values outside are not counted
    e = np.array([0, 1, 1, 2, 3, 3, 3, -1, 9], dtype)
    for kw in ({"bins": 3}, {"bins": 3, "range": (1, 3)}, {"bins": [0, 1, 2.5, 3]}):
        got, ge = fl.histogram(fl.asarray(e), **kw)
        want, we = np.histogram(e, **kw)
        np.testing.assert_array_equal(got.get(), want)
        np.testing.assert_array_equal(ge, we)


def test_histogram_weights_density(device):
    rng = np.random.default_rng(6)
    h = rng.random(5000)
    w = rng.random(5000).astype(np.float32)
    got, _ = fl.histogram(fl.asarray(h), bins=[0, 0.1, 0.5, 0.7, 1.0], weights=fl.asarray(w))
    want, _ = np.histogram(h, bins=[0, 0.1, 0.5, 0.7, 1.0], weights=w)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.get(), want, rtol=1e-4)
    got, _ = fl.histogram(fl.asarray(h), bins=8, range=(0.2, 0.9), density=True)
    np.testing.assert_allclose(got.get(), np.histogram(h, 8, (0.2, 0.9), density=True)[0])
    nan = np.array([0.5, np.nan, 0.7])
    np.testing.assert_array_equal(fl.histogram(fl.asarray(nan), 2, range=(0, 1))[0].get(),
                                  np.histogram(nan, 2, range=(0, 1))[0])


def test_histogram_errors(device):
    x = fl.asarray(np.arange(5.0))
    with pytest.raises(ValueError, match="monoton"):
        fl.histogram(x, bins=[0, 2, 1])
    with pytest.raises(ValueError):
        fl.histogram(x, bins=0)
    with pytest.raises(ValueError, match="max must be larger than min"):
        fl.histogram(x, bins=3, range=(2, 1))
    with pytest.raises(ValueError, match="not finite"):
        fl.histogram(fl.asarray(np.array([0.0, np.inf])))
    with pytest.raises(ShapeError):
        fl.histogram(x, weights=np.ones(4))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_histogram_equal_bins_on_and_beside_edges(device, dtype):
    # equal-width bins take the bin from the value's distance, moved by the edges'
    # comparisons: every edge and its neighbours land where numpy puts them; on a CPU,
    # 2^17 values into 37 bins take the partial sums (bins computed once: no check pass)
    rng = np.random.default_rng(7)
    e = np.histogram_bin_edges(np.array([-3, 7], dtype), 37).astype(dtype)
    beside = np.concatenate([e, np.nextafter(e, -np.inf), np.nextafter(e, np.inf)]) \
        if dtype != np.int64 else np.arange(-5, 10)
    h = np.concatenate([beside.astype(dtype), (rng.random(1 << 17) * 12 - 4).astype(dtype)])
    w = rng.random(h.size)
    x = fl.asarray(h)
    for kw in ({"bins": 37}, {"bins": 37, "range": (-3, 7)}, {"bins": 5, "range": (0, 1)}):
        np.testing.assert_array_equal(fl.histogram(x, **kw)[0].get(), np.histogram(h, **kw)[0])
        got = fl.histogram(x, weights=fl.asarray(w), **kw)[0].get()
        np.testing.assert_allclose(got, np.histogram(h, weights=w, **kw)[0], rtol=1e-12)
    if device.type == "cpu":
        n = launches(lambda: fl.histogram(x, bins=37, range=(-3, 7))[0].get())
        assert n == 3  # the bins and weights, the partial sums, their combine (37 zeroed
        # counts are small work, written by the host path)
