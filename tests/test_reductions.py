"""Reductions, their fusion and their numpy semantics (dtypes, NaN, accuracy)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl


def rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).random(shape).astype(dtype)


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean", "var", "std", "any",
                                "all", "argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2), -1])
def test_reductions_match_numpy(device, op, axis):
    h = rand((3, 4, 5), seed=3) + 0.5
    if op in ("argmax", "argmin") and isinstance(axis, tuple):
        pytest.skip("numpy's arg reductions take one axis")
    x = fl.asarray(h)
    got = getattr(x, op)(axis=axis)
    ref = getattr(h.astype(np.float64), op)(axis=axis)
    assert got.shape == np.shape(ref)
    np.testing.assert_allclose(got.get(), ref, rtol=2e-5)
    kept = getattr(x, op)(axis=axis, keepdims=True)
    assert kept.shape == getattr(h, op)(axis=axis, keepdims=True).shape


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int32, np.uint16, np.uint64,
                                   np.int64, np.float32, np.float64])
def test_result_dtypes_follow_numpy(device, dtype):
    h = (np.arange(24).reshape(4, 6) % 7).astype(dtype)
    x = fl.asarray(h)
    for op in ("sum", "prod", "max", "min", "mean", "any", "all", "argmax"):
        got, ref = getattr(x, op)(axis=1), getattr(h, op)(axis=1)
        assert got.dtype == ref.dtype, (op, dtype)
        np.testing.assert_array_equal(got.get(), ref) if op != "mean" else \
            np.testing.assert_allclose(got.get(), ref)


def test_integer_sums_are_exact(device):
    h = np.full(100_000, 2**20 + 1, np.int32)
    assert int(fl.asarray(h).sum()) == int(h.astype(np.int64).sum())  # past int32 range


def test_float_sum_accuracy_large(device):
    """A tree/chunked sum meets the tolerance numpy's pairwise sum meets."""
    h = rand(2**21, seed=5)
    ref = h.astype(np.float64).sum()
    np.testing.assert_allclose(float(fl.sum(fl.asarray(h))), ref, rtol=2e-6)


def test_nan_propagates_and_arg_picks_first(device):
    h = np.array([[1.0, np.nan, 3.0, np.nan], [4.0, 4.0, 2.0, 4.0]], np.float32)
    x = fl.asarray(h)
    np.testing.assert_array_equal(x.max(axis=1).get(), h.max(axis=1))
    np.testing.assert_array_equal(x.min(axis=1).get(), h.min(axis=1))
    np.testing.assert_array_equal(x.argmax(axis=1).get(), h.argmax(axis=1))
    np.testing.assert_array_equal(x.argmin(axis=1).get(), h.argmin(axis=1))
    assert int(x.argmax()) == h.argmax()


def test_full_reduction_fuses_producer(device):
    xh, yh = rand(50_000, seed=1), rand(50_000, seed=2)
    x, y = fl.asarray(xh), fl.asarray(yh)
    fl.reset_stats()
    s = fl.sum(x * y)
    np.testing.assert_allclose(float(s), (xh.astype(np.float64) * yh).sum(), rtol=1e-5)
    # two stages (pieces, then their total) in one launch; x * y is never written out
    assert fl.stats()["kernels_launched"] == 1
    # the product of two input reads inside the reduction's loop
    assert re.search(r"in\d+\[[^\]]*\] \* in\d+\[", fl.show_code(fl.sum(x * y)))


def test_combined_reductions_share_one_pass(device):
    h = rand(100_000, seed=4)
    x = fl.asarray(h)
    fl.reset_stats()
    mn, mx, sm = fl.compute(x.min(), x.max(), x.sum())
    assert fl.stats()["kernels_launched"] == 1  # one first stage for all three + combine
    assert float(mn) == h.min() and float(mx) == h.max()
    np.testing.assert_allclose(float(sm), h.astype(np.float64).sum(), rtol=1e-5)


def test_row_softmax_is_one_kernel(device):
    h = rand((64, 300), seed=6) * 10
    x = fl.asarray(h)
    fl.reset_stats()
    e = fl.exp(x - x.max(axis=-1, keepdims=True))
    out = e / e.sum(axis=-1, keepdims=True)
    got = out.get()
    assert fl.stats()["kernels_launched"] == 1
    h64 = h.astype(np.float64)
    ref = np.exp(h64 - h64.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)


