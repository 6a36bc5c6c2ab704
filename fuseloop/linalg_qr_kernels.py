"""The OpenCL C kernels of the device QR (:mod:`fuseloop.linalg_qr`).

``fuseloop_geqr2`` factors one panel (LAPACK's geqr2, then larft) in one work-group;
``fuseloop_gemm_set`` is :mod:`fuseloop.linalg_gemm`'s ``C -= A B`` kernel built to
write ``C = -(A B)`` instead (the QR's products ``V^T A`` go into a scratch block, which
would otherwise need a launch to clear it first), in slices of the inner size that
``fuseloop_qr_sum`` adds.  This module imports no other
fuseloop module: :mod:`fuseloop.linalg_kernels` lists these kernels with its own.
"""

from __future__ import annotations

from .linalg_gemm import GEMM_UPDATE_SOURCE

# One panel of a blocked Householder QR, in place, by one work-group: the b columns
# k..k+b of the rows k..m of a (row stride ld), b <= NB.  Column j's reflector is
# LAPACK's dlarfg: sigma = |x|^2 of the column below the diagonal, beta = -sign(alpha)
# sqrt(alpha^2 + sigma), tau = (beta - alpha) / beta, v = x / (alpha - beta) below a 1
# (sigma = 0: tau = 0, H = I).  It needs d_c = v_j . A[:, c] for every other column:
# for c > j to apply H_j (A[:, c] -= tau v_j d_c), for c < j the Gram entries v_c . v_j
# of the compact WY factor T (upper triangular, b x b, in local memory: T[0:j, j] =
# -tau T[0:j, 0:j] d[0:j], T[j, j] = tau).  One pass over the panel's rows per column:
# pass j applies H_j to the columns right of j, stores v_j, and computes column j + 1's
# new values x (into xs, two buffers of m - k in turn: the pass reads column j there
# while column j + 1's owners write the other) and x's dot products with every
# column's new values (rows below j + 1; c = j + 1 is sigma); then, after three barriers
# and a reduction over the row lanes, the next reflector.  A work-item takes column cl
# (+ CW, ...) of the rows lane, lane + RL, ...: neighbouring work-items read
# neighbouring columns of a row (coalesced), and a CPU's group of one walks the rows in
# order; on GPUs RU = 4 rows at a time (a pass is otherwise a chain of waits on L2).
# At the end the panel's V (unit lower trapezoidal, zeros above) and Y = -V T are
# written to v and y at rows k..m, columns k..k+b (row stride ldv): the trailing update
# and the forming of Q read them as plain matrices.
_GEQR2 = r"""
#define CW (WG < NB ? WG : NB)
#define RL (WG / CW)
#define PC (NB / CW)
#define RU (WG > 1 ? 4 : 1)
#define PA(i, j) a[(k + (i)) * ld + k + (j)]
#define TQ(i, j) tq[(i) * NB + (j)]
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_geqr2(__global FL_T *a, __global FL_T *tau, __global FL_T *v,
                    __global FL_T *y, __global FL_T *xs, const long k, const long m,
                    const long ld, const long b_, const long ldv)
{
    __local FL_T tq[NB * NB];
    __local FL_T red[RL * NB];
    __local FL_T wv[NB];
    __local FL_T dsum[NB];
    const int lid = get_local_id(0), cl = lid % CW, lane = lid / CW, b = (int)b_;
    const long mp = m - k;
    FL_T beta = (FL_T)0, tj = (FL_T)0, scale = (FL_T)0;
    for (int c = lid; c < NB; c += WG)
        wv[c] = (FL_T)0;
    barrier(CLK_LOCAL_MEM_FENCE);
    /* pass -1 only reads: column 0 into xs and its dots */
    for (int j = -1; j < b; ++j) {
        __global const FL_T *xj = xs + (j & 1) * mp;
        __global FL_T *xn = xs + ((j + 1) & 1) * mp;
        const int next = j + 1 < b;
        FL_T acc[PC];
        for (int q = 0; q < PC; ++q)
            acc[q] = (FL_T)0;
        for (long i0 = (j < 0 ? 0 : j) + lane; i0 < mp; i0 += RL * RU) {
            /* RU rows' loads first, then their arithmetic and stores: the loads are
               in flight together (a store before a load would make it wait) */
            FL_T xv[RU], xo[RU], av[RU][PC];
#pragma unroll
            for (int u = 0; u < RU; ++u) {
                const long i = i0 + u * RL;
                const int in = i < mp && i > j;
                xv[u] = in && j >= 0 ? xj[i] : (FL_T)0;
                xo[u] = in && next ? PA(i, j + 1) : (FL_T)0;
                for (int q = 0; q < PC; ++q) {
                    const int c = cl + q * CW;
                    av[u][q] = i < mp && c < b && c != j && c != j + 1 ? PA(i, c) : (FL_T)0;
                }
            }
#pragma unroll
            for (int u = 0; u < RU; ++u) {
                const long i = i0 + u * RL;
                if (i >= mp)
                    break;
                const FL_T vi = j < 0 ? (FL_T)0 : i == j ? (FL_T)1 : xv[u] * scale;
                const FL_T f = tj * vi;
                /* column j + 1's new value (each work-item of the row computes it: its
                   owner writes it to xn, not to a, which the others read) */
                const FL_T xi = next && i > j ? xo[u] - f * wv[j + 1] : (FL_T)0;
                for (int q = 0; q < PC; ++q) {
                    const int c = cl + q * CW;
                    if (c >= b)
                        break;
                    FL_T nv = av[u][q];
                    if (c == j) {
                        nv = vi;
                        if (i > j)
                            PA(i, j) = vi;
                    } else if (c == j + 1) {
                        nv = xi;
                        if (i == j)
                            PA(j, c) -= f * wv[c];
                        else
                            xn[i] = xi;
                    } else if (c > j + 1 && j >= 0 && tj != (FL_T)0) {
                        nv -= f * wv[c];
                        PA(i, c) = nv;
                    }
                    if (i > j + 1)
                        acc[q] += xi * nv;
                }
            }
        }
        if (lid == 0 && j >= 0)
            PA(j, j) = beta;  /* (no work-item reads a[j, j] in pass j) */
        if (!next)
            break;
        for (int q = 0; q < PC; ++q)
            red[lane * NB + cl + q * CW] = acc[q];
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
        for (int c = lid; c < b; c += WG) {
            FL_T d = (FL_T)0;
            for (int l = 0; l < RL; ++l)
                d += red[l * NB + c];
            dsum[c] = d;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* reflector j + 1, the same in every work-item (the same values, in order) */
        const int jn = j + 1;
        const FL_T sigma = dsum[jn], alpha = xn[jn];
        beta = alpha;
        tj = (FL_T)0;
        scale = (FL_T)0;
        if (sigma != (FL_T)0) {
            const FL_T norm = sqrt(alpha * alpha + sigma);
            beta = alpha >= (FL_T)0 ? -norm : norm;
            tj = (beta - alpha) / beta;
            scale = (FL_T)1 / (alpha - beta);
        }
        for (int c = lid; c < b; c += WG)  /* v_jn's 1 at row jn, then scaled x below */
            wv[c] = c == jn ? (FL_T)0 : PA(jn, c) + scale * dsum[c];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = lid; i < jn; i += WG) {
            FL_T t = (FL_T)0;
            for (int l = i; l < jn; ++l)
                t += TQ(i, l) * wv[l];
            TQ(i, jn) = -tj * t;
        }
        if (lid == 0) {
            TQ(jn, jn) = tj;
            tau[k + jn] = tj;
        }
    }
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
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
#undef RU
#undef PA
#undef TQ
"""

