"""The trailing-update kernel of the blocked factorisations on GPUs (``C -= A B``):
its OpenCL C source and tiling rule, launched by
:func:`fuseloop.linalg_kernels.gemm_update` (which builds it through the kernel cache
with the other linalg kernels)."""

from __future__ import annotations

from typing import Any

import numpy as np

#: bytes of one vector load from local memory (float4, double2): 128-bit shared loads
GEMM_VECTOR_BYTES = 16
#: whether ``fuseloop_gemm_update`` reads and writes c's whole, aligned tiles as
#: vectors (its build's VPG 4; 1: element by element, each load of c after the
#: previous element's store, which ptxas builds in 128 registers for sm_90 against
#: 141: two groups of 256 per SM instead of one; ``bench_linalg.py --ops update``
#: times both)
GEMM_VECTOR_C = True
#: the fewest work-items a ``fuseloop_gemm_update`` group has (its small tiles)
GEMM_GROUP = 64

# The trailing update of the blocked algorithms, c -= a b (m x n, inner size kk <= a
# block), for GPUs: the fuseloop contraction costs the host a lazy expression, an
# assignment and a plan look-up per block (most of a 4096 factorisation's time on an
# H100), this kernel one launch.  A(i, p) = a[aoff + i*as0 + p*as1], B(p, j) =
# b[boff + p*bs0 + j*bs1], C(i, j) = c[coff + i*cs0 + j*cs1].
#
# A work-group of WG = TS x TS work-items computes a GT x GT tile of c (GT: the build's
# NB), each work-item 2V x 2V of it, V the elements of a 16-byte vector (float4,
# double2): rows ty V + r and GT/2 + ty V + r (r < V), the columns likewise with tx, so
# that per step of the inner loop a work-item reads its A and B values as 4 vector
# loads from local memory for 4 V^2 products (float32: 64 per 4 loads) and
# neighbouring work-items write neighbouring columns of c.  The inner size goes
# through local memory GK = 8 at a time (16 took ptxas 167 registers: one group per
# SM), in two buffers: the next step's A and B
# elements are loaded from global memory into registers before this step's products
# and stored into the other buffer after them, one barrier per step.  Global loads
# run along whichever stride is 1 (coalesced); local rows are GT + 4 long (16-byte
# aligned rows; a store along the inner size spreads over the banks).  c is read and
# written once, as vectors where a tile's rows are whole and aligned (GEMM_VECTOR_C).
# ``lower``: only the tiles on and below the diagonal of the square c
# are launched (the Cholesky update's symmetric half), numbered row by row.
GEMM_UPDATE_SOURCE = r"""
#define GT NB
#if IS_DOUBLE
#define V 2
#define VT double2
#define CUDA_MAKEV make_double2
#define UNPACK(d, o, v) (d[o] = v.x, d[o + 1] = v.y)
#define FROMV(d, o, w) (d[o] = w.x - d[o], d[o + 1] = w.y - d[o + 1])
#define TOV(d, o) MAKEV(d[o], d[o + 1])
#else
#define V 4
#define VT float4
#define CUDA_MAKEV make_float4
#define UNPACK(d, o, v) (d[o] = v.x, d[o + 1] = v.y, d[o + 2] = v.z, d[o + 3] = v.w)
#define FROMV(d, o, u) (d[o] = u.x - d[o], d[o + 1] = u.y - d[o + 1], \
                       d[o + 2] = u.z - d[o + 2], d[o + 3] = u.w - d[o + 3])
#define TOV(d, o) MAKEV(d[o], d[o + 1], d[o + 2], d[o + 3])
#endif
#define TS (GT / (2 * V))
#define GK 8
#define LD (GT + 4)
#define PER (GK * GT / WG)
#ifdef __CUDACC__
#define LVEC(x) (*(const VT *) &(x))
#define GVEC VT
#define MAKEV CUDA_MAKEV
#else
#define LVEC(x) (*(const __local VT *) &(x))
#define GVEC __global VT
#define MAKEV (VT)
#endif
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_gemm_update(__global FL_T *c, __global const FL_T *a, __global const FL_T *b,
                          const long m, const long n, const long kk,
                          const long aoff, const long as0, const long as1,
                          const long boff, const long bs0, const long bs1,
                          const long coff, const long cs0, const long cs1, const long lower)
{
    __local FL_T la[2][GK * LD] __attribute__((aligned(16)));
    __local FL_T lb[2][GK * LD] __attribute__((aligned(16)));
    const int lid = get_local_id(0), tx = lid % TS, ty = lid / TS;
    const long g = get_group_id(0);
    long bi, bj;
    if (lower != 0) {  /* the g-th tile of the lower triangle, row by row */
        bi = (long) ((sqrt((float) (8 * g + 1)) - 1.0f) * 0.5f);
        while (bi > 0 && bi * (bi + 1) / 2 > g)
            --bi;
        while ((bi + 1) * (bi + 2) / 2 <= g)
            ++bi;
        bj = g - bi * (bi + 1) / 2;
    } else {
        const long tiles_n = (n + GT - 1) / GT;
        bi = g / tiles_n;
        bj = g % tiles_n;
    }
    const long i0 = bi * GT, j0 = bj * GT;
    /* the tile's rows and columns within c (32-bit compares below) */
    const int rm = (int) min(m - i0, (long) GT), rn = (int) min(n - j0, (long) GT);
    /* this work-item's elements of each step: along the stride that is 1 (coalesced),
       GK per row or column of the tile (then WG / GK of them apart), else GT per inner
       index (then WG / GT inner indices apart); one address per operand and step */
    const int a_along = as1 == 1, b_along = bs0 == 1;
    const int pa = a_along ? lid % GK : lid / GT, ia = a_along ? lid / GK : lid % GT;
    const int pb = b_along ? lid % GK : lid / GT, jb = b_along ? lid / GK : lid % GT;
    const long a_k = a_along ? (WG / GK) * as0 : (WG / GT) * as1;
    const long b_k = b_along ? (WG / GK) * bs1 : (WG / GT) * bs0;
    const __global FL_T *ga = a + aoff + (i0 + ia) * as0 + pa * as1;
    const __global FL_T *gb = b + boff + pb * bs0 + (j0 + jb) * bs1;
    FL_T ra[PER], rb[PER];
    FL_T acc[2 * V][2 * V];
#pragma unroll
    for (int r = 0; r < 2 * V; ++r)
#pragma unroll
        for (int s = 0; s < 2 * V; ++s)
            acc[r][s] = (FL_T) 0;
    const long steps = (kk + GK - 1) / GK;
    for (long st = -1; st < steps; ++st) {
        if (st + 1 < steps) {  /* the next step's elements into registers */
            const long p0 = (st + 1) * GK;
            const int rk = (int) min(kk - p0, (long) GK);
            /* (walked, not k * a_k: the compiler would keep PER addresses) */
            const __global FL_T *qa = ga + p0 * as1, *qb = gb + p0 * bs0;
#pragma unroll
            for (int k = 0; k < PER; ++k) {
                const bool in_a = a_along ? ia + k * (WG / GK) < rm && pa < rk
                                          : ia < rm && pa + k * (WG / GT) < rk;
                const bool in_b = b_along ? jb + k * (WG / GK) < rn && pb < rk
                                          : jb < rn && pb + k * (WG / GT) < rk;
                ra[k] = in_a ? *qa : (FL_T) 0;
                rb[k] = in_b ? *qb : (FL_T) 0;
                qa += a_k;
                qb += b_k;
            }
        }
        if (st >= 0) {  /* this step's products, from local memory */
            const int cur = st & 1;
#pragma unroll 4  /* (unrolled fully: 143 registers, one group per SM) */
            for (int p = 0; p < GK; ++p) {
                const VT a0 = LVEC(la[cur][p * LD + ty * V]);
                const VT a1 = LVEC(la[cur][p * LD + GT / 2 + ty * V]);
                const VT b0 = LVEC(lb[cur][p * LD + tx * V]);
                const VT b1 = LVEC(lb[cur][p * LD + GT / 2 + tx * V]);
                FL_T av[2 * V], bv[2 * V];
                UNPACK(av, 0, a0);
                UNPACK(av, V, a1);
                UNPACK(bv, 0, b0);
                UNPACK(bv, V, b1);
#pragma unroll
                for (int r = 0; r < 2 * V; ++r)
#pragma unroll
                    for (int s = 0; s < 2 * V; ++s)
                        acc[r][s] += av[r] * bv[s];
            }
        }
        if (st + 1 < steps) {  /* into the buffer no work-item reads in this step */
            const int nxt = (st + 1) & 1;
#pragma unroll
            for (int k = 0; k < PER; ++k) {
                la[nxt][a_along ? pa * LD + ia + k * (WG / GK)
                                : (pa + k * (WG / GT)) * LD + ia] = ra[k];
                lb[nxt][b_along ? pb * LD + jb + k * (WG / GK)
                                : (pb + k * (WG / GT)) * LD + jb] = rb[k];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    /* c's rows of the tile as 16-byte vectors where they are whole and aligned (the
       factorisations' blocks of 64 are): a quarter of the memory instructions, and a
       row's loads issued together (a store then a load of c, which the compiler must
       take as possibly the same element, waits for the load before it: one round trip
       to memory per row, not per element) */
    const long corner = coff + i0 * cs0 + j0;
    if (VPG != 1 && rm == GT && rn == GT && cs1 == 1 && cs0 % V == 0 && corner % V == 0) {
#pragma unroll
        for (int r = 0; r < 2 * V; ++r) {
            const long row = corner + ((r < V ? 0 : GT / 2) + ty * V + r % V) * cs0 + tx * V;
#if GEMM_SET  /* (fuseloop_gemm_set: c = -(a b), c's values not read) */
#if IS_DOUBLE
            const VT lo = MAKEV((FL_T) 0, (FL_T) 0), hi = lo;
#else
            const VT lo = MAKEV((FL_T) 0, (FL_T) 0, (FL_T) 0, (FL_T) 0), hi = lo;
#endif
#else
            const VT lo = *(GVEC *) &c[row], hi = *(GVEC *) &c[row + GT / 2];
#endif
            FROMV(acc[r], 0, lo);
            FROMV(acc[r], V, hi);
            *(GVEC *) &c[row] = TOV(acc[r], 0);
            *(GVEC *) &c[row + GT / 2] = TOV(acc[r], V);
        }
    } else {
#pragma unroll
        for (int r = 0; r < 2 * V; ++r) {
            const long i = i0 + (r < V ? 0 : GT / 2) + ty * V + r % V;
#pragma unroll
            for (int s = 0; s < 2 * V; ++s) {
                const long j = j0 + (s < V ? 0 : GT / 2) + tx * V + s % V;
                if (i < m && j < n)
#if GEMM_SET
                    c[coff + i * cs0 + j * cs1] = -acc[r][s];
#else
                    c[coff + i * cs0 + j * cs1] -= acc[r][s];
#endif
            }
        }
    }
}
#undef GT
#undef V
#undef VT
#undef UNPACK
#undef FROMV
#undef TOV
#undef GVEC
#undef MAKEV
#undef CUDA_MAKEV
#undef TS
#undef GK
#undef LD
#undef PER
#undef LVEC
"""


