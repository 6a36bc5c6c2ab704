"""Small views of concrete arrays computed at once by numpy on the CPU device
(fuseloop.host_eager): results and dtypes are the kernels' and numpy's, loops of such
statements launch nothing, and kernels and numpy see each other's writes.

As in tests/test_host_path.py the host path is on here (the session turns it off).
"""

from __future__ import annotations

import operator

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import host_eager, host_path


def _cases(m, a8, f32, i32, f64):
    """Operations on small views, with numpy's dtype rules at their edges."""
    return [
        a8[1:4] + a8[0:3],                  # int8 overflow wraps
        f32[1:5] * 2.5,                     # a Python float keeps float32
        f32[0:3] * np.float64(1.5),         # a numpy float64 scalar promotes (NEP 50)
        np.float64(1.5) * f32[0:3],         # ... on the left: numpy's ufunc hands it over
        np.int8(3) - a8[1:4], np.float32(2) * f64[2:4],
        i32[0:4] // i32[4:8],               # integer division by zero: 0
        i32[0:4] % i32[4:8],
        f64[0:4] / f64[4:8],                # float division by zero: inf, nan
        f64[0:4] + f64[8],                  # a NaN element propagates
        i32[0:4] + f32[0:4],                # int32 with float32: float64
        f32[2:6] < f32[1:5],                # a comparison's bool
        -i32[2:5], abs(f32[0:4]), m.sqrt(f64[1:4]), m.minimum(f32[0:3], f32[3:6]),
        f32[1, ] * f32[2:6] - 1,            # a 0-d view with a 1-d one
        3 - i32[::-2],                      # reversed, and a reflected operator
        f32[1:7] ** -1.5, f64[0:4] ** 3,    # powers by products, as the operator's
        f64[i32[4:8]],                      # a gather by a small index: a copy
        m.dot(f64[0:3], m.abs(f64)[0:3]),   # a small lazy operand, computed now
    ]


def _inputs():
    return (np.array([120, 7, 100, -128, 5], dtype=np.int8),
            np.linspace(-2, 3, 9, dtype=np.float32),
            np.array([7, -7, 9, 0, 2, 0, 3, 0], dtype=np.int32),
            np.array([1.0, -1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 4.0, np.nan]))


def test_results_and_dtypes_are_the_kernels(host, monkeypatch):
    ins = _inputs()
    ref = _cases(np, *[x.copy() for x in ins])

    def run():
        fl.reset_stats()
        out = _cases(fl, *[fl.asarray(x.copy()) for x in ins])
        return out, [o.get() for o in out], fl.stats()

    eager, on, s_on = run()
    assert s_on["kernels_launched"] == 0
    assert all(type(e) is host_eager.HostArray for e in eager[:-1])
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    kern, off, s_off = run()
    assert s_off["kernels_launched"] > 0 and not any(type(k) is host_eager.HostArray for k in kern)
    for k, (a, b, r) in enumerate(zip(on, off, ref)):
        assert a.dtype == b.dtype == r.dtype, k
        # (numpy's pow rounds apart from the products fuseloop computes powers by)
        np.testing.assert_allclose(a, r, rtol=1e-6, err_msg=str(k))
        np.testing.assert_array_equal(a, b, err_msg=str(k))


def _loops(m, path, A, x, L, b):
    for k in range(3):  # floyd_warshall's statement
        for i in range(path.shape[0]):
            path[i, :] = m.minimum(path[i, :], path[i, k] + path[k, :])
    for i in range(1, A.shape[0]):  # cholesky's
        for j in range(i):
            A[i, j] -= m.dot(A[i, :j], A[j, :j])
            A[i, j] /= A[j, j]
        A[i, i] -= m.dot(A[i, :i], A[i, :i])
        A[i, i] = m.sqrt(A[i, i])
    for i in range(x.shape[0]):  # trisolv's
        x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
    y = x[:4] * 0.5  # a result in memory of its own: its view gives it a buffer
    y[1:3] += m.flip(x[2:4])
    return path, A, x, y


def test_loops_of_small_statements_launch_nothing(host):
    rng = np.random.default_rng(7)
    p0 = rng.random((6, 6))
    s0 = rng.random((6, 6))
    a0 = s0 @ s0.T + 6 * np.eye(6)
    l0 = np.tril(rng.random((6, 6))) + 4 * np.eye(6)
    b0 = rng.random(6)
    ref = _loops(np, p0.copy(), a0.copy(), np.zeros(6), l0, b0)
    made = host_eager.counts["materialised"]
    fl.reset_stats()
    got = _loops(fl, *[fl.asarray(v.copy()) for v in (p0, a0, np.zeros(6), l0, b0)])
    assert fl.stats()["kernels_launched"] == 0 and host_eager.counts["materialised"] == made + 1
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g.get(), r, rtol=1e-13)


def test_kernels_and_numpy_see_each_others_writes(host, monkeypatch):
    n = 1 << 16  # above the host path's limit: kernels
    big = fl.asarray(np.arange(n, dtype=np.float64))
    doubled = (big * 2).eval()          # a kernel, maybe not run yet
    assert float(doubled[3]) == 6.0     # numpy reads after it has run
    row = doubled[10:14]
    assert type(row) is host_eager.HostArray
    row[1] = -5.0                       # numpy writes ...
    doubled[12] += 1.0
    assert float((doubled * 1).sum()) == (n - 1) * n - 22 - 5 + 1  # ... a kernel reads
    doubled[:4] = big[:4] + 100.0       # a kernel writes (large target) ...
    assert float(doubled[2]) == 102.0   # ... numpy reads
    r = fl.asarray(np.arange(5.0))[1:4] * 2.0  # a result in memory of its own
    assert type(r) is host_eager.HostArray
    made = host_eager.counts["materialised"]
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    fl.reset_stats()
    np.testing.assert_array_equal((r + 1).get(), [3.0, 5.0, 7.0])  # a kernel reads it
    assert fl.stats()["kernels_launched"] == 1 and host_eager.counts["materialised"] == made + 1


