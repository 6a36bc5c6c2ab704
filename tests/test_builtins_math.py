"""The math builtins of issue 28 against numpy and scipy.special, float32 and float64.

Tolerances are OpenCL's ULP bounds (full profile, section 7.4 of the OpenCL C spec),
plus two ulps for the reference's own error where scipy computes it; they are listed
in docs/api.md.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import fuseloop as fl

sp = pytest.importorskip("scipy.special")

FLOATS = (np.float32, np.float64)
RNG = np.random.default_rng(28)
PI_LD = np.longdouble("3.14159265358979323846264338327950288")


def ulps(got: np.ndarray, ref: np.ndarray, dt: type) -> np.ndarray:
    """Distance of ``got`` from the (wider) reference in units of ``dt``'s spacing there."""
    ref_dt = np.asarray(ref).astype(dt)
    spacing = np.abs(np.spacing(ref_dt)).astype(np.longdouble)
    diff = np.abs(got.astype(np.longdouble) - np.asarray(ref, np.longdouble))
    same = (got == ref_dt) | (np.isnan(got) & np.isnan(ref_dt))
    return np.where(same, 0, diff / spacing)


def check_ulps(got: np.ndarray, ref: np.ndarray, dt: type, bound: float) -> None:
    assert got.dtype == dt
    u = ulps(got, ref, dt)
    worst = int(np.argmax(u))
    assert u.max() <= bound, (f"{u.max():.1f} ulps at x[{worst}]: got {got.flat[worst]!r}, "
                              f"reference {np.asarray(ref).flat[worst]!r}")


def sample(lo: float, hi: float, dt: type, n: int = 4000) -> np.ndarray:
    return RNG.uniform(lo, hi, n).astype(dt)


def reference(fn, x: np.ndarray, dt: type) -> np.ndarray:
    """scipy's value in float64 (rounded to float32 for float32: at most 0.5 ulp off)."""
    return fn(x.astype(np.float64))


# name, reference, float32 range, float64 range, bound (ulps); two more in float64 for
# the reference's own error. scipy's erfc is hundreds of ulps off beyond x = 20
# (erfc(25.6): 5.2920352391169e-287, mpmath and glibc: 5.2920352391172e-287), so
# erf and erfc take glibc's (Python's math module) instead
SPECIAL = [
    ("erf", np.vectorize(math.erf), (-6, 6), (-8, 8), 16),
    ("erfc", np.vectorize(math.erfc), (-3, 9), (-5, 26), 16),
    ("exp10", sp.exp10, (-37, 38), (-307, 308), 3),
    ("gamma", sp.gamma, (0.01, 34), (0.01, 170), 16),
]