def gemm_tiling(device: Any, m: int, n: int, dtype: np.dtype, lower: bool = False
                ) -> tuple[int, int]:
    """``(tile, work-items)`` of ``fuseloop_gemm_update`` for an ``m x n`` update
    (``lower``: its tiles on and below the diagonal): tiles of 128 (float32; 64 for
    float64, whose 2V x 2V per work-item is 4 x 4) by groups of 256, or half that tile
    by groups of 64 where the big tiles would leave compute units without a group (the
    late, small updates of a factorisation) or the device takes no group of 256."""
    v = GEMM_VECTOR_BYTES // np.dtype(dtype).itemsize
    tile = 128 if v == 4 else 64
    units = max(1, getattr(device, "compute_units", 1))
    limit = getattr(device, "max_work_group_size", 1024)
    if gemm_groups(m, n, tile, lower) < units or (tile // (2 * v)) ** 2 > limit:
        tile //= 2
    return tile, (tile // (2 * v)) ** 2


def gemm_groups(m: int, n: int, tile: int, lower: bool) -> int:
    """Work-groups of an ``m x n`` update by ``tile`` tiles: all of them, or with
    ``lower`` (square) those on and below the diagonal."""
    tm, tn = -(-m // tile), -(-n // tile)
    return tm * (tm + 1) // 2 if lower else tm * tn


__all__ = ["GEMM_GROUP", "GEMM_UPDATE_SOURCE", "GEMM_VECTOR_BYTES", "GEMM_VECTOR_C",
           "gemm_groups", "gemm_tiling"]
