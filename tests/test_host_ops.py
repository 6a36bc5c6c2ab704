"""Small operations computed at once by numpy on the CPU device (fuseloop.host_ops).

As in tests/test_host_path.py the host path is on here (the session turns it off);
each result is compared with numpy's and with the kernels' (host path off).
"""

from __future__ import annotations

import operator

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import host_path
from fuseloop.expr.nodes import Scalar


def _products(m, a, v, w):
    return [a[1, :3] @ a[:3, 2], m.dot(v[::-1], w), a @ v[:4], v[:4] @ a, a[:2] @ a,
            m.dot(a[1:3, :0], a[:0, 1:]), a[2, :0] @ v[:0]]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_small_products_computed_at_once(host, monkeypatch, dtype):
    """``x @ y`` and ``dot`` of small concrete operands: computed when asked for (no
    lazy tree, no kernel); a 0-d result holds its value without a buffer."""
    rng = np.random.default_rng(3)
    an, vn, wn = (rng.random(s).astype(dtype) for s in ((4, 4), 6, 6))
    ref = _products(np, an, vn, wn)

    def make():
        a, v, w = fl.asarray(an), fl.asarray(vn), fl.asarray(wn)
        fl.reset_stats()
        out = _products(fl, a, v, w)
        return out, fl.stats()

    got, s = make()
    assert s["host_operations"] == len(ref) and s["kernels_launched"] == 0
    assert type(got[0]._node) is Scalar and got[0].is_lazy
    assert all(not g.is_lazy for g in got[2:5])
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    kern, s_off = make()
    assert s_off["host_operations"] == 0
    for g, k, r in zip(got, kern, ref):
        g, k = g.get(), k.get()
        assert g.dtype == r.dtype == k.dtype and g.shape == r.shape == k.shape
        np.testing.assert_allclose(g, r, rtol=1e-5)
        np.testing.assert_allclose(g, k, rtol=1e-5)


def test_product_values_in_later_kernels_and_after_writes(host, monkeypatch):
    """The value is the operands' at the time of the product (what the lazy one would
    compute: it is evaluated before its inputs are written); a kernel reading it later
    (host path off) takes it as an argument."""
    vn = np.arange(1.0, 7.0)
    v = fl.asarray(vn)
    d = v[:3] @ v[3:]                 # 1*4 + 2*5 + 3*6 = 32
    v[0] = 100.0                      # written after: d keeps its value
    e = fl.dot(v[:2], v[:2])          # 100*100 + 2*2
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    fl.reset_stats()
    out = (v * d + e).get()
    assert fl.stats()["kernels_launched"] == 1
    vn[0] = 100.0
    np.testing.assert_array_equal(out, vn * 32.0 + 10004.0)
    assert float(d) == 32.0


def test_statements_with_products_and_lazy_operands(host, monkeypatch):
    """Loops of statements reading products (trisolv, spmv's ``vals @ x[cols]`` with a
    gathered operand) match numpy and the kernels; what is not taken (integers, mixed
    dtypes) goes the general way."""
    rng = np.random.default_rng(5)
    ln = np.tril(rng.random((8, 8))) + np.eye(8) * 4
    bn = rng.random(8)
    cols, vals = np.array([0, 3, 5, 7, 2]), rng.random(5)

    def loop(L, b, x, xi, fi, v, c):
        for i in range(8):
            x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
        return x, v @ x[c], xi @ xi, fi @ x[:3]

    def make(m):
        to = np.asarray if m is np else fl.asarray
        out = loop(to(ln), to(bn), to(np.zeros(8)), to(np.arange(4)),
                   to(np.ones(3, np.float32)), to(vals), to(cols))
        return [np.asarray(o if m is np else o.get()) for o in out]

    fl.reset_stats()
    on = make(fl)
    # (8 products, the gathered one, and each row's 0-d subtraction and division; the
    # mixed-dtype product's elementwise step, of a small view, and its sum: host_eager)
    assert fl.stats()["kernels_launched"] == 0 and fl.stats()["host_operations"] == 9 + 16 + 2
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    off = make(fl)
    for g, k, r in zip(on, off, make(np)):
        assert g.dtype == k.dtype == r.dtype
        np.testing.assert_allclose(g, r, rtol=1e-12)
        np.testing.assert_allclose(g, k, rtol=1e-12)


