"""The SVD and the symmetric eigenproblem on the device, by one-sided (Hestenes) Jacobi.

The matrix's columns are kept as the rows of a contiguous work array ``w`` (so that
a column is contiguous) and orthogonalised pairwise by plane rotations, in a
parallel round-robin order: a step is one launch of ``fuseloop_jacobi_step``, a
work-group per pair of rows (n/2 independent pairs), which computes the pair's three
dot products and, unless the pair is already orthogonal to ``tol = sqrt(m) eps``
relative to its norms, rotates both rows of ``w`` and of ``vt`` (the accumulated
right vectors, one row each).  A sweep is ``n - 1`` steps (``n`` rounded up to an
even number: every pair once); whether any pair of the sweep rotated is a flag on
the device, read once per sweep.  At convergence the singular values are the row
norms of ``w``, the left vectors its rows divided by them, the right vectors the
rows of ``vt``.  A wide matrix is handled as its transpose.  A row below ``eps``
times its partner is not rotated (it may be a cancellation's rounding error, parallel
to the partner, which no rotation makes orthogonal: a rank-deficient matrix's); its
direction is not kept.

Left vectors that do not come from a column (a singular value at most ``eps``
times the largest, or the extra
columns of ``full_matrices=True`` for a non-square matrix) are completed as
numpy's are: an orthonormal basis of the complement, one vector at a time from the
unit vector farthest from the span so far (classical Gram-Schmidt, twice).

``eigh`` / ``eigvalsh`` run the same sweeps on ``A + s I`` with ``s`` a bound of
``||A||_2`` (the infinity norm, at most ``sqrt(n)`` times it): the shifted matrix is
positive semi-definite, so its singular values are its eigenvalues and its right
singular vectors the eigenvectors; the eigenvalues are ``sigma - s``.  Inputs are
first scaled by their largest magnitude (results scaled back).
"""

from __future__ import annotations

import os
import threading
from typing import Any, NamedTuple

import numpy as np

from . import caches as _caches
from . import launching
from .array import Array
from .cache import KernelPlan, SourceKernel
from .creation import arange, empty
from .evaluate import upload
from .linalg_kernels import PRELUDE as _k_prelude
from .linalg_kernels import buffer as _buf
from .linalg_kernels import contiguous_copy as _copy
from .ops import reductions as _r
from .ops.shape import reshape, tril, triu
from .runtime.devices import Device

LinAlgError = np.linalg.LinAlgError

#: sweeps after which the iteration gives up (numpy's "SVD did not converge");
#: well-conditioned and rank-deficient matrices alike take about 6 to 12
MAX_SWEEPS = 60