@pytest.mark.parametrize("dt", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("name,fn,r32,r64,bound", SPECIAL, ids=[s[0] for s in SPECIAL])
def test_special_functions_within_opencl_ulps(device, name, fn, r32, r64, bound, dt):
    x = sample(*(r32 if dt == np.float32 else r64), dt)
    got = getattr(fl, name)(fl.asarray(x)).get()
    check_ulps(got, reference(fn, x, dt), dt, bound + (2 if dt == np.float64 else 0))


@pytest.mark.parametrize("dt", FLOATS, ids=["f32", "f64"])
def test_gamma_of_negative_non_integers(device, dt):
    x = sample(-10.5, 0, dt)
    x = x[np.abs(x - np.round(x)) > 1e-2]  # away from the poles (the error grows there)
    got = fl.gamma(fl.asarray(x)).get()
    check_ulps(got, reference(sp.gamma, x, dt), dt, 16 + (2 if dt == np.float64 else 0))


@pytest.mark.parametrize("dt", FLOATS, ids=["f32", "f64"])
def test_gammaln(device, dt):
    # OpenCL gives lgamma no ULP bound: relative 8 eps where |lgamma| >= 1, and absolute
    # 8 eps near its zeros (1 and 2), where a relative bound means nothing
    x = np.concatenate([sample(0.01, 50, dt), sample(50, 1e4, dt, 500),
                        sample(-6.5, -0.01, dt, 1000)])
    x = x[np.abs(x - np.round(x)) > 1e-2]
    got = fl.gammaln(fl.asarray(x)).get()
    assert got.dtype == dt
    eps = np.finfo(dt).eps
    np.testing.assert_allclose(got, sp.gammaln(x.astype(np.float64)), rtol=8 * eps,
                               atol=8 * eps)


@pytest.mark.parametrize("dt", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("name,bound", [("sinpi", 4), ("cospi", 4), ("tanpi", 6)])
def test_pi_multiples(device, name, bound, dt):
    x = np.concatenate([sample(-2, 2, dt), sample(-1e4, 1e4, dt, 1000)])
    if name == "tanpi":  # away from the poles at half-integers
        x = x[np.abs(np.abs(np.fmod(x, 1)) - 0.5) > 1e-2]
    got = getattr(fl, name)(fl.asarray(x)).get()
    r = np.fmod(x.astype(np.longdouble), 2) * PI_LD  # fmod is exact
    ref = {"sinpi": np.sin, "cospi": np.cos, "tanpi": np.tan}[name](r)
    if dt == np.float64:
        # long double pi carries 64 bits: near a zero of the function its absolute
        # error (1e-19 * |x|) exceeds ulps of the tiny result, so check absolutely there
        near_zero = np.abs(ref) < 1e-3
        np.testing.assert_allclose(got[near_zero], ref[near_zero].astype(dt), rtol=0,
                                   atol=1e-16)
        got, ref, x = got[~near_zero], ref[~near_zero], x[~near_zero]
    check_ulps(got, ref, dt, bound)
    # exact values at integers and halves
    k = np.arange(-8, 9, dtype=dt) / 2
    got = getattr(fl, name)(fl.asarray(k)).get()
    if name != "tanpi":
        exact = {"sinpi": [0, 1, 0, -1], "cospi": [1, 0, -1, 0]}[name]
        want = np.take(exact, (k * 2).astype(int) % 4)
        np.testing.assert_array_equal(got, want)  # (-0.0 == 0.0 here)


@pytest.mark.parametrize("dt", FLOATS, ids=["f32", "f64"])
def test_rsqrt(device, dt):
    x = np.concatenate([sample(1e-30, 1, dt), sample(1, 1e30, dt)])
    got = fl.rsqrt(fl.asarray(x)).get()
    check_ulps(got, 1 / np.sqrt(x.astype(np.longdouble)), dt, 2)


@pytest.mark.parametrize("dt", FLOATS, ids=["f32", "f64"])
def test_fma_correctly_rounded_and_mad_close(device, dt):
    n = 500
    a, b, c = (RNG.standard_normal(n).astype(dt) * 10 ** RNG.integers(-3, 3, n).astype(dt)
               for _ in range(3))
    c[:50] = -(a[:50].astype(np.float64) * b[:50]).astype(dt)  # cancellation: fma matters
    got = fl.fma(fl.asarray(a), fl.asarray(b), fl.asarray(c)).get()
    exact = np.array([float(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r)))
                      for p, q, r in zip(a, b, c)])
    # a float32 result: exact -> float64 -> float32 double-rounds only on exact ties of
    # float64's rounding; the Fraction's own rounding is correct for float64
    want = np.array([float(np.dtype(dt).type(Fraction(float(p)) * Fraction(float(q))
                                             + Fraction(float(r))))
                     if dt == np.float64 else np.float32(e)
                     for p, q, r, e in zip(a, b, c, exact)], dtype=dt)
    assert got.dtype == dt
    np.testing.assert_array_equal(got, want)
    mad = fl.mad(fl.asarray(a), fl.asarray(b), fl.asarray(c)).get()
    scale = np.abs(a.astype(np.float64) * b) + np.abs(c)
    np.testing.assert_allclose(mad, exact, rtol=0, atol=float(4 * np.finfo(dt).eps
                                                                * scale.max()))


