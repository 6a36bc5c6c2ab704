"""numpy's remaining functions (fuseloop/numpy_more.py, fuseloop/numpy_io.py), against
numpy.  Small arrays and several functions per test: each new expression is a kernel
build."""

from __future__ import annotations

import inspect
import io
import warnings

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import DTypeError, HostFallbackWarning

RNG = np.random.default_rng(2727)
X = RNG.standard_normal(40)
Y = RNG.standard_normal(40)

# numpy's public functions fuseloop leaves out on purpose (docs/api.md says why)
NOT_PROVIDED = {
    "asmatrix", "bmat", "busday_count", "busday_offset", "datetime_as_string",
    "datetime_data", "frompyfunc", "get_include", "getbufsize", "geterrcall", "info",
    "is_busday", "isnat", "nested_iters", "setbufsize", "seterrcall", "show_config",
    "show_runtime", "test",
}


def _same(got, ref, rtol=1e-10, atol=1e-12):
    got = got.get() if isinstance(got, fl.Array) else np.asarray(got)
    assert got.shape == np.shape(ref) and got.dtype == np.asarray(ref).dtype, (got, ref)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)


def test_every_numpy_function_is_provided_or_listed():
    missing = {n for n in dir(np) if not n.startswith("_") and callable(getattr(np, n))
               and not inspect.isclass(getattr(np, n)) and not hasattr(fl, n)
               # (an alias is provided with its original: numexpr, once imported, adds
               # numpy.expm1x = numpy.expm1)
               and not hasattr(fl, getattr(getattr(np, n), "__name__", n))}
    # (a subset: a later numpy's new function must not fail fuseloop's tests)
    assert missing <= NOT_PROVIDED, sorted(missing - NOT_PROVIDED)


def test_windows_and_fromfunction(device):
    for name in ("bartlett", "blackman", "hamming", "hanning"):
        _same(getattr(fl, name)(7), getattr(np, name)(7))
    _same(fl.hanning(0), np.hanning(0))
    _same(fl.bartlett(1), np.bartlett(1))
    _same(fl.kaiser(8, 4.5), np.kaiser(8, 4.5))
    _same(fl.kaiser(1, 4.5), np.kaiser(1, 4.5))
    f = lambda i, j, k=2: i * k - j  # noqa: E731
    _same(fl.fromfunction(f, (3, 4), k=3), np.fromfunction(f, (3, 4), k=3))
    _same(fl.fromfunction(f, (2, 2), dtype=int), np.fromfunction(f, (2, 2), dtype=int))


def test_histograms(device):
    x, y = fl.asarray(X), fl.asarray(Y)
    _same(fl.histogram_bin_edges(x, 6), np.histogram_bin_edges(X, 6))
    x32 = X.astype(np.float32)
    _same(fl.histogram_bin_edges(fl.asarray(x32), 5, range=(-1, 2)),
          np.histogram_bin_edges(x32, 5, range=(-1, 2)))
    with pytest.warns(HostFallbackWarning):
        _same(fl.histogram_bin_edges(x, "fd"), np.histogram_bin_edges(X, "fd"))
    w = np.abs(Y)
    h, xe, ye = fl.histogram2d(x, y, bins=(3, 4), density=True, weights=fl.asarray(w))
    H, XE, YE = np.histogram2d(X, Y, bins=(3, 4), density=True, weights=w)
    _same(h, H)
    _same(xe, XE)
    _same(ye, YE)
    s = np.stack([X, Y, X * Y], axis=1)
    bins = [3, np.array([-1.0, 0.0, 0.5, 2.0]), 2]
    h, edges = fl.histogramdd(fl.asarray(s), bins=bins, range=[None, None, (-1, 1)])
    H, EDGES = np.histogramdd(s, bins=bins, range=[None, None, (-1, 1)])
    _same(h, H)
    for e, E in zip(edges, EDGES):
        _same(e, E)
    with pytest.raises(ValueError, match="dimension of bins"):
        fl.histogramdd(fl.asarray(s), bins=[2, 2])


def test_put_along_axis_and_piecewise(device):
    a = np.arange(12.0).reshape(3, 4)
    fa = fl.asarray(a)
    ind = np.array([[1], [-1], [0]])
    fl.put_along_axis(fa, fl.asarray(ind), fl.asarray([[-1.0], [-2.0], [-3.0]]), axis=1)
    np.put_along_axis(a, ind, np.array([[-1.0], [-2.0], [-3.0]]), axis=1)
    _same(fa, a)
    fl.put_along_axis(fa, np.array([[0, 2, 1, 1]]), 9, axis=0)
    np.put_along_axis(a, np.array([[0, 2, 1, 1]]), 9, axis=0)
    _same(fa, a)
    with pytest.raises(ValueError, match="same number of dimensions"):
        fl.put_along_axis(fa, np.array([1]), 0, axis=0)
    xs = np.linspace(-2, 2, 9)
    fx = fl.asarray(xs)
    _same(fl.piecewise(fx, [fx < 0, fx > 1], [lambda v: -v, lambda v: v * v, 0.5]),
          np.piecewise(xs, [xs < 0, xs > 1], [lambda v: -v, lambda v: v * v, 0.5]))
    ints = np.arange(-3, 4)
    _same(fl.piecewise(fl.asarray(ints), fl.asarray(ints) < 0, [-1, lambda v: v * 2]),
          np.piecewise(ints, ints < 0, [-1, lambda v: v * 2]))
    with pytest.raises(ValueError, match="functions are expected"):
        fl.piecewise(fx, [fx < 0], [1, 2, 3])


