"""fl.linalg.qr on the device (fuseloop/linalg_qr.py) against numpy.

Blocks of 16 make small matrices span several panels (a partial last one); the GPUs'
variant (panel groups of several work-items, the trailing products by
``fuseloop_gemm_update`` and ``fuseloop_gemm_set``) runs here on any device.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from launch_counts import launches

import fuseloop as fl
from fuseloop import linalg_factor, linalg_qr

MODES = ("reduced", "complete", "r")
#: the contractions' tests' shape: 3 panels of 16 (a partial one), a trailing update
#: after the first two
TALL = (60, 40)


@pytest.fixture
def block16(monkeypatch):
    monkeypatch.setattr(linalg_factor, "block_size", lambda device: 16)
    return 16


@pytest.fixture
def products(monkeypatch, block16):
    """The trailing products by the hand-written kernels (as on GPUs): built once for
    any shape, where fuseloop's contraction kernels are built per structure, which a
    shape's coincident sizes change (each build costs CI about a second)."""
    monkeypatch.setattr(linalg_factor, "UPDATE", "kernel")
    return block16


@pytest.fixture
def gpu_variant(monkeypatch, block16):
    """The GPUs' code paths: panel groups of 32 work-items (two lanes of rows, each
    work-item a column of the 16, 4 rows at a time), the products by the hand-written
    kernels."""
    monkeypatch.setattr(linalg_factor, "UPDATE", "kernel")
    monkeypatch.setattr(linalg_qr, "panel_group_size", lambda device: 32)
    # (V^T A in slices of the rows, added by fuseloop_qr_sum)
    monkeypatch.setattr(linalg_qr, "SPLIT_ROWS", 8)
    return block16


def _check(a, got, mode, tol):
    """``got`` is numpy's QR of ``a`` (the same signs), Q orthonormal, Q R = a."""
    want = np.linalg.qr(a.astype(np.float64), mode=mode)
    scale = max(1.0, np.abs(a).max())
    if mode == "r":
        assert got.shape == want.shape and got.dtype == a.dtype
        np.testing.assert_allclose(got.get(), want, atol=tol * scale)
        return
    q, r = got.Q.get(), got.R.get()
    assert q.shape == want.Q.shape and r.shape == want.R.shape
    assert q.dtype == a.dtype and r.dtype == a.dtype
    np.testing.assert_allclose(q, want.Q, atol=tol)
    np.testing.assert_allclose(r, want.R, atol=tol * scale)
    np.testing.assert_allclose(q.T @ q, np.eye(q.shape[1]), atol=tol)
    np.testing.assert_allclose(q @ r, a, atol=tol * scale)


@pytest.mark.parametrize("shape", [(40, 40), (60, 40), (40, 60)],
                         ids=["square", "tall", "wide"])
def test_qr_float64(device, products, shape):
    a = np.random.default_rng(sum(shape)).standard_normal(shape)
    da = fl.asarray(a)
    for mode in MODES:
        _check(a, fl.linalg.qr(da, mode=mode), mode, 1e-12)


def test_qr_by_contractions(device, block16):
    # a CPU's products (fuseloop's contractions): one shape, which the tests below share
    # ("complete" differs only in Q's width: test_qr_float64)
    a = np.random.default_rng(1).standard_normal(TALL)
    da = fl.asarray(a)
    for mode in ("reduced", "r"):
        _check(a, fl.linalg.qr(da, mode=mode), mode, 1e-12)


def test_qr_default_block_and_ints(device, monkeypatch):
    # one panel of the device's block (m, n below 128 on a CPU; the products by the
    # hand-written kernels, as in the tests above); ints as numpy
    monkeypatch.setattr(linalg_factor, "UPDATE", "kernel")
    a = np.random.default_rng(3).standard_normal(TALL)
    _check(a, fl.linalg.qr(fl.asarray(a)), "reduced", 1e-12)
    ints = np.arange(12).reshape(4, 3) % 5
    got = fl.linalg.qr(fl.asarray(ints))
    assert got.R.dtype == np.float64
    np.testing.assert_allclose(got.R.get(), np.linalg.qr(ints).R, atol=1e-12)


def test_gpu_variant(device, gpu_variant):
    # (float32 here; float64 in the tests above)
    rng = np.random.default_rng(7)
    for shape in ((53, 37), (37, 53)):
        a = rng.standard_normal(shape).astype(np.float32)
        for mode in ("reduced", "complete"):
            _check(a, fl.linalg.qr(fl.asarray(a), mode=mode), mode, 3e-5)


def test_gemm_set_kernel(device, monkeypatch):
    # C = -(A B), C's old values not read (NaN here): A transposed in its buffer (as
    # the QR's V^T), a whole, aligned 64 x 64 tile (written as vectors) and a partial one
    rng = np.random.default_rng(8)
    m, n, kk = 64, 100, 37
    a_t, b = rng.standard_normal((kk, m)), rng.standard_normal((kk, n))
    da, db = fl.asarray(a_t), fl.asarray(b)
    dc = linalg_factor._copy(fl.asarray(np.full((m, n), np.nan)))
    buf = linalg_factor._buf
    assert linalg_qr.gemm_set(buf(dc), buf(da), buf(db), m, n, kk, (0, n, 1), (0, 1, m),
                              (0, n, 1), dc.dtype, dc.device) == 1
    np.testing.assert_allclose(dc.get(), -(a_t.T @ b), rtol=1e-12, atol=1e-12)
    # in slices of the inner size (here 2 or 3 of 16 or 24), added by a second launch
    monkeypatch.setattr(linalg_qr, "SPLIT_ROWS", 16)
    slices, chunk = linalg_qr.set_slices(dc.device, m, n, kk, dc.dtype)
    assert slices > 1 and chunk % 8 == 0 and (slices - 1) * chunk < kk <= slices * chunk
    parts = fl.empty((linalg_qr.MAX_SPLIT * m * n,))
    dc[...] = np.nan
    assert linalg_qr.gemm_set(buf(dc), buf(da), buf(db), m, n, kk, (0, n, 1), (0, 1, m),
                              (0, n, 1), dc.dtype, dc.device, buf(parts)) == 2
    np.testing.assert_allclose(dc.get(), -(a_t.T @ b), rtol=1e-12, atol=1e-12)