def _scalar_loop(m, t, s, f):
    """nussinov-, crc16- and durbin-like statements on 0-d values."""
    for i in range(3, -1, -1):
        for j in range(i + 1, 5):
            t[i, j] = max(t[i, j], t[i + 1, j - 1] + (1 if s[i] + s[j] == 3 else 0))
            for k in range(i + 1, j):
                t[i, j] = max(t[i, j], t[i, k] + t[k + 1, j])
    crc = 0xFFFF
    for b in s:
        cur = 0xFF & b
        for _ in range(4):
            crc = (crc >> 1) ^ 0x8408 if (crc & 1) ^ (cur & 1) else crc >> 1
            cur >>= 1
    alpha, beta = -f[0], 1.0
    for k in range(1, 4):
        beta *= 1.0 - alpha * alpha
        alpha = -(f[k] + f[k - 1] * 0.5) / beta
        f[k] = alpha
    return t, crc, f, alpha * 2


def test_0d_operations_computed_at_once(host, monkeypatch):
    """Operators on 0-d operands (elements, values made here, Python scalars) on the
    CPU device give arrays holding their value (no node, no evaluation); in-place
    operators on such a value, bool/int/float of it and assigning it need no buffer;
    results and dtypes are numpy's and the kernels'."""
    tn = np.arange(25, dtype=np.int32).reshape(5, 5) % 7
    sn = np.array([1, 2, 0, 3, 2], dtype=np.int32)
    fn = np.array([0.5, -0.25, 0.125, 2.0], dtype=np.float32)

    def make():
        t, s, f = fl.asarray(tn.copy()), fl.asarray(sn), fl.asarray(fn.copy())
        fl.reset_stats()
        t, crc, f, a = _scalar_loop(fl, t, s, f)
        st = fl.stats()
        return [t.get(), np.asarray(crc), f.get(), a.get()], st

    on, st = make()
    assert st["kernels_launched"] == 0 and st["host_operations"] > 100
    # (at most the statements' writes, 20 + 3, and a.get(): no evaluation per operation)
    assert st["host_evaluations"] <= 24
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    off, st_off = make()
    assert st_off["host_operations"] == 0 and st_off["kernels_launched"] > 50
    ref = _scalar_loop(np, tn.copy(), sn, fn.copy())
    for g, k, r in zip(on, off, [np.asarray(x) for x in ref]):
        assert g.dtype == k.dtype == r.dtype
        np.testing.assert_array_equal(g, r)
        np.testing.assert_array_equal(g, k)


def test_0d_values_errors_and_kernels(host, monkeypatch):
    """Errors stay numpy's (an int out of range, a cast refused in place); a value made
    here reads the element when made, and a kernel reading it later sees that value."""
    a = fl.asarray(np.array([3, 5, 7], dtype=np.int8))
    with pytest.raises(OverflowError):
        a[0] + 300
    v = a[1] * 2
    with pytest.raises(TypeError, match="same_kind"):
        v /= 2
    assert v.dtype == np.int8 and int(v) == 10
    w = a[2] - a[0]                    # 4, read now
    a[2] = 0
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    fl.reset_stats()
    np.testing.assert_array_equal((a + w).get(), np.array([7, 9, 4], dtype=np.int8))
    assert fl.stats()["kernels_launched"] == 1


def test_small_mask_selections_and_writes(host, monkeypatch):
    """``x[m]`` and ``x[m] = v`` with a boolean mask of x's shape (nbody's ``inv_r3[inv_r3
    > 0] = inv_r3[inv_r3 > 0] ** (-1.5)``): numpy's, without a compaction kernel; a
    kept mask reading x keeps its values; a value of another length raises as before."""
    rng = np.random.default_rng(7)
    xn = rng.random((5, 5)) - 0.5

    def run(x):
        x[x > 0] = x[x > 0] ** (-1.5)
        r = x * 2 + 1                      # lazy: x[m] = 0.0 below is not a plain view
        r[r < 0.5] = 0.0
        keep = x < 0                       # kept: read before the write below
        x[keep] = x[keep] * 3
        return [x, r, keep, x[x < 0.1], x[x > 100]]

    def make():
        fl.reset_stats()
        out = [o.get() for o in run(fl.asarray(xn.copy()))]
        return out, fl.stats()

    on, st = make()
    assert st["scans"] == 0 and st["kernels_launched"] == 0
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    off, st_off = make()
    assert st_off["scans"] > 0
    for g, k, r in zip(on, off, run(xn.copy())):
        assert g.dtype == k.dtype == r.dtype and g.shape == r.shape == k.shape
        np.testing.assert_allclose(g, r, rtol=1e-12)
        np.testing.assert_allclose(g, k, rtol=1e-12)
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 1 << 14)
    x = fl.asarray(xn.copy())
    with pytest.raises(ValueError):
        x[x > 0] = fl.asarray(np.ones(30))


