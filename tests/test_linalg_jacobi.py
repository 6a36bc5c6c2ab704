"""fl.linalg's SVD and symmetric eigenproblem on the device (fuseloop/linalg_jacobi.py),
against numpy: reconstructions, orthonormality and values (signs of vectors are
arbitrary, so vectors are compared through what they reconstruct)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import linalg_jacobi


@pytest.fixture
def no_fallback():
    """A host fallback is an error (real input runs on the device)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.HostFallbackWarning)
        yield


@pytest.fixture(params=["one-launch", "launch-a-step"])
def path(request, monkeypatch):
    """Small matrices' sweeps in one launch (``fuseloop_jacobi_local``, the default up
    to 16 columns on a CPU), or a launch a step as larger ones."""
    if request.param == "launch-a-step":
        monkeypatch.setattr(linalg_jacobi, "LOCAL_MAX_N", {"cpu": 0, "gpu": 0})
    else:
        monkeypatch.setattr(linalg_jacobi, "LOCAL_MAX_N", {"cpu": 64, "gpu": 64})
    return request.param


def _tol(dtype):
    return 1e-10 if dtype == np.float64 else 1e-4


def _check_svd(a, full_matrices=True):
    m, n = a.shape
    k = min(m, n)
    u, s, vh = (r.get() for r in fl.linalg.svd(fl.asarray(a), full_matrices=full_matrices))
    assert u.dtype == s.dtype == vh.dtype == a.dtype
    assert u.shape == ((m, m) if full_matrices else (m, k))
    assert vh.shape == ((n, n) if full_matrices else (k, n))
    ref = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    tol, big = _tol(a.dtype), max(np.abs(ref).max(), 1.0)
    assert np.all(np.diff(s) <= 0)  # descending, as numpy's
    assert np.abs(s - ref).max() <= tol * big
    assert np.abs((u[:, :k] * s) @ vh[:k] - a).max() <= tol * big
    assert np.abs(u.T @ u - np.eye(u.shape[1])).max() <= tol
    assert np.abs(vh @ vh.T - np.eye(vh.shape[0])).max() <= tol


@pytest.mark.parametrize("shape", [(12, 12), (17, 6), (5, 13), (1, 1)],
                         ids=["square", "tall", "wide", "1x1"])
def test_svd_shapes_float64(device, no_fallback, shape):
    a = np.random.default_rng(0).standard_normal(shape)
    _check_svd(a)
    _check_svd(a, full_matrices=False)


def test_svd_float32(device, no_fallback):
    a = np.random.default_rng(1).standard_normal((20, 9)).astype(np.float32)
    _check_svd(a)
    got = fl.linalg.svdvals(fl.asarray(a.T))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.get(), np.linalg.svd(a, compute_uv=False), rtol=1e-4)


def test_svd_rank_deficient_and_zero(device, no_fallback, path):
    """Zero singular values: U still orthonormal (completed as numpy's is)."""
    b = np.random.default_rng(2).standard_normal((10, 3))
    _check_svd(np.hstack([b, b, 2 * b[:, :1]]))  # rank 3 of 7 columns
    _check_svd(np.hstack([b, b]).T, full_matrices=False)
    _check_svd(np.zeros((4, 3)))
    # rank 1, every column parallel: the cancellations leave columns of rounding error
    # along the others, which no rotation makes orthogonal (they must not be rotated
    # forever)
    _check_svd(np.ones((8, 5)))
    _check_svd(np.outer(np.arange(1.0, 7.0), [1.0, -2.0, 3.0, 0.5]), full_matrices=False)
    _check_svd(np.diag([3.0, 0.0, 1.0, 0.0]))  # a diagonal input, zeros on it


def test_svd_batched_and_result_names(device, no_fallback):
    a = np.random.default_rng(3).standard_normal((2, 3, 6, 4))
    res = fl.linalg.svd(a, full_matrices=False)
    assert res.U is res[0] and res.S is res[1] and res.Vh is res[2]
    u, s, vh = (r.get() for r in res)
    assert u.shape == (2, 3, 6, 4) and s.shape == (2, 3, 4) and vh.shape == (2, 3, 4, 4)
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-10)
    np.testing.assert_allclose((u * s[..., None, :]) @ vh, a, atol=1e-12)


def _check_eigh(a, sym, uplo="L"):
    w, v = (r.get() for r in fl.linalg.eigh(fl.asarray(a), UPLO=uplo))
    tol, big = _tol(a.dtype), max(np.abs(sym).max(), 1.0)
    ref = np.linalg.eigvalsh(sym.astype(np.float64))
    assert np.all(np.diff(w) >= 0)  # ascending, as numpy's
    assert np.abs(w - ref).max() <= tol * big
    assert np.abs((v * w) @ v.T - sym).max() <= tol * big
    assert np.abs(v.T @ v - np.eye(len(w))).max() <= tol
    wv = fl.linalg.eigvalsh(fl.asarray(a), UPLO=uplo).get()
    assert np.abs(wv - ref).max() <= tol * big


