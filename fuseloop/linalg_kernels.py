"""The hand-written OpenCL kernels of the device factorisations (``linalg_factor``).

Each kernel works in place on a row-major matrix buffer through element offsets
and strides passed as scalars, so that one compiled kernel serves every block of
a factorisation.  They do the small, sequential parts of the blocked algorithms
in local memory (the diagonal block of a Cholesky factorisation, the LU panel's
pivot tournament, the triangular solves of a block against many vectors) and the
row swaps; the trailing updates, where the flops are, are fuseloop's own
contractions on CPUs and, on GPUs, a tiled ``C -= A B`` (:mod:`fuseloop.linalg_gemm`;
see ``linalg_factor.update_kernel``).  Built per element type, work-group size,
block size (``NB``, the local arrays' size) and vectors per group (``VPG``), through
the kernel cache as :class:`fuseloop.cache.SourceKernel`s, and launched with
:func:`fuseloop.launching.enqueue`, like the mask compaction's kernels.  They also
build with NVRTC through the CUDA backend's prelude (no helper functions: a
``__local`` pointer parameter is not CUDA).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from . import caches as _caches
from . import launching
from . import linalg_gemm as _gemm
from .cache import KernelPlan, SourceKernel
from .expr.nodes import Storage
from .linalg_cholesky_kernels import POTRF as _POTRF
from .linalg_cholesky_kernels import TRMM_INV as _TRMM_INV

if TYPE_CHECKING:
    from .array import Array
from .linalg_gemm import GEMM_GROUP, GEMM_UPDATE_SOURCE, gemm_groups, gemm_tiling
from .linalg_panel import KERNELS as _PANEL_KERNELS
from .linalg_qr_kernels import KERNELS as _QR_KERNELS
from .runtime.devices import Device

# FL_T: the element type; WG: work-items per group; NB: the largest block; VPG: see
# fuseloop_trsm_blocks.  A group of one work-item (a CPU's: group_size) has nothing to
# wait for at a barrier, so there the kernels have none: PoCL 5.0's work-group compiler
# asserted (region_entry_barrier) on fuseloop_tslu's barriers in its column loop, and
# its compile runs at a kernel's first launch, in this process (compile_workers).
# The linalg modules' hand-written kernels all start with this (WG defined by each).
PRELUDE = r"""
#if IS_DOUBLE
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#if WG == 1
#undef barrier
#define barrier(flags) ((void)0)
#endif
/* how a pointer to local memory is declared as a parameter (a CUDA build: plainly) */
#ifndef FL_LOCAL_ARG
#define FL_LOCAL_ARG __local
#endif
/* An LU panel's chosen rows idx[0..b) as LAPACK's pivots piv[k..k+b) and their net
   row moves (perm[0] of them: row k + perm[1 + 2t] receives row k + perm[2 + 2t]), by
   one work-item.  Slot s < b is panel position (and row) s, slot b + j the original
   position of chosen row idx[j] when that is below the block: only these 2 b move. */
