"""The OpenCL sources of fuseloop's radix sort keys (:mod:`fuseloop.ops.radix_sort`):
``BITS`` (a value's key and back, which the passes' kernels of
:mod:`fuseloop.ops.radix_kernels` take too) and ``KEYS`` (the key kernel, making every
key with its position and their OR and AND, and the values from sorted keys).  Build
options: ``U``/``U4`` the values' bits and their vector of 4, ``KT``/``KT4`` the key
type and its vector, ``BITS``/``INF`` the width and +inf's bits, ``WG`` work-items a
group."""

from __future__ import annotations

# The keys: U is the values' bits (an unsigned type of their width), KT the key type.
# The kind (0 unsigned or bool, 1 signed, 2 floating), the direction and canon (-0.0 as
# 0.0 and every NaN the largest key, for argsort's ties; else one key per value, NaN's
# sign cleared) are arguments: one build per width serves every dtype and direction.
BITS = r"""
#define SIGN ((U)((U)1 << (BITS - 1)))
#define MASK ((U)~(U)0)
#define MAG(u) ((U)((u) & (U)~SIGN))

KT to_key(const U u, const int kind, const int descending, const int canon)
{
    U k = u;
    if (kind == 1) {
        k = (U)(u ^ SIGN);
    } else if (kind == 2) {
        if (MAG(u) > INF)  /* NaN */
            return canon ? (KT)MASK : (KT)(U)(MAG(u) | SIGN);
        k = (u & SIGN) ? (U)~u : (U)(u | SIGN);
        if (canon && MAG(u) == 0)
            k = SIGN;
    }
    return (KT)(descending ? (U)(k ^ MASK) : k);
}

/* the value (its bits) of a key made with canon off */
U from_key(const U k, const int kind, const int descending)
{
    if (kind == 2) {
        /* non-NaN keys, ascending or descending, lie in [~(INF | SIGN), INF | SIGN] */
        const U asc = (descending && k <= (U)(INF | SIGN)) ? (U)(k ^ MASK) : k;
        return (asc & SIGN) ? MAG(asc) : (U)~asc;
    }
    const U u = descending ? (U)(k ^ MASK) : k;
    return kind == 1 ? (U)(u ^ SIGN) : u;
}
"""

KEYS = r"""

/* the key of one value, written with its position, and folded into the OR and AND */
#define ONE_KEY(i, u) do {                                  \
        const KT k_ = to_key((u), kind, descending, canon); \
        keys[i] = k_;                                       \
        if (positions)                                      \
            idx[i] = (uint)(i);                             \
        o |= k_;                                            \
        a &= k_;                                            \
    } while (0)
/* vectors of 4 values a work-item loads before it makes their keys (several loads in
   flight: a GPU needs them to reach its bandwidth) */
#define KUNROLL 4

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_keys(__global const U *restrict src, __global KT *restrict keys,
                   __global uint *restrict idx, __global KT *restrict bits,
                   __global uint *restrict totals,
                   const int kind, const int descending, const int canon,
                   const int positions, const long n)
{
    __local KT lo[WG], la[WG];
    const int lid = get_local_id(0);
    if (get_group_id(0) == 0)  /* (the first count kernel, or fl_radix_hist, adds to
                                  them: a digit's totals for each of 8 bytes) */
        for (int d = lid; d < 8 * 256; d += WG)
            totals[d] = 0;
    KT o = 0, a = (KT)~(KT)0;
    /* vector v holds values 4v .. 4v + 3: consecutive work-items take consecutive
       vectors (coalesced), KUNROLL of them grid-size apart at a time */
    const long nv = n / 4, size = get_global_size(0);
    for (long base = get_global_id(0); base < nv; base += KUNROLL * size) {
        U4 v[KUNROLL];
#pragma unroll
        for (int u = 0; u < KUNROLL; ++u)
            if (base + u * size < nv)
                v[u] = vload4(base + u * size, src);
#pragma unroll
        for (int u = 0; u < KUNROLL; ++u) {
            const long w = base + u * size;
            if (w < nv) {
                const KT4 k = (KT4)(to_key(v[u].s0, kind, descending, canon),
                                    to_key(v[u].s1, kind, descending, canon),
                                    to_key(v[u].s2, kind, descending, canon),
                                    to_key(v[u].s3, kind, descending, canon));
                vstore4(k, w, keys);
                if (positions)
                    vstore4((uint4)((uint)(4 * w)) + (uint4)(0, 1, 2, 3), w, idx);
                o |= k.s0 | k.s1 | k.s2 | k.s3;
                a &= k.s0 & k.s1 & k.s2 & k.s3;
            }
        }
    }
    const long i = 4 * nv + get_global_id(0);  /* the last n % 4 values */
    if (i < n)
        ONE_KEY(i, src[i]);
    lo[lid] = o;
    la[lid] = a;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int width = WG / 2; width > 0; width >>= 1) {
        if (lid < width) {
            lo[lid] |= lo[lid + width];
            la[lid] &= la[lid + width];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        /* (the ORs, then the ANDs: one read brings both to the host) */
        bits[get_group_id(0)] = lo[0];
        bits[get_num_groups(0) + get_group_id(0)] = la[0];
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_values(__global const KT *restrict keys, __global U *restrict dst,
                     const int kind, const int descending, const long n)
{
    const long i = get_global_id(0);
    if (i >= n)
        return;
    dst[i] = from_key((U)keys[i], kind, descending);
}
"""


__all__ = ["BITS", "KEYS"]