def test_apply_functions(device):
    b = np.arange(24.0).reshape(2, 3, 4)
    fb = fl.asarray(b)
    f = lambda v: v[0] - 2 * v[-1]  # noqa: E731
    _same(fl.apply_along_axis(f, 1, fb), np.apply_along_axis(f, 1, b))
    g = lambda v, k: fl.stack([v, v * k]) if isinstance(v, fl.Array) else np.stack([v, v * k])  # noqa: E731
    _same(fl.apply_along_axis(g, -1, fb, 3), np.apply_along_axis(g, -1, b, 3))
    _same(fl.apply_over_axes(fl.sum, fb, [0, 2]), np.apply_over_axes(np.sum, b, [0, 2]))
    with pytest.raises(ValueError, match="iteration dimensions are 0"):
        fl.apply_along_axis(f, 0, fl.zeros((3, 0)))


def test_polynomials(device):
    _same(fl.poly([1, 2, -3]), np.poly([1, 2, -3]))
    z = np.array([1 + 2j, 1 - 2j, 0.5])
    _same(fl.poly(fl.asarray(z)), np.poly(z))  # (conjugate pairs: a real result)
    q, r = fl.polydiv([1, -3, 2, 5], [2, 1])
    Q, R = np.polydiv([1, -3, 2, 5], [2, 1])
    _same(q, Q)
    _same(r, R)
    _same(fl.polydiv([1.0, 2, 1], [1.0, 1])[1], np.polydiv([1.0, 2, 1], [1.0, 1])[1])
    xs = np.linspace(0, 1, 16)
    ys = 2 * xs**2 - xs + 0.05 * np.sin(7 * xs)
    fx, fy = fl.asarray(xs), fl.asarray(ys)
    _same(fl.polyfit(fx, fy, 2), np.polyfit(xs, ys, 2), rtol=1e-8)
    c, res, rank, sv, rc = fl.polyfit(fx, fy, 2, full=True)
    C, RES, RANK, SV, RC = np.polyfit(xs, ys, 2, full=True)
    _same(c, C, rtol=1e-8)
    _same(res, RES, rtol=1e-6)
    _same(sv, SV, rtol=1e-8)
    assert (rank, rc) == (RANK, RC)
    c, v = fl.polyfit(fx, fy, 2, w=fl.asarray(1 + xs), cov=True)
    C, V = np.polyfit(xs, ys, 2, w=1 + xs, cov=True)
    _same(c, C, rtol=1e-8)
    _same(v, V, rtol=1e-6)
    with pytest.raises(ValueError, match="deg >= 0"):
        fl.polyfit(fx, fy, -1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(HostFallbackWarning):
            fl.roots([1, -3, 2])
    with pytest.warns(HostFallbackWarning):
        _same(fl.roots([1, -6, 11, -6]), np.roots([1, -6, 11, -6]))


def test_bits_and_mask_indices(device):
    u = np.array([[3, 255, 7], [1, 128, 0]], dtype=np.uint8)
    fu = fl.asarray(u)
    _same(fl.unpackbits(fu), np.unpackbits(u))
    _same(fl.unpackbits(fu, axis=1, bitorder="little"),
          np.unpackbits(u, axis=1, bitorder="little"))
    _same(fl.unpackbits(fu, axis=0, count=-3), np.unpackbits(u, axis=0, count=-3))
    _same(fl.unpackbits(fu, count=50), np.unpackbits(u, count=50))
    _same(fl.packbits(fl.unpackbits(fu)), np.packbits(np.unpackbits(u)))
    with pytest.raises(DTypeError, match="unsigned byte"):
        fl.unpackbits(fl.asarray([1, 2]))
    for got, ref in zip(fl.mask_indices(4, fl.triu, 1), np.mask_indices(4, np.triu, 1)):
        _same(got, ref)


def test_checks_order_and_memory(device):
    with pytest.raises(ValueError, match="infs or NaNs"):
        fl.asarray_chkfinite([1.0, np.inf])
    _same(fl.asarray_chkfinite([1, 2], dtype=np.float32), np.asarray_chkfinite([1, 2], "f"))
    _same(fl.asfortranarray(fl.arange(6).reshape(2, 3)), np.arange(6).reshape(2, 3))
    assert not fl.isfortran(fl.ones((2, 2))) and fl.isfortran(np.ones((2, 2), order="F"))
    r = fl.require(fl.ones(3), np.float32, "CAW")
    assert r.dtype == np.float32
    whole = fl.arange(6).eval()
    assert fl.require(whole, requirements="O") is whole
    view = whole[1:]
    owned = fl.require(view, requirements=["OWNDATA"])
    assert owned is not view and not fl.shares_memory(owned.eval(), whole)
    with pytest.raises(ValueError, match="both 'C' and 'F'"):
        fl.require(fl.ones(3), None, ["C", "F"])
    a = fl.arange(20.0).reshape(4, 5).eval()
    h = np.arange(20.0).reshape(4, 5)
    for sel in [(np.s_[1:], np.s_[:]), (np.s_[:, 1], np.s_[:, 2:]), (np.s_[::2], np.s_[1::2]),
                (np.s_[1], np.s_[:, 1]), (np.s_[:, 0], np.s_[:, 1])]:
        for fn in ("shares_memory", "may_share_memory"):
            assert getattr(fl, fn)(a[sel[0]], a[sel[1]]) == getattr(np, fn)(h[sel[0]],
                                                                            h[sel[1]]), sel
    assert not fl.shares_memory(a, a + 1) and not fl.may_share_memory(a, h)
    ops = (fl.ones((3, 4)), fl.ones((4, 5)), fl.ones((5, 2)))
    path = fl.einsum_path("ij,jk,kl->il", *ops, optimize="optimal")
    ref = np.einsum_path("ij,jk,kl->il", *(np.ones(o.shape) for o in ops), optimize="optimal")
    assert path == ref


def test_io_round_trips(device, tmp_path):
    a = fl.asarray(X[:6].reshape(2, 3))
    fl.save(tmp_path / "a.npy", a)
    back = fl.load(tmp_path / "a.npy")
    assert isinstance(back, fl.Array)
    _same(back, X[:6].reshape(2, 3))
    np.savez(tmp_path / "b.npz", a, b=a + 1)  # (numpy's dispatch reaches fl.savez)
    with fl.load(tmp_path / "b.npz") as z:
        assert sorted(z) == ["arr_0", "b"] and isinstance(z["b"], fl.Array)
        _same(z["b"], X[:6].reshape(2, 3) + 1)
    fl.savez_compressed(tmp_path / "c.npz", x=a)
    _same(np.load(tmp_path / "c.npz")["x"], X[:6].reshape(2, 3))
    text = io.StringIO()
    fl.savetxt(text, a, fmt="%.17g")
    _same(fl.loadtxt(io.StringIO(text.getvalue())), X[:6].reshape(2, 3))
    _same(fl.genfromtxt(io.StringIO("1,2\n3,\n"), delimiter=","),
          np.genfromtxt(io.StringIO("1,2\n3,\n"), delimiter=","))
    with pytest.raises(DTypeError, match=r"numpy\.genfromtxt"):
        fl.genfromtxt(io.StringIO("a,b\n1,2\n"), delimiter=",", names=True)
    _same(fl.frombuffer(b"\x01\x02\x03\x04", dtype=np.uint16), np.array([513, 1027], "u2"))
    _same(fl.fromstring("1 2 3", sep=" "), np.fromstring("1 2 3", sep=" "))
    _same(fl.fromiter(range(4), dtype=np.int32), np.arange(4, dtype=np.int32))
    X.tofile(tmp_path / "raw")
    _same(fl.fromfile(tmp_path / "raw", count=5), X[:5])
    _same(fl.fromregex(io.StringIO("a=1 b=22"), r"=(\d+)", [("v", np.int64)]),
          np.array([1, 22]))


def test_printing_and_scalar_helpers(device):
    h = np.array([[1 / 3, 2.0], [3.0, 4.5]])
    a = fl.asarray(h)
    assert fl.array2string(a, precision=2) == np.array2string(h, precision=2)
    assert fl.array_str(a) == np.array_str(h) == str(a)
    assert np.array_repr(a) == repr(a) and repr(a).startswith("fl.Array([[0.33333333,")
    assert fl.array_repr(a, precision=2).startswith("fl.Array([[0.33, 2.  ],")
    with fl.printoptions(precision=3):
        assert "0.333," in repr(a) and fl.get_printoptions()["precision"] == 3
    assert fl.binary_repr(-5, width=8) == np.binary_repr(-5, width=8)
    assert fl.base_repr(10, 3) == "101" and fl.typename("d") == np.typename("d")
    assert fl.mintypecode("if") == np.mintypecode("if")
    assert fl.iterable(a) and not fl.iterable(1.0)
    assert fl.format_float_positional(np.float32(0.1)) == "0.1"
    assert fl.format_float_scientific(1234.5, precision=2) == "1.23e+03"
    old = fl.seterr(all="ignore")
    try:
        assert fl.geterr()["divide"] == "ignore"
    finally:
        fl.seterr(**old)


def test_numpy_dispatch_reaches_new_functions(device):
    u = fl.asarray(np.array([5], dtype=np.uint8))
    assert isinstance(np.unpackbits(u), fl.Array)
    xs = np.linspace(0, 1, 16)  # (test_polynomials' shapes: its kernels are reused)
    got = np.polyfit(fl.asarray(xs), fl.asarray(3 * xs + 1), 2)
    assert isinstance(got, fl.Array)
    _same(got, np.polyfit(xs, 3 * xs + 1, 2), rtol=1e-8, atol=1e-12)
    assert isinstance(np.histogram_bin_edges(fl.asarray(X), 4), fl.Array)