void fl_panel_swaps(__global long *piv, __global long *perm, FL_LOCAL_ARG const int *idx,
                    FL_LOCAL_ARG int *rowat, FL_LOCAL_ARG int *posof, const long k,
                    const int b)
{
    for (int s = 0; s < 2 * b; ++s) {
        rowat[s] = s;
        posof[s] = s;
    }
    for (int j = 0; j < b; ++j) {
        const int sl = idx[j] < b ? idx[j] : b + j, p = posof[sl], q = rowat[j];
        piv[k + j] = k + (p < b ? p : idx[p - b]);
        rowat[j] = sl;
        rowat[p] = q;
        posof[sl] = j;
        posof[q] = p;
    }
    int entries = 0;
    for (int s = 0; s < 2 * b; ++s) {
        const int w = rowat[s];
        if (w != s && (s < b || idx[s - b] >= b)) {
            perm[1 + 2 * entries] = s < b ? s : idx[s - b];
            perm[2 + 2 * entries] = w < b ? w : idx[w - b];
            ++entries;
        }
    }
    perm[0] = entries;
}
"""

# Triangular solves T x = b for nvec vectors at once, in place: T is n x n (n <= NB),
# lower or upper, with a unit diagonal (unit 1) or the stored one (unit 0; unit 2: a
# zero on it is skipped, as LAPACK leaves a singular LU column unscaled), T[i,j] = t[toff + i*ts0 +
# j*ts1] (only its triangle is read); element i of vector v is b[boff + i*bs0 +
# v*bs1].  Each work-group reads T and VPG vectors into local memory (along
# whichever stride of b is 1), solves them there (each work-item its own vectors, no
# barriers while solving; on GPUs WG / VPG work-items a vector, a barrier a step: see
# trsm_lanes) and writes them back; with ``copy`` also to c[coff + i*cs0
# + v*cs1] (a contiguous copy that the next matrix product reads).  The Cholesky
# panel's rows, a block row of right-hand sides and an LU block row's columns are
# all such vectors.  The groups from ``split`` on solve a second such system (the
# ``_z`` parameters; the same n, lower and copy): the LU's panel and block row in one
# launch, side by side on the device.
_TRSM_BLOCKS = r"""
#define TT(i, j) tt[(i) * (NB + 1) + (j)]
#define XX(i, v) xx[(i) * (VPG + 1) + (v)]
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_trsm_blocks(__global FL_T *b, __global FL_T *c, __global const FL_T *t,
                          const long n_, const long nvec_a, const long toff_a,
                          const long ts0_a, const long ts1_a, const long boff_a,
                          const long bs0_a, const long bs1_a, const long coff_a,
                          const long cs0_a, const long cs1_a,
                          const long lower, const long unit_a, const long copy,
                          const long split, const long nvec_z, const long toff_z,
                          const long ts0_z, const long ts1_z, const long boff_z,
                          const long bs0_z, const long bs1_z, const long coff_z,
                          const long cs0_z, const long cs1_z, const long unit_z)
{
    __local FL_T tt[NB * (NB + 1)];
    __local FL_T xx[NB * (VPG + 1)];
    const int lid = get_local_id(0), n = (int)n_;
    const int z = get_group_id(0) >= split;  /* (the same for the whole group) */
    const long nvec = z ? nvec_z : nvec_a, toff = z ? toff_z : toff_a;
    const long ts0 = z ? ts0_z : ts0_a, ts1 = z ? ts1_z : ts1_a;
    const long boff = z ? boff_z : boff_a, bs0 = z ? bs0_z : bs0_a, bs1 = z ? bs1_z : bs1_a;
    const long coff = z ? coff_z : coff_a, cs0 = z ? cs0_z : cs0_a, cs1 = z ? cs1_z : cs1_a;
    const long unit = z ? unit_z : unit_a;
    const long v0 = (long)(z ? get_group_id(0) - split : get_group_id(0)) * VPG;
    const int nv = nvec - v0 < VPG ? (int)(nvec - v0) : VPG;
    for (int e = lid; e < n * n; e += WG) {
        /* neighbouring work-items on neighbouring addresses (T may be a transpose) */
        const int i = ts1 == 1 ? e / n : e % n, j = ts1 == 1 ? e % n : e / n;
        if (lower ? j <= i : j >= i)
            TT(i, j) = t[toff + i * ts0 + j * ts1];
    }
    if (bs0 == 1) {
        for (int e = lid; e < nv * n; e += WG) {
            const int v = e / n, i = e % n;
            XX(i, v) = b[boff + i + (v0 + v) * bs1];
        }
    } else {
        for (int e = lid; e < nv * n; e += WG) {
            const int i = e / nv, v = e % nv;
            XX(i, v) = b[boff + i * bs0 + (v0 + v) * bs1];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#if WG > VPG
    /* WG / VPG work-items a vector (a GPU's) share each step's row updates, a barrier a
       step; a step's solved x_i is stored at the next (until then the vector's other
       work-items read the unsolved value, and no step after reads or writes row i) */
    {
        const int v = lid % VPG, lane = lid / VPG;
        FL_T prev = (FL_T)0;
        int prev_i = -1;
        for (int s = 0; s < n; ++s) {
            const int i = lower ? s : n - 1 - s;
            if (v < nv) {
                if (lane == 0 && prev_i >= 0)
                    XX(prev_i, v) = prev;
                FL_T xi = XX(i, v);
                if (unit != 1) {
                    const FL_T d = TT(i, i);
                    if (unit == 0 || d != (FL_T)0)
                        xi /= d;
                }
                const int lo = lower ? i + 1 : 0, hi = lower ? n : i;
                for (int r = lo + lane; r < hi; r += WG / VPG)
                    XX(r, v) -= TT(r, i) * xi;
                prev = xi;
                prev_i = i;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (v < nv && lane == 0 && prev_i >= 0)
            XX(prev_i, v) = prev;
    }
#elif WG > 1
    /* each work-item its own vectors, x_i kept in a register */
    for (int v = lid; v < nv; v += WG) {
        for (int s = 0; s < n; ++s) {
            const int i = lower ? s : n - 1 - s;
            FL_T xi = XX(i, v);
            if (unit != 1) {
                const FL_T d = TT(i, i);
                if (unit == 0 || d != (FL_T)0) {
                    xi /= d;
                    XX(i, v) = xi;
                }
            }
            const int lo = lower ? i + 1 : 0, hi = lower ? n : i;
            for (int r = lo; r < hi; ++r)
                XX(r, v) -= TT(r, i) * xi;
        }
    }
#else
    /* one work-item (a CPU): the vectors innermost, contiguous, so that they vectorise */
    for (int s = 0; s < n; ++s) {
        const int i = lower ? s : n - 1 - s;
        const FL_T d = TT(i, i);
        if (unit == 0 || (unit == 2 && d != (FL_T)0))
            for (int v = 0; v < nv; ++v)
                XX(i, v) /= d;
        const int lo = lower ? i + 1 : 0, hi = lower ? n : i;
        for (int r = lo; r < hi; ++r) {
            const FL_T f = TT(r, i);
            for (int v = 0; v < nv; ++v)
                XX(r, v) -= f * XX(i, v);
        }
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    if (bs0 == 1) {
        for (int e = lid; e < nv * n; e += WG) {
            const int v = e / n, i = e % n;
            b[boff + i + (v0 + v) * bs1] = XX(i, v);
        }
    } else {
        for (int e = lid; e < nv * n; e += WG) {
            const int i = e / nv, v = e % nv;
            b[boff + i * bs0 + (v0 + v) * bs1] = XX(i, v);
        }
    }
    if (copy != 0) {
        if (cs0 == 1) {
            for (int e = lid; e < nv * n; e += WG) {
                const int v = e / n, i = e % n;
                c[coff + i + (v0 + v) * cs1] = XX(i, v);
            }
        } else {
            for (int e = lid; e < nv * n; e += WG) {
                const int i = e / nv, v = e % nv;
                c[coff + i * cs0 + (v0 + v) * cs1] = XX(i, v);
            }
        }
    }
}
#undef TT
#undef XX
"""

# One block of a triangular solve T Y = X with few right-hand sides (m <= VPG) in one
# launch: every work-group reads the b x b diagonal block at T[k, k] (T[i,j] =
# t[i*ts0 + j*ts1], only its triangle) and rows k..k+b of x (n x m, contiguous: the
# right-hand sides less the earlier blocks' terms) into local memory and solves them
# (on a GPU step by step, the rows not yet solved shared out over the group, one
# barrier a step, the solved values into fin; with groups of one, a CPU's, right-hand
# side after right-hand side); group 0 writes the solution to rows k..k+b of
# y, and each group updates rpg of the rows [r0, r1) of x not yet solved (a work-item
# per row): x[r] -= T[r, k:k+b] y[k:k+b].  x rows k..k+b are only read here, so that
# every group solves the same block; y is the solution when every block is done.
_TRSV_BLOCKS = r"""
#define TT(i, j) tt[(i) * (NB + 1) + (j)]
#define SOL(i, v) sol[(i) * VPG + (v)]
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_trsv_blocks(__global FL_T *x, __global FL_T *y, __global const FL_T *t,
                          const long b_, const long m_, const long k, const long ts0,
                          const long ts1, const long r0, const long r1, const long rpg,
                          const long lower, const long unit)
{
    __local FL_T tt[NB * (NB + 1)];
    __local FL_T sol[NB * VPG];
#if WG > 1
    __local FL_T fin[NB * VPG];
#define OUT(i, v) fin[(i) * VPG + (v)]
#else
#define OUT(i, v) SOL(i, v)
#endif
    const int lid = get_local_id(0), b = (int)b_, m = (int)m_;
    const long toff = k * ts0 + k * ts1;
    for (int e = lid; e < b * b; e += WG) {
        const int i = ts1 == 1 ? e / b : e % b, j = ts1 == 1 ? e % b : e / b;
        if (lower ? j <= i : j >= i)
            TT(i, j) = t[toff + i * ts0 + j * ts1];
    }
    for (int e = lid; e < b * m; e += WG)
        SOL(e / m, e % m) = x[(k + e / m) * m + e % m];
    barrier(CLK_LOCAL_MEM_FENCE);
#if WG > 1
    /* row i of sol is final when its step comes (no work-item writes it then): each
       work-item divides it itself, and the solved value goes to fin */
    for (int s = 0; s < b; ++s) {
        const int i = lower ? s : b - 1 - s;
        const int lo = lower ? i + 1 : 0, hi = lower ? b : i;
        for (int e = lid; e < (hi - lo) * m; e += WG) {
            const int r = lo + e / m, v = e % m;
            const FL_T xi = unit ? SOL(i, v) : SOL(i, v) / TT(i, i);
            SOL(r, v) -= TT(r, i) * xi;
        }
        for (int v = lid; v < m; v += WG)
            OUT(i, v) = unit ? SOL(i, v) : SOL(i, v) / TT(i, i);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#else
    for (int v = 0; v < m; ++v) {
        for (int s = 0; s < b; ++s) {
            const int i = lower ? s : b - 1 - s;
            FL_T xi = SOL(i, v);
            if (!unit) {
                xi /= TT(i, i);
                SOL(i, v) = xi;
            }
            const int lo = lower ? i + 1 : 0, hi = lower ? b : i;
            for (int r = lo; r < hi; ++r)
                SOL(r, v) -= TT(r, i) * xi;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    if (get_group_id(0) == 0)
        for (int e = lid; e < b * m; e += WG)
            y[(k + e / m) * m + e % m] = OUT(e / m, e % m);
    const long g0 = r0 + (long)get_group_id(0) * rpg;
    const long g1 = g0 + rpg < r1 ? g0 + rpg : r1;
    for (long r = g0 + lid; r < g1; r += WG)
        for (int v = 0; v < m; ++v) {
            FL_T acc = x[r * m + v];
            for (int j = 0; j < b; ++j)
                acc -= t[r * ts0 + (k + j) * ts1] * OUT(j, v);
            x[r * m + v] = acc;
        }
}
#undef TT
#undef SOL
#undef OUT
"""

# One level of the LU panel's pivot tournament (tournament pivoting, as in
# communication-avoiding LU): the panel is a[(k + r) * ld + k + c] for r < m, c < b
# (b <= NB), left unchanged.  Each work-group takes up to TR = 2 NB of its rows (level
# 0: rows g TR ...; later levels: the candidates of sets 2g and 2g + 1 of cand_in,
# nsets of them, b entries each, -1 for none), copies them into local memory,
# factors the copy with partial pivoting (the first largest |a| of a column, as
# LAPACK) and writes the rows it chose, in pivot order, as set g of cand_out.  The
# final level (one group) also writes the factored b x b block of its chosen rows to
# diag (L below the diagonal, unit, and U) and the swaps that bring the chosen rows
# to the panel's top as LAPACK's pivots: piv[k + j] = the row swapped with row k + j;
# and their net effect as perm: perm[0] rows, row k + perm[1 + 2t] receiving row
# k + perm[2 + 2t] (what fuseloop_rowperm applies).
# A zero pivot of the final level sets flag[0] to its 1-based column (the first one;
# the factorisation goes on, as LAPACK's getrf does).  CPR work-items share each row
# of the copy (2 for groups of 4 NB); per column three barriers (pivot search in two
# stages, swap, update).  The final level's swaps come from the chosen rows by one
# work-item after the last barrier (fl_panel_swaps, shared with fuseloop_tslu_rows).
_TSLU = r"""
#define TR (2 * NB)
#define CPR (WG > TR ? WG / TR : 1)
#define A(r, c) tile[(r) * (NB + 1) + (c)]
#define LANES (WG < 16 ? WG : 16)
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_tslu(__global long *cand_out, __global long *piv, __global long *flag,
                   __global FL_T *diag, __global long *perm, __global const FL_T *a,
                   __global const long *cand_in,
                   const long k, const long ld, const long m, const long b_,
                   const long nsets, const long final)
{
    __local FL_T tile[TR * (NB + 1)];
    __local int idx[TR];
    __local FL_T part_v[16];
    __local int part_r[16];
    __local int rows_here;
    __local int rowat[TR], posof[TR];
    __local FL_T lcol[TR];
    const int lid = get_local_id(0), g = get_group_id(0), b = (int)b_;
    if (lid == 0) {
        int R = 0;
        if (nsets == 0) {  /* the first level: a slice of the panel's rows */
            const long r0 = (long)g * TR;
            R = m - r0 < TR ? (int)(m - r0) : TR;
            for (int r = 0; r < R; ++r)
                idx[r] = (int)(r0 + r);
        } else {  /* the candidates of two sets (or the last one alone) */
            const int sets = 2 * g + 1 < nsets ? 2 : 1;
            for (int e = 0; e < sets * b; ++e) {
                const long r = cand_in[2 * (long)g * b + e];
                if (r >= 0)
                    idx[R++] = (int)r;
            }
        }
        rows_here = R;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int R = rows_here, steps = R < b ? R : b;
    for (int e = lid; e < R * b; e += WG) {
        const int r = e / b, c = e % b;
        A(r, c) = a[(k + idx[r]) * ld + k + c];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = 0; j < steps; ++j) {
        /* column j - 1's multipliers wait in lcol unless its pivot was zero (the
           test inside the loop: PoCL 3.0 crashed on a loop under an if here) */
        for (int r = j + lid; r < R; r += WG)
            if (j > 0 && A(j - 1, j - 1) != (FL_T)0)
                A(r, j - 1) = lcol[r];
        /* the pivot: each lane the first largest of its rows, then of the lanes */
        if (lid < LANES) {
            FL_T best = (FL_T)-1;
            int p = j;
            for (int r = j + lid; r < R; r += LANES) {
                const FL_T v = fabs(A(r, j));
                if (v > best) {
                    best = v;
                    p = r;
                }
            }
            part_v[lid] = best;
            part_r[lid] = p;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        FL_T best = part_v[0];
        int p = part_r[0];
        for (int l = 1; l < LANES; ++l) {
            const FL_T v = part_v[l];
            if (v > best || (v == best && part_r[l] < p)) {
                best = v;
                p = part_r[l];
            }
        }
        if (p != j) {
            for (int c = lid; c < b; c += WG) {
                const FL_T x = A(j, c);
                A(j, c) = A(p, c);
                A(p, c) = x;
            }
            if (lid == 0) {
                const int x = idx[j];
                idx[j] = idx[p];
                idx[p] = x;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const FL_T d = A(j, j);
        if (d != (FL_T)0) {
            /* CPR work-items per row share its columns; the multipliers are stored
               into column j after the barrier (the row's other work-items read the
               unscaled value here) */
            const FL_T rd = (FL_T)1 / d;
            for (int r = j + 1 + lid / CPR; r < R; r += WG / CPR) {
                const FL_T l = A(r, j) * rd;
                for (int c = j + 1 + lid % CPR; c < b; c += CPR)
                    A(r, c) -= l * A(j, c);
                if (lid % CPR == 0)
                    lcol[r] = l;
            }
        } else if (final != 0 && lid == 0 && flag[0] == 0) {
            flag[0] = k + j + 1;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r = steps + lid; r < R; r += WG)  /* (the last column's) */
        if (A(steps - 1, steps - 1) != (FL_T)0)
            A(r, steps - 1) = lcol[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (final == 0) {
        for (int j = lid; j < b; j += WG)
            cand_out[(long)g * b + j] = j < steps ? idx[j] : -1;
    } else {
        for (int e = lid; e < b * b; e += WG)
            diag[e] = A(e / b, e % b);
        if (lid == 0)
            fl_panel_swaps(piv, perm, idx, rowat, posof, k, b);
    }
}
#undef A
#undef LANES
#undef TR
#undef CPR
"""

# name -> (source, buffer arguments, number of int64 scalars, column-parallel: one
# work-item per column, else work-groups of group_size(device, False)); with the LU
# panel's row kernels (fuseloop.linalg_panel) and the QR's (fuseloop.linalg_qr_kernels)
_KERNELS: dict[str, tuple[str, list[str], int, bool]] = {
    **_PANEL_KERNELS,
    **_QR_KERNELS,
    "fuseloop_potrf": (_POTRF, ["out0", "out1", "out2"], 5, False),
    "fuseloop_trmm_inv": (_TRMM_INV, ["out0", "out1", "in0"], 8, True),
    "fuseloop_trsm_blocks": (_TRSM_BLOCKS, ["out0", "out1", "in0"], 26, True),
    "fuseloop_tslu": (_TSLU, ["out0", "out1", "out2", "out3", "out4", "in0", "in1"], 6, False),
    "fuseloop_trsv_blocks": (_TRSV_BLOCKS, ["out0", "out1", "in0"], 10, True),
    # (built with NB: its tile; see linalg_gemm.gemm_tiling)
    "fuseloop_gemm_update": (GEMM_UPDATE_SOURCE, ["out0", "in0", "in1"], 13, False),
}


#: right-hand sides up to which a triangular solve's block is one fused launch
FEW_RHS = 4

#: local memory a work-group of the blocked kernels may use on a GPU (NVIDIA's and
#: CUDA's static limit is 48 KiB per group; some left for the compiler)
GPU_LOCAL_BYTES = 40 * 1024

_kernels: dict[tuple[str, str, int, int, int], SourceKernel] = {}
# device -> local_limit(device): the driver's query costs each launch ~10 us otherwise
_local_limits: dict[Device, int] = {}
_lock = threading.Lock()
_caches.register("linalg_kernels.kernels", _kernels.clear, lambda: len(_kernels),
                 why="one per kernel, element type, work-group size and block size")
_caches.register("linalg_kernels.local_limits", _local_limits.clear,
                 lambda: len(_local_limits), why="one per device")


def group_size(device: Device, parallel: bool) -> int:
    """Work-items per group: of the column-parallel kernels and the blocks' triangular
    solves (``parallel``), else of the one work-group that factors a block.  On a CPU
    one work-item per group (PoCL runs a group's work-items on one core: no gain from
    sharing a block out); on a GPU a power of two within the device's limit."""
    if device.type == "cpu":
        return 1
    want = 64 if parallel else 256
    while want > device.max_work_group_size:
        want //= 2
    return want


def vectors_per_group(device: Device, nb: int, dtype: np.dtype, wg: int) -> int:
    """How many vectors a work-group of ``fuseloop_trsm_blocks`` solves (with a block of
    ``nb``): 64, or as many as the triangle leaves room for in the local memory a GPU
    group may use (see :func:`fit_block`)."""
    limit = local_limit(device)
    vpg = max(64, wg)
    while vpg > 1 and (nb * (nb + 1) + nb * (vpg + 1)) * dtype.itemsize > limit:
        vpg //= 2
    return vpg


def _kernel(name: str, dtype: np.dtype, wg: int, nb: int = 32, vpg: int = FEW_RHS
            ) -> SourceKernel:
    """Kernel ``name`` built for this element type, work-group size, block size and
    vectors per group (the defaults: sizes that fit any of them on a GPU)."""
    key = (name, dtype.char, wg, nb, vpg)
    found = _kernels.get(key)
    if found is None:
        source, bufs, n_scalars, _ = _KERNELS[name]
        ctype = "double" if dtype == np.float64 else "float"
        plan = KernelPlan(
            name=name, source=PRELUDE + source,
            arg_names=[*bufs, *(f"s{i}" for i in range(n_scalars))],
            gsize=["p[0]"], lsize=[str(wg)],
            build_options=[f"-DFL_T={ctype}", f"-DWG={wg}", f"-DNB={nb}", f"-DVPG={vpg}",
                           f"-DIS_DOUBLE={int(dtype == np.float64)}"],
            arg_dtypes=[*([None] * len(bufs)), *(["int64"] * n_scalars)])
        with _lock:
            found = _kernels.setdefault(key, SourceKernel(plan))
    return found


def launch(name: str, dtype: np.dtype, outs: list[Storage], ins: list[Storage],
           scalars: list[int], device: Device, columns: int = 1, *, groups: int = 0,
           nb: int = 1, vpg: int = 1, wg: int = 0) -> None:
    """Run kernel ``name`` now (after any deferred launches) on ``device``;
    ``columns``: the work-items of a column-parallel kernel, or ``groups`` work-groups
    of it; ``nb``, ``vpg``: the block size and vectors per group it is built for;
    ``wg``: its work-items per group (else :func:`group_size`'s)."""
    parallel = _KERNELS[name][3]
    wg = wg or group_size(device, parallel)
    if not groups:
        groups = max(1, -(-columns // wg)) if parallel else 1
    compiled = _kernel(name, dtype, wg, nb, vpg).get(device)
    plan = launching.plan_for(compiled, (groups,), 0, 0, device)
    assert plan is not None
    # (Python ints: the launcher converts them to the kernel's int64 itself, and skips
    # setting a small one again when the kernel object already holds it)
    args: list[Any] = list(scalars)
    launching.enqueue(plan, outs, ins, args, False, device)


def potrf(a: Storage, flag: Storage, off: int, ld: int, n: int, col0: int, nb: int,
          dtype: np.dtype, device: Device, inv: Storage | None = None) -> None:
    """Cholesky factor of the n x n block at ``a[off]`` (row stride ``ld``) in place,
    by one work-group in local memory (``n <= nb``); with ``inv``, also the factor's
    inverse into it (row stride ``n``), for :func:`trmm_inverse`."""
    launch("fuseloop_potrf", dtype, [a, flag, a if inv is None else inv], [],
           [off, ld, n, col0, int(inv is not None)], device, nb=nb)


def trmm_inverse(b: Storage, c: Storage, inv: Storage, n: int, nvec: int,
                 b_at: tuple[int, int, int], c_at: tuple[int, int, int], nb: int,
                 dtype: np.dtype, device: Device) -> None:
    """``x = X b`` in place for ``nvec`` vectors of ``n <= nb`` elements, ``X`` the lower
    ``n x n`` matrix in ``inv`` (:func:`potrf`'s inverse), vector ``v``'s element ``i`` at
    ``b[off + i * s0 + v * s1]`` for ``b_at = (off, s0, s1)``, also written to ``c`` at
    ``c_at``: a triangular solve against a factored block as one product."""
    wg = group_size(device, True)
    vpg = vectors_per_group(device, nb, dtype, wg)
    launch("fuseloop_trmm_inv", dtype, [b, c], [inv], [n, nvec, *b_at, *c_at], device,
           groups=max(1, -(-nvec // vpg)), nb=nb, vpg=vpg, wg=wg)


#: ``fuseloop_trsm_blocks``'s split when it solves one system (one object: a kernel
#: object that holds it already is not set again)
_NO_SPLIT = 1 << 62
_NO_SECOND = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


def trsm_blocks(b: Storage, t: Storage, n: int, nvec: int, t_at: tuple[int, int, int],
                b_at: tuple[int, int, int], lower: bool, unit: int, nb: int,
                dtype: np.dtype, device: Device,
                copy: tuple[Storage, int, int, int] | None = None,
                second: tuple[int, tuple[int, int, int], tuple[int, int, int],
                              tuple[int, int, int], int] | None = None) -> None:
    """Solve ``T x = b`` in place for ``nvec`` vectors of ``n <= nb`` elements: ``T``'s
    (offset, row stride, column stride) in ``t`` is ``t_at``, vector ``v``'s element
    ``i`` is ``b[off + i * s0 + v * s1]`` for ``b_at = (off, s0, s1)``; ``unit``: 1 for a
    unit diagonal, 2 to skip zeros on the stored one (0: divide by it); ``copy``: a
    buffer and its (offset, s0, s1) that also receives the solution.  ``second``: a
    second system in the same buffers and launch, as ``(nvec, t_at, b_at, c_at,
    unit)`` (``c_at`` in ``copy``'s buffer, which it needs)."""
    wg = group_size(device, True)
    vpg = vectors_per_group(device, nb, dtype, wg)
    lanes = trsm_lanes(device)
    if lanes > 1 and vpg * lanes <= device.max_work_group_size:
        wg = vpg * lanes
    c, *c_at = copy if copy is not None else (b, *b_at)
    groups = max(1, -(-nvec // vpg))
    split: int = _NO_SPLIT
    more: tuple[int, ...] = _NO_SECOND
    if second is not None:
        assert copy is not None
        nvec2, t2, b2, c2, unit2 = second
        split, more = groups, (nvec2, *t2, *b2, *c2, int(unit2))
        groups += max(1, -(-nvec2 // vpg))
    launch("fuseloop_trsm_blocks", dtype, [b, c], [t],
           [n, nvec, *t_at, *b_at, *c_at, int(lower), int(unit), int(copy is not None),
            split, *more], device, groups=groups, nb=nb, vpg=vpg, wg=wg)


def trsm_lanes(device: Device) -> int:
    """Work-items per vector of ``fuseloop_trsm_blocks`` (groups of that many times
    its vectors per group): 4 on a GPU, where one work-item's 64 steps of up to 63
    updates each, one after another, were most of a launch's time; 1 on a CPU."""
    return 1 if device.type == "cpu" else 4


def trsv_step(x: Storage, y: Storage, t: Storage, b: int, m: int, k: int,
              t_strides: tuple[int, int], rows: tuple[int, int], lower: bool, unit: bool,
              nb: int, dtype: np.dtype, device: Device) -> None:
    """One block of a triangular solve with ``m <= FEW_RHS`` right-hand sides (see
    ``fuseloop_trsv_blocks``): the block at ``T[k, k]`` solved into ``y``, the rows
    ``rows[0]:rows[1]`` of ``x`` updated, in one launch."""
    wg = group_size(device, True)
    count = rows[1] - rows[0]
    # a row per work-item on a GPU; on a CPU (groups of one) a few groups per core, as
    # each group solves the diagonal block again
    rpg = wg if device.type != "cpu" else max(wg, -(-count // (4 * device.compute_units)))
    groups = max(1, -(-count // rpg))
    launch("fuseloop_trsv_blocks", dtype, [x, y], [t],
           [b, m, k, *t_strides, *rows, rpg, int(lower), int(unit)], device, groups=groups,
           nb=nb, vpg=FEW_RHS)


def gemm_update(c: Storage, a: Storage, b: Storage, m: int, n: int, kk: int,
                c_at: tuple[int, int, int], a_at: tuple[int, int, int],
                b_at: tuple[int, int, int], lower: bool, dtype: np.dtype,
                device: Device) -> None:
    """``C -= A B`` in place (``m x n``, inner size ``kk``) by ``fuseloop_gemm_update``;
    each operand's (offset, row stride, column stride) in its buffer; ``lower``: only
    the tiles on and below the diagonal of the square ``C`` (the rest is left)."""
    if m <= 0 or n <= 0 or kk <= 0:
        return
    tile, wg = gemm_tiling(device, m, n, dtype, lower)
    launch("fuseloop_gemm_update", dtype, [c], [a, b],
           [m, n, kk, *a_at, *b_at, *c_at, int(lower)], device,
           groups=gemm_groups(m, n, tile, lower), nb=tile, wg=wg,
           vpg=4 if _gemm.GEMM_VECTOR_C else 1)


def panel_pivots(a: Storage, piv: Storage, flag: Storage, diag: Storage, perm: Storage,
                 cands: tuple[Storage, Storage], k: int, ld: int, m: int, b: int, nb: int,
                 dtype: np.dtype, device: Device) -> int:
    """The pivots of the LU panel of ``b`` columns and ``m`` rows at ``a[k, k]`` by a
    tournament (``fuseloop_tslu``, one launch per level: the first takes the rows in
    slices of ``2 nb``, each later one halves the candidate sets), its factored
    diagonal block into ``diag`` and its row exchanges into ``perm`` (``1 + 4 nb``
    int64); ``cands``: two buffers of candidate rows, each of at least
    ``ceil(m / (2 nb)) * b`` int64.  Returns the number of launches."""
    rows = 2 * nb
    wg = tslu_group_size(device, rows)
    sets, src, dst, launches = 0, cands[1], cands[0], 0
    while True:
        groups = -(-m // rows) if sets == 0 else -(-sets // 2)
        launch("fuseloop_tslu", dtype, [dst, piv, flag, diag, perm], [a, src],
               [k, ld, m, b, sets, int(groups == 1)], device, groups=groups, nb=nb, wg=wg)
        launches += 1
        if groups == 1:
            return launches
        sets, src, dst = groups, dst, src


def tslu_group_size(device: Device, rows: int) -> int:
    """Work-items of a ``fuseloop_tslu`` group taking ``rows`` rows: on a GPU twice the
    factoring groups' (512), up to 4 per row, as each column's rank-1 update of the
    slice (up to ``rows`` x 63 products between two barriers) is most of a tournament
    level's time, and the levels most of the LU's; 1 on a CPU (see :func:`group_size`)."""
    g = group_size(device, False)
    if device.type == "cpu":
        return min(g, 2 * rows)
    return max(1, min(2 * g, 4 * rows, device.max_work_group_size))


def tslu_local_bytes(nb: int, dtype: np.dtype) -> int:
    """The local memory of a ``fuseloop_tslu`` work-group with a block of ``nb``."""
    return 2 * nb * ((nb + 2) * dtype.itemsize + 4 * 3) + 16 * (dtype.itemsize + 4) + 4


def local_limit(device: Device) -> int:
    """The local memory a work-group of these kernels may use on ``device``: what its
    OpenCL driver reports, less a margin, and on a GPU at most ``GPU_LOCAL_BYTES``
    (PoCL's CPU device reports megabytes; some CPU runtimes 32 KiB)."""
    known = _local_limits.get(device) if isinstance(device, Device) else None
    if known is not None:
        return known
    limit = _local_limit(device)
    if isinstance(device, Device):
        _local_limits[device] = limit
    return limit


def _local_limit(device: Device) -> int:
    size = getattr(getattr(device, "cl_device", None), "local_mem_size", None)
    if device.type != "cpu":
        return min(GPU_LOCAL_BYTES, int(size) - 8192) if size else GPU_LOCAL_BYTES
    return int(size) * 3 // 4 if size else 1 << 20


def fit_block(device: Device, nb: int, dtype: np.dtype) -> int:
    """``nb``, halved until the LU panel's tournament (the kernel with the most local
    memory) fits a work-group's local memory (float64 blocks of 64 do not on GPUs)."""
    limit = local_limit(device)
    while nb > 8 and tslu_local_bytes(nb, dtype) > limit:
        nb //= 2
    return nb


def contiguous_copy(x: Array) -> Array:
    """A new contiguous array holding ``x``'s values (for kernels that write in place)."""
    from .creation import empty

    out = empty(x.shape, x.dtype, x.device)
    out[...] = x
    return out


def buffer(x: Array) -> Storage:
    """The buffer of a concrete, contiguous array (what the kernels read and write)."""
    s = x._storage
    assert s is not None and x.is_contiguous
    return s


__all__ = ["FEW_RHS", "GEMM_GROUP", "PRELUDE", "buffer", "contiguous_copy", "fit_block",
           "gemm_update", "group_size", "launch", "local_limit", "panel_pivots", "potrf",
           "trmm_inverse", "trsm_blocks", "trsm_lanes", "trsv_step", "tslu_group_size",
           "vectors_per_group"]
