"""numpy's other reductions and statistics (fuseloop.numpy_stats), against numpy."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fuseloop as fl


def with_nans(shape=(4, 6), dtype=np.float32, seed=0):
    h = np.random.default_rng(seed).random(shape).astype(dtype)
    h[1, 2] = h[2, 0] = np.nan
    h[3, :] = np.nan  # an all-NaN row
    return h


def same(got, ref, rtol=2e-6):
    """Values (NaN where numpy's are), shape and dtype as numpy's."""
    got = got.get() if isinstance(got, fl.Array) else np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.dtype, ref.dtype)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=1e-12, equal_nan=True)


def numpy_quiet(f, *args, **kwargs):
    with warnings.catch_warnings():  # (numpy's all-NaN slice warnings)
        warnings.simplefilter("ignore", RuntimeWarning)
        return f(*args, **kwargs)


def test_cumsum_cumprod_flatten_axis_and_out(device):
    h = np.arange(1, 13, dtype=np.float32).reshape(3, 4) / 4
    x = fl.asarray(h)
    same(fl.cumsum(x), np.cumsum(h))  # axis=None: the flattened array
    same(fl.cumprod(x, axis=0), np.cumprod(h, axis=0))
    same(x.cumsum(axis=1), h.cumsum(axis=1))  # (numpy's methods too)
    out = fl.zeros(12, dtype=np.float32)
    assert fl.cumsum(x, out=out) is out
    same(out, np.cumsum(h))


@pytest.mark.parametrize("name", ["nansum", "nanprod", "nanmax", "nanmin", "nanmean",
                                  "nanvar", "nanstd", "nancumsum", "nancumprod"])
def test_nan_reductions(device, name):
    h = with_nans()
    f, g = getattr(fl, name), getattr(np, name)
    same(f(fl.asarray(h), axis=1), numpy_quiet(g, h, axis=1), rtol=2e-5)


def test_nan_reductions_keepdims_and_all_axes(device):
    h = with_nans()
    x = fl.asarray(h)
    same(fl.nanmax(x, axis=0, keepdims=True), numpy_quiet(np.nanmax, h, axis=0, keepdims=True))
    same(fl.nanmean(x), np.nanmean(h), rtol=2e-5)


def test_nanvar_ddof_and_integers(device):
    h = with_nans()
    same(fl.nanvar(fl.asarray(h), axis=1, ddof=1), numpy_quiet(np.nanvar, h, axis=1, ddof=1),
         rtol=2e-5)
    i = np.arange(12).reshape(3, 4)  # (no NaN in integers: the plain reduction)
    same(fl.nanmean(fl.asarray(i), axis=0), np.nanmean(i, axis=0))
    same(fl.nanmax(fl.asarray(i)), np.nanmax(i))


def test_nanargmax_nanargmin_and_all_nan_error(device):
    h = with_nans()
    x = fl.asarray(h[:3])
    same(fl.nanargmax(x, axis=1), np.nanargmax(h[:3], axis=1))
    same(fl.nanargmin(x), np.nanargmin(h[:3]))
    with pytest.raises(ValueError, match="All-NaN"):
        fl.nanargmax(fl.asarray(h), axis=1)


def test_ptp(device):
    h = np.random.default_rng(1).random((3, 5))
    same(fl.ptp(fl.asarray(h), axis=1), np.ptp(h, axis=1))
    same(fl.ptp(fl.asarray(h), keepdims=True), np.ptp(h, keepdims=True))


def test_average_weights_returned_and_errors(device):
    rng = np.random.default_rng(2)
    h, w = rng.random((2, 3, 4)), rng.random((4, 2))
    x = fl.asarray(h)
    avg, scl = fl.average(x, axis=(2, 0), weights=fl.asarray(w), returned=True)
    ravg, rscl = np.average(h, axis=(2, 0), weights=w, returned=True)
    same(avg, ravg, rtol=1e-12)
    same(scl, rscl, rtol=1e-12)
    same(fl.average(x), np.average(h), rtol=1e-12)
    with pytest.raises(ZeroDivisionError):
        fl.average(x, axis=(2, 0), weights=fl.asarray(w * 0))
    with pytest.raises(TypeError, match="axis"):
        fl.average(x, weights=fl.asarray(w))


def test_median_and_nanmedian(device):
    h = np.random.default_rng(3).random((2, 5, 4)).astype(np.float32)
    x = fl.asarray(h)
    same(fl.median(x, axis=(0, 2), keepdims=True), np.median(h, axis=(0, 2), keepdims=True))
    same(fl.median(x, axis=1), np.median(h, axis=1))  # an odd count
    n = with_nans()
    same(fl.median(fl.asarray(n), axis=1), np.median(n, axis=1))  # a NaN makes NaN
    same(fl.nanmedian(fl.asarray(n), axis=1), numpy_quiet(np.nanmedian, n, axis=1))
    e = np.zeros((0, 3), np.float32)  # an empty axis: NaN
    same(fl.median(fl.asarray(e), axis=0), numpy_quiet(np.median, e, axis=0))


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "nearest", "midpoint",
                                    "median_unbiased", "closest_observation"])
def test_quantile_methods(device, method):
    h = np.random.default_rng(4).random((3, 7)).astype(np.float32)
    q = [0.0, 0.25, 0.5, 0.77, 1.0]
    same(fl.quantile(fl.asarray(h), q, axis=1, method=method),
         np.quantile(h, q, axis=1, method=method))
    n = with_nans()
    same(fl.nanquantile(fl.asarray(n), 0.3, axis=1, method=method),
         numpy_quiet(np.nanquantile, n, 0.3, axis=1, method=method))


def test_percentile_dtypes_nans_and_errors(device):
    n = with_nans()
    x = fl.asarray(n)
    same(fl.percentile(x, 40), np.percentile(n, 40))  # float32 stays float32
    same(fl.percentile(x, [10, 90], axis=1), np.percentile(n, [10, 90], axis=1))
    same(fl.nanpercentile(x, [40, 90], axis=0, keepdims=True),
         numpy_quiet(np.nanpercentile, n, [40, 90], axis=0, keepdims=True))
    with pytest.raises(ValueError, match="range"):
        fl.percentile(x, 101)
    with pytest.raises(ValueError, match="method"):
        fl.quantile(x, 0.5, method="bogus")


def test_cov_and_corrcoef(device):
    rng = np.random.default_rng(5)
    h, w, f = rng.random((3, 6)), rng.random(6), np.arange(1, 7)
    x = fl.asarray(h)
    same(fl.cov(x), np.cov(h), rtol=1e-12)
    same(fl.cov(x, rowvar=False, bias=True), np.cov(h, rowvar=False, bias=True),
         rtol=1e-12)
    same(fl.cov(x[0]), np.cov(h[0]), rtol=1e-12)  # one variable: 0-d
    same(fl.cov(x, fweights=fl.asarray(f), aweights=fl.asarray(w)),
         np.cov(h, fweights=f, aweights=w), rtol=1e-12)
    same(fl.corrcoef(x), np.corrcoef(h), rtol=1e-12)


def test_numpy_dispatches_to_fuseloop(device):
    h = with_nans()
    x = fl.asarray(h)
    got = np.nanmedian(x, axis=1)  # through __array_function__: no host copy
    assert isinstance(got, fl.Array)
    same(got, numpy_quiet(np.nanmedian, h, axis=1))
    assert isinstance(np.cumsum(x), fl.Array)