def test_rank_deficient(device, block16):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((TALL[0], 5)) @ rng.standard_normal((5, TALL[1]))
    a[:, 7] = 0  # and a zero column: a reflector with tau = 0
    q, r = fl.linalg.qr(fl.asarray(a))
    q, r = q.get(), r.get()
    want = np.linalg.qr(a).R
    np.testing.assert_allclose(q.T @ q, np.eye(40), atol=1e-12)
    np.testing.assert_allclose(q @ r, a, atol=1e-12)
    # rows past the rank are rounding noise: numpy's up to each row's sign
    signs = np.where(np.sum(r * want, axis=1) < 0, -1.0, 1.0)
    np.testing.assert_allclose(r * signs[:, None], want, atol=1e-12)
    np.testing.assert_allclose(r[:5], want[:5], atol=1e-12)


def test_batched_and_empty(device, products):
    a = np.random.default_rng(5).standard_normal((2, 2, 40, 60))
    got = fl.linalg.qr(fl.asarray(a))
    want = np.linalg.qr(a)
    np.testing.assert_allclose(got.Q.get(), want.Q, atol=1e-12)
    np.testing.assert_allclose(got.R.get(), want.R, atol=1e-12)
    for shape in ((0, 3), (3, 0), (0, 4, 2)):
        e = np.zeros(shape)
        for mode in MODES:
            w = np.linalg.qr(e, mode=mode)
            g = fl.linalg.qr(fl.asarray(e), mode=mode)
            if mode == "r":
                assert g.shape == w.shape
            else:
                np.testing.assert_array_equal(g.Q.get(), w.Q)
                np.testing.assert_array_equal(g.R.get(), w.R)


def test_no_host_fallback_for_real_input(device, products):
    a = fl.asarray(np.random.default_rng(6).standard_normal(TALL))
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.HostFallbackWarning)
        for mode in MODES:
            fl.linalg.qr(a, mode=mode)
        fl.linalg.qr(a * 1j)  # (complex: on the device too, tests/test_linalg_complex.py)


def test_bad_input(device):
    with pytest.raises(fl.linalg.LinAlgError, match="1-dimensional"):
        fl.linalg.qr(np.ones(3))
    with pytest.raises(ValueError, match="unknown mode 'raw'"):
        fl.linalg.qr(np.ones((3, 3)), mode="raw")


@pytest.mark.parametrize("variant", ["contraction", "kernel"])
def test_launches_per_panel(device, block16, monkeypatch, variant):
    # per panel the panel kernel and, while columns are left of it, the two products
    # of its trailing update; Q two products per panel.  Besides: the copy of the
    # matrix, R's triangle, and Q's identity
    monkeypatch.setattr(linalg_factor, "UPDATE", variant)
    for m, n in ((40, 60), TALL) if variant == "kernel" else (TALL,):
        panels = -(-min(m, n) // block16)
        trailing = panels - (n <= min(m, n))  # (the last panel has none where n <= m)
        a = fl.asarray(np.random.default_rng(m + n).standard_normal((m, n)))
        factor = 1 + panels + 2 * trailing
        assert launches(lambda a=a: fl.linalg.qr(a, mode="r").eval(), warm=True) == factor + 1
        assert launches(lambda a=a: fl.compute(*fl.linalg.qr(a)), warm=True) == \
            factor + 1 + 1 + 2 * panels


def test_panel_rules(monkeypatch):
    from types import SimpleNamespace

    gpu = SimpleNamespace(type="gpu", max_work_group_size=1024)
    cpu = SimpleNamespace(type="cpu", max_work_group_size=4096)
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert linalg_qr.panel_group_size(cpu) == 1
    assert linalg_qr.panel_group_size(gpu) == linalg_qr.PANEL_GROUP == 512
    assert linalg_qr.panel_group_size(SimpleNamespace(type="gpu", max_work_group_size=256)) == 256
    # half the factorisations' block on GPUs (32), theirs on CPUs; halved again where a
    # panel group's local memory does not fit (8 KiB usable of 16)
    assert linalg_qr.qr_block(gpu, f32) == 32 and linalg_qr.qr_block(gpu, f64) == 32
    assert linalg_qr.qr_block(cpu, f64) == linalg_factor.block_size(cpu) == 128
    tiny = SimpleNamespace(type="gpu", max_work_group_size=1024,
                           cl_device=SimpleNamespace(local_mem_size=16384))
    assert linalg_qr.qr_block(tiny, f64) == 16
    # float64 blocks of 64 with groups of 512: T (32 KiB) and the lanes' sums fit 40 KiB
    monkeypatch.setattr(linalg_qr, "QR_BLOCK", 64)
    assert linalg_qr.qr_block(gpu, f64) == 64
