"""The GPUs' trailing-update kernel (fuseloop/linalg_gemm.py, ``C -= A B``) run on any
device, against numpy: both tilings the rule picks between, operands stored either
way round (each operand's stride-1 side along or across the inner size), a ``C``
inside a larger buffer, sizes that are not multiples of the tile or the inner step,
and ``lower``."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import linalg_factor, linalg_gemm, linalg_kernels


def test_tiling_rule():
    h100 = SimpleNamespace(type="gpu", compute_units=132, max_work_group_size=1024)
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    # big tiles while they give every compute unit a group; float64 4 x 4 per item
    assert linalg_gemm.gemm_tiling(h100, 4032, 4032, f32) == (128, 256)
    assert linalg_gemm.gemm_tiling(h100, 1024, 1024, f32) == (64, 64)
    assert linalg_gemm.gemm_tiling(h100, 4032, 4032, f64) == (64, 256)
    assert linalg_gemm.gemm_tiling(h100, 512, 512, f64) == (32, 64)
    # lower: only the triangle's tiles count (144 of them, 78 on and below the diagonal)
    assert linalg_gemm.gemm_tiling(h100, 1536, 1536, f32) == (128, 256)
    assert linalg_gemm.gemm_tiling(h100, 1536, 1536, f32, lower=True) == (64, 64)
    small = SimpleNamespace(type="gpu", compute_units=1, max_work_group_size=128)
    assert linalg_gemm.gemm_tiling(small, 4096, 4096, f32) == (64, 64)
    assert linalg_gemm.gemm_groups(130, 70, 64, False) == 3 * 2
    assert linalg_gemm.gemm_groups(130, 130, 64, True) == 6


def _run(c, a, b, c_at, a_at, b_at, m, n, kk, lower):
    buf = linalg_factor._buf
    dc = linalg_factor._copy(fl.asarray(c))
    linalg_kernels.gemm_update(buf(dc), buf(fl.asarray(a)), buf(fl.asarray(b)), m, n, kk,
                               c_at, a_at, b_at, lower, dc.dtype, dc.device)
    return dc.get()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_update_kernel_both_tilings(device, monkeypatch, dtype):
    rng = np.random.default_rng(27)
    m, n, kk = 131, 133, 21  # partial tiles, a partial last step of the inner size
    ld = 140
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    big, _ = linalg_gemm.gemm_tiling(SimpleNamespace(compute_units=1), 1 << 12, 1 << 12,
                                     np.dtype(dtype))
    for tile in (big, big // 2):
        wg = (tile * np.dtype(dtype).itemsize // (2 * linalg_gemm.GEMM_VECTOR_BYTES)) ** 2
        monkeypatch.setattr(linalg_kernels, "gemm_tiling", lambda *_, t=tile, w=wg: (t, w))
        a = rng.standard_normal((m, kk)).astype(dtype)
        b = rng.standard_normal((kk, n)).astype(dtype)
        c = rng.standard_normal((m + 2, ld)).astype(dtype)
        # C at c[1, 4] (whole tiles' rows 16-byte aligned: c read and written as
        # vectors) and at c[1, 3] (element by element), rows ld apart
        for col, a_args, b_args in ((4, (a.T.copy(), (0, 1, m)), (b, (0, n, 1))),
                                    (3, (a, (0, kk, 1)), (b.T.copy(), (0, 1, kk)))):
            want = c.copy()
            want[1:1 + m, col:col + n] -= a.astype(np.float64) @ b
            # the first: A stored transposed, B row-major (both operands' stride 1
            # across the inner size); the second the other way round
            got = _run(c, a_args[0], b_args[0], (ld + col, ld, 1), a_args[1], b_args[1],
                       m, n, kk, False)
            np.testing.assert_allclose(got, want, **tol)
        # lower: the tiles on and below the diagonal of a square C, from more than one
        # tile row (the groups numbered along the triangle), the rest left as it was
        sq = rng.standard_normal((m, ld)).astype(dtype)
        full = sq[:, :m] - a.astype(np.float64) @ a.T
        res = _run(sq, a, a, (0, ld, 1), (0, kk, 1), (0, 1, kk), m, m, kk, True)
        got = res[:, :m]
        tiles = np.arange(m) // tile
        above = tiles[:, None] < tiles[None, :]
        np.testing.assert_allclose(got[~above], full[~above], **tol)
        np.testing.assert_array_equal(got[above], sq[:, :m][above])
        np.testing.assert_array_equal(res[:, m:], sq[:, m:])  # (outside C)
