"""Complex matrices in fl.linalg on the device (fuseloop/linalg_complex*.py) against numpy.

The complex LU runs with a block of 8 (so that the matrices span several blocks) and
work-groups of 4.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import linalg_complex

CDTYPES = [np.complex64, np.complex128]
TOL = {np.complex64: 2e-4, np.complex128: 1e-11}
N = 20


@pytest.fixture(autouse=True)
def _small_blocks_no_host(monkeypatch):
    monkeypatch.setattr(linalg_complex, "CLU_BLOCK", 8)
    # work-groups of 4 (as on a GPU, where the panel's reductions are shared) on any device
    monkeypatch.setattr(linalg_complex, "_group_size", lambda device: 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.HostFallbackWarning)
        yield


def _skip_fp64(device, dtype):
    if np.dtype(dtype) == np.complex128 and not device.has_fp64:
        pytest.skip(f"{device.name} has no float64")


def _general(shape, dtype, seed=1):
    rng = np.random.default_rng(seed)
    n = shape[-1]
    m = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return (m / np.sqrt(2 * n) + 2 * np.eye(n)).astype(dtype)


def _hermitian_pd(shape, dtype, seed=2):
    m = _general(shape, np.complex128, seed)
    return (m @ m.conj().swapaxes(-1, -2) + np.eye(shape[-1])).astype(dtype)


def _close(got, want, dtype):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(got - want).max() <= TOL[dtype] * scale


@pytest.mark.parametrize("dtype", CDTYPES)
def test_solve_and_inv(device, dtype):
    _skip_fp64(device, dtype)
    a = _general((2, N, N), dtype)
    rng = np.random.default_rng(3)
    b = (rng.standard_normal((2, N, 3)) + 1j * rng.standard_normal((2, N, 3))).astype(dtype)
    _close(fl.linalg.solve(a, b).get(), np.linalg.solve(a, b), dtype)
    _close(fl.linalg.solve(a[0], b[0, :, 0]).get(), np.linalg.solve(a[0], b[0, :, 0]), dtype)
    # a real matrix with complex right-hand sides (broadcast over the batch)
    ar = a[0].real.copy()
    _close(fl.linalg.solve(ar, b).get(), np.linalg.solve(ar, b), dtype)
    _close(fl.linalg.inv(a).get(), np.linalg.inv(a), dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_det_and_slogdet(device, dtype):
    _skip_fp64(device, dtype)
    a = _general((2, N, N), dtype)
    a[1] = a[1][::-1]  # (pivots that swap rows)
    want = np.linalg.det(a)
    got = fl.linalg.det(a).get()
    assert got.dtype == dtype
    assert np.abs(got - want).max() <= 10 * TOL[dtype] * np.abs(want).max()
    sign, logabs = fl.linalg.slogdet(fl.asarray(a))
    ws, wl = np.linalg.slogdet(a)
    _close(sign.get(), ws, dtype)
    assert logabs.dtype == wl.dtype
    np.testing.assert_allclose(logabs.get(), wl, rtol=10 * TOL[dtype])


@pytest.mark.parametrize("dtype", [np.complex64])
def test_singular(device, dtype):
    a = np.array([[1, 2j, 3], [2j, -4, 6j], [1, 0, 1]], dtype)  # (row 2: 2j row 1)
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        fl.linalg.solve(a, np.ones(3, dtype))
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        fl.linalg.inv(a)
    assert np.linalg.det(a) == 0 and fl.linalg.det(a).get() == 0
    sign, logabs = fl.linalg.slogdet(a)
    assert sign.dtype == dtype and sign.get() == 0 and logabs.get() == -np.inf


@pytest.mark.parametrize("dtype", CDTYPES)
def test_cholesky(device, dtype):
    _skip_fp64(device, dtype)
    a = _hermitian_pd((2, N, N), dtype)
    _close(fl.linalg.cholesky(a).get(), np.linalg.cholesky(a), dtype)
    _close(fl.linalg.cholesky(a, upper=True).get(), np.linalg.cholesky(a, upper=True), dtype)
    # only the lower triangle is read, the diagonal's imaginary parts ignored (LAPACK's)
    junk = np.triu(a[0], 1) * 3 + np.diag(np.full(N, 0.5j, dtype))
    _close(fl.linalg.cholesky(a[0] + junk).get(), np.linalg.cholesky(a[0]), dtype)
    bad = a[0].copy()
    bad[15, 15] = -5
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        fl.linalg.cholesky(bad)