def test_an_element_is_read_after_the_kernels_writing_it(host):
    """A view of an element taken before a small (deferred) launch writes its array
    reads the launch's value in operators, unary ones too, and writes."""
    src = fl.asarray(np.arange(20000.0))  # above the host path's limit: a kernel

    def element():
        a = fl.asarray(np.zeros(20000))
        e = a[3]
        a[:] = src * 2 + 1                  # a launch, maybe not yet enqueued
        assert type(e) is host_eager.HostArray
        return e

    assert float(element() + 0.5) == 7.5
    assert float(0.5 * element()) == 3.5
    assert float(-element()) == -7.0
    assert float(abs(element())) == 7.0
    assert bool(element() > 6.5)
    target = fl.asarray(np.zeros(4))
    target[1] = element()
    target[2] += element()
    np.testing.assert_array_equal(target.get(), [0.0, 7.0, 7.0, 0.0])


def test_views_aliasing_and_evaluation_order(host):
    x = fl.asarray(np.arange(8.0))
    lazy = x * 2                        # lazy (a whole array), reads x[1]
    x[1] = 100.0                        # computed first: it keeps the old values
    np.testing.assert_array_equal(lazy.get(), np.arange(8.0) * 2)
    v = x[2:5]
    v[0] = 7.0                          # written through the view
    v += 1.0
    x[4:7] = x[3:6]                     # overlapping copy, as numpy
    ref = np.arange(8.0)
    ref[1] = 100.0
    ref[2] = 7.0
    ref[2:5] += 1.0
    ref[4:7] = ref[3:6].copy()
    np.testing.assert_array_equal(x.get(), ref)
    r = x[0:4] + 0.0
    w = r[1:3]                          # a view of a result: it shares its memory
    w[0] = -1.0
    assert r.get()[1] == -1.0 and float(w[0]) == -1.0
    kept = x[0:3] * 1.0                 # a value computed now keeps it after writes
    x[0:3] = 0.0
    np.testing.assert_array_equal(kept.get(), ref[0:3])
    ref[0:3] = 0.0
    s = x[2:8]
    s.shape = (2, 3)                    # numpy's in-place reshape: its view follows
    np.testing.assert_array_equal((s + 1).get(), ref[2:8].reshape(2, 3) + 1)
    np.testing.assert_array_equal((s.T - s.T[0]).get(), (ref[2:8].reshape(2, 3).T
                                                          - ref[2:8].reshape(2, 3).T[0]))


def test_errors_stay_numpys(host):
    i = fl.asarray(np.array([1, 2, 3, 4], dtype=np.int8))
    with pytest.raises(OverflowError):
        i[1:3] + 1000
    with pytest.raises(TypeError, match="same_kind"):
        v = i[1:3]
        v /= 2                          # float64 result into int8
    with pytest.raises(IndexError):
        i[1:3][5]
    np.testing.assert_array_equal(i.get(), [1, 2, 3, 4])


def test_masks_of_results_computed_here(host):
    """nbody's ``r[r > 0] = r[r > 0] ** -1.5`` on a result computed at once: numpy's
    selection and write (fuseloop.host_masks), no compaction kernel."""
    pos = np.random.default_rng(2).random((6, 3))
    ref = (pos[:, 0:1].T - pos[:, 0:1]) ** 2
    ref[ref > 0] = ref[ref > 0] ** -1.5
    p = fl.asarray(pos)
    fl.reset_stats()
    r = (p[:, 0:1].T - p[:, 0:1]) ** 2
    r[r > 0] = r[r > 0] ** -1.5
    assert fl.stats()["kernels_launched"] == 0 and fl.stats()["scans"] == 0
    np.testing.assert_allclose(r.get(), ref, rtol=1e-14)


def test_traced_functions_take_small_views(host):
    """``@fl.fuse`` takes a small view (and a result computed at once) as the array it is."""
    @fl.fuse
    def step(a, b):
        return a * 2 + b

    x = fl.asarray(np.arange(10.0))
    np.testing.assert_array_equal(step(x[1:4], x[2:5]).get(), [4.0, 7.0, 10.0])
    np.testing.assert_array_equal(step(x[1:4] * 1.0, x[2:5]).get(), [4.0, 7.0, 10.0])