def test_eigh_negative_and_uplo(device, no_fallback):
    """A general matrix: only the named triangle is read; eigenvalues of both signs."""
    a = np.random.default_rng(4).standard_normal((11, 11))
    _check_eigh(a, np.tril(a) + np.tril(a, -1).T, "L")
    _check_eigh(a, np.triu(a) + np.triu(a, 1).T, "U")


def test_eigh_repeated_diagonal_1x1(device, no_fallback, path):
    q, _ = np.linalg.qr(np.random.default_rng(5).standard_normal((10, 10)))
    rep = q @ np.diag([1.0] * 3 + [-3.0] * 3 + [2.0] * 4) @ q.T
    _check_eigh(rep, rep)
    d = np.diag([3.0, -2.0, 0.0, 5.0, -2.0])
    _check_eigh(d, d)
    _check_eigh(-np.eye(3), -np.eye(3))  # shifted to zero: vectors from the rotations alone
    _check_eigh(np.array([[-4.0]]), np.array([[-4.0]]))


def test_eigh_float32(device, no_fallback):
    a = np.random.default_rng(6).standard_normal((16, 16)).astype(np.float32)
    a = a + a.T
    _check_eigh(a, a)
    assert fl.linalg.eigh(a).eigenvalues.dtype == np.float32


def test_pinv_and_rank_on_the_device(device, no_fallback):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((7, 4))
    np.testing.assert_allclose(fl.linalg.pinv(a).get(), np.linalg.pinv(a), atol=1e-12)
    deficient = np.hstack([a, a[:, :2]])
    assert int(fl.linalg.matrix_rank(deficient).get()) == 4
    d = np.diag([1.0, 1e-3, 0.0])
    assert int(fl.linalg.matrix_rank(d, rtol=1e-2).get()) == 1
    assert int(fl.linalg.matrix_rank(d, hermitian=True).get()) == 2
    np.testing.assert_allclose(fl.linalg.pinv(d, rtol=1e-2).get(),
                               np.linalg.pinv(d, rtol=1e-2), atol=1e-12)


def test_nan_input_raises(device):
    a = np.ones((3, 3))
    a[1, 1] = np.nan
    with pytest.raises(np.linalg.LinAlgError, match="not finite"):
        fl.linalg.svd(a)


def test_launches_per_sweep(device, monkeypatch):
    """One launch per round-robin step: n - 1 per sweep for even n, n for odd; a small
    matrix's sweeps in one launch."""
    for n, steps, local in ((8, 7, 0), (7, 7, 0), (8, 7, 8)):
        monkeypatch.setattr(linalg_jacobi, "LOCAL_MAX_N", {"cpu": local, "gpu": local})
        a = np.random.default_rng(n).standard_normal((n, 10))
        w = linalg_jacobi._copy(fl.asarray(a))
        vt = fl.empty((n, n), np.float64)  # (set to the identity by the first launch)
        fl.reset_stats()
        sweeps = linalg_jacobi.sweeps(w, vt)
        assert 2 <= sweeps <= 15
        assert fl.stats()["kernels_launched"] == (1 if local else sweeps * steps)
        # the rows are orthogonal and a = (w^T) vt, i.e. a^T = vt^T w
        got_w, got_v = w.get(), vt.get()
        off = got_w @ got_w.T - np.diag((got_w * got_w).sum(1))
        assert np.abs(off).max() <= 1e-12 * np.abs(a).max() ** 2 * 10
        np.testing.assert_allclose(got_v.T @ got_w, a, atol=1e-12)


def test_work_groups_of_several_items(device, no_fallback, monkeypatch, path):
    """A GPU's layout on any device: groups of 8 work-items share each pair's dot
    products (one launch: 2 a pair, 4 pairs at a time), each row's norm and the
    completion of U (local reductions, barriers)."""
    monkeypatch.setattr(linalg_jacobi, "group_size", lambda device, m: 8)
    monkeypatch.setattr(linalg_jacobi, "local_group_size", lambda device: 8)
    b = np.random.default_rng(9).standard_normal((21, 4))
    _check_svd(np.hstack([b, b[:, :2], b[:, 1:] @ np.ones((3, 1))]))  # rank 4 of 7
    a = np.random.default_rng(10).standard_normal((13, 13))
    _check_eigh(a, np.tril(a) + np.tril(a, -1).T)


def test_float32_rotations_keep_norms(device, no_fallback):
    """Rotations with c rounded to 1 (t^2 below eps) grow both rows by t^2 / 2; over
    the sweeps float32 norms drifted by ~3e-5 at n = 96, which the shift s turned into
    eigenvalue errors of 5e-5 of the largest (eigvalsh: nothing to divide it out by)."""
    a = np.random.default_rng(11).standard_normal((96, 96)).astype(np.float32)
    a = a + a.T
    w, v = (r.get() for r in fl.linalg.eigh(a))
    ref = np.linalg.eigvalsh(a.astype(np.float64))
    assert np.abs(w - ref).max() <= 1e-5 * np.abs(ref).max()
    assert np.abs(fl.linalg.eigvalsh(a).get() - ref).max() <= 1e-5 * np.abs(ref).max()
    assert np.abs(v.T.astype(np.float64) @ v - np.eye(96)).max() <= 1e-5
    s = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    assert np.abs(fl.linalg.svdvals(a).get() - s).max() <= 2e-6 * s.max()
