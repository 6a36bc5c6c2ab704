"""The OpenCL sources of Cholesky's diagonal-block kernel (``fuseloop_potrf``), built and
launched by :mod:`fuseloop.linalg_kernels` like its other kernels (``PRELUDE``'s macros:
``FL_T``, ``WG``, ``NB``)."""

from __future__ import annotations

# Cholesky (lower) of the nb x nb diagonal block at a[off] (row stride ld, nb <= NB),
# by one work-group of WG work-items in local memory: the block's lower triangle is
# read once, factored right-looking and written back.  Column j's rank-1 update of
# the trailing triangle uses the column as it stands (a_ij a_cj / d2, d2 = a_jj: the
# product of the scaled entries), so no step writes what another work-item reads in
# it and a column costs one barrier; the columns are scaled (and the diagonal's
# square roots taken) as the block is written back.  flag[0] is set to the (1-based)
# global column of the first pivot that is not positive (or NaN); the factorisation
# stops there, and a later block's kernel with the flag set returns at once.
POTRF = r"""
#define T(i, j) t[(i) * (NB + 1) + (j)]
#define CL (WG < 16 ? WG : 16)
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_potrf(__global FL_T *a, __global long *flag, const long off,
                    const long ld, const long nb_, const long col0)
{
    __local FL_T t[NB * (NB + 1)];
    const int lid = get_local_id(0), nb = (int)nb_;
    /* no work-item of this group writes the flag before the end: all see one value */
    if (flag[0] != 0)
        return;
    for (int e = lid; e < nb * nb; e += WG) {
        const int i = e / nb, j = e % nb;
        if (j <= i)
            T(i, j) = a[off + i * ld + j];
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
        /* the trailing triangle: CL work-items per row, a column each */
        for (int i = j + 1 + lid / CL; i < nb; i += WG / CL) {
            const FL_T lij = T(i, j) * r;
            for (int c = j + 1 + lid % CL; c <= i; c += CL)
                T(i, c) -= lij * T(c, j);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int e = lid; e < nb * nb; e += WG) {
        const int i = e / nb, j = e % nb;
        if (j < i)
            a[off + i * ld + j] = T(i, j) / sqrt(T(j, j));
        else if (j == i)
            a[off + i * ld + j] = sqrt(T(i, i));
    }
    if (bad != 0 && lid == 0)
        flag[0] = col0 + bad;
}
#undef T
#undef CL
"""

__all__ = ["POTRF"]
