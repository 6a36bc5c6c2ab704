"""The GPUs' LU panel kernel (fuseloop/linalg_panel.py) run on any device, against numpy.

``fuseloop_tslu_rows`` is forced (``PANEL = "rows"``) with small blocks and groups so
that small matrices need several panels and, per panel, several levels of candidates;
its code is the GPU's, only the block and group sizes differ.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from launch_counts import launches

import fuseloop as fl
from fuseloop import linalg_factor, linalg_kernels, linalg_panel

GROUP = 64  # rows a group takes: with blocks of 16, four candidate sets per group


@pytest.fixture
def rows_panel(monkeypatch):
    """The GPUs' LU (this panel kernel, the trailing updates by fuseloop_gemm_update,
    work-groups of 4) with blocks of 16 and panel groups of GROUP rows."""
    monkeypatch.setattr(linalg_panel, "PANEL", "rows")
    monkeypatch.setattr(linalg_factor, "UPDATE", "kernel")
    monkeypatch.setattr(linalg_factor, "block_size", lambda device: 16)
    monkeypatch.setattr(linalg_kernels, "group_size", lambda device, parallel: 4)
    monkeypatch.setattr(linalg_panel, "rows_group_size", lambda device, nb, dtype: GROUP)
    return 16


def _shuffled(n, seed, dtype=np.float64):
    # the pivots lie in other groups than their columns
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, n)) / np.sqrt(n) + 2 * np.eye(n)
    return m[rng.permutation(n)].astype(dtype)


def test_levels_rule():
    # a panel of up to a group's rows is one launch; 4096 rows with groups of 512 and
    # blocks of 64 two (8 groups, then their 8 x 64 candidates in one group)
    assert linalg_panel.rows_levels(512, 64, 512) == [1]
    assert linalg_panel.rows_levels(4096, 64, 512) == [8, 1]
    assert linalg_panel.rows_levels(4097, 64, 512) == [9, 2, 1]
    assert linalg_panel.rows_levels(300, 16, 64) == [5, 2, 1]
    assert linalg_panel.rows_levels(20, 4, 64) == [1]
    gpu = SimpleNamespace(type="gpu", max_work_group_size=1024)
    cpu = SimpleNamespace(type="cpu", max_work_group_size=4096)
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert linalg_panel.rows_group_size(gpu, 64, f32) == 512
    assert linalg_panel.rows_group_size(gpu, 64, f64) == 256
    assert linalg_panel.use_rows(gpu, 64, f32) and linalg_panel.use_rows(gpu, 32, f64)
    assert not linalg_panel.use_rows(cpu, 128, f32)
    small = SimpleNamespace(type="gpu", max_work_group_size=64)  # groups of 64 < 2 x 64
    assert not linalg_panel.use_rows(small, 64, f32) and linalg_panel.use_rows(small, 32, f32)
    # 16 KiB of local memory (8 usable): not the 24 KiB a group of 512 rows needs
    tiny = SimpleNamespace(type="gpu", max_work_group_size=1024,
                           cl_device=SimpleNamespace(local_mem_size=16384))
    assert not linalg_panel.use_rows(tiny, 64, f32)


@pytest.mark.parametrize("n", [40, 300])
def test_launches_per_panel(device, rows_panel, n):
    # per panel its levels (rows_levels) instead of the slices' log2 tournament; the
    # rest of the LU as in test_linalg_device.test_launches_per_block
    nb = rows_panel
    blocks = -(-n // nb)
    levels = sum(len(linalg_panel.rows_levels(n - k, min(nb, n - k), GROUP))
                 for k in range(0, n, nb))
    # one launch up to a group's rows, two up to 4 groups (one group merges 4 sets of
    # 16 candidates), three up to 16
    assert levels == sum(1 + (n - k > GROUP) + (n - k > 4 * GROUP) for k in range(0, n, nb))
    gen = fl.asarray(_shuffled(n, 1))
    assert launches(lambda: linalg_factor._lu(gen), warm=True) == \
        2 + levels + blocks + 2 * (blocks - 1)


@pytest.mark.parametrize("n", [1, 17, 64, 300])
def test_solve_det_slogdet(device, rows_panel, n):
    # n = 300: panels of 300 .. 12 rows (not a multiple of the block), three levels to
    # one; the determinant's sign checks the row exchanges recorded as LAPACK's
    a = _shuffled(n, n)
    b = np.random.default_rng(2).standard_normal((n, 3))
    np.testing.assert_allclose(fl.linalg.solve(a, b).get(), np.linalg.solve(a, b), rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(fl.linalg.det(a).get(), np.linalg.det(a), rtol=1e-9)
    sign, logdet = fl.linalg.slogdet(a)
    assert sign.get() == np.linalg.slogdet(a)[0]
    np.testing.assert_allclose(logdet.get(), np.linalg.slogdet(a)[1], rtol=1e-10)


def test_rows_read_in_chunks(device, rows_panel, monkeypatch):
    # groups of 256: their rows read through local memory 64 at a time (4 chunks)
    monkeypatch.setattr(linalg_panel, "rows_group_size", lambda device, nb, dtype: 256)
    n = 300  # the first panels: two groups, then one
    a = _shuffled(n, 11)
    b = np.random.default_rng(12).standard_normal(n)
    np.testing.assert_allclose(fl.linalg.solve(a, b).get(), np.linalg.solve(a, b), rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(fl.linalg.det(a).get(), np.linalg.det(a), rtol=1e-9)


def test_one_level_pivots_are_lapacks(device, rows_panel):
    # panels of at most a group's rows: partial pivoting itself, so LAPACK's pivots and
    # factors (ties included: the first largest |a| in the current row order)
    import scipy.linalg

    n = GROUP
    a = np.random.default_rng(3).standard_normal((n, n)) / 2
    # a tie that rounding cannot break: column 0's pivot is row 2, so row 0 moves to
    # position 2; in column 1 rows 1 and 0 then tie (5 = 5 - 0 / 3): LAPACK picks
    # position 1, row 1, not row 0 (a smaller row number)
    a[:3, :2] = [[1, 5], [0, 5], [3, 0]]
    a[3:, 0] = np.clip(a[3:, 0], -2, 2)
    f = linalg_factor._lu(fl.asarray(a))
    lu, piv = scipy.linalg.lu_factor(a)
    np.testing.assert_array_equal(f.piv.get(), piv)
    np.testing.assert_allclose(f.lu.get(), lu, rtol=1e-10, atol=1e-10)
    # the rows' net order: L U = A[rows]
    low = np.tril(f.lu.get(), -1) + np.eye(n)
    np.testing.assert_allclose(low @ np.triu(f.lu.get()), a[f.rows.get()], atol=1e-10)


def test_float32_factors(device, rows_panel):
    n = 150
    a = _shuffled(n, 4, np.float32)
    f = linalg_factor._lu(fl.asarray(a))
    lu = f.lu.get().astype(np.float64)
    low = np.tril(lu, -1) + np.eye(n)
    a64 = a.astype(np.float64)
    err = np.abs(low @ np.triu(lu) - a64[f.rows.get()]).max()
    assert err <= 20 * np.finfo(np.float32).eps * n * np.abs(a64).max(), err
    assert sorted(f.rows.get()) == list(range(n)) and f.bad == 0


def test_singular(device, rows_panel):
    a = _shuffled(100, 5)
    a[:, 37] = 0  # a zero pivot in the third panel, found at its final level
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        fl.linalg.solve(a, np.ones(100))
    assert fl.linalg.det(a).get() == 0 == np.linalg.det(a)
    sign, logdet = fl.linalg.slogdet(a)
    assert sign.get() == 0 and logdet.get() == -np.inf
    assert linalg_factor._lu(fl.asarray(a)).bad == 38
    z = np.zeros((20, 20))  # every pivot zero: the first column flagged
    assert linalg_factor._lu(fl.asarray(z)).bad == 1
    assert fl.linalg.det(z).get() == 0


def test_gpu_group_local_memory():
    # the GPUs' groups (512 rows, blocks of 64; 256 rows for float64) within the
    # local memory and work-items a GPU group may use
    gpu = SimpleNamespace(type="gpu", max_work_group_size=1024)
    for dt in (np.dtype(np.float32), np.dtype(np.float64)):
        nb = linalg_kernels.fit_block(gpu, 64, dt)
        wg = linalg_panel.rows_group_size(gpu, nb, dt)
        assert wg <= 1024 and wg >= 2 * nb
        assert linalg_panel.rows_local_bytes(wg, nb, dt) <= linalg_kernels.GPU_LOCAL_BYTES


def test_triangular_solves_with_lanes(device, rows_panel, monkeypatch):
    # the GPUs' fuseloop_trsm_blocks: 4 work-items a vector (groups of 4 x 64), in the
    # LU's panel and block row solves, Cholesky's panel and solves with many vectors
    monkeypatch.setattr(linalg_kernels, "trsm_lanes", lambda device: 4)
    n = 70
    a = _shuffled(n, 8)
    b = np.random.default_rng(9).standard_normal((n, linalg_kernels.FEW_RHS + 3))
    np.testing.assert_allclose(fl.linalg.solve(a, b).get(), np.linalg.solve(a, b), rtol=1e-9,
                               atol=1e-12)
    spd = a @ a.T
    np.testing.assert_allclose(fl.linalg.cholesky(spd).get(), np.linalg.cholesky(spd),
                               rtol=1e-9, atol=1e-12)
    z = _shuffled(40, 10)
    z[:, 17] = 0  # LU's unit 2: the zero on U's diagonal skipped
    assert linalg_factor._lu(fl.asarray(z)).bad == 18
    np.testing.assert_allclose(fl.linalg.det(a).get(), np.linalg.det(a), rtol=1e-9)