def test_no_numpy_warning_with_or_without_the_error_state_switch(host):
    # (numpy's error state is switched off only for loops that may set a flag: a
    # float overflow warns in numpy, never in the kernels; min/max and int arrays'
    # wrap-around run without the switch and set none)
    import warnings

    f = fl.asarray(np.array([1e308, 2.0, np.nan, 0.0]))
    i = fl.asarray(np.array([2**62, 3, -2**63, 1], dtype=np.int64))
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        got = [f[0:2] * f[0:2], f[0:3] / f[3], fl.minimum(f[0:3], f[1:4]),
               f[1:3] < f[2:4], i[0:2] + i[0:2], i[0:2] * i[1:3], i[0:2] // i[3:4] * 0,
               i[0] * i[0]]
        v = i[0:2]
        v *= i[1:3]
        e = f[2]
        e += 1.0
    assert all(type(g) is host_eager.HostArray for g in got[:-1])
    with np.errstate(all="ignore"):
        fn, inn = f.get(), np.array([2**62, 3, -2**63, 1], dtype=np.int64)
        ref = [fn[0:2] * fn[0:2], fn[0:3] / fn[3], np.minimum(fn[0:3], fn[1:4]),
               fn[1:3] < fn[2:4], inn[0:2] + inn[0:2], inn[0:2] * inn[1:3],
               inn[0:2] // inn[3:4] * 0, inn[0:1] * inn[0:1]]
        inn[0:2] *= inn[1:3]
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(np.reshape(g.get(), np.shape(r)), r)
        assert g.dtype == r.dtype
    np.testing.assert_array_equal(i.get(), inn)


def test_large_products_of_concrete_arrays_by_numpy(host, monkeypatch):
    # (above the host path's limit a product of concrete operands is numpy's matmul
    # into a new buffer: no kernel; a lazy operand is computed first)
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 1 << 10)
    rng = np.random.default_rng(3)
    a0, b0 = rng.random((70, 64)), rng.random((64, 66))
    for dt in (np.float64, np.float32):
        a, b = fl.asarray(a0.astype(dt)), fl.asarray(b0.astype(dt))
        shifted = (b * 2).eval()            # a kernel writes an operand ...
        fl.reset_stats()
        got = [a @ shifted, fl.dot(a[3], b), a[1:, :] @ b[::-1, 1:], fl.matmul(a, b[:, 7])]
        vals = [g.get() for g in got]
        assert fl.stats()["kernels_launched"] == 0  # ... numpy reads it
        lazy = (2.0 * a) @ b                # the lazy operand: one kernel (or numpy's)
        assert not lazy.is_lazy and (2.0 * a @ b[:, 0]).is_lazy  # (by a vector: fused)
        s = (got[0] + 1).sum()              # a kernel reads a product
        an, bn = a0.astype(dt), b0.astype(dt)
        ref = [an @ (bn * 2), np.dot(an[3], bn), an[1:, :] @ bn[::-1, 1:], an @ bn[:, 7],
               (2.0 * an) @ bn]
        monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
        kern = (fl.asarray(an) @ fl.asarray(bn * 2)).get()
        monkeypatch.setattr(host_path, "HOST_MAX_WORK", 1 << 10)
        tol = 1e-5 if dt is np.float32 else 1e-12
        for g, v, r in zip([*got, lazy], [*vals, lazy.get()], ref):
            assert g.dtype == r.dtype and g.shape == r.shape
            np.testing.assert_allclose(v, r, rtol=tol)
        np.testing.assert_allclose(kern, ref[0], rtol=tol)
        assert float(s) == pytest.approx(float((ref[0] + 1).sum()), rel=tol)
        # without BLAS products, or with a side below BLAS_MIN_SIDE: fuseloop's kernel
        from fuseloop import host_products

        monkeypatch.setattr(host_products, "BLAS_PRODUCTS", False)
        fl.reset_stats()
        np.testing.assert_allclose((a @ b).get(), an @ bn, rtol=tol)
        assert fl.stats()["kernels_launched"] == 1
        monkeypatch.setattr(host_products, "BLAS_PRODUCTS", True)
        monkeypatch.setattr(host_products, "BLAS_SKINNY_MAX_WORK", 40 * 64 * 66 - 1)
        fl.reset_stats()
        np.testing.assert_allclose((a[:40] @ b).get(), an[:40] @ bn, rtol=tol)
        assert fl.stats()["kernels_launched"] == 1


def test_small_skinny_products_by_numpy(host, monkeypatch):
    """A side below BLAS_MIN_SIDE with little work (BLAS_SKINNY_MAX_WORK): a launch
    would cost more than numpy's product (more work: the kernel, tested above)."""
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 1 << 10)
    rng = np.random.default_rng(4)
    xn, bn = rng.random((8, 96)), rng.random((96, 80))
    x, b = fl.asarray(xn), fl.asarray(bn)
    fl.reset_stats()
    np.testing.assert_allclose((x @ b).get(), xn @ bn, rtol=1e-12)
    assert fl.stats()["kernels_launched"] == 0


def _reductions(m, i8, b, f32, f64, i32):
    return [m.sum(i8[0:4]), m.sum(b[1:5]), m.prod(i32[0:3], axis=0), m.max(f64[0:5]),
            m.min(f32[1:6]), m.mean(i32[0:5]), f32[0:6].reshape(2, 3).sum(axis=1),
            m.sum(f64[0:4] * f64[1:5], keepdims=True), m.any(b[0:3]), m.max(i8[1:5])]


def test_reductions_and_windows_computed_here(host, monkeypatch):
    ins = (np.array([120, 100, 7, -128, 5], dtype=np.int8), np.array([1, 0, 1, 1, 0, 1], bool),
           np.linspace(-2, 3, 9, dtype=np.float32),
           np.array([1.0, np.nan, 0.5, 2.0, -3.0, 4.0]),
           np.array([70000, 70000, 3, 2, 9], np.int32))
    ref = _reductions(np, *ins)

    def run():
        fl.reset_stats()
        out = _reductions(fl, *[fl.asarray(x.copy()) for x in ins])
        return [o.get() for o in out], fl.stats()["kernels_launched"]

    on, k_on = run()
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    off, k_off = run()
    assert k_on == 0 < k_off
    for k, (a, b, r) in enumerate(zip(on, off, ref)):
        assert a.dtype == b.dtype == np.asarray(r).dtype, k
        np.testing.assert_allclose(a, r, rtol=1e-6, err_msg=str(k))
        np.testing.assert_allclose(a, b, rtol=1e-6, err_msg=str(k))
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 4096)
    # a convolution's statement: a window of 4 axes times the weights (4608 elements,
    # above the host path's limit) summed, on a lazy input computed at its second view
    rng = np.random.default_rng(5)
    x0, w0 = rng.random((8, 6, 6, 8), np.float32), rng.random((3, 3, 8, 8), np.float32)
    x, w = fl.asarray(x0), fl.asarray(w0)
    act = fl.maximum(x - 0.5, 0)                # lazy
    out = fl.zeros((8, 4, 4, 8), dtype=np.float32)
    fl.synchronize()
    cells = [(i, j) for i in range(4) for j in range(4)]
    for n, (i, j) in enumerate(cells):
        if n == 2:
            assert act._storage is not None     # computed once, at its second view
            fl.reset_stats()
        out[:, i, j, :] = fl.sum(act[:, i:i + 3, j:j + 3, :, None] * w[None], axis=(1, 2, 3))
    assert fl.stats()["kernels_launched"] == 0
    a0 = np.maximum(x0 - 0.5, 0)
    want = np.zeros((8, 4, 4, 8), np.float32)
    for i in range(4):
        for j in range(4):
            want[:, i, j, :] = np.sum(a0[:, i:i + 3, j:j + 3, :, None] * w0[None], axis=(1, 2, 3))
    np.testing.assert_allclose(out.get(), want, rtol=1e-5)