def test_cross_entropy_computes_each_row_in_one_kernel(device):
    """``mean(logsumexp(x) - x[rows, labels])``: the per-row values (maximum, sum and
    the gathered element) in one row kernel, then their mean, not a kernel per
    reduction (the maximum was computed twice, reading every row three times)."""
    rng = np.random.default_rng(8)
    h = rng.uniform(-4, 4, (37, 301))  # float64, odd sizes
    labels = rng.integers(0, 301, 37)
    x, rows, lab = fl.asarray(h), fl.asarray(np.arange(37)), fl.asarray(labels)
    mx = x.max(axis=1, keepdims=True)
    lse = mx[:, 0] + fl.log(fl.sum(fl.exp(x - mx), axis=1))
    fl.reset_stats()
    got = float(fl.mean(lse - x[rows, lab]))
    assert fl.stats()["kernels_launched"] == 2
    m = h.max(axis=1)
    want = np.mean(m + np.log(np.exp(h - m[:, None]).sum(axis=1)) - h[np.arange(37), labels])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_centering_by_full_mean(device):
    h = rand(10_000, seed=7)
    x = fl.asarray(h)
    fl.reset_stats()
    got = (x - x.mean()).get()
    np.testing.assert_allclose(got, h - h.astype(np.float64).mean(), atol=1e-6)
    assert fl.stats()["kernels_launched"] <= 3  # mean (two stages) + the subtraction


def test_column_and_row_reductions_of_views(device):
    h = rand((30, 40), seed=8)
    x = fl.asarray(h)
    np.testing.assert_allclose(x.T.sum(axis=1).get(), h.T.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(x[::2, 5:].max(axis=0).get(), h[::2, 5:].max(axis=0))
    np.testing.assert_allclose(fl.sum(x[1:-1] * x[:-2], axis=1).get(),
                               (h[1:-1] * h[:-2]).sum(axis=1), rtol=1e-5)


def test_empty_reductions(device):
    x = fl.asarray(np.zeros((0, 3), np.float32))
    np.testing.assert_array_equal(x.sum(axis=0).get(), np.zeros(3, np.float32))
    assert float(x.sum()) == 0.0
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        x.max()


def test_axis_errors(device):
    x = fl.asarray(np.zeros((2, 3)))
    with pytest.raises(fl.errors.AxisError, match="axis 2 is out of bounds"):
        x.sum(axis=2)
    with pytest.raises(fl.errors.AxisError, match="repeated axis"):
        x.sum(axis=(0, -2))


def test_a_tuple_of_axes_remembered_is_checked_like_a_new_one(device):
    """Normalised tuples of axes are remembered (ops.shape._axes_tuples): a tuple equal
    to a remembered one but not of Python ints (``1.0`` hashes as ``1``) still raises,
    and a negative spelling gives the same axes."""
    h = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = fl.asarray(h)
    for _ in range(2):
        np.testing.assert_array_equal(x.sum(axis=(0, 2)).get(), h.sum(axis=(0, 2)))
        np.testing.assert_array_equal(x.sum(axis=(-1, 0)).get(), h.sum(axis=(0, 2)))
        with pytest.raises(TypeError, match="must be an integer"):
            x.sum(axis=(0.0, 2))
        with pytest.raises(fl.errors.AxisError, match="out of bounds"):
            x.sum(axis=(0, 3))


def test_norms_and_dots(device):
    h, g = rand(100, seed=9) - 0.5, rand(100, seed=10)
    x, y = fl.asarray(h), fl.asarray(g)
    for ord in (None, 1, 2, np.inf, -np.inf, 0, 3):
        np.testing.assert_allclose(float(fl.linalg.norm(x, ord)), np.linalg.norm(h, ord),
                                   rtol=1e-5)
    np.testing.assert_allclose(float(fl.dot(x, y)), h @ g, rtol=1e-5)
    np.testing.assert_allclose(float(fl.vdot(x, y)), np.vdot(h, g), rtol=1e-5)
    np.testing.assert_allclose(float(fl.inner(x, y)), np.inner(h, g), rtol=1e-5)
    m = rand((4, 5), seed=11)
    np.testing.assert_allclose(fl.linalg.norm(fl.asarray(m), axis=1).get(),
                               np.linalg.norm(m, axis=1), rtol=1e-5)


@pytest.mark.parametrize("n", [1, 3, 7, 8, 9, 17, 70001])
def test_cpu_row_sums_use_interleaved_accumulators(device, n):
    # the CPU recipe reduces long rows into 8 accumulators: rows shorter than 8 leave
    # some of them unset, which must not reach the result
    rng = np.random.default_rng(n)
    h = rng.random((3, n))
    ih = rng.integers(-50, 50, (3, n)).astype(np.int32)
    x, xi = fl.asarray(h), fl.asarray(ih)
    np.testing.assert_allclose(x.sum(axis=1).get(), h.sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(xi.sum(axis=1).get(), ih.sum(axis=1))
    np.testing.assert_array_equal(x.max(axis=1).get(), h.max(axis=1))
    np.testing.assert_array_equal(x.argmin(axis=1).get(), h.argmin(axis=1))
    lo, total = fl.compute(x[0].min(), x[0].sum())
    assert float(lo) == h[0].min()
    np.testing.assert_allclose(float(total), h[0].sum(), rtol=1e-12)
    if device.type == "cpu" and n > 1:
        assert "part_j0[8]" in fl.show_code(x.sum(axis=1))