def test_scipy_dtype_rules(device):
    """float32 stays float32, everything else computes in float64: scipy.special's rule
    where its float64 loop comes first (scipy 1.17; older releases listed float32 first
    and gave float32 for bool and small integers)."""
    for dt in ("bool", "int8", "uint16", "int32", "int64", "float32", "float64"):
        x = np.array([1, 0, 1], dtype=dt)
        want = np.dtype(np.float32 if dt == "float32" else np.float64)
        for name in ("erf", "gamma", "gammaln", "exp10"):
            assert getattr(fl, name)(fl.asarray(x, device=device)).dtype == want
            if getattr(sp, name).types[0] == "d->d":
                assert getattr(sp, name)(x).dtype == want
    x32 = fl.asarray(np.ones(3, np.float32))
    assert fl.fma(x32, 2.0, 1).dtype == np.float32  # Python scalars stay weak
    assert fl.fma(x32, np.ones(3), 1).dtype == np.float64
    assert fl.erf(np.int8(1)).dtype == np.float64
    assert float(fl.erf(0.5).get()) == pytest.approx(sp.erf(0.5), rel=1e-15)
    assert fl.tgamma is fl.gamma and fl.lgamma is fl.gammaln


SPECIAL_VALUES = [
    ("erf", [np.inf, -np.inf, np.nan, -0.0, 0.0], [1, -1, np.nan, -0.0, 0.0]),
    ("erfc", [np.inf, -np.inf, np.nan, 1e4], [0, 2, np.nan, 0]),
    ("gamma", [np.inf, np.nan, 0.0, -0.0, -1.0, -np.inf, 1e4], [np.inf, np.nan, np.inf,
                                                                -np.inf, np.nan, np.nan,
                                                                np.inf]),
    ("gammaln", [np.inf, np.nan, 0.0, -1.0, 1.0, 2.0], [np.inf, np.nan, np.inf, np.inf, 0, 0]),
    ("exp10", [np.inf, -np.inf, np.nan, 1e4, -1e4, 0.0], [np.inf, 0, np.nan, np.inf, 0, 1]),
    ("rsqrt", [np.inf, 0.0, -0.0, -1.0, np.nan], [0, np.inf, -np.inf, np.nan, np.nan]),
    ("sinpi", [np.inf, np.nan, -0.0, 1e30], [np.nan, np.nan, -0.0, 0]),
    ("cospi", [np.inf, np.nan, -0.0, 1e30], [np.nan, np.nan, 1, 1]),
]


@pytest.mark.parametrize("dt", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("name,xs,want", SPECIAL_VALUES, ids=[s[0] for s in SPECIAL_VALUES])
def test_special_values(device, name, xs, want, dt):
    got = getattr(fl, name)(fl.asarray(np.array(xs, dt))).get()
    want = np.array(want, dt)
    np.testing.assert_array_equal(got, want)
    signed = ~np.isnan(want)  # (a NaN's sign is unspecified)
    np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(want[signed]))


# {{{ numpy ufuncs, compared with numpy exactly (or to the bound given)

FINITE = np.array([0.0, -0.0, 1.5, -2.5, 3e-3, -7e5, 1e30, -1e-30], np.float64)
EDGES = np.concatenate([FINITE, [np.inf, -np.inf, np.nan]])