def test_0d_values_held_here_need_no_device_queue(host, monkeypatch):
    """crc16's bit tests on values made here (``cur & 1``, ``1 ^ c``, ``cur >>= 1``)
    read no buffer: they take neither the device's runtime nor its lock, and numpy's
    error state is switched only for operators that may set a flag (an int8 sum's
    overflow wraps, as numpy's and the kernels')."""
    from fuseloop import host_ops

    data = fl.asarray(np.array([0xA7, 0x3C], dtype=np.uint8))
    big = fl.asarray(np.array([120], dtype=np.int8))
    cur, b8 = 0xFF & data[0], big[0] + 0
    monkeypatch.setattr(host_ops, "_runtime", lambda device: pytest.fail("the runtime"))
    crc, ref, ref_cur = 0xFFFF, 0xFFFF, np.uint8(0xA7)
    for _ in range(8):
        if (crc & 1) ^ (cur & 1):
            crc = (crc >> 1) ^ 0x8408
        else:
            crc >>= 1
        cur >>= 1
        if (ref & 1) ^ (ref_cur & 1):
            ref = (ref >> 1) ^ 0x8408
        else:
            ref >>= 1
        ref_cur >>= 1
    assert crc == ref and int(cur) == int(ref_cur) and cur.dtype == np.uint8
    wrapped = b8 + b8
    assert wrapped.dtype == np.int8 and int(wrapped) == -16
    assert type(wrapped._node) is Scalar
    # (the truth of a held value is read from it, not through a Python scalar first)
    monkeypatch.setattr(fl.Array, "_scalar", lambda self: pytest.fail("_scalar"))
    assert bool(cur | 1) and not bool(cur & 0) and bool(data[0] * 1.0 != 0.0)


def _with_python_scalars(m, v8, i32, f32):
    """0-d values made here (a Scalar node) with Python scalars on either side: their
    loops convert one side or both (numpy's weak scalars); zeros and NaN too."""
    c = 0xFF & v8[1]                      # uint8, held here
    x = i32[2] * 3                        # int32, held here
    y = f32[0] + 0.5                      # float32, held here
    return [c & 1, 1 ^ (c & 1), c >> 3, x * 1.5, 2.5 - x, x // 0,
            y * 0, y + float("nan"), 0.0 - y, y / 4, x % 7, -1 - x, (c << 2) | 1]


def test_0d_values_with_python_scalars(host, monkeypatch):
    """An operator on a value held here and a Python int or float: numpy's scalars'
    value and dtype (and the kernels'), a Python scalar out of the dtype's range is
    numpy's OverflowError; no buffer, no kernel."""
    v8n = np.array([3, 0xB7, 9], dtype=np.uint8)
    i32n = np.array([4, -6, 11], dtype=np.int32)
    f32n = np.array([1.25, -2.0], dtype=np.float32)
    with np.errstate(all="ignore"):
        ref = _with_python_scalars(np, v8n, i32n, f32n)

    def make():
        v8, i32, f32 = fl.asarray(v8n), fl.asarray(i32n), fl.asarray(f32n)
        fl.reset_stats()
        out = _with_python_scalars(fl, v8, i32, f32)
        return out, fl.stats()

    on, st = make()
    assert st["kernels_launched"] == 0
    assert all(type(o._node) is Scalar for o in on)
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    off, st_off = make()
    assert st_off["host_operations"] == 0
    for g, k, r in zip(on, off, ref):
        g, k, r = g.get(), k.get(), np.asarray(r)
        assert g.dtype == k.dtype == r.dtype, (g, k, r)
        np.testing.assert_array_equal(g, r)
        np.testing.assert_array_equal(g, k)
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 4096)
    held = 0xFF & fl.asarray(v8n)[1]
    assert type(held._node) is Scalar
    with pytest.raises(OverflowError):
        held + 300
    with pytest.raises(OverflowError):
        -1 & held


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_vector_products_of_views_are_numpys(host, monkeypatch, dtype):
    """``x @ y`` and ``dot`` of two small 1-D views (a loop's ``L[i, :i] @ x[:i]``,
    reversed and strided too): numpy's value exactly, computed now, one operation
    each; the kernels' within rounding; lengths that disagree are numpy's error."""
    rng = np.random.default_rng(11)
    an = rng.standard_normal((9, 40)).astype(dtype)
    vn = rng.standard_normal(80).astype(dtype)
    if an.dtype.kind == "c":
        an = an + 1j * an[::-1]
        vn = vn * (0.5 - 2j)

    def prods(m, a, v):
        return [a[3, :17] @ v[:17], m.dot(a[2, ::-3], v[1:28:2]), a[:8, 5] @ v[::10],
                m.dot(v[40:], a[4]), a[0, 1:2] @ v[7:8]]

    ref = prods(np, an, vn)
    a, v = fl.asarray(an), fl.asarray(vn)
    fl.reset_stats()
    got = prods(fl, a, v)
    s = fl.stats()
    assert s["kernels_launched"] == 0 and s["host_operations"] == len(ref)
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    kern = prods(fl, fl.asarray(an), fl.asarray(vn))
    for g, k, r in zip(got, kern, ref):
        g, k = g.get(), k.get()
        assert g.dtype == k.dtype == np.asarray(r).dtype and g.shape == ()
        assert g == r
        np.testing.assert_allclose(g, k, rtol=2e-5 if an.dtype.itemsize <= 8 else 1e-12)
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 4096)
    with pytest.raises(ValueError):
        a[0, :5] @ v[:6]


