"""The trailing-update kernel of the blocked factorisations on GPUs (``C -= A B``):
its OpenCL C source and tiling, launched by :func:`fuseloop.linalg_kernels.gemm_update`
(which builds it through the kernel cache with the other linalg kernels)."""

from __future__ import annotations

#: work-items of a ``fuseloop_gemm_update`` group (8 x 8, fixed by its tiling)
GEMM_GROUP = 64
#: the rows and columns of c one ``fuseloop_gemm_update`` group computes
GEMM_TILE = 64

# The trailing update of the blocked algorithms, c -= a b (m x n, inner size kk <= a
# block), for GPUs: the fuseloop contraction costs the host a lazy expression, an
# assignment and a plan look-up per block (most of a 4096 factorisation's time on an
# H100), this kernel one launch.  A(i, p) = a[aoff + i*as0 + p*as1], B(p, j) =
# b[boff + p*bs0 + j*bs1], C(i, j) = c[coff + i*cs0 + j*cs1].  A work-group of 64
# (8 x 8) computes a GT x GT tile of c, each work-item 8 x 8 of it (rows ty + 8 r,
# columns tx + 8 s: neighbouring work-items on neighbouring columns; the tiling of
# fuseloop's best H100 matmul recipe, 4 products per local load), through local
# copies of GK columns of A's tile and GK rows of B's, loaded along whichever stride
# is 1.  ``lower``: tiles above the diagonal (of a square c) are skipped, the
# Cholesky update's symmetric half.
GEMM_UPDATE_SOURCE = r"""
#define GT 64
#define GK 16
#define TS 8
__kernel __attribute__((reqd_work_group_size(TS * TS, 1, 1)))
void fuseloop_gemm_update(__global FL_T *c, __global const FL_T *a, __global const FL_T *b,
                          const long m, const long n, const long kk,
                          const long aoff, const long as0, const long as1,
                          const long boff, const long bs0, const long bs1,
                          const long coff, const long cs0, const long cs1, const long lower)
{
    __local FL_T la[GK][GT + 1];
    __local FL_T lb[GK][GT + 1];
    const int lid = get_local_id(0), tx = lid % TS, ty = lid / TS;
    const long tiles_n = (n + GT - 1) / GT;
    const long bi = get_group_id(0) / tiles_n, bj = get_group_id(0) % tiles_n;
    if (lower != 0 && bj > bi)
        return;  /* (the whole group: no barrier is skipped by part of it) */
    const long i0 = bi * GT, j0 = bj * GT;
    FL_T acc[GT / TS][GT / TS];
#pragma unroll
    for (int r = 0; r < GT / TS; ++r)
#pragma unroll
        for (int s = 0; s < GT / TS; ++s)
            acc[r][s] = (FL_T)0;
    for (long p0 = 0; p0 < kk; p0 += GK) {
        for (int e = lid; e < GK * GT; e += TS * TS) {
            /* coalesced along the stride that is 1 */
            const int p = as1 == 1 ? e % GK : e / GT, i = as1 == 1 ? e / GK : e % GT;
            const int q = bs1 == 1 ? e / GT : e % GK, j = bs1 == 1 ? e % GT : e / GK;
            la[p][i] = i0 + i < m && p0 + p < kk ? a[aoff + (i0 + i) * as0 + (p0 + p) * as1]
                                                 : (FL_T)0;
            lb[q][j] = j0 + j < n && p0 + q < kk ? b[boff + (p0 + q) * bs0 + (j0 + j) * bs1]
                                                 : (FL_T)0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int p = 0; p < GK; ++p) {
            FL_T av[GT / TS], bv[GT / TS];
#pragma unroll
            for (int r = 0; r < GT / TS; ++r)
                av[r] = la[p][ty + TS * r];
#pragma unroll
            for (int s = 0; s < GT / TS; ++s)
                bv[s] = lb[p][tx + TS * s];
#pragma unroll
            for (int r = 0; r < GT / TS; ++r)
#pragma unroll
                for (int s = 0; s < GT / TS; ++s)
                    acc[r][s] += av[r] * bv[s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#pragma unroll
    for (int r = 0; r < GT / TS; ++r) {
        const long i = i0 + ty + TS * r;
#pragma unroll
        for (int s = 0; s < GT / TS; ++s) {
            const long j = j0 + tx + TS * s;
            if (i < m && j < n)
                c[coff + i * cs0 + j * cs1] -= acc[r][s];
        }
    }
}
#undef GT
#undef GK
#undef TS
"""

__all__ = ["GEMM_GROUP", "GEMM_TILE", "GEMM_UPDATE_SOURCE"]