@pytest.mark.parametrize("dt", FLOATS, ids=["f32", "f64"])
def test_exact_float_ufuncs(device, dt):
    x = np.concatenate([EDGES, sample(-100, 100, np.float64, 200)]).astype(dt)
    xd = fl.asarray(x)
    tiny = np.array([np.finfo(dt).smallest_subnormal, -np.finfo(dt).smallest_subnormal,
                     np.finfo(dt).tiny, np.finfo(dt).max], dt)
    for name in ("fabs", "signbit", "reciprocal", "conjugate", "conj"):
        np.testing.assert_array_equal(getattr(fl, name)(xd).get(), getattr(np, name)(x))
    for name in ("frexp", "modf"):
        for src in (x, tiny):
            got = getattr(fl, name)(fl.asarray(src))
            for g, w in zip(got, getattr(np, name)(src)):
                assert g.dtype == w.dtype
                np.testing.assert_array_equal(g.get(), w)
                np.testing.assert_array_equal(np.signbit(g.get()), np.signbit(w))
    for toward in (np.inf, -np.inf, 0.0, np.nan):
        np.testing.assert_array_equal(fl.nextafter(xd, toward).get(),
                                      np.nextafter(x, dt(toward)))
    for h in (0.5, np.nan):
        np.testing.assert_array_equal(fl.heaviside(xd, h).get(), np.heaviside(x, dt(h)))
    for e in (np.array(3, np.int32), np.int64(-1100), np.int64(1 << 40), -(1 << 20), 0):
        np.testing.assert_array_equal(fl.ldexp(xd, e).get(), np.ldexp(x, e))
    k = RNG.integers(-300, 300, x.size).astype(np.int32)
    np.testing.assert_array_equal(fl.ldexp(xd, fl.asarray(k)).get(), np.ldexp(x, k))


@pytest.mark.parametrize("dt", FLOATS, ids=["f32", "f64"])
def test_rounding_ufuncs(device, dt):
    # logaddexp: log1p and exp within OpenCL's bounds (2 and 3 ulps)
    x = np.concatenate([EDGES, sample(-800, 800, np.float64, 300)]).astype(dt)
    y = np.concatenate([[np.inf, np.inf, -np.inf], sample(-800, 800, np.float64, x.size - 3)
                        ]).astype(dt)
    xd, yd = fl.asarray(x), fl.asarray(y)
    for name in ("deg2rad", "rad2deg", "radians", "degrees"):
        np.testing.assert_array_equal(getattr(fl, name)(xd).get(), getattr(np, name)(x))
    for name in ("logaddexp", "logaddexp2"):
        check_ulps(getattr(fl, name)(xd, yd).get(), getattr(np, name)(x, y), dt, 4)
        check_ulps(getattr(fl, name)(xd, xd).get(), getattr(np, name)(x, x), dt, 1)


@pytest.mark.parametrize("dt", ["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                "int64", "uint64", "bool"])
def test_integer_inputs_as_numpy(device, dt):
    info = np.iinfo(dt) if dt != "bool" else None
    vals = [0, 1, 2, 3] + ([-1, -2, int(info.min)] if info is not None and info.min < 0
                           else []) + ([int(info.max)] if info is not None else [])
    x = np.array(vals).astype(dt)
    xd = fl.asarray(x)
    with np.errstate(all="ignore"):
        for name in ("signbit", "reciprocal", "fabs", "conj", "deg2rad"):
            got, want = getattr(fl, name)(xd), getattr(np, name)(x)
            want = want.astype(np.float32) if want.dtype == np.float16 else want
            assert got.dtype == want.dtype, name
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got.get(), want, rtol=1e-3)
            else:
                np.testing.assert_array_equal(got.get(), want, err_msg=name)


# }}}

# {{{ functions built from fused operations


@pytest.mark.parametrize("dt", ["float32", "float64", "int16", "uint8", "int64", "bool"])
@pytest.mark.parametrize("decimals", [0, 1, 2, -1, -2])
def test_round(device, dt, decimals):
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.125, 1.005, 15, 25, 150, 250, 7.55, 0, 1])
    x = x.astype(dt) if dt.startswith("float") else np.abs(x).astype(dt)
    if dt == "bool" and decimals != 0:
        return  # numpy rounds bools through float16 there
    got = fl.round(fl.asarray(x), decimals)
    want = np.round(x, decimals)
    want = want.astype(np.float32) if want.dtype == np.float16 else want
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.get(), want)
    assert fl.around is fl.round