def _unary_of_values(m, f32, i16, f64):
    s = f32[1] * 2                         # float32, held here
    k = i16[0] + i16[2]                    # int16, held here
    d = f64[0] - 5.0                       # float64, held here (negative)
    return [m.sqrt(s), -s, abs(d), m.exp(d), ~k, -k, m.sqrt(d), m.floor(s), m.sqrt(f32[0]),
            m.sin(f64[1]), m.logical_not(k), m.negative(d)]


def test_unary_functions_of_values_held_here(host, monkeypatch):
    """A ufunc of one 0-d value made here or of an element (cholesky's ``sqrt(A[i, i])``):
    numpy's value and dtype, the kernels' (a NaN of a negative's root too), computed
    at once without a buffer or a kernel."""
    f32n = np.array([2.25, 0.5], np.float32)
    i16n = np.array([300, -7, 12], np.int16)
    f64n = np.array([1.5, 0.75])
    with np.errstate(invalid="ignore"):
        ref = _unary_of_values(np, f32n, i16n, f64n)

    def make():
        f32, i16, f64 = fl.asarray(f32n), fl.asarray(i16n), fl.asarray(f64n)
        fl.reset_stats()
        out = _unary_of_values(fl, f32, i16, f64)
        return out, fl.stats()

    on, st = make()
    assert st["kernels_launched"] == 0 and all(type(o._node) is Scalar for o in on)
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    off, st_off = make()
    assert st_off["host_operations"] == 0
    for g, k, r in zip(on, off, ref):
        g, k, r = g.get(), k.get(), np.asarray(r)
        assert g.dtype == k.dtype == r.dtype
        np.testing.assert_array_equal(g, r)
        np.testing.assert_allclose(g, k, rtol=1e-6)


class _NoSwitch:
    """numpy's error state as a context variable whose set fails the test."""

    def set(self, value):
        pytest.fail("numpy's error state switched")

    def reset(self, token):
        pytest.fail("numpy's error state switched")


def test_float64_values_by_python_floats(host, monkeypatch):
    """float64 ``+ - * /`` of held values, elements and Python scalars: Python's float
    operators, so numpy's error state is not switched; each value is numpy's to the
    bit (infinities, NaN, signed zeros, subnormals), with numpy's dtype, and a
    division by zero is left to numpy (inf, nan)."""
    from fuseloop import host_eager, host_writes

    vals = np.array([1.5, -0.0, 1e308, 5e-324, np.inf, np.nan, -3.25, 0.1], np.float64)
    v = fl.asarray(vals)
    held = [v[k] * 1.0 for k in range(len(vals))]
    elems = [v[k] for k in range(len(vals))] + [v[k] for k in range(len(vals))]
    with monkeypatch.context() as m:
        for mod in (host_path, host_eager, host_writes):
            m.setattr(mod, "_errors", _NoSwitch())
        for f in (operator.add, operator.sub, operator.mul, operator.truediv):
            for i, j in np.ndindex(len(vals), len(vals)):
                if f is operator.truediv and vals[j] == 0.0:
                    continue
                with np.errstate(all="ignore"):
                    ref = f(vals[i], vals[j])
                for got in (f(held[i], held[j]), f(elems[i], elems[j]),
                            f(held[i], float(vals[j])), f(float(vals[i]), held[j])):
                    assert got.dtype == np.float64 and type(got._node) is Scalar
                    assert np.float64(got.get()).tobytes() == ref.tobytes(), (f, i, j)
    with np.errstate(all="ignore"):
        assert float(held[0] / held[1]) == -np.inf and np.isnan(float(held[1] / 0.0))
