"""The OpenCL sources of Cholesky's block kernels, built and launched by
:mod:`fuseloop.linalg_kernels` like its other kernels (``PRELUDE``'s macros: ``FL_T``,
``WG``, ``NB``, ``VPG``): the diagonal block's factor (``fuseloop_potrf``), with its
inverse on request, and the panel's solve as a product with that inverse
(``fuseloop_trmm_inv``)."""

from __future__ import annotations

# Cholesky (lower) of the nb x nb diagonal block at a[off] (row stride ld, nb <= NB),
# by one work-group of WG work-items in local memory: the block's lower triangle is
# read once, factored right-looking and written back.  Column j's rank-1 update of
# the trailing triangle uses the column as it stands (a_ij a_cj / d2, d2 = a_jj: the
# product of the scaled entries), so no step writes what another work-item reads in
# it and a column costs one barrier; the columns are scaled (and the diagonal's
# square roots taken) as the block is written back.  With want_inv, the same steps
# also eliminate an identity to L's inverse (row i of R -= a_ij / d2 times row j: rows
# scaled by 1 / l_ii at the end), R kept transposed in the local array's upper
# triangle (R[i][c] at T(c, i + 1)), and written to inv (row stride nb).  flag[0] is
# set to the (1-based) global column of the first pivot that is not positive (or
# NaN); the factorisation stops there, and a later block's kernel with the flag set
# returns at once.
POTRF = r"""
#define T(i, j) t[(i) * (NB + 1) + (j)]
#define CL (WG < 16 ? WG : 16)
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_potrf(__global FL_T *a, __global long *flag, __global FL_T *inv,
                    const long off, const long ld, const long nb_, const long col0,
                    const long want_inv)
{
    __local FL_T t[NB * (NB + 1)];
    const int lid = get_local_id(0), nb = (int)nb_, w = want_inv != 0;
    /* no work-item of this group writes the flag before the end: all see one value */
    if (flag[0] != 0)
        return;
    for (int e = lid; e < nb * nb; e += WG) {
        const int i = e / nb, j = e % nb;
        if (j <= i)
            T(i, j) = a[off + i * ld + j];
    }
    if (w)  /* R = I, above the diagonal (no element the loop above writes) */
        for (int e = lid; e < nb * nb; e += WG) {
            const int c = e / nb, i = e % nb;
            if (c <= i)
                T(c, i + 1) = i == c ? (FL_T)1 : (FL_T)0;
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    int bad = 0;
    for (int j = 0; j < nb; ++j) {
        const FL_T d2 = T(j, j);  /* (the same value for the whole group) */
        if (!(d2 > (FL_T)0)) {
            bad = j + 1;
            break;
        }
        const FL_T r = (FL_T)1 / d2;
        /* the trailing triangle (and R's rows below j): CL work-items per row */
        for (int i = j + 1 + lid / CL; i < nb; i += WG / CL) {
            const FL_T lij = T(i, j) * r;
            for (int c = j + 1 + lid % CL; c <= i; c += CL)
                T(i, c) -= lij * T(c, j);
            if (w)
                for (int c = lid % CL; c <= j; c += CL)
                    T(c, i + 1) -= lij * T(c, j + 1);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int e = lid; e < nb * nb; e += WG) {
        const int i = e / nb, j = e % nb;
        if (j < i)
            a[off + i * ld + j] = T(i, j) / sqrt(T(j, j));
        else if (j == i)
            a[off + i * ld + j] = sqrt(T(i, i));
        if (w && j <= i)
            inv[i * nb + j] = T(j, i + 1) / sqrt(T(i, i));
    }
    if (bad != 0 && lid == 0)
        flag[0] = col0 + bad;
}
#undef T
#undef CL
"""

# x = X b in place for nvec vectors of n <= NB elements, X the lower n x n matrix at
# inv (row stride n: fuseloop_potrf's inverse), element i of vector v at b[boff + i*bs0 +
# v*bs1], also written to c[coff + i*cs0 + v*cs1]: Cholesky's panel rows solved against
# the diagonal block (L21 = A21 L11^-T) as a product, every output at once, where a
# substitution takes n steps one after another.  Each work-group reads X and VPG
# vectors into local memory, then each work-item sums outputs' terms.
TRMM_INV = r"""
#define XI(i, j) xi[(i) * (NB + 1) + (j)]
#define XX(i, v) xx[(i) * (VPG + 1) + (v)]
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_trmm_inv(__global FL_T *b, __global FL_T *c, __global const FL_T *inv,
                       const long n_, const long nvec, const long boff, const long bs0,
                       const long bs1, const long coff, const long cs0, const long cs1)
{
    __local FL_T xi[NB * (NB + 1)];
    __local FL_T xx[NB * (VPG + 1)];
    const int lid = get_local_id(0), n = (int)n_;
    const long v0 = (long)get_group_id(0) * VPG;
    const int nv = nvec - v0 < VPG ? (int)(nvec - v0) : VPG;
    for (int e = lid; e < n * n; e += WG) {
        const int i = e / n, j = e % n;
        if (j <= i)
            XI(i, j) = inv[e];
    }
    for (int e = lid; e < nv * n; e += WG) {
        const int v = e / n, i = e % n;
        XX(i, v) = b[boff + i * bs0 + (v0 + v) * bs1];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < nv * n; e += WG) {
        const int v = e / n, i = e % n;
        FL_T s = (FL_T)0;
        for (int k = 0; k <= i; ++k)
            s += XI(i, k) * XX(k, v);
        b[boff + i * bs0 + (v0 + v) * bs1] = s;
        c[coff + i * cs0 + (v0 + v) * cs1] = s;
    }
}
#undef XI
#undef XX
"""

__all__ = ["POTRF", "TRMM_INV"]