def _complex_cases(m, G, H, D, S):
    out = []
    for k in range(2):
        g = G[k, 1] @ H[k]                  # complex views' product, 0-d real scaling
        h = H[1 - k] * D[k, 0] - G[0, k]
        S[k] += g @ h
        out += [g, h, G[k, 0, 1] * G[k, 1, 0], H[k] / G[k, 0]]  # (the division: kernels)
        out += [abs(G[k, 0, 1]), abs(H[k])]  # (hypot, numpy's and the kernels')
    return [*out, S]


def test_complex_views_products_and_updates(host, monkeypatch):
    rng = np.random.default_rng(11)
    ins = (rng.random((2, 2, 3, 3)) + 1j * rng.random((2, 2, 3, 3)),
           (rng.random((2, 3, 3)) + 1j * rng.random((2, 3, 3))).astype(np.complex64).astype(
               np.complex128), rng.random((2, 2)), np.zeros((2, 3, 3), np.complex128))
    ref = _complex_cases(np, *[x.copy() for x in ins])

    def run():
        fl.reset_stats()
        out = _complex_cases(fl, *[fl.asarray(x.copy()) for x in ins])
        return [o.get() for o in out], fl.stats()

    on, s_on = run()
    assert s_on["host_operations"] == 14 and s_on["host_evaluations"] >= 2  # (S[k] +=)
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    off, _ = run()
    for k, (a, b, r) in enumerate(zip(on, off, ref)):
        assert a.dtype == b.dtype == r.dtype, k
        np.testing.assert_allclose(a, r, rtol=1e-13, err_msg=str(k))
        np.testing.assert_allclose(a, b, rtol=1e-13, err_msg=str(k))


def test_matrix_elements_rows_and_columns(host):
    an = np.arange(12.0).reshape(3, 4)
    a = fl.asarray(an)
    a[0, 0]  # (the matrix's view made once: the written-out steps from here on)
    for key in [(1, 2), (-1, -1), (2, -4), (0, slice(1, 3)), (slice(None), -1),
                (slice(2, 0, -1), 3), (-3, slice(None, None, 2))]:
        got = a[key]
        assert type(got) is host_eager.HostArray and got.shape == an[key].shape, key
        np.testing.assert_array_equal(got.get(), an[key])
    for key in [(3, 0), (0, 4), (-4, 1), (1, -5), (3, slice(None)), (slice(None), 4)]:
        with pytest.raises(IndexError):
            a[key]
    a[2, -1] = 7.5
    an[2, -1] = 7.5
    np.testing.assert_array_equal(a.get(), an)


def test_a_stencil_on_thousands_of_elements_is_computed_here(host):
    """jacobi_1d's statement on 3200 elements: its views, operations and write are
    numpy's at once (no host-path evaluation of a lazy expression), as numpy computes
    them."""
    a0, b0 = np.linspace(0.0, 1.0, 3200), np.linspace(1.0, 2.0, 3200)
    a, b = fl.asarray(a0.copy()), fl.asarray(b0.copy())
    assert type(a[:-2]) is host_eager.HostArray
    fl.reset_stats()
    for _ in range(3):
        b[1:-1] = 0.33333 * (a[:-2] + a[1:-1] + a[2:])
        a[1:-1] = 0.33333 * (b[:-2] + b[1:-1] + b[2:])
        b0[1:-1] = 0.33333 * (a0[:-2] + a0[1:-1] + a0[2:])
        a0[1:-1] = 0.33333 * (b0[:-2] + b0[1:-1] + b0[2:])
    s = fl.stats()
    assert s["kernels_launched"] == 0 and s["host_operations"] == 18
    np.testing.assert_array_equal(a.get(), a0)
    np.testing.assert_array_equal(b.get(), b0)


def test_vector_elements_and_slices_as_indices(host):
    """A vector's element and slice views (spmv's ``A_col[A_row[i]:A_row[i + 1]]``,
    trisolv's ``x[i]``): numpy's values, an integer element as an index or a slice's
    bound, and numpy's errors for an element out of range, a zero step or a float
    element as an index."""
    rows_n = np.array([0, 2, 2, 5, 6], dtype=np.uint32)
    cols_n = np.array([4, 1, 0, 3, 2, 5], dtype=np.uint32)
    rows, cols, x = fl.asarray(rows_n), fl.asarray(cols_n), fl.asarray(np.arange(6.0))
    rows[0]  # (the vector's view made once: the written-out steps from here on)
    for i in range(4):
        got = cols[rows[i]:rows[i + 1]]
        assert type(got) is host_eager.HostArray  # (an empty one too: spmv's empty rows)
        np.testing.assert_array_equal(got.get(), cols_n[rows_n[i]:rows_n[i + 1]])
    assert [float(x[k]) for k in (0, -1, 5, -6)] == [0.0, 5.0, 5.0, 0.0]
    assert x[-1].shape == () and x[1:3].shape == (2,) and x[::-2].shape == (3,)
    x[-2] = 7.5
    x[0:2] = x[3:5]
    np.testing.assert_array_equal(x.get(), [3.0, 7.5, 2.0, 3.0, 7.5, 5.0])
    assert operator.index(rows[3]) == 5 and [0, 1, 2, 3][cols[1]:][0] == 1
    for bad in (6, -7):
        with pytest.raises(IndexError):
            x[bad]
        with pytest.raises(IndexError):
            x[bad] = 1.0
    with pytest.raises(ValueError):
        x[::0]
    with pytest.raises(TypeError):
        operator.index(x[1])


