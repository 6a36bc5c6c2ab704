"""Every elementwise function against numpy, for every dtype (one kernel per dtype)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.ufuncs import BINARY, UNARY

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float32", "float64"]


def sample(dtype: str, n: int = 257, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = max(info.min, -1000), min(info.max, 1000)
        vals = rng.integers(lo, hi, n, endpoint=True).astype(dt)
        vals[:4] = [info.min, info.max, 0, 1 if dt.kind == "u" else -1]
        return vals
    vals = (rng.standard_normal(n) * 3).astype(dt)
    vals[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5]
    return vals


def numpy_result(name: str, *args: np.ndarray):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            out = getattr(np, name)(*args)
        except TypeError:
            return None
        if out.dtype == np.float16:  # fuseloop computes numpy's float16 results in float32
            # (ldexp's exponent stays an integer: it has no float loop)
            out = getattr(np, name)(*[a if name == "ldexp" and k == 1 else a.astype(np.float32)
                                      for k, a in enumerate(args)])
    return out


def check(name: str, got: np.ndarray, want: np.ndarray, args: tuple) -> None:
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    if want.dtype.kind == "f":
        rtol = 2e-6 if want.dtype == np.float32 else 1e-12
        ok = np.isclose(got, want, rtol=rtol, atol=rtol, equal_nan=True)
        if name == "floor_divide" or name == "remainder":
            ok |= ~np.isfinite(want)  # numpy and C differ for inf/nan operands here
        bad = np.flatnonzero(~ok)
        assert not bad.size, (name, [(tuple(a[b] for a in args), got[b], want[b])
                                     for b in bad[:5]])
    else:
        bad = np.flatnonzero(got != want)
        assert not bad.size, (name, [(tuple(a[b] for a in args), got[b], want[b])
                                     for b in bad[:5]])


# integer ops with undefined or numpy-raising cases are checked separately
_SKIP_INT = {"power"}


@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_against_numpy(device, dtype):
    if dtype == "float64" and not device.has_fp64:
        pytest.skip("no fp64")
    host = sample(dtype)
    x = fl.asarray(host)
    names, exprs, wants = [], [], []
    for name in UNARY:
        want = numpy_result(name, host)
        if want is None:
            with pytest.raises(TypeError):
                getattr(fl, name)(x)
            continue
        if want.dtype == np.float64 and not device.has_fp64:
            continue
        names.append(name)
        exprs.append(getattr(fl, name)(x))
        wants.append(want)
    fl.reset_stats()
    got = fl.compute(*exprs)
    assert fl.stats()["kernels_launched"] == 1  # every function in one kernel
    for name, g, w in zip(names, got, wants):
        check(name, g.get(), w, (host,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_against_numpy(device, dtype):
    if dtype == "float64" and not device.has_fp64:
        pytest.skip("no fp64")
    a, b = sample(dtype, seed=1), sample(dtype, seed=2)
    if np.dtype(dtype).kind in "iu":
        b[10:20] = 0  # division and modulo by zero
        b[20:30] = np.array(-1).astype(dtype) if np.dtype(dtype).kind == "i" else 1
        a[20] = np.iinfo(dtype).min
        b_shift = np.abs(b.astype(np.int64)) % (np.dtype(dtype).itemsize * 8 + 4)
    x, y = fl.asarray(a), fl.asarray(b)
    names, exprs, wants, args = [], [], [], []
    for name in BINARY:
        lhs, rhs, rx = a, b, y
        if name in ("left_shift", "right_shift") and np.dtype(dtype).kind in "iu":
            rhs = b_shift.astype(dtype)
            rx = fl.asarray(rhs)
        if name in _SKIP_INT and np.dtype(dtype).kind in "iub":
            continue
        want = numpy_result(name, lhs, rhs)
        if want is None:
            with pytest.raises(TypeError):
                getattr(fl, name)(x, rx)
            continue
        names.append(name)
        exprs.append(getattr(fl, name)(x, rx))
        wants.append(want)
        args.append((lhs, rhs))
    got = fl.compute(*exprs)
    for name, g, w, arg in zip(names, got, wants, args):
        check(name, g.get(), w, arg)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint64"])
def test_integer_power(device, dtype):
    rng = np.random.default_rng(3)
    a = rng.integers(-5 if dtype[0] == "i" else 0, 6, 200).astype(dtype)
    e = rng.integers(0, 9, 200).astype(dtype)
    got = (fl.asarray(a) ** fl.asarray(e)).get()
    np.testing.assert_array_equal(got, a ** e)


def test_negative_integer_power_gives_zero(device):
    a = np.array([2, 1, -1, -1, 5], np.int32)
    e = np.array([-1, -3, -3, -2, -2], np.int32)
    np.testing.assert_array_equal((fl.asarray(a) ** fl.asarray(e)).get(), [0, 1, -1, 1, 0])


def test_where_clip_and_astype(device):
    a = sample("float32")
    x = fl.asarray(a)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(fl.where(x > 0, x, 0.5).get(), np.where(a > 0, a, 0.5))
        np.testing.assert_array_equal(fl.clip(x, -1, 2).get(), np.clip(a, -1, 2))
        np.testing.assert_array_equal(fl.astype(x, np.int32).get()[8:],
                                      a.astype(np.int32)[8:])
    assert fl.where(x > 0, x, 0.5).dtype == np.float32
    np.testing.assert_array_equal(x.astype(bool).get(), a.astype(bool))


def test_out_given_positionally_or_by_keyword(device):
    """numpy's ``out``: ``np.multiply(Z, Z, Z)``, ``np.logical_not(I, I)`` (NPBench's
    mandelbrot2), ``out=`` and ``out=(arr,)``; the result is written and returned."""
    a = np.arange(6.0) - 2
    z = fl.asarray(a, device=device)
    assert fl.multiply(z, z, z) is z
    fl.add(z, 1.5, out=(z,))
    m = fl.asarray(a > 0, device=device)
    fl.logical_not(m, m)
    np.testing.assert_array_equal(z.get(), a * a + 1.5)
    np.testing.assert_array_equal(m.get(), ~(a > 0))
    i = fl.asarray(np.arange(6), device=device)
    with pytest.raises(TypeError, match="same_kind"):
        fl.sqrt(i, out=i)  # float64 into int64: numpy's UFuncTypeError
    with pytest.raises(TypeError, match="one output"):
        fl.add(z, z, z, out=z)
    np.testing.assert_array_equal(i.get(), np.arange(6))


def test_numpy_scalar_operands_take_the_lean_path(device, monkeypatch):
    """``np.float64(a) * x`` and ``np.subtract(x, np.float64(a))`` (numpy hands the ufunc
    to fuseloop; ``x - np.float64(a)`` still builds its node the general way): numpy's
    dtypes (a numpy scalar is not weak), one kernel for every value of the scalar, no
    general node building (deriche's coefficients are numpy scalars)."""
    import fuseloop.array as fa

    built = []
    real = fa.build_node
    monkeypatch.setattr(fa, "build_node", lambda *a, **k: built.append(1) or real(*a, **k))
    xn = np.arange(5, dtype=np.float32)
    x = fl.asarray(xn, device=device)
    fl.reset_stats()
    for s in (np.float64(1.5), np.float64(-2.0), np.float32(0.5), np.int64(3), np.bool_(True)):
        for got, want in ((s * x, s * xn), (np.subtract(x, s), xn - s),
                          (np.maximum(s, x), np.maximum(s, xn))):
            assert got.dtype == want.dtype
            np.testing.assert_allclose(got.get(), want, rtol=1e-6)
    assert not built
    assert fl.stats()["kernels_lowered"] <= 3 * 4  # (per dtype pair and operation, not value)
