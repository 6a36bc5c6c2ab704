"""Complex matrices in fl.linalg on the device (fuseloop/linalg_complex*.py) against numpy.

The complex LU runs with a block of 4 (so that the matrices span several blocks) and
work-groups of 4.  One size of matrix (N, or N x 8) throughout: the kernels that
fuseloop builds per shape are then shared between the tests.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from device_quirks import asserts_on_group_barriers, skip_without_fp64

import fuseloop as fl
from fuseloop import linalg_complex, linalg_qr_complex

CDTYPES = [np.complex64, np.complex128]
TOL = {np.complex64: 2e-4, np.complex128: 1e-11}
N = 12


@pytest.fixture(autouse=True)
def _small_blocks_no_host(request, monkeypatch):
    monkeypatch.setattr(linalg_complex, "CLU_BLOCK", 4)
    # work-groups of 4 (as on a GPU, where the panel's reductions are shared) on any device
    # whose compiler takes them
    if "device" not in request.fixturenames or not asserts_on_group_barriers(
            request.getfixturevalue("device")):
        monkeypatch.setattr(linalg_complex, "group_size", lambda device: 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.HostFallbackWarning)
        yield


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
    skip_without_fp64(device, dtype)
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
    skip_without_fp64(device, dtype)
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
    skip_without_fp64(device, dtype)
    a = _hermitian_pd((2, N, N), dtype)
    _close(fl.linalg.cholesky(a).get(), np.linalg.cholesky(a), dtype)
    _close(fl.linalg.cholesky(a, upper=True).get(), np.linalg.cholesky(a, upper=True), dtype)
    # only the lower triangle is read, the diagonal's imaginary parts ignored (LAPACK's)
    junk = np.triu(a[0], 1) * 3 + np.diag(np.full(N, 0.5j, dtype))
    _close(fl.linalg.cholesky(a[0] + junk).get(), np.linalg.cholesky(a[0]), dtype)
    bad = a[0].copy()
    bad[9, 9] = -5
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        fl.linalg.cholesky(bad)


def _orthonormal(q, dtype, rows=False):
    g = q @ q.conj().T if rows else q.conj().T @ q
    assert np.abs(g - np.eye(g.shape[0])).max() <= TOL[dtype] * 4


@pytest.mark.parametrize("dtype", CDTYPES)
def test_eigh(device, dtype):
    skip_without_fp64(device, dtype)
    n = N
    h = _hermitian_pd((2, n, n), dtype) - 2 * np.eye(n, dtype=dtype)
    w, v = fl.linalg.eigh(h)
    w, v = w.get(), v.get()
    want = np.linalg.eigvalsh(h)
    assert w.dtype == want.dtype and v.dtype == dtype
    assert np.abs(w - want).max() <= TOL[dtype] * np.abs(want).max()
    for i in range(2):
        assert np.abs(h[i] @ v[i] - v[i] * w[i]).max() <= 4 * TOL[dtype] * np.abs(want).max()
        _orthonormal(v[i], dtype)
    # from the upper triangle, the lower one (and the diagonal's imaginary parts) ignored
    junk = np.triu(h[0]) + np.tril(_general((n, n), dtype), -1) + np.diag(np.full(n, 1j))
    got = fl.linalg.eigvalsh(junk.astype(dtype), UPLO="U").get()
    assert np.abs(got - want[0]).max() <= TOL[dtype] * np.abs(want).max()


def test_eigh_repeated_eigenvalues(device):
    # eigenspaces of dimension up to 4: orthonormal bases picked from the embedding's
    q, _ = np.linalg.qr(_general((N, N), np.complex128, seed=4))
    d = np.array([1.0, 1, 1, 2, 2, 3, 5, 5, 5, 5, 6, 7])
    h = (q * d) @ q.conj().T
    w, v = fl.linalg.eigh(h)
    w, v = w.get(), v.get()
    assert np.abs(w - d).max() <= 1e-12
    assert np.abs(h @ v - v * w).max() <= 1e-12
    _orthonormal(v, np.complex128)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_svd(device, dtype):
    skip_without_fp64(device, dtype)
    a = _general((N, N), dtype)[:, :8].copy()  # tall (stacks: as eigh's, _batched)
    want = np.linalg.svd(a, compute_uv=False)
    scale = want.max()
    for full in (True, False):
        u, s, vh = (x.get() for x in fl.linalg.svd(a, full_matrices=full))
        assert u.shape == (N, N if full else 8) and vh.shape == (8, 8)
        assert s.dtype == want.dtype and np.abs(s - want).max() <= TOL[dtype] * scale
        assert np.abs((u[:, :8] * s) @ vh - a).max() <= 4 * TOL[dtype] * scale
        _orthonormal(u, dtype)
        _orthonormal(vh, dtype, rows=True)
    wide = a.T.copy()
    assert np.abs(fl.linalg.svdvals(wide).get() - want).max() <= TOL[dtype] * scale
    u, s, vh = (x.get() for x in fl.linalg.svd(wide))
    assert u.shape == (8, 8) and vh.shape == (N, N)
    assert np.abs((u * s) @ vh[:8] - wide).max() <= 4 * TOL[dtype] * scale
    _orthonormal(vh, dtype, rows=True)


def test_svd_rank_deficient_and_what_builds_on_it(device):
    dt = np.complex128
    a = _general((N, N), dt)[:, :3] @ _general((N, N), dt, seed=5)[:3, :8]  # rank 3
    for full in (True, False):
        u, s, vh = (x.get() for x in fl.linalg.svd(a, full_matrices=full))
        assert u.shape == (N, N if full else 8)
        np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), atol=1e-12)
        assert np.abs((u[:, :8] * s) @ vh - a).max() <= 1e-12
        _orthonormal(u, dt)
        _orthonormal(vh, dt, rows=True)
    assert fl.linalg.matrix_rank(a).get() == 3
    np.testing.assert_allclose(fl.linalg.pinv(a).get(), np.linalg.pinv(a), atol=1e-12)
    h = _hermitian_pd((N, N), dt)
    assert fl.linalg.matrix_rank(h, hermitian=True).get() == N
    for ord in ("fro", 1, "nuc"):
        got = fl.linalg.matrix_norm(a, ord=ord).get()
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, np.linalg.norm(a, ord), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_qr(device, dtype, monkeypatch):
    # numpy's (LAPACK's) reflectors: Q and R themselves, R's diagonal real
    skip_without_fp64(device, dtype)
    monkeypatch.setattr(linalg_qr_complex, "CQR_BLOCK", 4)
    # (work-groups of 8: 4 columns by 2 row lanes, where the device's compiler takes them)
    if not asserts_on_group_barriers(device):
        monkeypatch.setattr(linalg_qr_complex, "group_size", lambda device: 8)
    a = _general((2, N, N), dtype)[:, :, :8].copy()
    a[1, :, 0] = 0
    a[1, 0, 0] = 2j  # (x = 0 below a complex alpha: tau not 0, as zlarfg's)
    a[1, 1:, 1] = 0  # (then a zero column below the diagonal: tau 0)
    for mode in ("reduced", "complete", "r"):
        got, want = fl.linalg.qr(a, mode=mode), np.linalg.qr(a, mode=mode)
        if mode == "r":
            _close(got.get(), want, dtype)
            continue
        assert got.Q.shape == want.Q.shape
        _close(got.Q.get(), want.Q, dtype)
        _close(got.R.get(), want.R, dtype)
    wide = a[0].T.copy()
    got = fl.linalg.qr(wide)
    _close(got.Q.get(), np.linalg.qr(wide).Q, dtype)
    _close(got.R.get(), np.linalg.qr(wide).R, dtype)