def test_empty_rows_of_a_sparse_product_are_computed_here(host, monkeypatch):
    """spmv's ``y[i] = A_val[a:b] @ x[A_col[a:b]]`` with empty rows (``a == b``): an
    empty view, its empty gather and their product (numpy's 0, the kernels' too) are
    computed here, with no node built; numpy's values, with the host path on or off."""
    rng = np.random.default_rng(7)
    row_n = np.array([0, 2, 2, 2, 5, 5, 6], dtype=np.int32)
    col_n = rng.integers(0, 9, 6).astype(np.int32)
    val_n, x_n = rng.random(6), rng.random(9)
    ref = np.array([val_n[row_n[i]:row_n[i + 1]] @ x_n[col_n[row_n[i]:row_n[i + 1]]]
                    for i in range(6)])

    def run():
        row, col, val, x = (fl.asarray(a) for a in (row_n, col_n, val_n, x_n))
        y = fl.empty(6, np.float64)
        row[0], col[0:1], val[0:1]  # (each vector's view made once)
        fl.reset_stats()
        for i in range(6):
            cols = col[row[i]:row[i + 1]]
            y[i] = val[row[i]:row[i + 1]] @ x[cols]
        return y.get(), fl.stats()

    on, stats = run()
    np.testing.assert_allclose(on, ref, rtol=1e-15)
    assert stats["kernels_launched"] == 0 and stats["host_operations"] >= 12
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    off, _ = run()
    np.testing.assert_allclose(off, ref, rtol=1e-15)


def test_copy_of_a_small_concrete_array_is_made_now(host):
    """channel_flow's ``pn = p.copy()``: numpy's copy into a buffer of its own, made
    at once (no lazy copy whose views build nodes); later writes to either are apart."""
    pn0 = np.arange(20.0).reshape(4, 5)
    p = fl.asarray(pn0.copy())
    fl.reset_stats()
    pn, col = p.copy(), p[:, 1].copy()
    assert not pn.is_lazy and type(pn) is fl.Array and type(pn[1:-1, 2:]) is host_eager.HostArray
    p[1:-1, 1:-1] = (pn[1:-1, 2:] + pn[1:-1, 0:-2]) * 0.5
    pn[0, 0] = -1.0
    ref = pn0.copy()
    ref[1:-1, 1:-1] = (pn0[1:-1, 2:] + pn0[1:-1, 0:-2]) * 0.5
    np.testing.assert_array_equal(p.get(), ref)
    np.testing.assert_array_equal(col.get(), pn0[:, 1])
    assert float(pn[0, 0]) == -1.0 and fl.stats()["kernels_launched"] == 0


def test_small_product_of_a_large_view_is_computed_here(host):
    """covariance's ``data[:, i] @ data[:, i:M] / (n - 1.0)``: a vector by a large
    concrete view has a small result, numpy's matmul held here, so the division that
    follows is computed at once too (it was a lazy node and a host evaluation)."""
    d0 = np.random.default_rng(4).random((100, 60))
    data, cov = fl.asarray(d0), fl.asarray(np.zeros((60, 60)))
    ref = np.zeros((60, 60))
    fl.reset_stats()
    for i in range(0, 60, 7):
        row = data[:, i] @ data[:, i:60] / 99.0
        assert not row.is_lazy
        cov[i:60, i] = cov[i, i:60] = row
        ref[i:60, i] = ref[i, i:60] = d0[:, i] @ d0[:, i:60] / 99.0
    np.testing.assert_array_equal(cov.get(), ref)
    assert fl.stats()["kernels_launched"] == 0


def test_an_element_assigned_itself_or_another(host):
    """nussinov's ``T[i, j] = max(T[i, j], T[i, k] + T[k + 1, j])``: the element itself
    (nothing to write) or another element's value, as numpy's."""
    t0 = (np.arange(36, dtype=np.int32).reshape(6, 6) * 7) % 11
    t, ref = fl.asarray(t0.copy()), t0.copy()
    for tab in (t, ref):
        for i in range(4, -1, -1):
            for j in range(i + 1, 6):
                for k in range(i + 1, j):
                    tab[i, j] = max(tab[i, j], tab[i, k] + tab[k + 1, j])
        tab[0, 1] = tab[0, 1]
        tab[1, -1] = tab[1, 5]
        tab[2, 0] = tab[2, 1]
        row = tab[3]
        row[2] = row[2] + 1
        tab[3, 2] = row[2]
    np.testing.assert_array_equal(t.get(), ref)


def test_negative_and_absolute_of_views(host, monkeypatch):
    """``-r[0]``, ``abs(x[1:3])`` (durbin): computed here by the operator's own steps
    (not the general apply), numpy's values and dtypes (int8's -128 wraps)."""
    from fuseloop import host_products

    a0 = np.array([-128, 5, -7, 0], dtype=np.int8)
    f0 = np.array([-1.5, 0.0, np.nan, 2.0], dtype=np.float32)
    a, f = fl.asarray(a0), fl.asarray(f0)
    from fuseloop import array

    monkeypatch.setattr(array, "_eager_apply", lambda *args: pytest.fail("apply"))
    monkeypatch.setattr(host_products, "apply", lambda *args: pytest.fail("apply"))
    got = [-a[0], abs(a[0]), -a[1:3], abs(a[0:2]), -f[2], abs(f[0:3])]
    with np.errstate(all="ignore"):
        ref = [-a0[0], abs(a0[0]), -a0[1:3], abs(a0[0:2]), -f0[2], abs(f0[0:3])]
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == np.shape(r)
        np.testing.assert_array_equal(g.get(), r)