# C = -(A B): the update kernel with c's old values read as zeros (a build of its own,
# so that fuseloop_gemm_update's code is unchanged), split along the inner size: its
# last scalar (the update's "lower") is a chunk of inner indices, and work-group g
# takes tile g % tiles of chunk g / tiles, writing that chunk's product to slice
# g / tiles of c (m * cs0 elements apart; fuseloop_qr_sum adds the slices).  The QR's
# V^T A has few tiles (b rows) and a long inner size (the rows): one group per tile
# would leave most compute units idle.
_SET_EDITS = (
    ("void fuseloop_gemm_update(", "void fuseloop_gemm_set("),
    ("const long n, const long kk,", "const long n, const long kk_all,"),
    ("const long aoff, ", "const long aoff_all, "),
    ("const long boff, ", "const long boff_all, "),
    ("const long coff, ", "const long coff_all, "),
    ("    const long g = get_group_id(0);\n",
     "    const long tiles_all = ((m + GT - 1) / GT) * ((n + GT - 1) / GT);\n"
     "    const long g = get_group_id(0) % tiles_all, part = get_group_id(0) / tiles_all;\n"
     "    const long kc = lower > 0 ? lower : kk_all, k0 = part * kc;\n"
     "    const long kk = min(kk_all - k0, kc);\n"
     "    const long aoff = aoff_all + k0 * as1, boff = boff_all + k0 * bs0;\n"
     "    const long coff = coff_all + part * m * cs0;\n"),
    ("if (lower != 0) {", "if (0) {"),
)


def _set_source() -> str:
    source = GEMM_UPDATE_SOURCE
    for old, new in _SET_EDITS:
        # (the update kernel's text changed: its set build must be looked at again)
        assert source.count(old) == 1, f"fuseloop_gemm_set: {old!r} not found once"
        source = source.replace(old, new)
    return "#define GEMM_SET 1\n" + source + "#undef GEMM_SET\n"


_GEMM_SET = _set_source()

# w[e] = the sum of parts[s * stride + e] over s < nparts, for e < count
_QR_SUM = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_qr_sum(__global FL_T *w, __global const FL_T *parts, const long count,
                     const long nparts, const long stride)
{
    const long e = get_global_id(0);
    if (e >= count)
        return;
    FL_T t = parts[e];
    for (long s = 1; s < nparts; ++s)
        t += parts[s * stride + e];
    w[e] = t;
}
"""


def geqr2_local_bytes(nb: int, wg: int, itemsize: int) -> int:
    """The local memory of a ``fuseloop_geqr2`` group (``wg`` work-items, blocks of
    ``nb``)."""
    return (nb * nb + (wg // min(wg, nb)) * nb + 2 * nb) * itemsize


#: as ``linalg_kernels._KERNELS`` lists them (name -> source, buffers, scalars,
#: column-parallel)
KERNELS: dict[str, tuple[str, list[str], int, bool]] = {
    "fuseloop_geqr2": (_GEQR2, ["out0", "out1", "out2", "out3", "out4"], 5, False),
    "fuseloop_gemm_set": (_GEMM_SET, ["out0", "in0", "in1"], 13, False),
    "fuseloop_qr_sum": (_QR_SUM, ["out0", "in0"], 3, True),
}

__all__ = ["KERNELS", "geqr2_local_bytes"]
