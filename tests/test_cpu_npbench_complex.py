"""Complex elementwise work on a CPU device's host path (fuseloop.host_path, issue 26).

PoCL's kernels on complex values cost as much CPU as numpy's loops or more (mandelbrot's
``abs(Z) < 2``: 20x), so an evaluation reading a complex value runs here, by numpy, up
to ``COMPLEX_MAX_WORK`` elements, for the operations whose numpy loops are the kernels'
helpers' formulas; division, powers and functions of complex values stay kernels.
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import host_path

N = 8192  # (above HOST_MAX_WORK: only complex work is taken here at this size)


@pytest.fixture
def complex_host(host, monkeypatch):
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 4096)
    return host


def _values(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.random(N) * 4 - 2 + 1j * (rng.random(N) * 4 - 2)
    c = rng.random(N) - 0.5 + 1j * rng.random(N)
    return z, c


def test_complex_elementwise_runs_on_the_host(complex_host):
    z, c = _values()

    def exprs(m, x, y):
        return [abs(x) < 1.5, x * x + y, m.square(x) - y, -x, m.conj(x), m.real(x * y),
                m.imag(x), x == y, x != x, abs(x), x * 2.5, x.astype(np.complex64),
                m.where(abs(x) > 1, x, y), m.isfinite(x)]

    want = exprs(np, z, c)
    x, y = fl.asarray(z), fl.asarray(c)
    fl.synchronize()
    fl.reset_stats()
    got = [e.get() for e in exprs(fl, x, y)]
    s = fl.stats()
    assert s["kernels_launched"] == 0 and s["host_evaluations"] == len(want)
    for g, r in zip(got, want):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=1e-15, atol=0)


def test_two_dimensional_mask_of_a_complex_array(complex_host):
    """mandelbrot's step: a mask of ``abs(Z)``, selections and a masked write by it."""
    z, c = (v.reshape(64, 128) for v in _values(5))
    zf, cf = fl.asarray(z), fl.asarray(c)
    nf = fl.zeros(z.shape, dtype=np.int64)
    n = np.zeros(z.shape, np.int64)
    fl.synchronize()
    fl.reset_stats()
    for k in range(3):
        mask = fl.less(abs(zf), 2.0)
        nf[mask] = k
        zf[mask] = zf[mask] ** 2 + cf[mask]
        m = np.less(abs(z), 2.0)
        n[m] = k
        z[m] = z[m] ** 2 + c[m]
    assert fl.stats()["kernels_launched"] == 0
    np.testing.assert_array_equal(nf.get(), n)
    np.testing.assert_allclose(zf.get(), z, rtol=1e-14)


def test_complex_division_functions_and_large_work_stay_kernels(complex_host, monkeypatch):
    z, c = _values()
    x, y = fl.asarray(z), fl.asarray(c)
    for make, ref in [(lambda: x / y, z / c), (lambda: fl.exp(x), np.exp(z)),
                      (lambda: x.sum(), z.sum())]:
        fl.synchronize()
        fl.reset_stats()
        np.testing.assert_allclose(make().get(), ref, rtol=1e-12)
        assert fl.stats()["kernels_launched"] >= 1, ref
    monkeypatch.setattr(host_path, "COMPLEX_MAX_WORK", N // 2)  # (past its limit)
    fl.reset_stats()
    np.testing.assert_allclose((x * y).get(), z * c, rtol=1e-15)
    assert fl.stats()["kernels_launched"] == 1 and fl.stats()["host_evaluations"] == 0
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)  # (the host path off)
    monkeypatch.setattr(host_path, "COMPLEX_MAX_WORK", 1 << 16)
    fl.reset_stats()
    np.testing.assert_allclose((abs(x) < 1).get(), abs(z) < 1)
    assert fl.stats()["host_evaluations"] == 0


def test_real_work_of_the_same_size_stays_kernels(complex_host):
    z, _ = _values()
    r = fl.asarray(z.real.copy())
    fl.synchronize()
    fl.reset_stats()
    np.testing.assert_array_equal((r * 2 + 1).get(), z.real * 2 + 1)
    assert fl.stats()["host_evaluations"] == 0 and fl.stats()["kernels_launched"] == 1


def test_complex_statements_into_whole_arrays(complex_host):
    """``W[...] = e`` and ``ufunc(..., out=W)`` of complex values: the host path's too."""
    z, c = _values(7)
    x, y = fl.asarray(z), fl.asarray(c)
    w = fl.empty(N, dtype=np.complex128)
    fl.synchronize()
    fl.reset_stats()
    w[...] = x * y + x
    np.testing.assert_allclose(w.get(), z * c + z, rtol=1e-15)
    fl.multiply(x, y, out=w)
    np.testing.assert_allclose(w.get(), z * c, rtol=1e-15)
    assert fl.stats()["kernels_launched"] == 0 and fl.stats()["host_evaluations"] == 2