def test_masks_of_complex_and_larger_arrays_move_here(host):
    """mandelbrot's ``N[I] = n; Z[I] = Z[I]**2 + C[I]``: complex elements, and arrays
    above the host path's limit, are selected and written by numpy once concrete (a lazy
    mask or value computed by a kernel first); numpy's results, no compaction scan."""
    n = host_path.HOST_MAX_WORK + 100
    x, y = np.meshgrid(np.linspace(-1.8, 0.4, n // 100), np.linspace(-1.1, 1.1, 100))
    c0 = (x + 1j * y).ravel()
    zr, nr = np.zeros_like(c0), np.zeros(c0.shape, np.int64)
    c = fl.asarray(c0)
    z, k = fl.zeros(c0.shape, dtype=np.complex128), fl.zeros(c0.shape, dtype=np.int64)
    fl.reset_stats()
    for it in range(4):
        m = abs(zr) < 2.0
        nr[m] = it
        zr[m] = zr[m] ** 2 + c0[m]
        i = fl.less(abs(z), 2.0)
        k[i] = it
        z[i] = z[i] ** 2 + c[i]
    nr[nr == 3] = 0
    k[k == 3] = 0
    assert fl.stats()["scans"] == 0
    np.testing.assert_array_equal(z.get(), zr)
    np.testing.assert_array_equal(k.get(), nr)
    assert z.dtype == np.complex128 and k.dtype == np.int64


def test_masks_select_lazy_arrays_after_deferred_writes(host):
    """mandelbrot2's ``np.add(Z, C, Z); I = abs(Z) > h; Z = Z[I]; Xi = Xi[I]``: a write
    still deferred, a lazy mask and a lazy array (an arange) are computed first; the
    selections are numpy's, no compaction scan."""
    n = host_path.HOST_MAX_WORK + 100
    c0 = np.linspace(-2.0, 0.5, n) + 0.3j
    zr, xr = np.zeros_like(c0), np.arange(n)
    c, z, xi = fl.asarray(c0), fl.zeros(n, dtype=np.complex128), fl.arange(n)
    fl.reset_stats()
    for _ in range(3):
        np.multiply(zr, zr, zr)
        np.add(zr, c0, zr)
        keep = ~(abs(zr) > 2.0)
        zr, xr, c0 = zr[keep], xr[keep], c0[keep]
        fl.multiply(z, z, z)
        fl.add(z, c, z)
        i = fl.logical_not(abs(z) > 2.0)
        z, xi, c = z[i], xi[i], c[i]
    assert fl.stats()["scans"] == 0
    np.testing.assert_array_equal(z.get(), zr)
    np.testing.assert_array_equal(xi.get(), xr)
    assert xi.dtype == xr.dtype


def test_masks_of_values_made_at_once_need_no_buffer(host):
    """``r[r > 0] = r[r > 0] ** -1.5`` on a value made at once (nbody's ``inv_r3``):
    numpy's selection and write on its own array, no buffer given to it, one write;
    an int mask write casts a Python float as numpy's assignment does."""
    pos = np.random.default_rng(3).random((6, 3))
    ref = (pos[:, 0:1].T - pos[:, 0:1]) ** 2
    ref[ref > 0] = ref[ref > 0] ** -1.5
    p = fl.asarray(pos)
    fl.reset_stats()
    r = (p[:, 0:1].T - p[:, 0:1]) ** 2
    r[r > 0] = r[r > 0] ** -1.5
    assert type(r) is host_eager.HostArray and r._buf is None
    assert fl.stats()["host_evaluations"] == 1 and fl.stats()["kernels_launched"] == 0
    np.testing.assert_allclose(r.get(), ref, rtol=1e-14)  # (x ** -1.5 by products: fuseloop's)
    k = fl.asarray(np.arange(8, dtype=np.int32))[0:8] * 3
    k[k > 9] = 2.7
    want = np.arange(8, dtype=np.int32) * 3
    want[want > 9] = 2.7
    assert k.dtype == np.int32
    np.testing.assert_array_equal(k.get(), want)


def test_hstack_of_values_made_at_once(host):
    """nbody's ``np.hstack((ax, ay, az))`` of small products made at once: numpy's
    copy, made now (later writes to the inputs do not show); mixed dtypes stay lazy
    with fuseloop's promotion."""
    rng = np.random.default_rng(4)
    m0, p0 = rng.random((5, 5)), rng.random((5, 1))
    m, p = fl.asarray(m0), fl.asarray(p0)
    fl.reset_stats()
    cols = [(m[:, 0:5] * k) @ p for k in (1.0, 2.0, 3.0)]
    got = fl.hstack(cols)
    assert fl.stats()["host_evaluations"] == 0 and fl.stats()["kernels_launched"] == 0
    assert type(got) is host_eager.HostArray and got.dtype == np.float64
    want = np.hstack([(m0 * k) @ p0 for k in (1.0, 2.0, 3.0)])
    cols[0][0, 0] = -1.0
    np.testing.assert_array_equal(got.get(), want)
    i = fl.asarray(np.arange(4, dtype=np.int32))[0:4] * 2
    mixed = fl.concatenate([i, fl.asarray(np.ones(3, np.float32))[0:3] * 1])
    assert mixed.dtype == np.float64
    np.testing.assert_array_equal(mixed.get(), np.concatenate([np.arange(4) * 2, np.ones(3)]))


def test_triu_and_tril_of_values_made_at_once(host):
    """``fl.triu(-(m * m.T) * r, 1)`` of small values made at once (nbody's energy):
    numpy's, now, with the input's dtype; an int matrix view's too."""
    rng = np.random.default_rng(5)
    m0 = rng.random((6, 1))
    m = fl.asarray(m0)
    v = m[0:6, 0:1] * m[0:6, 0:1].T
    fl.reset_stats()
    up, low = fl.triu(-v, 1), fl.tril(v, -2)
    assert fl.stats()["host_evaluations"] == 0 and fl.stats()["kernels_launched"] == 0
    assert type(up) is host_eager.HostArray
    np.testing.assert_array_equal(up.get(), np.triu(-(m0 * m0.T), 1))
    np.testing.assert_array_equal(low.get(), np.tril(m0 * m0.T, -2))
    i = fl.asarray(np.arange(12, dtype=np.int16).reshape(3, 4))
    got = fl.triu(i[0:3, 0:4])
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got.get(), np.triu(np.arange(12, dtype=np.int16).reshape(3, 4)))


def _element_writes(m, i32, f64, c128, v16):
    """``A[i, j] = v`` and ``x[i] = v`` of 0-d values of every kind, numpy's casts."""
    i32[1, 2] = 7.9                      # a Python float into int32: truncated
    i32[-1, -2] = -5
    i32[0, 0] = f64[2] * 2.5             # a value held here (float64) into int32
    i32[2, 1] = f64[1]                   # an element of another array and dtype
    f64[0] = i32[1, 2]                   # int32 element into float64
    f64[-1] = 1e300 * 10                 # a Python float: inf
    c128[1] = f64[3]                     # real into complex
    c128[0] = c128[2] * c128[1]          # complex into complex
    v16[3] = 65535                       # the largest uint16
    v16[0] = v16[3] + v16[3]             # uint16 overflow wraps (a value held here)
    return [i32, f64, c128, v16]


def test_element_writes_are_numpys(host, monkeypatch):
    """An element written by a 0-d value (a Python scalar, an element, a value held
    here): numpy's scalar assignment and casts, as the kernels'; out of range values
    and indices are numpy's errors; a lazy array reading the element before the write
    keeps the old value."""
    ins = (np.arange(12, dtype=np.int32).reshape(3, 4), np.array([0.5, -3.75, 8.25, 2.0]),
           np.array([1 + 2j, 3 - 1j, -0.5 + 0.25j]), np.array([1, 2, 3, 4], np.uint16))
    with np.errstate(over="ignore"):
        ref = _element_writes(np, *[x.copy() for x in ins])

    def run():
        arrs = [fl.asarray(x.copy()) for x in ins]
        fl.synchronize()
        fl.reset_stats()
        out = _element_writes(fl, *arrs)
        return [o.get() for o in out], fl.stats()

    on, s_on = run()
    assert s_on["kernels_launched"] == 0
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    off, _ = run()
    for g, k, r in zip(on, off, ref):
        assert g.dtype == k.dtype == r.dtype
        np.testing.assert_array_equal(g, r)
        np.testing.assert_array_equal(g, k)
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 4096)
    x = fl.asarray(np.array([1, 2, 3], np.int8))
    with pytest.raises(OverflowError):
        x[0] = 300
    with pytest.raises(IndexError):
        x[3] = 1
    with pytest.raises(ValueError):
        x[1] = float("nan")
    a = fl.asarray(np.arange(6.0).reshape(2, 3))
    before = a * 2                       # lazy, reads a[1, 1] = 4.0
    a[1, 1] = -1.0
    a[0, 2] = a[1, 1]
    np.testing.assert_array_equal(before.get(), np.arange(6.0).reshape(2, 3) * 2)
    np.testing.assert_array_equal(a.get(), [[0.0, 1.0, -1.0], [3.0, -1.0, 5.0]])
    np.testing.assert_array_equal(x.get(), [1, 2, 3])