# One step of the parallel one-sided Jacobi method: work-group g takes pair g of
# round ``step`` of the round-robin tournament over npad (even) rows (row 0 fixed,
# rows 1..npad-1 rotating; a pair with the padding row n is skipped), the pair's
# dot products over its two rows of w (length m), reduced over the group, then the
# rotation of those rows and of the same rows of v (length nv; 0: no vectors; the
# first step of the first sweep sets v to the identity).
# flag[sweep] is set by a pair that rotated.  The rotation is the smaller of the two
# that make the pair orthogonal (Rutishauser's formulas: |angle| <= pi/4).
_STEP = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_jacobi_step(__global FL_T *w, __global FL_T *v, __global long *flag,
                          const long n, const long m, const long nv, const long npad,
                          const long step, const long sweep)
{
#if WG > 1
    __local FL_T red[3 * WG];
#endif
    const int lid = get_local_id(0);
    const long g = get_group_id(0), last = npad - 1;
    long p = g == 0 ? 0 : (g - 1 + step) % last + 1;
    long q = (last - 1 - g + step) % last + 1;
    if (p > q) {
        const long t = p;
        p = q;
        q = t;
    }
    if (sweep == 0 && step == 0 && nv > 0) {
        /* the first step meets every row once: v starts as the identity here */
        for (long k = lid; k < nv; k += WG) {
            v[p * nv + k] = k == p ? (FL_T)1 : (FL_T)0;
            if (q < n)
                v[q * nv + k] = k == q ? (FL_T)1 : (FL_T)0;
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
    if (q >= n)  /* (the same for the whole group) */
        return;
    __global FL_T *a = w + p * m, *b = w + q * m;
    FL_T al = (FL_T)0, be = (FL_T)0, ga = (FL_T)0;
    for (long k = lid; k < m; k += WG) {
        const FL_T x = a[k], y = b[k];
        al += x * x;
        be += y * y;
        ga += x * y;
    }
#if WG > 1
    red[lid] = al;
    red[WG + lid] = be;
    red[2 * WG + lid] = ga;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = WG / 2; h > 0; h >>= 1) {
        if (lid < h) {
            red[lid] += red[lid + h];
            red[WG + lid] += red[WG + lid + h];
            red[2 * WG + lid] += red[2 * WG + lid + h];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    al = red[0];
    be = red[WG];
    ga = red[2 * WG];
#endif
    /* (NaN: no rotation; the caller reports the NaN singular values.)  A row below
       EPS times the other is left alone: its direction may be the rounding error of a
       cancellation, parallel to the other row (a rank-deficient matrix's), which no
       rotation makes orthogonal; its singular value is then below EPS sigma_max, and
       its U column is not kept (see fuseloop_jacobi_order) */
    const FL_T na = sqrt(al), nb = sqrt(be);
    const FL_T tol = sqrt((FL_T)m) * (FL_T)EPS;
    if (!(fabs(ga) > tol * na * nb) || na <= (FL_T)EPS * nb || nb <= (FL_T)EPS * na)
        return;
    const FL_T zeta = (be - al) / (2 * ga);
    const FL_T t = copysign((FL_T)1, zeta) / (fabs(zeta) + hypot((FL_T)1, zeta));
    /* applied as x - s (y + tau x), y + s (x - tau y) with tau = s / (1 + c), that is
       c = 1 - s tau without rounding c: for t^2 below eps, 1 + t^2 rounds to 1 and
       (c, s) = (1, t) would grow both rows by t^2 / 2, a bias that over the sweeps
       made float32 norms drift by 1e-4 */
    const FL_T c = (FL_T)1 / sqrt((FL_T)1 + t * t), s = c * t, tau = s / ((FL_T)1 + c);
    for (long k = lid; k < m; k += WG) {
        const FL_T x = a[k], y = b[k];
        a[k] = x - s * (y + tau * x);
        b[k] = y + s * (x - tau * y);
    }
    __global FL_T *va = v + p * nv, *vb = v + q * nv;
    for (long k = lid; k < nv; k += WG) {
        const FL_T x = va[k], y = vb[k];
        va[k] = x - s * (y + tau * x);
        vb[k] = y + s * (x - tau * y);
    }
    if (lid == 0)
        flag[sweep] = 1;
}
"""

# The row norms of w (n x m) and of vt (n x nv; 0: none, norm 1), a work-group per
# row: sig[i] = |w_i| / |vt_i| and vn[i] = |vt_i|.  The rotations' rounding lets the
# rows' norms drift together (w = a vt throughout): by ~1e-4 over the sweeps of a
# float32 400 x 400 matrix, so both are divided by vt's.
_NORMS = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_jacobi_norms(__global FL_T *sig, __global FL_T *vn, __global const FL_T *w,
                           __global const FL_T *vt, const long n, const long m,
                           const long nv)
{
#if WG > 1
    __local FL_T red[2 * WG];
#endif
    const int lid = get_local_id(0);
    const long i = get_group_id(0);
    FL_T s = (FL_T)0, t = (FL_T)0;
    for (long k = lid; k < m; k += WG)
        s += w[i * m + k] * w[i * m + k];
    for (long k = lid; k < nv; k += WG)
        t += vt[i * nv + k] * vt[i * nv + k];
#if WG > 1
    red[lid] = s;
    red[WG + lid] = t;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = WG / 2; h > 0; h >>= 1) {
        if (lid < h) {
            red[lid] += red[lid + h];
            red[WG + lid] += red[WG + lid + h];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    s = red[0];
    t = red[WG];
#endif
    if (lid == 0) {
        const FL_T v = nv > 0 ? sqrt(t) : (FL_T)1;
        sig[i] = sqrt(s) / v;
        vn[i] = v;
    }
}
"""

# The results in order: work-group i takes row i, whose value is val = (sig[i] -
# shift) * scale (two one-element buffers); its rank r among the values
# (descending or ascending; ties by position) is where it goes: s[r] = val, row r of
# u the row of w over its norm sig[i] vn[i] (with want_u; zero for a direction not
# kept: sig[i] at most EPS times the largest, or THR), row r of v the row of vt over
# its norm vn[i] (nv elements; 0: none).  cnt[0]: how many are kept; cnt[1]: how
# many values are not finite (written by rank 0).
_ORDER = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_jacobi_order(__global FL_T *s, __global FL_T *u, __global FL_T *v,
                           __global long *cnt, __global const FL_T *sig,
                           __global const FL_T *vn, __global const FL_T *w,
                           __global const FL_T *vt,
                           __global const FL_T *scale_, __global const FL_T *shift_,
                           const long n, const long m,
                           const long nv, const long descending, const long want_u)
{
#if WG > 1
    __local FL_T rtop[WG];
    __local long rr[WG], rg[WG], rb[WG];
#endif
    const int lid = get_local_id(0);
    const long i = get_group_id(0);
    const FL_T scale = scale_[0], shift = shift_[0];
    const FL_T mine = sig[i], val = (mine - shift) * scale;
    /* the largest norm, then the counts: the group's work-items a share each */
    FL_T top = (FL_T)0;
    for (long j = lid; j < n; j += WG)
        top = fmax(top, sig[j]);
#if WG > 1
    rtop[lid] = top;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = WG / 2; h > 0; h >>= 1) {
        if (lid < h)
            rtop[lid] = fmax(rtop[lid], rtop[lid + h]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    top = rtop[0];
#endif
    const FL_T keep = fmax((FL_T)THR, (FL_T)EPS * top);
    long r = 0, good = 0, bad = 0;
    for (long j = lid; j < n; j += WG) {
        const FL_T other = (sig[j] - shift) * scale;
        const int before = descending ? other > val : other < val;
        r += before || (other == val && j < i);
        good += sig[j] > keep;
        bad += !isfinite(other);
    }
#if WG > 1
    rr[lid] = r;
    rg[lid] = good;
    rb[lid] = bad;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = WG / 2; h > 0; h >>= 1) {
        if (lid < h) {
            rr[lid] += rr[lid + h];
            rg[lid] += rg[lid + h];
            rb[lid] += rb[lid + h];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    r = rr[0];
    good = rg[0];
    bad = rb[0];
#endif
    if (r >= n)  /* (NaN values: reported through cnt[1]) */
        r = n - 1;
    if (lid == 0)
        s[r] = val;
    if (lid == 0 && r == 0) {
        cnt[0] = good;
        cnt[1] = bad;
    }
    if (want_u) {
        const FL_T inv = mine > keep ? (FL_T)1 / (mine * vn[i]) : (FL_T)0;
        for (long k = lid; k < m; k += WG)
            u[r * m + k] = w[i * m + k] * inv;
    }
    const FL_T vinv = (FL_T)1 / vn[i];
    for (long k = lid; k < nv; k += WG)
        v[r * nv + k] = vt[i * nv + k] * vinv;
}
"""

# Rows start..k-1 of q (k x m; rows 0..start-1 orthonormal) made an orthonormal basis
# of part of the complement of the rows' span, by one work-group: each new row from
# the unit vector e_i with the largest part outside the span so far (rest[i] = 1 -
# sum_r q[r, i]^2, kept up to date), its projection on the rows before taken out twice
# (classical Gram-Schmidt and a reorthogonalisation; d: the second's coefficients),
# then normalised.  The largest part is at least (m - row) / m: never a zero vector.
_COMPLETE = r"""
#define BOTH (CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_jacobi_complete(__global FL_T *q, __global FL_T *rest, __global FL_T *d,
                              const long k, const long m, const long start)
{
    __local FL_T bv[WG];
    __local long bi[WG];
    const int lid = get_local_id(0);
    for (long e = start * m + lid; e < k * m; e += WG)
        q[e] = (FL_T)0;
    for (long e = lid; e < m; e += WG) {
        FL_T t = (FL_T)0;
        for (long r = 0; r < start; ++r)
            t += q[r * m + e] * q[r * m + e];
        rest[e] = (FL_T)1 - t;
    }
    barrier(BOTH);
    for (long j = start; j < k; ++j) {
        FL_T best = (FL_T)-1;
        long at = 0;
        for (long e = lid; e < m; e += WG)
            if (rest[e] > best) {
                best = rest[e];
                at = e;
            }
        bv[lid] = best;
        bi[lid] = at;
        barrier(BOTH);
        for (int h = WG / 2; h > 0; h >>= 1) {
            if (lid < h && (bv[lid + h] > bv[lid] ||
                            (bv[lid + h] == bv[lid] && bi[lid + h] < bi[lid]))) {
                bv[lid] = bv[lid + h];
                bi[lid] = bi[lid + h];
            }
            barrier(BOTH);
        }
        const long i = bi[0];
        __global FL_T *c = q + j * m;
        for (long e = lid; e < m; e += WG) {
            FL_T t = e == i ? (FL_T)1 : (FL_T)0;
            for (long r = 0; r < j; ++r)
                t -= q[r * m + i] * q[r * m + e];
            c[e] = t;
        }
        barrier(BOTH);
        for (long r = lid; r < j; r += WG) {
            FL_T t = (FL_T)0;
            for (long e = 0; e < m; ++e)
                t += q[r * m + e] * c[e];
            d[r] = t;
        }
        barrier(BOTH);
        FL_T nn = (FL_T)0;
        for (long e = lid; e < m; e += WG) {
            FL_T t = c[e];
            for (long r = 0; r < j; ++r)
                t -= d[r] * q[r * m + e];
            c[e] = t;
            nn += t * t;
        }
        bv[lid] = nn;
        barrier(BOTH);
        for (int h = WG / 2; h > 0; h >>= 1) {
            if (lid < h)
                bv[lid] += bv[lid + h];
            barrier(BOTH);
        }
        const FL_T inv = (FL_T)1 / sqrt(bv[0]);
        for (long e = lid; e < m; e += WG) {
            c[e] *= inv;
            rest[e] -= c[e] * c[e];
        }
        barrier(BOTH);
    }
}
#undef BOTH
"""

# Many rows to add (more than there are): the complement from Householder reflectors
# instead, as a QR factorisation's Q.  fuseloop_jacobi_hhqr (one work-group) factors
# the g x m rows of q (as columns) with reflectors H_j = I - tau_j v_j v_j^T, v_j in
# y[j, j:], each work-item updating a later row; fuseloop_jacobi_hhapply (a
# work-group per new row c >= g) writes H_0 ... H_{g-1} e_c, orthogonal to the g rows.
_HOUSEHOLDER = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_jacobi_hhqr(__global FL_T *y, __global FL_T *tau, __global const FL_T *q,
                          const long m, const long g)
{
    const int lid = get_local_id(0);
    for (long e = lid; e < g * m; e += WG)
        y[e] = q[e];
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (long j = 0; j < g; ++j) {
        __global FL_T *v = y + j * m;
        /* (every work-item computes the same norm: no reduction, no race) */
        FL_T ss = (FL_T)0;
        for (long e = j; e < m; ++e)
            ss += v[e] * v[e];
        const FL_T x0 = v[j], nrm = sqrt(ss), alpha = x0 >= (FL_T)0 ? -nrm : nrm;
        const FL_T vv = ss - x0 * x0 + (x0 - alpha) * (x0 - alpha);
        const FL_T t = vv > (FL_T)0 ? (FL_T)2 / vv : (FL_T)0;
        barrier(CLK_GLOBAL_MEM_FENCE);
        if (lid == 0) {
            v[j] = x0 - alpha;
            tau[j] = t;
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
        for (long k = j + 1 + lid; k < g; k += WG) {
            __global FL_T *r = y + k * m;
            FL_T d = (FL_T)0;
            for (long e = j; e < m; ++e)
                d += v[e] * r[e];
            d *= t;
            for (long e = j; e < m; ++e)
                r[e] -= d * v[e];
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_jacobi_hhapply(__global FL_T *q, __global const FL_T *y,
                             __global const FL_T *tau, const long k, const long m,
                             const long g)
{
#if WG > 1
    __local FL_T red[WG];
#endif
    const int lid = get_local_id(0);
    const long c = g + get_group_id(0);
    __global FL_T *col = q + c * m;
    for (long e = lid; e < m; e += WG)
        col[e] = e == c ? (FL_T)1 : (FL_T)0;
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (long j = g - 1; j >= 0; --j) {
        __global const FL_T *v = y + j * m;
        FL_T d = (FL_T)0;
        for (long e = j + lid; e < m; e += WG)
            d += v[e] * col[e];
#if WG > 1
        red[lid] = d;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int h = WG / 2; h > 0; h >>= 1) {
            if (lid < h)
                red[lid] += red[lid + h];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        d = red[0];
#endif
        d *= tau[j];
        for (long e = j + lid; e < m; e += WG)
            col[e] -= d * v[e];
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    }
}
"""

# All the sweeps of one small matrix by one work-group, in one launch: the steps of
# fuseloop_jacobi_step one after another (the same pairs, formulas and tests), LANES
# work-items a pair and WG / LANES pairs at a time, barriers between them; the sweeps
# end when one rotates no pair (or after max_sweeps).  v is set to the identity
# first; flag[0] = the sweeps run (max_sweeps + 1: not converged).
_LOCAL = r"""
#define BOTH (CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_jacobi_local(__global FL_T *w, __global FL_T *v, __global long *flag,
                           const long n, const long m, const long nv, const long npad,
                           const long lanes, const long max_sweeps)
{
    __local FL_T red[3 * WG];
    __local int rotated;
    const int lid = get_local_id(0);
    const long last = npad - 1, npairs = npad / 2, per = WG / lanes;
    const long lane = lid % lanes, slot = lid / lanes;
    const FL_T tol = sqrt((FL_T)m) * (FL_T)EPS;
    for (long e = lid; e < n * nv; e += WG)
        v[e] = e / nv == e % nv ? (FL_T)1 : (FL_T)0;
    long sweep = 0;
    for (; sweep < max_sweeps; ++sweep) {
        if (lid == 0)
            rotated = 0;
        barrier(BOTH);
        for (long step = 0; step < last; ++step) {
            for (long g0 = 0; g0 < npairs; g0 += per) {
                const long g = g0 + slot;
                long p = g == 0 ? 0 : (g - 1 + step) % last + 1;
                long q = (last - 1 - g + step) % last + 1;
                if (p > q) {
                    const long t = p;
                    p = q;
                    q = t;
                }
                const int active = g < npairs && q < n;
                __global FL_T *a = w + p * m, *b = w + q * m;
                FL_T al = (FL_T)0, be = (FL_T)0, ga = (FL_T)0;
                if (active)
                    for (long k = lane; k < m; k += lanes) {
                        const FL_T x = a[k], y = b[k];
                        al += x * x;
                        be += y * y;
                        ga += x * y;
                    }
                red[lid] = al;
                red[WG + lid] = be;
                red[2 * WG + lid] = ga;
                barrier(BOTH);
                for (long h = lanes / 2; h > 0; h >>= 1) {
                    if (lane < h) {
                        red[lid] += red[lid + h];
                        red[WG + lid] += red[WG + lid + h];
                        red[2 * WG + lid] += red[2 * WG + lid + h];
                    }
                    barrier(BOTH);
                }
                al = red[slot * lanes];
                be = red[WG + slot * lanes];
                ga = red[2 * WG + slot * lanes];
                const FL_T na = sqrt(al), nb = sqrt(be);
                if (active && fabs(ga) > tol * na * nb && na > (FL_T)EPS * nb &&
                        nb > (FL_T)EPS * na) {
                    const FL_T zeta = (be - al) / (2 * ga);
                    const FL_T t = copysign((FL_T)1, zeta) / (fabs(zeta) + hypot((FL_T)1, zeta));
                    const FL_T c = (FL_T)1 / sqrt((FL_T)1 + t * t), s = c * t;
                    const FL_T tau = s / ((FL_T)1 + c);
                    for (long k = lane; k < m; k += lanes) {
                        const FL_T x = a[k], y = b[k];
                        a[k] = x - s * (y + tau * x);
                        b[k] = y + s * (x - tau * y);
                    }
                    __global FL_T *va = v + p * nv, *vb = v + q * nv;
                    for (long k = lane; k < nv; k += lanes) {
                        const FL_T x = va[k], y = vb[k];
                        va[k] = x - s * (y + tau * x);
                        vb[k] = y + s * (x - tau * y);
                    }
                    if (lane == 0)
                        rotated = 1;
                }
                barrier(BOTH);
            }
        }
        const int again = rotated;
        barrier(BOTH);
        if (!again)
            break;
    }
    if (lid == 0)
        flag[0] = sweep + 1;
}
#undef BOTH
"""

_PRELUDE = _k_prelude  # (the fp64 pragma; no barriers in groups of one)

# name -> (source, buffer arguments (outputs first), number of int64 scalars)
_KERNELS: dict[str, tuple[str, list[str], int]] = {
    "fuseloop_jacobi_step": (_STEP, ["out0", "out1", "out2"], 6),
    "fuseloop_jacobi_norms": (_NORMS, ["out0", "out1", "in0", "in1"], 3),
    "fuseloop_jacobi_order": (_ORDER, ["out0", "out1", "out2", "out3", "in0", "in1", "in2",
                                       "in3", "in4", "in5"], 5),
    "fuseloop_jacobi_complete": (_COMPLETE, ["out0", "out1", "out2"], 3),
    "fuseloop_jacobi_local": (_LOCAL, ["out0", "out1", "out2"], 6),
    "fuseloop_jacobi_hhqr": (_HOUSEHOLDER, ["out0", "out1", "in0"], 2),
    "fuseloop_jacobi_hhapply": (_HOUSEHOLDER, ["out0", "in0", "in1"], 3),
}

_kernels: dict[tuple[str, str, int], SourceKernel] = {}
_lock = threading.Lock()
_caches.register("linalg_jacobi.kernels", _kernels.clear, lambda: len(_kernels),
                 why="one per kernel, element type and work-group size")


def group_size(device: Device, m: int) -> int:
    """Work-items per group (a pair, a row): 1 on a CPU (PoCL runs a group on one
    core; the groups of a launch fill the cores), on a GPU a power of two from 32 up
    to 256, about the row length ``m``."""
    if device.type == "cpu":
        return 1
    wg = 32
    while wg < 256 and wg < m and 2 * wg <= device.max_work_group_size:
        wg *= 2
    return wg


#: the largest n whose sweeps run in one launch (``fuseloop_jacobi_local``; with rows
#: of at most 8 n), on CPUs and on GPUs; FUSELOOP_JACOBI_LOCAL sets both (0: never)
LOCAL_MAX_N = {"cpu": 16, "gpu": 128}
if os.environ.get("FUSELOOP_JACOBI_LOCAL", "").strip():
    LOCAL_MAX_N = dict.fromkeys(LOCAL_MAX_N, int(os.environ["FUSELOOP_JACOBI_LOCAL"]))


def local_group_size(device: Device) -> int:
    """Work-items of the one work-group of ``fuseloop_jacobi_local``: 1 on a CPU, 256
    (or the device's limit) on a GPU."""
    return 1 if device.type == "cpu" else min(256, device.max_work_group_size)


def _zero_below(dtype: np.dtype) -> float:
    """Singular values (of a matrix scaled to largest magnitude 1) at or below which
    a column's direction is not kept: its squared norm would be subnormal."""
    fi = np.finfo(dtype)
    return float(np.sqrt(fi.tiny) / fi.eps)


def _kernel(name: str, dtype: np.dtype, wg: int) -> SourceKernel:
    key = (name, dtype.char, wg)
    found = _kernels.get(key)
    if found is None:
        source, bufs, n_scalars = _KERNELS[name]
        double = dtype == np.float64
        plan = KernelPlan(
            name=name, source=_PRELUDE + source,
            arg_names=[*bufs, *(f"s{i}" for i in range(n_scalars))],
            gsize=["p[0]"], lsize=[str(wg)],
            build_options=[f"-DFL_T={'double' if double else 'float'}", f"-DWG={wg}",
                           f"-DEPS={float(np.finfo(dtype).eps)!r}",
                           f"-DTHR={_zero_below(dtype)!r}", f"-DIS_DOUBLE={int(double)}"],
            arg_dtypes=[*([None] * len(bufs)), *(["int64"] * n_scalars)])
        with _lock:
            found = _kernels.setdefault(key, SourceKernel(plan))
    return found


def _launch(name: str, groups: int, wg: int, outs: list[Array], ins: list[Array],
            scalars: list[int]) -> None:
    dev = outs[0].device
    compiled = _kernel(name, outs[0].dtype, wg).get(dev)
    plan = launching.plan_for(compiled, (groups,), 0, 0, dev)
    assert plan is not None
    launching.enqueue(plan, [_buf(x) for x in outs], [_buf(x) for x in ins], scalars, False,
                      dev)


def sweeps(w: Array, vt: Array | None) -> int:
    """Orthogonalise the rows of the contiguous n x m ``w`` in place (rotating the
    rows of the n x n ``vt``, which starts as the identity, alike, when given) until
    a sweep rotates no pair;
    returns the number of sweeps (the last one found every pair orthogonal).
    Launches: ``npad - 1`` a sweep (``npad``: n rounded up to even), nothing else."""
    n, m = w.shape
    dev = w.device
    npad = n + (n & 1)
    most = LOCAL_MAX_N["cpu" if dev.type == "cpu" else "gpu"]
    if n <= most and m <= 8 * most:  # (long rows: many groups share a step's dot products)
        return _sweeps_local(w, vt)
    compiled = _kernel("fuseloop_jacobi_step", w.dtype, group_size(dev, m)).get(dev)
    plan = launching.plan_for(compiled, (npad // 2,), 0, 0, dev)
    assert plan is not None
    flags = Array._concrete(upload(np.zeros(MAX_SWEEPS, np.int64), dev), np.dtype(np.int64),
                            (MAX_SWEEPS,))
    outs = [_buf(w), _buf(vt if vt is not None else w), _buf(flags)]
    nv = 0 if vt is None else n
    for sweep in range(MAX_SWEEPS):
        for step in range(npad - 1):
            launching.enqueue(plan, outs, [], [n, m, nv, npad, step, sweep], False, dev)
        if not flags.get()[sweep]:  # (the whole array: a slice would be a launch)
            return sweep + 1
    raise LinAlgError(f"fl.linalg: the Jacobi iteration did not converge in {MAX_SWEEPS} "
                      f"sweeps ({n} x {m} {w.dtype} matrix)")


def _sweeps_local(w: Array, vt: Array | None) -> int:
    """:func:`sweeps` of a small matrix in one launch (``fuseloop_jacobi_local``): a
    GPU's launches, ~12 n of them, cost more than a small matrix's flops."""
    n, m = w.shape
    dev = w.device
    npad = n + (n & 1)
    wg = local_group_size(dev)
    per = 1
    while per < npad // 2 and per < wg:
        per *= 2
    flag = empty((1,), np.int64, dev)
    _launch("fuseloop_jacobi_local", 1, wg, [w, vt if vt is not None else w, flag], [],
            [n, m, 0 if vt is None else n, npad, max(1, wg // per), MAX_SWEEPS])
    done = int(flag.get()[0])
    if done > MAX_SWEEPS:
        raise LinAlgError(f"fl.linalg: the Jacobi iteration did not converge in "
                          f"{MAX_SWEEPS} sweeps ({n} x {m} {w.dtype} matrix)")
    return done


def _scale(a: Array) -> Array:
    """The largest magnitude of ``a`` (1 for a zero matrix): a 0-d array."""
    from .ufuncs import FUNCTIONS

    big = _r.max(FUNCTIONS["absolute"](a))
    return (big + (big == 0).astype(a.dtype)).eval()


class _Ordered(NamedTuple):
    values: Array  #: (sig - shift) * scale, in order
    u_rows: Array | None  #: the rows of w over their norms, in order (k rows)
    v_rows: Array | None  #: the rows of vt, in order
    good: int  #: the norms above the threshold (rows of u_rows kept)


def _ordered(w: Array, vt: Array | None, scale: Array, shift: Array, descending: bool,
             want_u: bool, k: int, what: str) -> _Ordered:
    """The values of the converged rows of ``w`` and its vectors, sorted (see
    ``fuseloop_jacobi_order``): three launches, one read of two counts."""
    n, m = w.shape
    dev, dt = w.device, w.dtype
    sig, vn = empty((n,), dt, dev), empty((n,), dt, dev)
    nv = 0 if vt is None else n
    _launch("fuseloop_jacobi_norms", n, group_size(dev, max(m, nv)), [sig, vn],
            [w, vt if vt is not None else w], [n, m, nv])
    values = empty((n,), dt, dev)
    u_rows = empty((k, m), dt, dev) if want_u else None
    v_rows = empty((n, n), dt, dev) if vt is not None else None
    cnt = empty((2,), np.int64, dev)
    _launch("fuseloop_jacobi_order", n, group_size(dev, max(m, n)),
            [values, u_rows if u_rows is not None else values,
             v_rows if v_rows is not None else values, cnt],
            [sig, vn, w, vt if vt is not None else w, scale, shift],
            [n, m, nv, int(descending), int(want_u)])
    good, bad = (int(c) for c in cnt.get())
    if bad:
        raise LinAlgError(f"fl.linalg.{what}: did not converge ({bad} of the {n} values are "
                          "not finite: NaN or inf in the input?)")
    return _Ordered(values, u_rows, v_rows, good)


def complete(q: Array, start: int) -> None:
    """Make rows ``start:`` of the contiguous k x m ``q`` (rows ``:start``
    orthonormal) an orthonormal basis of part of their span's complement, in place:
    by one work-group (``fuseloop_jacobi_complete``, O(m k) a row), or where more rows
    are added than there are, from Householder reflectors (``fuseloop_jacobi_hhqr``,
    ``fuseloop_jacobi_hhapply``: O(m start) a row, the rows in parallel)."""
    k, m = q.shape
    if start >= k:
        return
    dev = q.device
    wg = group_size(dev, m)
    if k - start > start:  # (O(m g^2) in one group, then O(m g) a new row in parallel)
        g = max(start, 1)
        y, tau = empty((g, m), q.dtype, dev), empty((g,), q.dtype, dev)
        _launch("fuseloop_jacobi_hhqr", 1, wg, [y, tau], [q], [m, start])
        _launch("fuseloop_jacobi_hhapply", k - start, wg, [q], [y, tau], [k, m, start])
        return
    _launch("fuseloop_jacobi_complete", 1, wg, [q, empty((m,), q.dtype, dev),
                                                empty((k,), q.dtype, dev)], [], [k, m, start])


def svd(a: Array, full_matrices: bool = True, compute_uv: bool = True) -> Any:
    """The SVD of one real m x n matrix (see :mod:`fuseloop.linalg_jacobi`):
    ``(U, S, Vh)`` as numpy's, or ``S`` without ``compute_uv``."""
    m, n = a.shape
    dev, dt = a.device, a.dtype
    wide = m < n
    nt, mt = min(m, n), max(m, n)
    scale = _scale(a)
    # the columns of the tall matrix (a, or a.T when wide) as rows
    w = _copy((a if wide else a.T) / scale)
    vt = empty((nt, nt), dt, dev) if compute_uv else None
    sweeps(w, vt)
    k = mt if full_matrices else nt
    zero = Array._concrete(upload(np.zeros(1, dt), dev), dt, ())
    done = _ordered(w, vt, scale, zero, True, compute_uv, k, "svd")
    if not compute_uv:
        return done.values
    u, vh = done.u_rows, done.v_rows
    assert u is not None and vh is not None
    complete(u, done.good)  # (rows of zero singular values, and full_matrices' extra)
    if wide:  # a.T = u.T S vh: a = vh.T S u
        return vh.T, done.values, u
    return u.T, done.values, vh


def eigh(a: Array, lower: bool = True, vectors: bool = True) -> Any:
    """The eigenvalues (ascending) and, with ``vectors``, eigenvectors (columns) of
    the symmetric n x n ``a``, of which only the lower (``lower``) or upper triangle
    is read: one-sided Jacobi of ``a + s I`` (see :mod:`fuseloop.linalg_jacobi`)."""
    from .ufuncs import FUNCTIONS

    n, dev, dt = a.shape[0], a.device, a.dtype
    half = tril(a) if lower else triu(a)
    scale = _scale(half)
    sym = (half + (tril(a, -1) if lower else triu(a, 1)).T) / scale
    # the infinity norm bounds the 2-norm (of a symmetric matrix): a + s I is
    # positive semi-definite
    shift = _r.max(_r.sum(FUNCTIONS["absolute"](sym), axis=1)).eval()
    i = arange(n, device=dev)
    w = _copy(sym + shift * (reshape(i, (n, 1)) == i).astype(dt))  # its rows: its columns
    vt = empty((n, n), dt, dev) if vectors else None
    sweeps(w, vt)
    done = _ordered(w, vt, scale, shift, False, False, 0, "eigh")
    if not vectors:
        return done.values
    assert done.v_rows is not None
    return done.values, done.v_rows.T


__all__ = ["MAX_SWEEPS", "complete", "eigh", "group_size", "svd", "sweeps"]