@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose(device, equal_nan):
    a = np.array([1.0, 1 + 1e-6, 1 + 1e-4, np.inf, -np.inf, np.inf, np.nan, np.nan, 0, 1e-9])
    b = np.array([1.0, 1.0, 1.0, np.inf, np.inf, 1.0, np.nan, 1.0, 0, 0])
    for x, y in ((a, b), (a.astype(np.float32), b.astype(np.float32)), (a, 1),
                 (a.astype(np.float32), 1.0), (np.array([1, 2, 3]), np.array([1, 3, 3]))):
        yd = fl.asarray(y) if isinstance(y, np.ndarray) else y
        got = fl.isclose(fl.asarray(x), yd, equal_nan=equal_nan).get()
        np.testing.assert_array_equal(got, np.isclose(x, y, equal_nan=equal_nan))
    got = fl.isclose(fl.asarray(a), fl.asarray(b), rtol=1e-3, atol=0.5).get()
    np.testing.assert_array_equal(got, np.isclose(a, b, rtol=1e-3, atol=0.5))


@pytest.mark.parametrize("dt", ["float32", "float64", "int32"])
def test_nan_to_num(device, dt):
    x = np.array([np.nan, np.inf, -np.inf, 1.5, -0.0]) if dt != "int32" else np.arange(5)
    x = x.astype(dt)
    np.testing.assert_array_equal(fl.nan_to_num(fl.asarray(x)).get(), np.nan_to_num(x))
    kw = {"nan": -1.0, "posinf": 9.0, "neginf": -9.0}
    np.testing.assert_array_equal(fl.nan_to_num(fl.asarray(x), **kw).get(),
                                  np.nan_to_num(x, **kw))
    xd = fl.asarray(x)
    assert fl.nan_to_num(xd, copy=False) is xd
    np.testing.assert_array_equal(xd.get(), np.nan_to_num(x))


def test_real_imag(device):
    x = np.array([1.5, -2.0, np.nan], np.float32)
    xd = fl.asarray(x)
    np.testing.assert_array_equal(fl.real(xd).get(), np.real(x))
    im = fl.imag(xd)
    assert im.dtype == np.float32 and im.shape == x.shape
    np.testing.assert_array_equal(im.get(), np.imag(x))


def test_frexp_in_one_kernel(device):
    x = fl.asarray(np.linspace(-5, 5, 101))
    fl.reset_stats()
    mant, exp = fl.compute(*fl.frexp(x))
    assert fl.stats()["kernels_launched"] == 1
    want = np.frexp(np.linspace(-5, 5, 101))
    np.testing.assert_array_equal(mant.get(), want[0])
    np.testing.assert_array_equal(exp.get(), want[1])


def test_cpu_vector_recipe_keeps_new_builtins_scalar(pocl):
    # erf, lgamma, ... are not in the vector table (their PoCL vector forms are
    # unmeasured): next to vectorised exp and sin they must still be right in every lane
    from fuseloop.recipes.cpu_vector import vector_builtins

    table = vector_builtins()
    for op in ("erf", "gamma", "gammaln", "sinpi", "rsqrt", "fma", "ldexp", "frexp_mantissa"):
        assert not any(name.startswith(f"fl_{op}_") for name in table), op
    n = 100_003
    x = RNG.uniform(0.1, 5, n).astype(np.float32)
    xd = fl.asarray(x)
    got = (fl.erf(fl.exp(-xd)) + fl.gammaln(xd) * fl.sin(xd) + fl.rsqrt(xd)).get()
    x64 = x.astype(np.float64)
    want = sp.erf(np.exp(-x64)) + sp.gammaln(x64) * np.sin(x64) + 1 / np.sqrt(x64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

# }}}