def _element_loops(m, a, f, i):
    """seidel's and cholesky's element statements, with Python floats, elements and
    negative keys of the same elements."""
    for j in range(1, 5):
        a[2, j] += a[2, j - 1]
        a[2, j] /= 9.0
        a[-1, j] -= a[1, -j] * 0.5 + a[3, 4 - j]
        f[1, j] *= 1.5
        f[1, j] -= f[1, j - 1] / 3.0
        i[j] += i[j - 1] * 3
    a[1, 1] -= m.dot(a[1, :1], a[0, :1])
    a[4, 4] = m.sqrt(a[4, 4])
    x = a[0, 3] * 1.0
    a[0, -2] = 1.0 / 7.0
    return [a, f, i, x, a[0, 3] * 1.0]


def test_kept_element_views_follow_writes(host, monkeypatch):
    """Element views kept per array (host_views) are views: later statements, other
    keys of the same element and held views see each write; results are numpy's."""
    ins = (np.linspace(0.5, 3, 25).reshape(5, 5), np.linspace(-1, 2, 12, dtype=np.float32
                                                             ).reshape(2, 6),
           np.arange(6, dtype=np.int32))
    ref = _element_loops(np, *[x.copy() for x in ins])
    for kept in (host_eager.ELEMENTS_MAX, 3):   # (3: kept views dropped and made again)
        monkeypatch.setattr(host_eager, "ELEMENTS_MAX", kept)
        arrs = [fl.asarray(x.copy()) for x in ins]
        fl.synchronize()
        fl.reset_stats()
        out = _element_loops(fl, *arrs)
        assert fl.stats()["kernels_launched"] == 0
        for g, r in zip(out, ref):
            assert g.dtype == np.asarray(r).dtype
            np.testing.assert_array_equal(g.get(), r)
        held = arrs[0][0, 3]                    # a view, as CuPy's 0-d views are
        arrs[0][0, -2] = 2.5
        assert float(held) == 2.5
        with pytest.raises(IndexError):
            arrs[0][5, 0]
        with pytest.raises(IndexError):
            arrs[2][-7]


def test_an_element_view_is_kept_until_changed(host):
    """An element read again has one HostArray kept per array and key (host_views),
    handed out while it is unchanged; one reshaped in place is not, and each sees the
    element's writes."""
    an = np.arange(12.0).reshape(3, 4)
    a = fl.asarray(an.copy())
    a[0, 0]  # (the matrix's view made once: the written-out steps from here on)
    first = a[1, 2]
    x = a[1, 2]
    assert x is not first and a[1, 2] is x
    x.shape = (1,)
    a[1, 2]
    y = a[1, 2]
    assert y is not x and y.shape == () and x.shape == (1,)
    assert a[1, 2] is y
    a[1, 2] += 1.0
    y += 2.0
    an[1, 2] += 3.0
    np.testing.assert_array_equal(a.get(), an)
    assert float(y) == float(first) == an[1, 2] and float(x[0]) == an[1, 2]


