"""complex64 and complex128 arrays against numpy (issue 27)."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest
from device_quirks import skip_without_fp64

import fuseloop as fl
from fuseloop.errors import DTypeError

RTOL = {np.complex64: 1e-5, np.complex128: 1e-12}
CDTYPES = [np.complex64, np.complex128]


def _data(dtype, n=37, seed=0, scale=2.0):
    rng = np.random.default_rng(seed)
    z = rng.uniform(-scale, scale, n) + 1j * rng.uniform(-scale, scale, n)
    return z.astype(dtype)


def _close(got, want, dtype, rtol=None):
    rtol = RTOL[np.dtype(dtype).type] if rtol is None else rtol
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


def test_transfer_and_repr(device):
    a = _data(np.complex64)
    x = fl.asarray(a)
    assert x.dtype == np.complex64
    got = x.get()
    assert got.dtype == np.complex64 and np.array_equal(got, a)
    assert "j" in repr(fl.asarray(a[:3]))
    assert fl.complex64 is np.complex64 and fl.complex128 is np.complex128


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "true_divide", "power"])
def test_binary(device, dtype, op):
    skip_without_fp64(device, dtype)
    a, b = _data(dtype, seed=1), _data(dtype, seed=2)
    x, y = fl.asarray(a), fl.asarray(b)
    f = getattr(fl, op)
    want = getattr(np, op)(a, b)
    _close(f(x, y).get(), want, dtype, rtol=1e-4 if dtype == np.complex64 and op == "power"
           else None)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("op", ["negative", "positive", "conjugate", "square", "exp", "log",
                                "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh",
                                "absolute", "sign", "reciprocal"])
def test_unary(device, dtype, op):
    skip_without_fp64(device, dtype)
    a = _data(dtype, seed=3)
    want = getattr(np, op)(a)
    _close(getattr(fl, op)(fl.asarray(a)).get(), want, dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_rounding_extrema_and_logic_follow_numpy(device, dtype):
    # numpy has complex loops of these; fuseloop's kernels had none (array-api-tests'
    # test_round found rint).  Extrema: lexicographic, NaN parts as numpy passes them
    skip_without_fp64(device, dtype)
    a, b = _data(dtype, n=12, seed=4), _data(dtype, n=12, seed=5)
    a[:6] = [1.5 + 2.5j, -0.5 - 1.5j, 0, 2 + 1j, complex(np.nan, 1), 1 + 1j]
    b[:6] = [1.5 + 2.5j, 0, 0, 2 + 3j, 1 + 1j, complex(1, np.nan)]
    x, y = fl.asarray(a), fl.asarray(b)
    names = ["maximum", "minimum", "fmax", "fmin", "logical_and", "logical_or",
             "logical_xor"]
    got = fl.compute(fl.round(x), fl.round(x, decimals=1), fl.round(x * 10, decimals=-1),
                     fl.exp2(x), *(getattr(fl, n)(x, y) for n in names))
    want = [np.round(a), np.round(a, 1), np.round(a * 10, -1), np.exp2(a),
            *(getattr(np, n)(a, b) for n in names)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.isnan(g.get()), np.isnan(w))
        _close(np.nan_to_num(g.get()), np.nan_to_num(w), dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_parts_and_angle(device, dtype):
    skip_without_fp64(device, dtype)
    a = _data(dtype, seed=4)
    x = fl.asarray(a)
    for got, want in [(fl.real(x), a.real), (fl.imag(x), a.imag), (x.real, a.real),
                      (x.imag, a.imag), (fl.conj(x), np.conj(a)), (x.conj(), a.conj()),
                      (fl.angle(x), np.angle(a)), (fl.angle(x, deg=True), np.angle(a, deg=True))]:
        _close(got.get(), want, dtype)
    # real arrays: real/imag/conj as before
    r = np.linspace(-1, 1, 5, dtype=np.float32)
    assert np.array_equal(fl.imag(fl.asarray(r)).get(), np.zeros(5, np.float32))
    np.testing.assert_allclose(fl.angle(fl.asarray(r)).get(), np.angle(r), rtol=1e-6)


def test_promotion_and_python_complex(device):
    f = np.linspace(0, 1, 7, dtype=np.float32)
    x = fl.asarray(f)
    got = (1j * x + 2).get()  # a Python complex is weak: complex64 with float32
    _close(got, 1j * f + 2, np.complex64)
    z = fl.asarray(_data(np.complex64, 7))
    assert (z + np.float32(1)).dtype == np.complex64
    assert (z * 2.5).dtype == np.complex64
    if device.has_fp64:
        d = np.linspace(0, 1, 7)
        assert (z + fl.asarray(d)).dtype == np.complex128
        _close((z + fl.asarray(d)).get(), z.get() + d, np.complex128)
        i = np.arange(7, dtype=np.int32)
        _close((fl.asarray(i) * 1j).get(), i * 1j, np.complex128)


def test_comparisons_and_predicates(device):
    a = np.array([1 + 1j, 1 + 2j, 2 + 0j, np.nan + 1j, 1 + np.inf * 1j, 1 + 1j], np.complex64)
    b = np.array([1 + 1j, 1 + 1j, 1 + 5j, 0j, 0j, 1 + 2j], np.complex64)
    x, y = fl.asarray(a), fl.asarray(b)
    for op in ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]:
        assert np.array_equal(getattr(fl, op)(x, y).get(), getattr(np, op)(a, b)), op
    for op in ["isnan", "isinf", "isfinite"]:
        assert np.array_equal(getattr(fl, op)(x).get(), getattr(np, op)(a)), op


def test_casts(device):
    f = np.linspace(-2, 2, 9, dtype=np.float32)
    _close(fl.asarray(f).astype(np.complex64).get(), f.astype(np.complex64), np.complex64)
    i = np.arange(-4, 5, dtype=np.int16)
    _close(fl.asarray(i).astype(np.complex64).get(), i.astype(np.complex64), np.complex64)
    z = fl.asarray(_data(np.complex64, 9))
    with pytest.warns(np.exceptions.ComplexWarning):
        r = z.astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        want = z.get().astype(np.float32)
    assert np.array_equal(r.get(), want)
    zb = np.array([0j, 1j, 2 + 0j], np.complex64)
    assert np.array_equal(fl.asarray(zb).astype(bool).get(), zb.astype(bool))
    if device.has_fp64:
        _close(z.astype(np.complex128).get(), z.get().astype(np.complex128), np.complex128)


def test_where_with_complex_branches(device):
    a = _data(np.complex64, seed=5)
    x = fl.asarray(a)
    got = fl.where(fl.abs(x) < 1.5, x, 1j).get()
    _close(got, np.where(np.abs(a) < 1.5, a, np.complex64(1j)), np.complex64)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("n", [37, 1 << 17])  # the second: a two-stage reduction
def test_reductions(device, dtype, n):
    skip_without_fp64(device, dtype)
    a = _data(dtype, n=n, seed=6, scale=1.0)
    x = fl.asarray(a)
    rtol = RTOL[np.dtype(dtype).type] * (30 if n > 100 else 1)
    _close(np.asarray(fl.sum(x).get()), np.asarray(a.sum()), dtype, rtol)
    _close(np.asarray(fl.mean(x).get()), np.asarray(a.mean()), dtype, rtol)
    small = (a[:40] / np.abs(a[:40])).astype(dtype)  # unit modulus: a product that stays finite
    _close(np.asarray(fl.prod(fl.asarray(small)).get()), np.asarray(small.prod()), dtype,
           rtol * 10)


def test_row_reductions(device):
    a = _data(np.complex64, n=6 * 50, seed=7).reshape(6, 50)
    x = fl.asarray(a)
    _close(fl.sum(x, axis=1).get(), a.sum(axis=1), np.complex64)
    _close(fl.sum(x, axis=0).get(), a.sum(axis=0), np.complex64)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_matmul(device, dtype):
    skip_without_fp64(device, dtype)
    a = _data(dtype, n=12 * 9, seed=8).reshape(12, 9)
    b = _data(dtype, n=9 * 5, seed=9).reshape(9, 5)
    _close((fl.asarray(a) @ fl.asarray(b)).get(), a @ b, dtype)
    big_a = _data(dtype, n=128 * 96, seed=10).reshape(128, 96)
    big_b = _data(dtype, n=96 * 64, seed=11).reshape(96, 64)
    _close((fl.asarray(big_a) @ fl.asarray(big_b)).get(), big_a @ big_b, dtype,
           RTOL[np.dtype(dtype).type] * 10)


def test_mandelbrot_iteration(device):
    xs = np.linspace(-2, 1, 40, dtype=np.float32)
    ys = np.linspace(-1.5, 1.5, 30, dtype=np.float32)
    c_host = (xs[None, :] + 1j * ys[:, None]).astype(np.complex64)
    c = fl.asarray(c_host)
    z = fl.zeros(c.shape, np.complex64)
    z_host = np.zeros_like(c_host)
    for _ in range(12):
        z = fl.where(fl.abs(z) < 2, z * z + c, z).eval()
        z_host = np.where(np.abs(z_host) < 2, z_host * z_host + c_host, z_host)
    _close(z.get(), z_host, np.complex64, rtol=1e-3)


def test_complex128_needs_fp64():
    from fuseloop.lower.codegen import _complex_target

    prog = types.SimpleNamespace(entries=[types.SimpleNamespace(kind="load", dtype="D")])
    dev = types.SimpleNamespace(name="no-double device", has_fp64=False)
    with pytest.raises(DTypeError, match=r"no-double device.*complex128"):
        _complex_target(None, prog, dev)


def test_unsupported_complex_op_is_a_clear_error(device):
    # (arctan, then maximum, were the example until they gained complex versions); the
    # OpenCL builtins numpy lacks took the real parts silently
    x = fl.asarray(_data(np.complex64, 5))
    with pytest.raises(DTypeError, match="no complex version of erf"):
        fl.erf(x).get()
    with pytest.raises(DTypeError, match=r"no complex version of fma.*a \* b \+ c"):
        fl.fma(x, x, 1.0)


_INVERSE_OPS = ["arccos", "arcsin", "arctan", "arccosh", "arcsinh", "arctanh", "log1p",
                "expm1", "log2", "log10"]


@pytest.mark.parametrize("dtype", CDTYPES)
def test_inverse_and_log_functions(device, dtype):
    skip_without_fp64(device, dtype)
    # both sides of the branch cuts, near zero (the series), past overflow of z^2
    a = np.concatenate([_data(dtype, seed=5, scale=3.0),
                        np.array([2 + 0j, 2 - 0j, -3 + 0j, -3 - 0j, 0.5j, 1e-9 + 2e-9j,
                                  1e20 - 3e20j, 0.25 + 0j], dtype)])
    x = fl.asarray(a)
    got = fl.compute(*(getattr(fl, op)(x) for op in _INVERSE_OPS))  # one kernel
    for op, g in zip(_INVERSE_OPS, got):
        _close(g.get(), getattr(np, op)(a), dtype)


def test_special_values_follow_the_standard(device):
    # a few of the Array API's (C99 Annex G's) rules, with the signs of zeros
    inf, nan = np.inf, np.nan
    z = np.array([complex(0.0, 0.0), complex(-inf, 1.0), complex(inf, inf), complex(nan, 0.0),
                  complex(1.0, 0.0), complex(-1.0, -0.0), complex(0.0, nan),
                  complex(inf, -2.0)], np.complex64)
    x = fl.asarray(z)
    ops = ["arccos", "arccosh", "arcsinh", "arctanh", "log1p", "expm1", "exp", "sinh",
           "cosh", "tanh"]
    got = dict(zip(ops, (g.get() for g in fl.compute(*(getattr(fl, op)(x) for op in ops)))))
    pi = np.float32(np.pi)

    def same(value, re, im):
        for u, v in ((value.real, re), (value.imag, im)):
            assert (np.isnan(u) and np.isnan(v)) or (u == v and np.signbit(u) == np.signbit(v)), (
                value, re, im)

    same(got["arccos"][0], pi / 2, -0.0)      # acos(+0 + 0j) = pi/2 - 0j
    same(got["arccos"][1], pi, -inf)          # acos(-inf + 1j) = pi - inf j
    same(got["arccosh"][2], inf, pi / 4)      # acosh(inf + inf j) = inf + pi/4 j
    same(got["arcsinh"][3], nan, 0.0)         # asinh(nan + 0j) = nan + 0j
    same(got["arctanh"][4], inf, 0.0)         # atanh(1 + 0j) = inf + 0j
    same(got["log1p"][5], -inf, -0.0)         # log1p(-1 - 0j) = -inf - 0j (conjugate)
    same(got["expm1"][0], 0.0, 0.0)
    same(got["exp"][3], nan, 0.0)             # exp(nan + 0j) = nan + 0j
    same(got["sinh"][6], 0.0, nan)            # sinh(+0 + nan j) = 0 + nan j
    same(got["cosh"][3], nan, 0.0)
    same(got["tanh"][7], 1.0, -0.0)           # tanh(inf - 2j) = 1 - 0j


def test_var_and_std_of_complex_values_are_real(device):
    # numpy: the mean of |x - mean(x)|**2, in the real type of x's precision (these
    # raised a DTypeError before); ddof, the Array API's correction, axes and keepdims
    cases = [(np.complex64, fl.var, np.var, {}), (np.complex64, fl.std, np.std, {"axis": 1}),
             (np.complex128, fl.var, np.var, {"axis": 0, "keepdims": True, "ddof": 1}),
             (np.complex128, fl.std, np.std, {"axis": 1, "correction": 2})]
    for dtype, f, ref, kw in cases:
        if dtype == np.complex128 and not device.has_fp64:
            continue
        h = _data(dtype, 4 * 7, seed=21).reshape(4, 7)
        got = f(fl.asarray(h), **kw).get()
        want = ref(h, **{("ddof" if k == "correction" else k): v for k, v in kw.items()})
        assert got.dtype == want.dtype, (dtype, f, kw, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.complex64 else 1e-12)


def test_vdot_conjugates_first_argument(device):
    a, b = _data(np.complex64, 20, seed=12), _data(np.complex64, 20, seed=13)
    got = np.asarray(fl.vdot(fl.asarray(a), fl.asarray(b)).get())
    _close(got, np.asarray(np.vdot(a, b)), np.complex64)
    _close(np.asarray(fl.dot(fl.asarray(a), fl.asarray(b)).get()), np.asarray(np.dot(a, b)),
           np.complex64)


def test_gpu_recipes_on_cpu(device, restore_recipes):
    """The GPU recipes (tiled contraction, rows, coalesced elementwise) with complex values."""
    from fuseloop.recipes import gpu_coalesced, gpu_tiled
    from fuseloop.recipes.registry import DevicePredicate
    from fuseloop.recipes.rows import make_gpu_rows

    pred = DevicePredicate(type=device.type, vendor=device.vendor, name=device.name,
                           platform=device.platform)
    fl.register_recipe(pred, gpu_tiled, name="test-c-gpu-tiled", kind="contraction")
    fl.register_recipe(pred, gpu_coalesced, name="test-c-gpu-coalesced")
    fl.register_recipe(pred, make_gpu_rows(64), name="test-c-gpu-rows", kind="reduction")
    a = _data(np.complex64, n=130 * 70, seed=14).reshape(130, 70)
    b = _data(np.complex64, n=70 * 90, seed=15).reshape(70, 90)
    x, y = fl.asarray(a), fl.asarray(b)
    assert "__local cfloat_t x_tile" in fl.show_code(x @ y)  # the tiled recipe applied
    _close((x @ y).get(), a @ b, np.complex64, 1e-4)
    _close(fl.sum(x * 1j, axis=1).get(), (a * 1j).sum(axis=1), np.complex64)
    big = _data(np.complex64, n=1 << 17, seed=16, scale=1.0)
    _close(np.asarray(fl.sum(fl.asarray(big)).get()), np.asarray(big.sum()), np.complex64,
           3e-4)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_power_follows_numpy_at_zero_and_whole_exponents(device, dtype):
    skip_without_fp64(device, dtype)
    z = np.array([0, -0.0, 1 + 1j, -2 + 0.5j, 3 - 4j, 1j, -1, -4, np.inf], dtype=dtype)
    x = fl.asarray(z)
    for e in (0, 1, 2, 3, 4, 7, 99, -1, -2, -3, 2.5, -0.5, 1 / 3, 2 + 1j, 1j, -1 + 1j):
        with np.errstate(all="ignore"):
            want = z ** dtype(e) if isinstance(e, complex) else z ** e
        got = (x ** e).get()
        assert got.dtype == want.dtype, (e, got.dtype, want.dtype)
        if isinstance(e, complex):  # infinite bases with complex exponents: pyopencl's
            got, want = got[:-1], want[:-1]  # pow, not C99 Annex G (module docstring)
        # zero bases: 0 for a positive real part of the exponent, NaN otherwise (numpy's
        # rule; pyopencl's pow through logarithms gives NaN for 0j ** 3)
        np.testing.assert_allclose(got, want, rtol=RTOL[dtype], atol=0, equal_nan=True,
                                   err_msg=f"z ** {e}")
