"""``fl.linalg.qr`` of complex matrices on the device: blocked Householder QR with
complex reflectors, as LAPACK's zgeqrf and zungqr.

Per block column one launch of ``fuseloop_cgeqr2`` factors the panel in one
work-group: per column the reflector ``H = I - tau v v^H`` of LAPACK's zlarfg
(``beta = -sign(Re alpha) |(alpha, x)|`` real, ``tau = (beta - alpha) / beta``, ``v =
x / (alpha - beta)`` below a 1; ``tau = 0`` only where ``x = 0`` and ``alpha`` is
real), so that ``R``'s diagonal is real, with numpy's signs; ``H^H`` is applied to
the panel's other columns (a work-item a column), and then the compact WY factor
``T`` (``H_1 ... H_b = I - V T V^H``) is formed.  ``V`` and ``T`` are written out as
plain matrices; the trailing columns are updated by three complex products
(:func:`fuseloop.linalg_complex.gemm`), ``A -= V (T^H (V^H A))``, and ``Q`` is formed
from the identity, last block first, by ``Q -= V (T (V^H Q))``.  The panel kernel is
the simple, sequential part: on a GPU its work-group parallelises the column norms
and the panel's columns only.
"""

from __future__ import annotations

import threading

import numpy as np

from . import caches as _caches
from . import launching
from .array import Array
from .cache import KernelPlan, SourceKernel
from .creation import arange, empty
from .linalg_complex import _PRELUDE, gemm, group_size
from .linalg_kernels import buffer as _buf
from .linalg_kernels import contiguous_copy as _copy
from .linalg_qr import QRResult, qr_matrix
from .ops.shape import reshape, triu