def _element_updates(m, a, f, i, s):
    """seidel_2d's element statements and others like them: an element updated in
    place by an element, a Python scalar or a value held here, every dtype's loop."""
    n = a.shape[1]
    for r in range(1, 3):
        for j in range(1, n):
            a[r, j] += a[r, j - 1]
            a[r, j] /= 9.0
            a[r - 1, j] -= a[r, j] * 2.0      # (a value held here)
            f[r, j] *= f[r - 1, j]            # float32
            f[r, j] += 0.5
            i[j] += i[j - 1] * 3              # int32: wraps, as numpy's arrays
            i[j] //= 2
            i[j - 1] %= 7
            s[j] += np.float64(0.25)          # a numpy scalar
            f[r - 1, j] += a[r, j]            # float32 by float64: the loop's, cast back
            f[r - 1, j - 1] -= 3              # float32 by a Python int
    a[0, 0] /= 0.0                            # numpy's inf, where Python's float raises
    return [a, f, i, s]


def test_element_updates_in_place_are_numpys(host, monkeypatch):
    """``A[i, j] op= v`` of an element and a 0-d operand: numpy's values and dtypes,
    no kernel and no view made per statement (host_writes._element_inplace); float64
    loops computed without switching numpy's error state but the division by zero."""
    from fuseloop import host_writes

    rng = np.random.default_rng(5)
    ins = (rng.random((3, 7)), rng.random((3, 7)).astype(np.float32),
           np.array([1, 2 ** 30, -5, 7, 9, 11, 13], np.int32), rng.random(7))
    with np.errstate(all="ignore"):
        ref = _element_updates(np, *[x.copy() for x in ins])
    arrs = [fl.asarray(x.copy()) for x in ins]
    for x in arrs:
        x[0]  # (each array's view made once)
    fl.synchronize()
    fl.reset_stats()
    monkeypatch.setattr(host_eager, "_view_of", lambda *a: pytest.fail("a view per statement"))
    out = _element_updates(fl, *arrs)
    assert fl.stats()["kernels_launched"] == 0
    for g, r in zip(out, ref):
        assert g.dtype == r.dtype
        np.testing.assert_array_equal(g.get(), r)
    # float64's loops (their entries made above) switch no error state: Python's floats
    monkeypatch.setattr(host_writes, "_errors", None)  # (any use of it raises)
    a, an = arrs[0], out[0].get()
    for j in range(1, 7):
        a[1, j] += a[1, j - 1]
        a[1, j] /= 9.0
        an[1, j] += an[1, j - 1]
        an[1, j] /= 9.0
    np.testing.assert_array_equal(a.get(), an)


def test_none_assigned_after_an_element_update_is_numpys(host):
    """An in-place operator's write-back is recognised by the view it wrote (first in
    host_writes.setitem); ``a[k] = None`` next is no write-back: numpy's NaN."""
    want = np.arange(6.0)
    a = fl.asarray(want.copy())
    for x in (a, want):
        x[1] += x[0]
        x[2] = x[1]
        x[3] = None
    np.testing.assert_array_equal(a.get(), want)


def test_kept_element_of_a_reshaped_array(host):
    """An element read again is handed out from its kept view at the top of a read
    (host_eager.getitem) only while the array is the one viewed: reshaped in place, its
    elements are read at their new places."""
    an = np.arange(12.0).reshape(3, 4)
    a = fl.asarray(an.copy())
    a[0, 0]
    a[1, 2]
    kept = a[1, 2]
    assert a[1, 2] is kept and float(kept) == an[1, 2]
    a.shape = (4, 3)
    assert a[1, 2] is not kept and float(a[1, 2]) == an.reshape(4, 3)[1, 2]
    assert float(a[1, 2]) == an.reshape(4, 3)[1, 2]
    b = a.reshape(2, 6)                   # (another array, of the same buffer)
    assert float(b[1, 2]) == an.reshape(2, 6)[1, 2]
    b[1, 2] += 0.5
    assert float(a[2, 2]) == an.reshape(4, 3)[2, 2] + 0.5


def _row_loops(m, p, x):
    """floyd_warshall's row statements and others on a matrix's rows: read, written,
    updated in place, through kept views."""
    n = p.shape[0]
    for k in range(n):
        for i in range(n):
            p[i, :] = m.minimum(p[i, :], p[i, k] + p[k, :])
    for i in range(1, n):
        p[i, 1:] += p[i - 1, :-1] * 2
        x[1:3] -= x[i % 3:i % 3 + 2]
    r = p[2, :]
    p[2, :] = 7                                   # (seen by the view read before)
    return [p, x, r * 1]


def test_kept_row_views_are_numpys(host):
    """A row's slice read again is one kept HostArray per array and key (host_views),
    handed out while the array is unchanged; statements through it are numpy's and
    launch nothing; reshaped, the array's rows are viewed anew."""
    rng = np.random.default_rng(8)
    pn = rng.integers(0, 50, (6, 6)).astype(np.int32)
    xn = rng.random(5)
    ref = _row_loops(np, pn.copy(), xn.copy())
    p, x = fl.asarray(pn.copy()), fl.asarray(xn.copy())
    p[0, 0], x[0]
    fl.synchronize()
    fl.reset_stats()
    got = _row_loops(fl, p, x)
    assert fl.stats()["kernels_launched"] == 0
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype
        np.testing.assert_array_equal(g.get(), r)
    p[1, :]
    row = p[1, :]
    assert p[1, :] is row and p[1, 2:] is not row
    p.shape = (3, 12)
    assert p[1, :] is not row and p[1, :].shape == (12,)
    np.testing.assert_array_equal(p[1, :].get(), ref[0].reshape(3, 12)[1])
    np.testing.assert_array_equal(row.get(), ref[0][1])    # (still the old view)
