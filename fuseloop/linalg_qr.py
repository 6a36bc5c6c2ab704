"""``fl.linalg.qr`` on the device: blocked Householder QR, as LAPACK's geqrf and orgqr.

Per block column of ``nb`` (at most ``min(m, n)`` reflectors in all) one launch of
``fuseloop_geqr2`` (:mod:`fuseloop.linalg_qr_kernels`) factors the panel in one
work-group: its Householder vectors (stored below the diagonal, LAPACK's layout),
``tau``, its part of ``R``, and the compact WY factor ``T`` (``H_1 ... H_b = I - V T
V^T``), from which it writes ``V`` and ``Y = -V T`` as plain matrices.  The trailing
columns are then updated by two matrix products, ``W = (V T)^T A`` and ``A -= V W``,
and ``Q`` is formed from the identity by the same two products per block, last block
first (``Q -= (V T) (V^T Q)``): fuseloop contractions on CPUs, the hand-written
``C -= A B`` kernel and its ``C = -(A B)`` build on GPUs (the rule of
:func:`fuseloop.linalg_factor.update_kernel`; there ``W``, a few tiles with the rows as
inner size, is computed in slices of the rows and their sum, one more launch).  So a
panel is 3 launches (on GPUs up to 4), and ``Q`` 2 (3) more a panel.  The reflectors
are LAPACK's (``beta = -sign(alpha) |x|``), so ``R`` and ``Q`` are numpy's up to
rounding, with the same signs.

Real float32 and float64; complex matrices: :mod:`fuseloop.linalg_qr_complex`.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import numpy as np

from . import linalg_factor as _f
from . import linalg_gemm as _gemm
from . import linalg_kernels as _k
from .array import Array
from .creation import arange, empty, zeros
from .expr.nodes import Storage
from .linalg_qr_kernels import geqr2_local_bytes
from .ops.linalg import _contract
from .ops.shape import reshape, triu
from .runtime.devices import Device

#: work-items of a ``fuseloop_geqr2`` group on a GPU (within the device's limit; a power
#: of two): per column each walks 1 / (PANEL_GROUP / nb) of the panel's rows, so more
#: is faster until the group's barriers and local memory cost more (float64 blocks of
#: 64 fit 40 KiB with up to 512); FUSELOOP_QR_PANEL_GROUP, for tuning on a GPU
PANEL_GROUP = int(os.environ.get("FUSELOOP_QR_PANEL_GROUP", "512") or 512)


class QRResult(NamedTuple):
    """``qr``'s result (numpy's field names)."""

    Q: Array
    R: Array


def panel_group_size(device: Any) -> int:
    """Work-items of a ``fuseloop_geqr2`` group: 1 on a CPU (PoCL runs a group's
    work-items one after another on one core), :data:`PANEL_GROUP` on a GPU."""
    if device.type == "cpu":
        return 1
    want = PANEL_GROUP
    while want > device.max_work_group_size:
        want //= 2
    return want


#: the QR's block width instead of :func:`qr_block`'s rule (0: the rule);
#: FUSELOOP_QR_BLOCK, for tuning on a GPU
QR_BLOCK = int(os.environ.get("FUSELOOP_QR_BLOCK", "0") or 0)


def qr_block(device: Any, dtype: np.dtype) -> int:
    """The QR's block width: the factorisations' (:func:`~fuseloop.linalg_factor.block_size`),
    halved on GPUs (a panel is one work-group, one SM, which reads it once per column: its
    time grows with the block, the trailing products' falls), then until a panel group's
    local memory (``T`` is nb x nb) fits the device's; :data:`QR_BLOCK` overrides the
    rule's first part."""
    nb = QR_BLOCK or (_f.block_size(device) // (1 if device.type == "cpu" else 2))
    wg = panel_group_size(device)
    while nb > 8 and geqr2_local_bytes(nb, wg, dtype.itemsize) > _k.local_limit(device):
        nb //= 2
    return nb


#: the fewest inner indices (the panel's rows) a slice of ``fuseloop_gemm_set`` takes,
#: and the most slices
SPLIT_ROWS = 256
MAX_SPLIT = 16


def set_slices(device: Any, m: int, n: int, kk: int, dtype: np.dtype) -> tuple[int, int]:
    """``(slices, inner indices per slice)`` of ``C = -(A B)`` (m x n, inner size kk):
    enough slices for two work-groups per compute unit, each of at least
    :data:`SPLIT_ROWS` inner indices (a multiple of 8, the kernel's step)."""
    tile, _ = _k.gemm_tiling(device, m, n, dtype, False)
    groups = _gemm.gemm_groups(m, n, tile, False)
    units = max(1, getattr(device, "compute_units", 1))
    want = min(MAX_SPLIT, -(-kk // SPLIT_ROWS), max(1, -(-2 * units // groups)))
    if want <= 1:
        return 1, kk
    chunk = -(-kk // want)
    chunk = -(-chunk // 8) * 8
    return -(-kk // chunk), chunk


def gemm_set(c: Storage, a: Storage, b: Storage, m: int, n: int, kk: int,
             c_at: tuple[int, int, int], a_at: tuple[int, int, int],
             b_at: tuple[int, int, int], dtype: np.dtype, device: Device,
             parts: Storage | None = None) -> int:
    """``C = -(A B)`` (``m x n``, inner size ``kk``) by ``fuseloop_gemm_set``, laid out
    as :func:`fuseloop.linalg_kernels.gemm_update`'s operands; with ``parts`` (room for
    ``MAX_SPLIT`` m x n slices) split along the inner size (:func:`set_slices`) and the
    slices added into ``C`` (contiguous) by ``fuseloop_qr_sum``.  Returns the launches."""
    if m <= 0 or n <= 0 or kk <= 0:
        return 0
    slices, chunk = set_slices(device, m, n, kk, dtype) if parts is not None else (1, kk)
    tile, wg = _k.gemm_tiling(device, m, n, dtype, False)
    groups = _gemm.gemm_groups(m, n, tile, False)
    out, out_at = (c, c_at) if parts is None or slices == 1 else (parts, (0, n, 1))
    _k.launch("fuseloop_gemm_set", dtype, [out], [a, b],
              [m, n, kk, *a_at, *b_at, *out_at, chunk], device,
              groups=groups * slices, nb=tile, wg=wg, vpg=4 if _gemm.GEMM_VECTOR_C else 1)
    if slices == 1:
        return 1
    assert parts is not None and c_at == (0, n, 1), c_at
    _k.launch("fuseloop_qr_sum", dtype, [c], [parts], [m * n, slices, m * n], device, m * n)
    return 2


class _Factors(NamedTuple):
    """A QR factorisation of an m x n matrix, k = min(m, n) reflectors."""

    w: Array  #: m x n: R on and above the diagonal, the reflectors below (LAPACK's)
    v: Array  #: m x k, each block's V (unit lower trapezoidal) in its columns
    y: Array  #: m x k, each block's -V T in its columns
    tau: Array  #: k (or 1 where k = 0)
    nb: int


def _parts(device: Any, dtype: np.dtype, size: int) -> Array | None:
    """The slices of ``fuseloop_gemm_set``'s products (``size`` elements each) where the
    products are the hand-written kernels' (:func:`~fuseloop.linalg_factor.update_kernel`),
    else None (fuseloop's contractions)."""
    return empty((MAX_SPLIT * size,), dtype, device) if _f.update_kernel(device) else None


def _factor(a: Array) -> _Factors:
    """The blocked Householder QR of the m x n matrix ``a`` (a new array; ``a`` is
    left as it is)."""
    m, n = a.shape
    kk, dev, dt = min(m, n), a.device, a.dtype
    w = _f._copy(a)
    nb = qr_block(dev, dt)
    v = empty((m, kk), dt, dev)
    y = empty((m, kk), dt, dev)
    tau = empty((max(kk, 1),), dt, dev)
    scratch = empty((nb * max(n, m),), dt, dev)
    # (the panel kernel's two columns in flight: see fuseloop_geqr2)
    columns = empty((2 * m,), dt, dev)
    bufs = [_f._buf(w), _f._buf(tau), _f._buf(v), _f._buf(y), _f._buf(columns)]
    parts = _parts(dev, dt, nb * max(n, m))
    for k in range(0, kk, nb):
        k2 = min(kk, k + nb)
        _k.launch("fuseloop_geqr2", dt, bufs, [], [k, m, n, k2 - k, kk], dev, groups=1,
                  nb=nb, wg=panel_group_size(dev))
        if k2 < n:
            # A -= V T^T V^T A = V ((V T)^T A): scratch = -(Y^T A) = (V T)^T A
            _apply_trailing(w, v, y, k, k2, scratch, parts)
    return _Factors(w, v, y, tau, nb)


def _apply_trailing(w: Array, v: Array, y: Array, k: int, k2: int, scratch: Array,
                    parts: Array | None) -> None:
    """The trailing columns ``k2:`` of rows ``k:`` of ``w`` multiplied by the block's
    ``(I - V T V^T)^T``."""
    m, n = w.shape
    rows, cols, b = m - k, n - k2, k2 - k
    if parts is not None:  # (the hand-written kernels)
        kk = v.shape[1]
        at, sc = k * kk + k, _f._buf(scratch)
        gemm_set(sc, _f._buf(y), _f._buf(w), b, cols, rows, (0, cols, 1), (at, 1, kk),
                 (k * n + k2, n, 1), w.dtype, w.device, _f._buf(parts))
        _k.gemm_update(_f._buf(w), _f._buf(v), sc, rows, cols, b, (k * n + k2, n, 1),
                       (at, kk, 1), (0, cols, 1), False, w.dtype, w.device)
        return
    # scratch = Y^T A = -(V T)^T A, then A += V scratch
    s = reshape(scratch[:b * cols], (b, cols))
    s[...] = _contract([(y[k:, k:k2], "pi"), (w[k:, k2:], "pj")], "ij",
                       {"i": b, "j": cols, "p": rows})
    w[k:, k2:] += _f._product(v[k:, k:k2], s)


def _form_q(f: _Factors, cols: int) -> Array:
    """The first ``cols`` columns of ``Q = H_1 ... H_k`` (LAPACK's orgqr): the identity
    multiplied by each block's ``I - V T V^T``, last block first; block ``k:k2``
    changes only rows and columns from ``k`` on."""
    m, kk = f.v.shape
    dev, dt = f.w.device, f.w.dtype
    q = _f._copy((reshape(arange(m, device=dev), (m, 1)) == arange(cols, device=dev))
                 .astype(dt))
    scratch = empty((f.nb * max(cols, 1),), dt, dev)
    parts = _parts(dev, dt, f.nb * max(cols, 1))
    for k in reversed(range(0, kk, f.nb)):
        k2 = min(kk, k + f.nb)
        _apply_q(q, f, k, k2, scratch, parts)
    return q


def _apply_q(q: Array, f: _Factors, k: int, k2: int, scratch: Array,
             parts: Array | None) -> None:
    """``Q[k:, k:] -= (V T) (V^T Q[k:, k:])`` for the block ``k:k2``."""
    m, cols = q.shape
    kk = f.v.shape[1]
    rows, b, width = m - k, k2 - k, cols - k
    if parts is not None:  # (the hand-written kernels)
        at, sc = k * kk + k, _f._buf(scratch)
        # scratch = -(V^T Q), then Q -= Y scratch, Y = -V T
        gemm_set(sc, _f._buf(f.v), _f._buf(q), b, width, rows, (0, width, 1), (at, 1, kk),
                 (k * cols + k, cols, 1), q.dtype, q.device, _f._buf(parts))
        _k.gemm_update(_f._buf(q), _f._buf(f.y), sc, rows, width, b, (k * cols + k, cols, 1),
                       (at, kk, 1), (0, width, 1), False, q.dtype, q.device)
        return
    s = reshape(scratch[:b * width], (b, width))
    s[...] = _contract([(f.v[k:, k:k2], "pi"), (q[k:, k:], "pj")], "ij",
                       {"i": b, "j": width, "p": rows})
    q[k:, k:] += _f._product(f.y[k:, k:k2], s)


def qr_matrix(a: Array, mode: str) -> QRResult | Array:
    """``numpy.linalg.qr`` of one real m x n matrix on the device."""
    m, n = a.shape
    kk, dev, dt = min(m, n), a.device, a.dtype
    q_cols = m if mode == "complete" else kk
    r_rows = m if mode == "complete" else kk
    if kk == 0:  # (no reflectors: numpy's empty or identity results)
        r0 = zeros((r_rows, n), dt, dev)
        if mode == "r":
            return r0
        eye = (reshape(arange(m, device=dev), (m, 1)) == arange(q_cols, device=dev))
        return QRResult(eye.astype(dt), r0)
    f = _factor(a)
    r = triu(f.w[:r_rows])
    if mode == "r":
        return r
    return QRResult(_form_q(f, q_cols), r)


def qr_empty_batch(a: Array, mode: str) -> QRResult | Array:
    """``qr`` of a stack of no matrices: numpy's (empty) shapes."""
    *batch, m, n = a.shape
    kk = min(m, n)
    q_cols, r_rows = (m, m) if mode == "complete" else (kk, kk)
    r = zeros((*batch, r_rows, n), a.dtype, a.device)
    return r if mode == "r" else QRResult(zeros((*batch, m, q_cols), a.dtype, a.device), r)


__all__ = ["PANEL_GROUP", "QR_BLOCK", "QRResult", "gemm_set", "panel_group_size", "qr_block",
           "qr_empty_batch", "qr_matrix"]