# One panel (columns k..k+b of rows k..m of the row-major m x ld a; b <= NB) of a
# complex Householder QR in place, by one work-group; complex values as two reals
# (real, imaginary: no complex type, so that the source also builds as CUDA C++).
# Writes the panel's V (unit lower trapezoidal, zeros above; rows k..m,
# columns k..k+b of the m x ldv v) and its T (b x b, row-major, into t).
_CGEQR2 = r"""
#define AR(i, j) a[2 * ((long)(i) * ld + (j))]
#define AI(i, j) a[2 * ((long)(i) * ld + (j)) + 1]
#define TR(i, j) tre[(i) * NB + (j)]
#define TI(i, j) tim[(i) * NB + (j)]
#define CW (WG < NB ? WG : NB)
#define RL (WG / CW)
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_cgeqr2(__global RT *a, __global RT *v, __global RT *t,
                     const long k, const long m, const long ld, const long b_,
                     const long ldv)
{
    __local RT red[WG];
    __local RT tre[NB * NB], tim[NB * NB];
    __local RT taur[NB], taui[NB], dsr[NB], dsi[NB];
    __local RT pr[RL * NB], pim[RL * NB];
    const int lid = get_local_id(0), b = (int)b_, cl = lid % CW, lane = lid / CW;
    for (int j = 0; j < b; ++j) {
        const long row = k + j, col = k + j;
        RT s = (RT)0;
        for (long i = row + 1 + lid; i < m; i += WG)
            s += AR(i, col) * AR(i, col) + AI(i, col) * AI(i, col);
        red[lid] = s;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int h = WG / 2; h > 0; h /= 2) {
            if (lid < h)
                red[lid] += red[lid + h];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        /* the reflector, the same in every work-item */
        const RT sigma = red[0], ar = AR(row, col), ai = AI(row, col);
        RT beta = ar, tr = (RT)0, ti = (RT)0, sr = (RT)0, si = (RT)0;
        if (sigma != (RT)0 || ai != (RT)0) {
            const RT norm = sqrt(ar * ar + ai * ai + sigma);
            beta = ar >= (RT)0 ? -norm : norm;
            tr = (beta - ar) / beta;
            ti = -ai / beta;
            const RT dr = ar - beta, d2 = dr * dr + ai * ai;  /* 1 / (alpha - beta) */
            sr = dr / d2;
            si = -ai / d2;
        }
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);  /* (all have read them) */
        for (long i = row + 1 + lid; i < m; i += WG) {
            const RT xr = AR(i, col), xi = AI(i, col);
            AR(i, col) = xr * sr - xi * si;
            AI(i, col) = xr * si + xi * sr;
        }
        if (lid == 0) {
            AR(row, col) = beta;
            AI(row, col) = (RT)0;
            taur[j] = tr;
            taui[j] = ti;
        }
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        /* H^H = I - conj(tau) v v^H on the panel's columns right of j: the work-items
           as CW columns by RL row lanes, the lanes' partial v^H a[:, c] summed in
           local memory (tau = 0: nothing subtracted; no barrier in a branch) */
        for (int c = cl; c < b; c += CW) {
            RT wr = (RT)0, wi = (RT)0;
            if (c > j) {
                const long cc = k + c;
                if (lane == 0) {  /* (v's 1 at row j) */
                    wr = AR(row, cc);
                    wi = AI(row, cc);
                }
                for (long i = row + 1 + lane; i < m; i += RL) {
                    const RT vr = AR(i, col), vi = AI(i, col);
                    const RT xr = AR(i, cc), xi = AI(i, cc);
                    wr += vr * xr + vi * xi;
                    wi += vr * xi - vi * xr;
                }
            }
            pr[lane * NB + c] = wr;
            pim[lane * NB + c] = wi;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = lid; c < b; c += WG) {
            RT wr = (RT)0, wi = (RT)0;
            for (int l = 0; l < RL; ++l) {
                wr += pr[l * NB + c];
                wi += pim[l * NB + c];
            }
            dsr[c] = tr * wr + ti * wi;  /* conj(tau) w */
            dsi[c] = tr * wi - ti * wr;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = cl; c < b; c += CW) {
            if (c <= j)
                continue;
            const long cc = k + c;
            const RT fr = dsr[c], fi = dsi[c];
            if (lane == 0) {
                AR(row, cc) -= fr;
                AI(row, cc) -= fi;
            }
            for (long i = row + 1 + lane; i < m; i += RL) {
                const RT vr = AR(i, col), vi = AI(i, col);
                AR(i, cc) -= vr * fr - vi * fi;
                AI(i, cc) -= vr * fi + vi * fr;
            }
        }
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    }
    /* T, column by column: T[0:j, j] = -tau_j T[0:j, 0:j] (V[:, 0:j]^H v_j), the dot
       products shared out as above; T[j, j] = tau_j */
    for (int j = lid; j < b; j += WG) {
        TR(j, j) = taur[j];
        TI(j, j) = taui[j];
    }
    for (int j = 1; j < b; ++j) {
        const long rj = k + j;
        for (int l = cl; l < j; l += CW) {
            const long c = k + l;
            RT dr = (RT)0, di = (RT)0;
            if (lane == 0) {  /* (v_j's 1 at row rj) */
                dr = AR(rj, c);
                di = -AI(rj, c);
            }
            for (long i = rj + 1 + lane; i < m; i += RL) {
                const RT lr = AR(i, c), li = AI(i, c), jr = AR(i, rj), ji = AI(i, rj);
                dr += lr * jr + li * ji;
                di += lr * ji - li * jr;
            }
            pr[lane * NB + l] = dr;
            pim[lane * NB + l] = di;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int l = lid; l < j; l += WG) {
            RT dr = (RT)0, di = (RT)0;
            for (int q = 0; q < RL; ++q) {
                dr += pr[q * NB + l];
                di += pim[q * NB + l];
            }
            dsr[l] = dr;
            dsi[l] = di;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = lid; i < j; i += WG) {
            RT sr = (RT)0, si = (RT)0;
            for (int l = i; l < j; ++l) {
                sr += TR(i, l) * dsr[l] - TI(i, l) * dsi[l];
                si += TR(i, l) * dsi[l] + TI(i, l) * dsr[l];
            }
            TR(i, j) = -(taur[j] * sr - taui[j] * si);
            TI(i, j) = -(taur[j] * si + taui[j] * sr);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int e = lid; e < b * b; e += WG) {
        const int i = e / b, c = e % b;
        t[2 * e] = i <= c ? TR(i, c) : (RT)0;
        t[2 * e + 1] = i <= c ? TI(i, c) : (RT)0;
    }
    for (long e = lid; e < (m - k) * b; e += WG) {
        const long i = e / b;
        const int c = (int)(e % b);
        const long at = 2 * ((k + i) * ldv + k + c);
        v[at] = i < c ? (RT)0 : i == c ? (RT)1 : AR(k + i, k + c);
        v[at + 1] = i <= c ? (RT)0 : AI(k + i, k + c);
    }
}
#undef AR
#undef AI
#undef TR
#undef TI
#undef CW
#undef RL
"""

#: the complex QR's block width
CQR_BLOCK = 32

