"""numpy's element-wise, comparison, sequence, set, polynomial and dtype functions that
the Array API lacks (fuseloop/numpy_misc.py, fuseloop/numpy_sets.py), against numpy.
Small arrays and several functions per test: each new expression is a kernel build."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import DTypeError

RNG = np.random.default_rng(27)
X = RNG.standard_normal(7)


def _same(got, ref, rtol=1e-12):
    got = got.get() if isinstance(got, fl.Array) else np.asarray(got)
    assert got.shape == np.shape(ref) and got.dtype == np.asarray(ref).dtype, (got, ref)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=1e-14, equal_nan=True)


def test_elementwise_functions(device):
    s = np.array([np.inf, -np.inf, 1.5, np.nan, -0.5, 0.0])
    z = np.array([1 + 0j, 2 + 1j, 3 - 1e-20j])
    ints = np.array([-3, 0, 2, 5])
    xs, zs, si = fl.asarray(s), fl.asarray(z), fl.asarray(ints)
    _same(fl.float_power(si, 2), np.float_power(ints, 2))
    q, r = fl.divmod(fl.asarray(X), 0.3)
    _same(q, np.divmod(X, 0.3)[0])
    _same(r, np.divmod(X, 0.3)[1])
    _same(fl.fix(fl.asarray(3 * X)), np.fix(3 * X))
    _same(fl.fix(si), np.fix(ints))
    _same(fl.sinc(si), np.sinc(ints))
    _same(fl.spacing(fl.asarray(X.astype(np.float32))), np.spacing(X.astype(np.float32)))
    _same(fl.isposinf(xs), np.isposinf(s))
    _same(fl.isneginf(xs), np.isneginf(s))
    _same(fl.iscomplex(zs), np.iscomplex(z))
    _same(fl.isreal(zs), np.isreal(z))
    _same(fl.isreal(si), np.isreal(ints))
    assert fl.iscomplexobj(zs) and fl.isrealobj(xs) and not fl.isrealobj(zs)
    assert not fl.isscalar(fl.asarray(1.0)) and fl.isscalar(1.0)
    with pytest.raises(TypeError):
        fl.isposinf(zs)
    out = fl.zeros(s.shape, dtype=bool)
    assert fl.isneginf(xs, out=out) is out
    _same(out, np.isneginf(s))


def test_gcd_lcm(device):
    a = np.array([12, -18, 0, 7, 35, 0, 2**40])
    b = np.array([8, 27, 5, 0, 14, 0, 6])
    _same(fl.gcd(fl.asarray(a), fl.asarray(b)), np.gcd(a, b))
    _same(fl.lcm(fl.asarray(a), b), np.lcm(a, b))
    i = np.array([4, -6, 9], dtype=np.int32)  # (a Python int is weak: int32 results)
    _same(fl.gcd(fl.asarray(i), 6), np.gcd(i, 6))
    _same(fl.lcm(fl.asarray(i), 4), np.lcm(i, 4))
    with pytest.raises(DTypeError, match="float64"):
        fl.gcd(fl.asarray(X), 2)


def test_i0_both_series(device):
    # both sides of the switch from the power series to the asymptotic one at |x| = 20
    v = np.array([0.0, 1.0, -3.0, 14.9, 19.9, 20.1, 40.0, -100.0, 700.0])
    _same(fl.i0(fl.asarray(v)), np.i0(v), rtol=1e-14)


def test_whole_array_comparisons(device):
    s = np.array([1.0, np.nan])
    x = fl.asarray(X)
    assert fl.allclose(x, X + 1e-9) is True and fl.allclose(x, X + 1e-3) is False
    assert fl.array_equal(fl.asarray(s), s, equal_nan=True)
    assert not fl.array_equal(fl.asarray(s), s)
    assert not fl.array_equal(x, x[:3])
    assert fl.array_equiv(fl.asarray([1.0, 2.0]), np.array([[1.0, 2.0], [1.0, 2.0]]))
    assert not fl.array_equiv(x, x[:3])
    z = np.array([1 + 1e-15j, 2 - 0j])
    _same(fl.real_if_close(fl.asarray(z)), np.real_if_close(z))
    _same(fl.real_if_close(fl.asarray(z + 1j)), np.real_if_close(z + 1j))
    # numpy's functions find fuseloop's through __array_function__
    assert np.allclose(x, X) is True


def test_interp(device):
    xp, fp = np.array([0.0, 1.0, 2.5, 4.0]), np.array([1.0, 3.0, -1.0, 2.0])
    q = np.array([-1.0, 0.0, 0.5, 2.5, 3.0, 4.0, 5.0])
    _same(fl.interp(fl.asarray(q), xp, fp), np.interp(q, xp, fp))
    _same(fl.interp(fl.asarray(q), fl.asarray(xp), fp, left=-9, right=9),
          np.interp(q, xp, fp, left=-9, right=9))
    _same(fl.interp(fl.asarray(q), xp, fp, period=3.5), np.interp(q, xp, fp, period=3.5))


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolve_correlate(device, mode):
    a, w = np.array([1.0, 2.0, 3.0, 4.0, 5.0]), np.array([1.0, -1.0, 0.5])
    fa, fw = fl.asarray(a), fl.asarray(w)
    _same(fl.convolve(fa, fw, mode), np.convolve(a, w, mode))
    _same(fl.convolve(fw, fa, mode), np.convolve(w, a, mode))
    _same(fl.correlate(fa, fw, mode), np.correlate(a, w, mode))
    _same(fl.correlate(fw, fa, mode), np.correlate(w, a, mode))
    # the shorter input first, an even length difference: 'same' centres on the longer
    _same(fl.correlate(fa[:2], fa[:4], mode), np.correlate(a[:2], a[:4], mode))
    if mode == "full":
        z, v = np.array([1 + 1j, 2 - 1j, 3j]), np.array([1j, 1])
        _same(fl.correlate(fl.asarray(z), v, mode), np.correlate(z, v, mode))
        _same(np.convolve(fa, fw), np.convolve(a, w))  # (through __array_function__)
        i, j = np.array([1, 2, 3], dtype=np.int32), np.array([2, -1], dtype=np.int32)
        _same(fl.convolve(fl.asarray(i), j), np.convolve(i, j))  # (int32 stays int32)
        with pytest.raises(ValueError, match="empty"):
            fl.convolve(fa, fl.asarray(np.zeros(0)))


def test_gradient(device):
    f = RNG.standard_normal((4, 5))
    cx = np.array([0.0, 0.5, 1.5, 2.0, 3.5])
    got = fl.gradient(fl.asarray(f))
    for g, r in zip(got, np.gradient(f), strict=True):
        _same(g, r)
    for g, r in zip(fl.gradient(fl.asarray(f), 0.5, edge_order=2),
                    np.gradient(f, 0.5, edge_order=2), strict=True):
        _same(g, r)
    _same(fl.gradient(fl.asarray(f), cx, axis=1, edge_order=2),
          np.gradient(f, cx, axis=1, edge_order=2))
    _same(fl.gradient(fl.asarray(f), cx, axis=-1), np.gradient(f, cx, axis=-1))


def test_trapezoid_ediff1d_unwrap(device):
    f = RNG.standard_normal((3, 5))
    cx = np.array([0.0, 0.5, 1.5, 2.0, 3.5])
    _same(fl.trapezoid(fl.asarray(f), dx=0.5), np.trapezoid(f, dx=0.5))
    _same(fl.trapezoid(fl.asarray(f), x=cx), np.trapezoid(f, x=cx))
    _same(fl.ediff1d(fl.asarray(f), to_end=[9, 8], to_begin=-1),
          np.ediff1d(f, to_end=[9, 8], to_begin=-1))
    phase = np.cumsum(RNG.uniform(-3, 3, 12)) % (2 * np.pi)
    _same(fl.unwrap(fl.asarray(phase)), np.unwrap(phase))


def test_digitize(device):
    q = np.array([-1.0, 0.0, 0.5, 2.5, 3.0, 4.0, 5.0])
    bins = np.array([0.0, 1.0, 2.5, 4.0])
    _same(fl.digitize(fl.asarray(q), bins), np.digitize(q, bins))
    down = bins[::-1].copy()
    _same(fl.digitize(fl.asarray(q), down, right=True), np.digitize(q, down, right=True))
    with pytest.raises(ValueError, match="monoton"):
        fl.digitize(fl.asarray(q), np.array([0.0, 2.0, 1.0]))


def test_unique_flags(device):
    u = np.array([[3.0, 1.0, np.nan], [1.0, np.nan, 2.0]])
    got = fl.unique(fl.asarray(u), return_index=True, return_inverse=True,
                    return_counts=True)
    for g, r in zip(got, np.unique(u, True, True, True), strict=True):
        _same(g, r)
    _same(np.unique(fl.asarray(u)), np.unique(u))  # (through __array_function__)
    _same(fl.unique(fl.asarray(u), equal_nan=False), np.unique(u, equal_nan=False))
    rows = np.array([[1, 2, 0], [0, 1, 5], [1, 2, 0], [1, 0, 0]])
    for g, r in zip(fl.unique(fl.asarray(rows), True, True, True, axis=0),
                    np.unique(rows, True, True, True, axis=0), strict=True):
        _same(g, r)


def test_set_functions(device):
    a, b = np.array([5, 1, 3, 3, 7]), np.array([3, 8, 1, 9])
    fa = fl.asarray(a)
    for name in ("union1d", "intersect1d", "setdiff1d", "setxor1d"):
        _same(getattr(fl, name)(fa, b), getattr(np, name)(a, b))
    for g, r in zip(fl.intersect1d(fa, b, return_indices=True),
                    np.intersect1d(a, b, return_indices=True), strict=True):
        _same(g, r)


def test_cross_and_products(device):
    a, b = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    _same(fl.cross(fl.asarray(a), b), np.cross(a, b))
    _same(fl.cross(fl.asarray(a.T), b.T, axis=0), np.cross(a.T, b.T, axis=0))
    m, v, w = RNG.standard_normal((2, 3, 4)), RNG.standard_normal(4), RNG.standard_normal(3)
    _same(fl.matvec(fl.asarray(m), v), np.matvec(m, v))
    _same(fl.vecmat(fl.asarray(w), m), np.vecmat(w, m))


def test_polynomials(device):
    p, q = np.array([2.0, -1.0, 3.0]), np.array([1.0, 4.0])
    _same(fl.polyval(p, fl.asarray(X)), np.polyval(p, X))
    _same(fl.polyadd(p, q), np.polyadd(p, q))
    _same(fl.polysub(q, p), np.polysub(q, p))
    _same(fl.polymul(p, q), np.polymul(p, q))
    _same(fl.polyder(np.array([3, 2, 1, 5]), 2), np.polyder(np.array([3, 2, 1, 5]), 2))
    i = np.array([3, 2, 1], dtype=np.int32)
    _same(fl.polyder(i), np.polyder(i))
    _same(fl.polyint(p, 2, k=[1, 2]), np.polyint(p, 2, k=[1, 2]))


def test_bitwise_count(device):
    v = np.array([0, 1, -1, 255, -128, 2**40 + 7], dtype=np.int64)
    _same(fl.bitwise_count(fl.asarray(v)), np.bitwise_count(v))
    v8 = np.array([0, 1, -1, 127, -128], dtype=np.int8)
    _same(fl.bitwise_count(fl.asarray(v8)), np.bitwise_count(v8))


def test_partition_lexsort_sort_complex(device):
    r = RNG.standard_normal((3, 6))
    _same(fl.partition(fl.asarray(r), 2).get()[:, 2], np.partition(r, 2)[:, 2])
    idx = fl.argpartition(fl.asarray(r), 2).get()
    _same(np.take_along_axis(r, idx, -1)[:, 2], np.partition(r, 2)[:, 2])
    with pytest.raises(ValueError, match="kth"):
        fl.partition(fl.asarray(r), 6)
    k1, k2 = np.array([1, 1, 0, 0, 1]), np.array([3, 1, 2, 1, 3])
    _same(fl.lexsort((fl.asarray(k2), fl.asarray(k1))), np.lexsort((k2, k1)))
    c = np.array([1 + 2j, 1 - 1j, 0 + 5j, 1 + 0j])
    _same(fl.sort_complex(fl.asarray(c)), np.sort_complex(c))


def test_sort_complex_puts_nans_where_numpy_does(device):
    # numpy orders R + Rj, R + nanj, nan + Rj, nan + nanj; sorting by (real, imag) with
    # lexsort put each NaN part last within its key instead
    nan = np.nan
    c = np.array([[complex(1, 2), complex(nan, 0), complex(1, nan), complex(-1, 3),
                   complex(nan, nan), complex(0, nan), complex(nan, -4), complex(1, -1)],
                  [complex(nan, 1), complex(3, 0), complex(0, -2), complex(nan, nan),
                   complex(2, nan), complex(-1, 0), complex(nan, -1), complex(2, -1)]],
                 np.complex64)
    got, want = fl.sort_complex(fl.asarray(c)).get(), np.sort_complex(c)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.real, want.real)  # (NaNs compare equal here)
    np.testing.assert_array_equal(got.imag, want.imag)


def test_dtype_functions():
    assert fl.promote_types("i2", "f4") == np.promote_types("i2", "f4")
    assert fl.min_scalar_type(300) == np.min_scalar_type(300)
    assert fl.common_type(fl.zeros(2, dtype=np.int32), np.float32(1)) is np.float64
    assert fl.common_type(fl.zeros(2, dtype=np.float32)) is np.float32
    assert fl.issubdtype(np.float32, np.floating) and not fl.issubdtype(np.int8, np.floating)
