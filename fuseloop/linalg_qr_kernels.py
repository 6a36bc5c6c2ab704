"""The OpenCL C kernels of the device QR (:mod:`fuseloop.linalg_qr`).

``fuseloop_geqr2`` factors one panel (LAPACK's geqr2, then larft) in one work-group;
``fuseloop_gemm_set`` is :mod:`fuseloop.linalg_gemm`'s ``C -= A B`` kernel built to
write ``C = -(A B)`` instead (the QR's products ``V^T A`` go into a scratch block, which
would otherwise need a launch to clear it first).  This module imports no other
fuseloop module: :mod:`fuseloop.linalg_kernels` lists these kernels with its own.
"""

from __future__ import annotations

from .linalg_gemm import GEMM_UPDATE_SOURCE

# One panel of a blocked Householder QR, in place, by one work-group: the b columns
# k..k+b of the rows k..m of a (row stride ld), b <= NB.  Per column j, LAPACK's
# dlarfg: sigma = |x|^2 of the column below the diagonal, beta = -sign(alpha)
# sqrt(alpha^2 + sigma), tau = (beta - alpha) / beta, x scaled by 1 / (alpha - beta)
# (sigma = 0: tau = 0, H = I); then the dots d_c = v_j . A[:, c] for every other column
# of the panel (for c > j the reflector's application, for c < j the Gram entries
# v_c . v_j that larft needs), the columns c > j updated (A[:, c] -= tau v_j d_c), and
# column j of the compact WY factor T (upper triangular, b x b, in local memory):
# T[0:j, j] = -tau T[0:j, 0:j] d[0:j], T[j, j] = tau.  A work-item takes column
# cl (+ CW, ...) of the rows lane, lane + RL, ...: neighbouring work-items read
# neighbouring columns of a row (coalesced), and a CPU's group of one walks the rows
# in order.  At the end the panel's reflectors V (unit lower trapezoidal, zeros
# above) and Y = -V T are written to v and y at rows k..m, columns k..k+b (row stride
# ldv): the trailing update and the forming of Q read them as plain matrices.
_GEQR2 = r"""
#define CW (WG < NB ? WG : NB)
#define RL (WG / CW)
#define PC (NB / CW)
#define SL (WG < 32 ? WG : 32)
#define RED (WG > RL * NB ? WG : RL * NB)
#define PA(i, j) a[(k + (i)) * ld + k + (j)]
#define TQ(i, j) tq[(i) * NB + (j)]
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_geqr2(__global FL_T *a, __global FL_T *tau, __global FL_T *v,
                    __global FL_T *y, const long k, const long m, const long ld,
                    const long b_, const long ldv)
{
    __local FL_T tq[NB * NB];
    __local FL_T red[RED];
    __local FL_T part[SL];
    __local FL_T wv[NB];
    const int lid = get_local_id(0), cl = lid % CW, lane = lid / CW, b = (int)b_;
    const long mp = m - k;
    for (int j = 0; j < b; ++j) {
        /* sigma: a work-item's share, SL partial sums, then each work-item adds those
           in the same order (the same value everywhere: no broadcast) */
        FL_T s = (FL_T)0;
        for (long i = j + 1 + lid; i < mp; i += WG) {
            const FL_T x = PA(i, j);
            s += x * x;
        }
        red[lid] = s;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < SL) {
            FL_T t = (FL_T)0;
            for (int q = lid; q < WG; q += SL)
                t += red[q];
            part[lid] = t;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        FL_T sigma = (FL_T)0;
        for (int q = 0; q < SL; ++q)
            sigma += part[q];
        const FL_T alpha = PA(j, j);
        FL_T beta = alpha, tj = (FL_T)0;
        if (sigma != (FL_T)0) {
            const FL_T norm = sqrt(alpha * alpha + sigma);
            beta = alpha >= (FL_T)0 ? -norm : norm;
            tj = (beta - alpha) / beta;
            const FL_T scale = (FL_T)1 / (alpha - beta);
            /* (the rows this work-item summed: no other reads them before the barrier) */
            for (long i = j + 1 + lid; i < mp; i += WG)
                PA(i, j) *= scale;
        }
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
        FL_T acc[PC];
        for (int q = 0; q < PC; ++q)
            acc[q] = (FL_T)0;
        for (long i = j + 1 + lane; i < mp; i += RL) {
            const FL_T vi = PA(i, j);
            for (int q = 0; q < PC; ++q) {
                const int c = cl + q * CW;
                if (c < b && c != j)
                    acc[q] += vi * PA(i, c);
            }
        }
        for (int q = 0; q < PC; ++q)
            red[lane * NB + cl + q * CW] = acc[q];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = lid; c < b; c += WG) {
            FL_T d = c == j ? (FL_T)0 : PA(j, c);  /* v_j's 1 at row j */
            for (int l = 0; l < RL; ++l)
                d += red[l * NB + c];
            wv[c] = d;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = lid; i < j; i += WG) {
            FL_T t = (FL_T)0;
            for (int l = i; l < j; ++l)
                t += TQ(i, l) * wv[l];
            TQ(i, j) = -tj * t;
        }
        if (lid == 0) {
            TQ(j, j) = tj;
            tau[k + j] = tj;
        }
        if (tj != (FL_T)0) {
            for (long i = j + lane; i < mp; i += RL) {
                const FL_T f = tj * (i == j ? (FL_T)1 : PA(i, j));
                for (int q = 0; q < PC; ++q) {
                    const int c = cl + q * CW;
                    if (c > j && c < b)
                        PA(i, c) -= f * wv[c];
                }
            }
        }
        /* (no work-item reads a[j, j] in this step: row j's v is the implicit 1) */
        if (lid == 0)
            PA(j, j) = beta;
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    }
    /* V and Y = -V T, a work-item per element, along the rows */
    for (long e = lid; e < mp * b; e += WG) {
        const long i = e / b;
        const int c = (int)(e % b), top = i < c ? (int)i : c;
        FL_T t = (FL_T)0;
        for (int l = 0; l <= top; ++l)
            t += (l == i ? (FL_T)1 : PA(i, l)) * TQ(l, c);
        v[(k + i) * ldv + k + c] = i < c ? (FL_T)0 : i == c ? (FL_T)1 : PA(i, c);
        y[(k + i) * ldv + k + c] = -t;
    }
}
#undef CW
#undef RL
#undef PC
#undef SL
#undef RED
#undef PA
#undef TQ
"""

# C = -(A B): the update kernel with c's old values read as zeros (a build of its own,
# so that fuseloop_gemm_update's code is unchanged)
_GEMM_SET = ("#define GEMM_SET 1\n"
             + GEMM_UPDATE_SOURCE.replace("void fuseloop_gemm_update(", "void fuseloop_gemm_set(")
             + "#undef GEMM_SET\n")


def geqr2_local_bytes(nb: int, wg: int, itemsize: int) -> int:
    """The local memory of a ``fuseloop_geqr2`` group (``wg`` work-items, blocks of
    ``nb``)."""
    cw = min(wg, nb)
    red = max(wg, (wg // cw) * nb)
    return (nb * nb + red + min(wg, 32) + nb) * itemsize


#: as ``linalg_kernels._KERNELS`` lists them (name -> source, buffers, scalars,
#: column-parallel)
KERNELS: dict[str, tuple[str, list[str], int, bool]] = {
    "fuseloop_geqr2": (_GEQR2, ["out0", "out1", "out2", "out3"], 5, False),
    "fuseloop_gemm_set": (_GEMM_SET, ["out0", "in0", "in1"], 13, False),
}

__all__ = ["KERNELS", "geqr2_local_bytes"]