_kernels: dict[tuple[str, int, int], SourceKernel] = {}
_lock = threading.Lock()
_caches.register("linalg_qr_complex.kernels", _kernels.clear, lambda: len(_kernels),
                 why="one per element type, work-group size and block width")


def _kernel(dtype: np.dtype, wg: int) -> SourceKernel:
    key = (dtype.char, wg, CQR_BLOCK)
    found = _kernels.get(key)
    if found is None:
        double = dtype == np.complex128
        rt = "double" if double else "float"
        plan = KernelPlan(
            name="fuseloop_cgeqr2",
            source=_PRELUDE + _CGEQR2,
            arg_names=["out0", "out1", "out2", *(f"s{i}" for i in range(5))],
            gsize=["p[0]"], lsize=[str(wg)],
            build_options=[f"-DRT={rt}", f"-DWG={wg}", f"-DNB={CQR_BLOCK}",
                           f"-DIS_DOUBLE={int(double)}"],
            arg_dtypes=[None] * 3 + ["int64"] * 5)
        with _lock:
            found = _kernels.setdefault(key, SourceKernel(plan))
    return found


def _factor(a: Array) -> tuple[Array, Array, list[Array]]:
    """The packed factors (R above, reflectors below), V (m x min(m, n)) and each
    block's T (b x b) of the complex m x n ``a``."""
    m, n = a.shape
    kk, dev, dt = min(m, n), a.device, a.dtype
    w = _copy(a)
    v = empty((m, kk), dt, dev)
    wg = group_size(dev)
    plan = launching.plan_for(_kernel(dt, wg).get(dev), (1,), 0, 0, dev)
    assert plan is not None
    ts: list[Array] = []
    s, x = empty((CQR_BLOCK * n,), dt, dev), empty((CQR_BLOCK * n,), dt, dev)
    for k in range(0, kk, CQR_BLOCK):
        k2 = min(kk, k + CQR_BLOCK)
        b, cols = k2 - k, n - k2
        t = empty((b, b), dt, dev)
        launching.enqueue(plan, [_buf(w), _buf(v), _buf(t)], [],
                          [k, m, n, b, kk], False, dev)
        ts.append(t)
        if cols > 0:  # A -= V (T^H (V^H A)) on the trailing columns
            vh = (k * kk + k, 1, kk)  # (V^H: V's strides swapped, conjugated)
            gemm(s, v, w, b, cols, m - k, (0, cols, 1), vh, (k * n + k2, n, 1), conj_a=True)
            gemm(x, t, s, b, cols, b, (0, cols, 1), (0, 1, b), (0, cols, 1), conj_a=True)
            gemm(w, v, x, m - k, cols, b, (k * n + k2, n, 1), (k * kk + k, kk, 1),
                 (0, cols, 1), subtract=True)
    return w, v, ts


def qr_matrix_complex(a: Array, mode: str) -> QRResult | Array:
    """``numpy.linalg.qr`` of one complex m x n matrix on the device."""
    m, n = a.shape
    kk = min(m, n)
    if kk == 0:  # (numpy's empty or identity results: the real path's, in this dtype)
        return qr_matrix(a, mode)
    w, v, ts = _factor(a)
    r_rows = m if mode == "complete" else kk
    r = triu(w[:r_rows])
    if mode == "r":
        return r
    cols = m if mode == "complete" else kk
    dev = a.device
    q = _copy((reshape(arange(m, device=dev), (m, 1)) == arange(cols, device=dev))
              .astype(a.dtype))
    s, x = empty((CQR_BLOCK * cols,), a.dtype, dev), empty((CQR_BLOCK * cols,), a.dtype, dev)
    for i in reversed(range(len(ts))):  # Q[k:, k:] -= V (T (V^H Q[k:, k:]))
        k = i * CQR_BLOCK
        b = min(kk, k + CQR_BLOCK) - k
        width = cols - k
        gemm(s, v, q, b, width, m - k, (0, width, 1), (k * kk + k, 1, kk),
             (k * cols + k, cols, 1), conj_a=True)
        gemm(x, ts[i], s, b, width, b, (0, width, 1), (0, b, 1), (0, width, 1))
        gemm(q, v, x, m - k, width, b, (k * cols + k, cols, 1), (k * kk + k, kk, 1),
             (0, width, 1), subtract=True)
    return QRResult(q, r)


__all__ = ["CQR_BLOCK", "group_size", "qr_matrix_complex"]
