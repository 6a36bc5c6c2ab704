"""Small solves and inverses on the CPU device with the host path on: numpy's LAPACK on
the buffers' memory (fuseloop.host_linalg), results equal to numpy's, no kernel."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import host_linalg, host_products

DTYPES = [np.float32, np.float64, np.complex128, np.int64]


def _system(dtype, n=50, k=150):
    rng = np.random.default_rng(4)
    a = rng.random((n, n)) + n * np.eye(n)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.random((n, n))
    return a.astype(dtype), rng.random((n, k)).astype(dtype), rng.random(n).astype(dtype)


def _as_numpy(x):
    return x.astype(np.float64) if x.dtype.kind == "i" else x


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_and_inv_are_numpys(host, dtype):
    a, b, v = _system(dtype)
    A, B, V = fl.asarray(a), fl.asarray(b), fl.asarray(v)
    fl.reset_stats()
    for got, want in ((fl.linalg.solve(A, B), np.linalg.solve(_as_numpy(a), _as_numpy(b))),
                      (fl.linalg.solve(A, V), np.linalg.solve(_as_numpy(a), _as_numpy(v))),
                      (fl.linalg.inv(A), np.linalg.inv(_as_numpy(a)))):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got.get(), want)
    if np.dtype(dtype).kind != "i":  # (an integer matrix's float copy is a kernel's)
        assert fl.stats()["kernels_launched"] == 0


def test_solve_after_kernels_and_of_a_lazy_operand(host):
    a, b, _ = _system(np.float64, 80, 3000)
    A = fl.asarray(a)
    B = fl.asarray(b) * 2  # (lazy: computed first, as numpy computes it)
    got = fl.linalg.solve(A, B)
    np.testing.assert_array_equal(got.get(), np.linalg.solve(a, b * 2))
    np.testing.assert_array_equal((got + 1).get(), np.linalg.solve(a, b * 2) + 1)


def test_singular_and_the_kernels_beyond_the_limits(host, monkeypatch):
    with pytest.raises(np.linalg.LinAlgError, match="Singular"):
        fl.linalg.solve(fl.asarray(np.zeros((3, 3))), fl.asarray(np.ones(3)))
    a, b, _ = _system(np.float64, 20, 4)
    for name, value in (("LAPACK_MAX_SIDE", 8), ("BLAS_PRODUCTS", False)):
        module = host_linalg if name == "LAPACK_MAX_SIDE" else host_products
        with monkeypatch.context() as m:
            m.setattr(module, name, value)
            fl.reset_stats()
            got = fl.linalg.solve(fl.asarray(a), fl.asarray(b)).get()
            assert fl.stats()["kernels_launched"] > 0  # (fuseloop's blocked LU)
        np.testing.assert_allclose(got, np.linalg.solve(a, b), rtol=1e-10)
