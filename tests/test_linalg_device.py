"""fl.linalg's factorisations and solvers (fuseloop/linalg_factor.py) against numpy.

The blocked algorithms are run both with the device's block size and with a block
of 16 (so that small matrices span several blocks, with partial last blocks).
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from device_quirks import asserts_on_group_barriers
from launch_counts import launches

import fuseloop as fl
from fuseloop import linalg_factor, linalg_gemm, linalg_kernels, linalg_panel

SIZES = [1, 5, 63, 64, 65, 200]


def _force_groups(monkeypatch, device, group: int) -> None:
    """Work-groups of ``group`` for the linalg kernels on ``device`` (skipped where its
    compiler would abort on their barriers)."""
    if group > 1 and asserts_on_group_barriers(device):
        pytest.skip(f"{device.runtime} aborts on the linalg kernels' barriers in groups of "
                    f"{group}; fuseloop gives this device groups of one")
    monkeypatch.setattr(linalg_kernels, "group_size", lambda device, parallel: group)


@pytest.fixture(params=[None, 16], ids=["block-default", "block-16"])
def block(request, monkeypatch):
    if request.param is not None:
        monkeypatch.setattr(linalg_factor, "block_size", lambda device: request.param)
        # work-groups of 4 (as on a GPU, where a group shares a block out) on any device
        # whose compiler takes them; elsewhere block 16 with the device's own groups
        device = request.getfixturevalue("device")
        if not asserts_on_group_barriers(device):
            _force_groups(monkeypatch, device, 4)
    return request.param


def _spd(n, dtype=np.float64, seed=0):
    m = np.random.default_rng(seed).standard_normal((n, n))
    return (m @ m.T / n + np.eye(n)).astype(dtype)


def _general(n, dtype=np.float64, seed=1):
    m = np.random.default_rng(seed).standard_normal((n, n))
    return (m / np.sqrt(n) + 2 * np.eye(n)).astype(dtype)


def _tol(a, dtype):
    # float32: scaled by the size and the condition number
    eps = np.finfo(dtype).eps
    return 4 * eps * a.shape[-1] * np.linalg.cond(a.astype(np.float64))


@pytest.mark.parametrize("n", SIZES)
def test_cholesky_float64(device, block, n):
    a = _spd(n)
    got = fl.linalg.cholesky(fl.asarray(a)).get()
    np.testing.assert_allclose(got, np.linalg.cholesky(a), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [5, 65, 200])
def test_cholesky_float32_and_upper(device, block, n):
    a = _spd(n, np.float32)
    got = fl.linalg.cholesky(fl.asarray(a), upper=True)
    assert got.dtype == np.float32
    ref = np.linalg.cholesky(a.astype(np.float64)).T
    assert np.abs(got.get() - ref).max() <= _tol(a, np.float32) * np.abs(ref).max()
    assert np.all(np.tril(got.get(), -1) == 0)


def test_cholesky_batched_and_int_promotes(device, block):
    a = np.stack([_spd(20, seed=s) for s in range(6)]).reshape(2, 3, 20, 20)
    np.testing.assert_allclose(fl.linalg.cholesky(a).get(), np.linalg.cholesky(a),
                               rtol=1e-10, atol=1e-12)
    ints = np.array([[4, 2], [2, 3]])
    got = fl.linalg.cholesky(fl.asarray(ints))
    assert got.dtype == np.float64  # numpy's promotion of integers
    np.testing.assert_allclose(got.get(), np.linalg.cholesky(ints))


@pytest.mark.parametrize("n", SIZES)
def test_solve_inv_det_slogdet_float64(device, block, n):
    a, b = _general(n), np.random.default_rng(2).standard_normal((n, 3))
    da = fl.asarray(a)
    np.testing.assert_allclose(fl.linalg.solve(da, fl.asarray(b)).get(), np.linalg.solve(a, b),
                               rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(fl.linalg.solve(da, b[:, 0]).get(),
                               np.linalg.solve(a, b[:, 0]), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(fl.linalg.inv(da).get(), np.linalg.inv(a), rtol=1e-9,
                               atol=1e-11)
    np.testing.assert_allclose(fl.linalg.det(da).get(), np.linalg.det(a), rtol=1e-9)
    sign, logdet = fl.linalg.slogdet(da)
    ref_sign, ref_log = np.linalg.slogdet(a)
    assert sign.get() == ref_sign
    np.testing.assert_allclose(logdet.get(), ref_log, rtol=1e-10, atol=1e-10)


def test_pivoting_and_negative_determinant(device, block):
    # a zero leading entry needs a row swap; odd swaps and negative pivots give the sign
    a = np.array([[0.0, 2, 1], [1, 1, 1], [3, 0, -1]])
    np.testing.assert_allclose(fl.linalg.det(a).get(), np.linalg.det(a))
    assert fl.linalg.slogdet(a)[0].get() == np.linalg.slogdet(a)[0]
    np.testing.assert_allclose(fl.linalg.solve(a, np.ones(3)).get(),
                               np.linalg.solve(a, np.ones(3)))


@pytest.mark.parametrize("n", [5, 65, 200])
def test_solve_float32(device, block, n):
    a, b = _general(n, np.float32), np.random.default_rng(3).standard_normal(n).astype(
        np.float32)
    x = fl.linalg.solve(fl.asarray(a), fl.asarray(b))
    assert x.dtype == np.float32
    ref = np.linalg.solve(a.astype(np.float64), b.astype(np.float64))
    assert np.abs(x.get() - ref).max() <= _tol(a, np.float32) * np.abs(ref).max()


def test_batched_solve_inv_det(device, block):
    rng = np.random.default_rng(4)
    a = np.stack([_general(17, seed=s) for s in range(6)]).reshape(2, 3, 17, 17)
    b = rng.standard_normal((3, 17, 2))  # broadcast against a's batch
    np.testing.assert_allclose(fl.linalg.solve(a, b).get(), np.linalg.solve(a, b), rtol=1e-9)
    vec = fl.linalg.solve(a, b[0, :, 0])  # a vector b against a stack of matrices
    assert vec.shape == (2, 3, 17)
    np.testing.assert_allclose(vec.get(), np.linalg.solve(a, b[0, :, 0]), rtol=1e-9)
    np.testing.assert_allclose(fl.linalg.inv(a).get(), np.linalg.inv(a), rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(fl.linalg.det(a).get(), np.linalg.det(a), rtol=1e-9)
    sign, logdet = fl.linalg.slogdet(a)
    np.testing.assert_array_equal(sign.get(), np.linalg.slogdet(a)[0])
    np.testing.assert_allclose(logdet.get(), np.linalg.slogdet(a)[1], rtol=1e-10)


def test_singular(device, block):
    a = np.array([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]])
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        fl.linalg.solve(a, np.ones(3))
    with pytest.raises(fl.linalg.LinAlgError, match="Singular matrix"):
        fl.linalg.inv(fl.asarray(a))
    assert fl.linalg.det(a).get() == 0
    sign, logdet = fl.linalg.slogdet(a)
    assert sign.get() == 0 and logdet.get() == -np.inf


def test_not_positive_definite(device, block):
    a = _spd(40)
    a[30, 30] = -5.0
    with pytest.raises(np.linalg.LinAlgError, match="Matrix is not positive definite"):
        fl.linalg.cholesky(a)


def test_bad_input(device):
    with pytest.raises(np.linalg.LinAlgError, match=r"square.*\(shape \(3, 4\)\)"):
        fl.linalg.cholesky(np.ones((3, 4)))
    with pytest.raises(np.linalg.LinAlgError, match=r"1-dimensional.*at least two"):
        fl.linalg.inv(np.ones(3))
    with pytest.raises(np.linalg.LinAlgError, match="square"):
        fl.linalg.det(np.ones((2, 2, 3)))
    with pytest.raises(ValueError, match=r"b of shape \(4,\)"):
        fl.linalg.solve(np.eye(3), np.ones(4))
    # (complex input runs on the device since issue 27: tests/test_linalg_complex.py)
    np.testing.assert_array_equal(fl.linalg.cholesky(np.eye(2, dtype=complex)).get(), np.eye(2))
    with pytest.raises(TypeError, match="integer"):
        fl.linalg.matrix_power(np.eye(2), 1.5)
    with pytest.raises(ValueError, match="invalid norm order"):
        fl.linalg.matrix_norm(np.eye(2), ord=3)


def test_matrix_power_and_norms(device):
    a = _general(7)
    for n in (0, 1, 2, 5, -3):
        np.testing.assert_allclose(fl.linalg.matrix_power(a, n).get(),
                                   np.linalg.matrix_power(a, n), rtol=1e-9, atol=1e-12)
    for ord in ("fro", 1, -1, np.inf, -np.inf):
        np.testing.assert_allclose(fl.linalg.matrix_norm(a, ord=ord).get(),
                                   np.linalg.norm(a, ord=ord), rtol=1e-12)
    stacked = np.stack([a, 2 * a])
    got = fl.linalg.matrix_norm(stacked, ord=1, keepdims=True)
    assert got.shape == (2, 1, 1)
    np.testing.assert_allclose(got.get()[:, 0, 0], np.linalg.norm(stacked, 1, axis=(1, 2)))


def test_host_fallbacks_warn(device):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((6, 4))
    s = _spd(5)
    # (empty stacks: the host fallback's)
    with pytest.warns(fl.HostFallbackWarning, match="fl.linalg.eigh runs on the host"):
        assert fl.linalg.eigh(np.ones((0, 3, 3))).eigenvectors.shape == (0, 3, 3)
    # the SVD and eigh (and what is built on them) run on the device for real input
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.HostFallbackWarning)
        # (QR: tests/test_linalg_qr.py; complex QR runs on the device too since issue 27)
        ac = a * (1 + 0.5j)
        q, r = fl.linalg.qr(ac)
        np.testing.assert_allclose((q.get() @ r.get()), ac, atol=1e-12)
        assert q.shape == (6, 4)
        assert fl.linalg.qr(ac, mode="complete")[0].shape == (6, 6)
        w, v = fl.linalg.eigh(s)
        np.testing.assert_allclose(w.get(), np.linalg.eigvalsh(s))
        np.testing.assert_allclose(s @ v.get(), v.get() * w.get(), atol=1e-12)
        np.testing.assert_allclose(fl.linalg.eigvalsh(s).get(), np.linalg.eigvalsh(s))
        np.testing.assert_allclose(fl.linalg.svdvals(a).get(), np.linalg.svd(a)[1])
        u, sv, vt = fl.linalg.svd(a, full_matrices=False)
        np.testing.assert_allclose(u.get() * sv.get() @ vt.get(), a, atol=1e-12)
        np.testing.assert_allclose(fl.linalg.pinv(a).get(), np.linalg.pinv(a), atol=1e-12)
        assert fl.linalg.matrix_rank(a).get() == 4
        assert fl.linalg.matrix_rank(np.array([0.0, 2.0])).get() == 1  # 1-D: numpy's rule
        assert fl.linalg.matrix_rank(np.zeros(3)).get() == 0
        for ord in (2, -2, "nuc"):
            np.testing.assert_allclose(fl.linalg.matrix_norm(a, ord=ord).get(),
                                       np.linalg.norm(a, ord=ord), rtol=1e-12)
    assert issubclass(fl.HostFallbackWarning, UserWarning)


def test_kernels_come_from_the_kernel_cache(device):
    a = _spd(30)
    fl.linalg.cholesky(a).get()
    fl.reset_stats()
    fl.linalg.cholesky(a).get()
    stats = fl.stats()
    assert stats["kernels_compiled"] == 0 and stats["memory_cache_hits"] > 0


@pytest.fixture
def block16(device, monkeypatch):
    """Blocks of 16 (the LU tournament's slices: 32 rows) and work-groups of 4."""
    monkeypatch.setattr(linalg_factor, "block_size", lambda device: 16)
    _force_groups(monkeypatch, device, 4)
    return 16


@pytest.mark.parametrize("present", ["device", "gpu"])
def test_launches_per_block(device, block16, present, monkeypatch):
    # O(n / block) launches: 3 per Cholesky block (diagonal block, panel, trailing
    # product), 2 per triangular-solve block (1 for up to FEW_RHS right-hand sides);
    # the LU panel's tournament adds one launch per level of candidates.  "gpu": the
    # CPU device presented as a GPU (the GPU's panel kernel, a row per work-item)
    if present == "gpu":
        if device.type != "cpu":
            pytest.skip("presents the CPU device as a GPU")
        monkeypatch.setenv("FUSELOOP_COMPILE", "inline")  # (workers know no such device)
        device = dataclasses.replace(device, index=9133, type="gpu", compute_units=132,
                                     max_work_group_size=1024)
        with fl.device(device):
            _launches_per_block(device, block16)
    else:
        _launches_per_block(device, block16)


def _launches_per_block(device, block16):
    n = 100
    blocks = -(-n // block16)
    spd, gen = fl.asarray(_spd(n)), fl.asarray(_general(n))
    few = fl.asarray(np.ones((n, linalg_kernels.FEW_RHS)))
    many = fl.asarray(np.ones((n, linalg_kernels.FEW_RHS + 1)))
    assert launches(lambda: fl.linalg.cholesky(spd).eval(), warm=True) == 3 * blocks
    # (the right-hand side's copy, then the blocks)
    assert launches(lambda: fl.linalg.solve_triangular(spd, few, lower=True).eval(),
                    warm=True) == 1 + blocks
    assert launches(lambda: fl.linalg.solve_triangular(spd, many, lower=True).eval(),
                    warm=True) == 2 * blocks
    levels = 0
    f8 = np.dtype(np.float64)
    rows = linalg_panel.use_rows(device, block16, f8)  # (GPUs: a row per work-item)
    for k in range(0, n, block16):
        if rows:  # (a launch per level of groups of rows)
            wg = linalg_panel.rows_group_size(device, block16, f8)
            levels += len(linalg_panel.rows_levels(n - k, min(block16, n - k), wg))
        else:
            slices = -(-(n - k) // (2 * block16))
            levels += 1 + (slices - 1).bit_length()  # 1 + ceil(log2(slices))
    # the copy and the row order's start, the tournament, the row exchanges, the two
    # triangular solves (one launch) and the product
    lu = 2 + levels + blocks + 2 * (blocks - 1)
    assert launches(lambda: linalg_factor._lu(gen), warm=True) == lu
    # solve: the LU, the right-hand side's rows gathered, a launch per block and direction
    assert launches(lambda: fl.linalg.solve(gen, few).eval(), warm=True) == lu + 1 + 2 * blocks


@pytest.mark.parametrize("group", [4, 64])
def test_pivots_chosen_across_row_slices(device, block16, group, monkeypatch):
    # rows shuffled: each panel's pivots lie in other slices of the tournament than
    # their columns; the determinant's sign checks the swaps LAPACK would record.
    # Groups of 64: two work-items share each of the tournament's 32 rows
    _force_groups(monkeypatch, device, group)
    rng = np.random.default_rng(6)
    n = 100
    a = (rng.standard_normal((n, n)) + 8 * np.eye(n))[rng.permutation(n)]
    b = rng.standard_normal((n, 2))
    np.testing.assert_allclose(fl.linalg.solve(a, b).get(), np.linalg.solve(a, b), rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(fl.linalg.det(a).get(), np.linalg.det(a), rtol=1e-9)
    sign, logdet = fl.linalg.slogdet(a)
    assert sign.get() == np.linalg.slogdet(a)[0]
    np.testing.assert_allclose(logdet.get(), np.linalg.slogdet(a)[1], rtol=1e-10)


@pytest.mark.parametrize("group", [1, 4])
def test_tournament_pivots_and_row_order(device, block16, group, monkeypatch):
    # the final level's swaps (fuseloop_tslu, one work-item after the last barrier): a
    # panel within one slice (32 rows) is partial pivoting, so LAPACK's pivots; with
    # several levels the pivots (applied in turn) give the rows' net order, L U = A[rows]
    import scipy.linalg

    _force_groups(monkeypatch, device, group)
    rng = np.random.default_rng(10)
    a = rng.standard_normal((32, 32))
    f = linalg_factor._lu(fl.asarray(a))
    lu, piv = scipy.linalg.lu_factor(a)
    np.testing.assert_array_equal(f.piv.get(), piv)
    np.testing.assert_allclose(f.lu.get(), lu, rtol=1e-10, atol=1e-10)
    n = 100  # (slices of 32 rows: up to 3 levels a panel; pivots from far below)
    a = (rng.standard_normal((n, n)) + 4 * np.eye(n))[rng.permutation(n)]
    f = linalg_factor._lu(fl.asarray(a))
    order = np.arange(n)
    for j, p in enumerate(f.piv.get()):
        order[[j, p]] = order[[p, j]]
    np.testing.assert_array_equal(f.rows.get(), order)
    low = np.tril(f.lu.get(), -1) + np.eye(n)
    np.testing.assert_allclose(low @ np.triu(f.lu.get()), a[order], atol=1e-10)


def test_singular_in_a_later_block(device, block16):
    a = _general(70)
    a[:, 37] = 0  # an exactly zero pivot in the third block, after a tournament
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        fl.linalg.solve(a, np.ones(70))
    assert fl.linalg.det(a).get() == 0 == np.linalg.det(a)
    sign, logdet = fl.linalg.slogdet(a)
    assert sign.get() == 0 and logdet.get() == -np.inf


def test_gpu_blocks_fit_local_memory():
    # a stand-in GPU: float64 blocks of 64 are halved so that the tournament's slice
    # (128 rows) fits; the triangular solve's vectors per group shrink to fit
    from types import SimpleNamespace

    gpu = SimpleNamespace(type="gpu", max_work_group_size=1024)
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert linalg_kernels.fit_block(gpu, 64, f32) == 64
    assert linalg_kernels.fit_block(gpu, 64, f64) == 32
    for dt in (f32, f64):
        nb = linalg_kernels.fit_block(gpu, 64, dt)
        assert linalg_kernels.tslu_local_bytes(nb, dt) <= linalg_kernels.GPU_LOCAL_BYTES
    assert linalg_kernels.vectors_per_group(gpu, 64, f32, 64) == 64
    vpg = linalg_kernels.vectors_per_group(gpu, 64, f64, 64)
    assert vpg < 64 and 64 * (65 + vpg + 1) * 8 <= linalg_kernels.GPU_LOCAL_BYTES


def test_cholesky_block_fits_its_own_kernels():
    # Cholesky's widest work-group holds the diagonal block only: float64 blocks of 64
    # fit a GPU's local memory there, though the LU's tournament (fit_block) halves them
    from types import SimpleNamespace

    gpu = SimpleNamespace(type="gpu", max_work_group_size=1024)
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert linalg_factor.cholesky_block(gpu, f64) == 64 > linalg_kernels.fit_block(gpu, 64, f64)
    assert linalg_factor.cholesky_block(gpu, f32) == 64
    assert 64 * 65 * 8 <= linalg_kernels.GPU_LOCAL_BYTES
    # a device with less: halved until the block fits what its driver reports (less 8 KiB)
    small = SimpleNamespace(type="gpu", max_work_group_size=1024,
                            cl_device=SimpleNamespace(local_mem_size=24 * 1024))
    nb = linalg_factor.cholesky_block(small, f64)
    assert nb == 32 and nb * (nb + 1) * 8 <= 16 * 1024 < 2 * nb * (2 * nb + 1) * 8


def test_gemm_update_kernel_against_numpy(device):
    # C -= A B through strides (A transposed in its buffer), partial 64 x 64 tiles
    # and an inner size that is not a multiple of the kernel's 16; with lower=True
    # the tiles above the diagonal are left as they were
    rng = np.random.default_rng(7)
    m, n, kk = 130, 70, 37
    a_t = rng.standard_normal((kk, m))  # A = a_t.T: A(i, p) at p * m + i
    b = rng.standard_normal((kk, n))
    c = rng.standard_normal((m, n))
    da, db = fl.asarray(a_t), fl.asarray(b)
    dc = linalg_factor._copy(fl.asarray(c))
    buf = linalg_factor._buf
    linalg_kernels.gemm_update(buf(dc), buf(da), buf(db), m, n, kk, (0, n, 1), (0, 1, m),
                               (0, n, 1), False, dc.dtype, dc.device)
    np.testing.assert_allclose(dc.get(), c - a_t.T @ b, rtol=1e-12, atol=1e-12)
    sq = rng.standard_normal((m, m))
    ds = linalg_factor._copy(fl.asarray(sq))
    linalg_kernels.gemm_update(buf(ds), buf(da), buf(da), m, m, kk, (0, m, 1), (0, 1, m),
                               (0, m, 1), True, ds.dtype, ds.device)
    want = sq - a_t.T @ a_t
    tile = linalg_gemm.gemm_tiling(ds.device, m, m, ds.dtype, True)[0]
    above = np.arange(m)[:, None] // tile < np.arange(m)[None, :] // tile
    np.testing.assert_allclose(ds.get()[~above], want[~above], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(ds.get()[above], sq[above])


@pytest.fixture
def gemm_updates(device, monkeypatch):
    """The GPUs' rule on any device: trailing updates by fuseloop_gemm_update; blocks of
    16 (several per matrix, a partial last one) and work-groups of 4."""
    monkeypatch.setattr(linalg_factor, "UPDATE", "kernel")
    monkeypatch.setattr(linalg_factor, "block_size", lambda device: 16)
    _force_groups(monkeypatch, device, 4)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_factorisations_with_the_update_kernel(device, gemm_updates, dtype):
    import scipy.linalg

    n = 83  # a partial last block, and 2 tiles of the update kernel at first
    a, g = _spd(n, dtype), _general(n, dtype)
    rng = np.random.default_rng(8)
    b1, bk = rng.standard_normal(n).astype(dtype), rng.standard_normal((n, 6)).astype(dtype)
    a64, g64 = a.astype(np.float64), g.astype(np.float64)
    tol = 1e-10 if dtype == np.float64 else 2e-4
    got = fl.linalg.cholesky(fl.asarray(a)).get()
    np.testing.assert_allclose(got, np.linalg.cholesky(a64), rtol=tol, atol=tol)
    # a launch per block for each update, as the contraction's (the copy, the factor's
    # tril, then per block the diagonal block, the panel and the update)
    da = fl.asarray(a)
    assert launches(lambda: fl.linalg.cholesky(da).eval(), warm=True) == 3 * -(-n // 16)
    for rhs in (b1, bk):
        np.testing.assert_allclose(fl.linalg.solve(fl.asarray(g), fl.asarray(rhs)).get(),
                                   np.linalg.solve(g64, rhs), rtol=tol, atol=tol)
    low = np.tril(g)
    for lower, trans in ((True, 0), (False, 0), (False, 1)):
        t = low if lower else low.T.copy()
        np.testing.assert_allclose(
            fl.linalg.solve_triangular(t, bk, lower=lower, trans=trans).get(),
            scipy.linalg.solve_triangular(t.astype(np.float64), bk, lower=lower,
                                          trans=trans), rtol=tol, atol=tol)
    np.testing.assert_allclose(fl.linalg.det(g).get(), np.linalg.det(g64), rtol=tol * 10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cholesky_panels_by_the_blocks_inverse(device, gemm_updates, dtype, monkeypatch):
    # with the update kernel (GPUs) the diagonal block's kernel also writes its factor's
    # inverse, and each panel is that inverse's product (no substitution launches)
    n = 83  # five blocks of 16 with a panel below, and a partial last one
    used = {"trmm_inverse": 0, "trsm_blocks": 0}

    def counting(name):
        original = getattr(linalg_kernels, name)

        def counted(*args, **kw):
            used[name] += 1
            return original(*args, **kw)
        return counted

    for name in used:
        monkeypatch.setattr(linalg_kernels, name, counting(name))
    tol = 1e-10 if dtype == np.float64 else 2e-4
    # ill-conditioned (1e8): the product with the inverse keeps L L^T = A to rounding
    q, _ = np.linalg.qr(np.random.default_rng(9).standard_normal((n, n)))
    a64 = (q * np.geomspace(1, 1e-8 if dtype == np.float64 else 1e-3, n)) @ q.T
    a = ((a64 + a64.T) / 2).astype(dtype)
    got = fl.linalg.cholesky(fl.asarray(a)).get().astype(np.float64)
    assert used == {"trmm_inverse": 5, "trsm_blocks": 0}
    np.testing.assert_allclose(got @ got.T, a.astype(np.float64), rtol=0, atol=tol)
    np.testing.assert_allclose(got, np.linalg.cholesky(a.astype(np.float64)),
                               rtol=0, atol=1e-6 if dtype == np.float64 else 5e-2)
    # the block kernel's inverse itself
    blk = _spd(16, dtype)
    w, inv = linalg_factor._copy(fl.asarray(blk)), fl.zeros(256, dtype)
    flag = linalg_factor._flag(w.device)
    buf = linalg_factor._buf
    linalg_kernels.potrf(buf(w), buf(flag), 0, 16, 16, 0, 16, w.dtype, w.device, buf(inv))
    lo = np.linalg.cholesky(blk.astype(np.float64))
    np.testing.assert_allclose(np.tril(w.get()), lo, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.tril(inv.get().reshape(16, 16)), np.linalg.inv(lo),
                               rtol=tol, atol=tol)


def test_update_kernel_rule():
    from types import SimpleNamespace

    gpu = SimpleNamespace(type="gpu", max_work_group_size=1024)
    cpu = SimpleNamespace(type="cpu", max_work_group_size=4096)
    small = SimpleNamespace(type="gpu", max_work_group_size=32)
    assert linalg_factor.update_kernel(gpu)
    assert not linalg_factor.update_kernel(cpu) and not linalg_factor.update_kernel(small)


def test_tournament_with_four_work_items_per_row(device, block16, monkeypatch):
    # the GPUs' tournament groups (4 work-items share each row of a slice's update)
    monkeypatch.setattr(linalg_kernels, "tslu_group_size", lambda device, rows: 4 * rows)
    rng = np.random.default_rng(9)
    n = 70  # slices of 32 rows: 3, then 2 levels of candidates
    a = (rng.standard_normal((n, n)) + 8 * np.eye(n))[rng.permutation(n)]
    b = rng.standard_normal(n)
    np.testing.assert_allclose(fl.linalg.solve(a, b).get(), np.linalg.solve(a, b), rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(fl.linalg.det(a).get(), np.linalg.det(a), rtol=1e-9)
    from types import SimpleNamespace

    gpu = SimpleNamespace(type="gpu", max_work_group_size=1024)
    assert linalg_kernels.tslu_group_size(gpu, 128) == 512
    assert linalg_kernels.tslu_group_size(gpu, 64) == 256


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_empty_stacks_give_numpy_shapes(device, dtype):
    """A stack of no matrices (shape (0, 3, 3)) gives numpy's empty results, shapes and
    dtypes, for the functions that loop over matrices (they raised before)."""
    a = np.zeros((0, 3, 3), dtype)
    x = fl.asarray(a, device=device)
    for name in ("cholesky", "inv", "det"):
        want = getattr(np.linalg, name)(a)
        got = getattr(fl.linalg, name)(x)
        assert got.shape == want.shape and got.dtype == want.dtype, name
    want = np.linalg.solve(a, a)
    got = fl.linalg.solve(x, x)
    assert got.shape == want.shape and got.dtype == want.dtype
