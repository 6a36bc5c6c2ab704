"""fuseloop's own LSD radix sort for OpenCL devices: ``sort`` and ``argsort``.

Why not pyopencl's ``RadixSort`` (the stack rule prefers a maintained library): on an
H100's OpenCL it sorted 2^24 float32 in 24.6 ms against CuPy's (CUB's) 0.55 ms, 45
times slower (4-bit digits, a scan kernel per pass built for generality).  This sort
takes 8-bit digits and keeps each pass to three short kernels.

The values first become unsigned keys whose order is the wanted order (``_KEYS``):
integers with their sign bit flipped, floats by their bits (all bits flipped for
negatives, the sign bit for the rest), NaNs after everything, descending by
complementing the key of every non-NaN.  For ``argsort`` -0.0 and 0.0 get one key and
every NaN the largest key, so that ties stay in their original order, as numpy's stable
sort keeps them; for ``sort`` the key is one-to-one (NaN's sign aside) and the sorted
values are made from the sorted keys (by the last pass where they are as wide as the keys,
4 or 8 bytes, else by one more kernel).  The key kernel also reduces the keys'
bitwise OR and AND, so that passes whose 8-bit digit is the same in every key (the
high bytes of small integers) are skipped; it reads and writes vectors of 4 (several
in flight a work-item) and reduces the OR and AND once a work-item, then once a group.

One pass over tiles of ``WG * PER`` keys (a work-group each):

1. ``count``: each tile's histogram of the digit, written digit-major, and added to
   the digits' totals (global atomics: 256 a tile).  A full tile is read in coalesced
   vectors of 4; the local atomics go to 8 interleaved copies of the histogram (a
   work-item's copy by its id), and a work-item adds each run of one digit among its
   keys at once, so that skewed digits (a float's top byte has few values; all keys
   equal) do not queue a work-group's atomics on one word;
2. ``scan``: one work-group per digit replaces its row of tile counts by where each
   tile's keys of the digit go: the keys of smaller digits (from the totals) plus the
   exclusive scan of the row, in chunks of a tile's size loaded coalesced into local
   memory and scanned there;
3. ``scatter``: each tile sorts itself stably by the digit in local memory (two
   counting sorts by 4-bit halves), then writes every key (and its position, the
   payload) to its tile's place for the digit + its rank there; consecutive work-items
   write consecutive keys of the sorted tile, so a digit's run is written coalesced.

The scatter is most of the sort's time (on an H100 ~258 us of a 2^24 pass that moves
~128 MB, ~45 us at full bandwidth): it is bound by its local-memory accesses and
barriers, not by global traffic, so its ranking is built to need few of either.
Each work-item takes PER consecutive keys (blocked: a stable rank is "items of smaller
digits, then earlier items of the digit", and blocked items make "earlier" a
work-item prefix).  A counting sort by a nibble counts the work-item's keys in
registers (16 8-bit counts in two 64-bit words, and each key's rank among its own keys
of its nibble, 4 a word), stores them as 8 words (two 16-bit counts each), scans that
table once (digit-major: a nibble's keys of lower work-items first; a tile of fewer
than 2^16 keys never carries from the low halves into the high ones) and moves each
key to its nibble's offset + its rank.  Against the previous version (counts
incremented in local memory key by key, 16 32-bit counts a work-item, Hillis-Steele
with two barriers a step, a scan of the digits' totals in every tile) this is about 12
local accesses a key instead of ~26, no chain of dependent local updates, and 26
barriers a tile instead of ~60; a full tile's first counting sort reads its keys
straight from global memory in vectors of 4.  Not taken: one 8-bit counting sort
(per-work-item counts of 256 digits are 128 KiB for 256 work-items, and ranking
within a warp-sized slice needs subgroup match or ballot, which NVIDIA's OpenCL lacks
and a portable kernel cannot assume); 32 keys a work-item (fits 48 KiB for ``sort``;
``benchmarks/bench_sort.py --sweep`` times it against 16).

The sort is stable, so sorting many rows at once is a sort by value followed by more
passes over the digits of the row number (read from the payload, the position).
Positions are 32-bit, so arrays of 2^32 elements or more and devices with too little
local memory for one tile take pyopencl's sort instead (see :func:`layout_for`).
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

from .. import caches as _caches
from .. import launching
from ..array import Array
from ..cache import KernelPlan, SourceKernel
from ..evaluate import allocate
from ..expr.nodes import Storage
from ..runtime.devices import Device

#: the sorted digit's bits (256 buckets)
RADIX_BITS = 8
RADIX = 1 << RADIX_BITS
#: work-items per work-group on a GPU, and on a CPU device (PoCL runs a group's work-items
#: in a loop; a small group keeps its barriers cheap): powers of two up to RADIX
GPU_GROUP, CPU_GROUP = 256, 32
#: the most keys a work-item ranks per tile (fewer where local memory is short; the
#: scatter's counts take tiles below 2^16 keys and at most 255 keys a work-item)
MAX_PER_ITEM = 16
#: the most work-groups of the key kernel (each writes one partial OR and AND)
KEY_GROUPS = 1024
#: positions and offsets are uint: larger arrays take pyopencl's sort
MAX_ELEMENTS = (1 << 32) - 1
#: False sends every OpenCL sort to pyopencl's RadixSort (benchmarks/bench_sort.py
#: times both in one run)
ENABLED = True

_COMMON = r"""
#define TILE (WG * PER)
#define RADIX 256
/* local arrays scanned by work-items taking consecutive entries: one word of padding
   every 32 spreads a work-group's accesses over the banks */
#define PAD(i) ((i) + ((i) >> 5))
#if HAS_VALUES
/* (positions and row lengths are below 2^32) */
#define DIGIT_OF(k, v) (by_row ? (((uint)(v) / (uint)rowlen) >> shift) & 0xFF \
                               : (uint)(((k) >> shift) & 0xFF))
#else
#define DIGIT_OF(k, v) ((uint)(((k) >> shift) & 0xFF))
#endif

/* a[PAD(0 .. WG * per)) replaced by its exclusive prefix sums, each work-item summing
   `per` consecutive entries; returns the sum of all of them.  sums: 2 * WG words of
   scratch, a Hillis-Steele scan of the work-items' sums that alternates between its two
   halves, so that each step takes one barrier (reads of one half, writes of the other) */
uint block_scan(__local uint *a, const int per, __local uint *sums)
{
    const int lid = get_local_id(0);
    uint s = 0;
    for (int k = 0; k < per; ++k)
        s += a[PAD(lid * per + k)];
    sums[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    int from = 0;
    for (int off = 1; off < WG; off <<= 1) {
        const uint v = sums[from + lid] + (lid >= off ? sums[from + lid - off] : 0);
        from ^= WG;
        sums[from + lid] = v;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const uint total = sums[from + WG - 1];
    uint run = sums[from + lid] - s;
    for (int k = 0; k < per; ++k) {
        const uint c = a[PAD(lid * per + k)];
        a[PAD(lid * per + k)] = run;
        run += c;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}
"""

_COUNT = r"""
/* NSUB copies of the histogram, copy c of digit d at hist[d * (NSUB + 1) + c] (an odd
   stride: the combine's reads of a digit's copies by consecutive work-items fall in
   different banks); work-item lid adds to copy lid % NSUB, so that the lanes of a warp
   that share a digit (skewed keys: a float's top byte has few values) add to NSUB words
   in different banks instead of queueing on one */
#define NSUB (WG < 8 ? WG : 8)
#define HSTRIDE (NSUB + 1)
#define KEY_DIGIT(k) ((uint)(((k) >> shift) & 0xFF))
#define ROW_DIGIT(v) ((((uint)(v) / (uint)rowlen) >> shift) & 0xFF)
/* a run of one digit among a work-item's keys is added at once (all keys equal: one
   atomic per work-item, not per key) */
#define ADD(dig) do {                                   \
        const uint d_ = (dig);                          \
        if (d_ != run_digit) {                          \
            if (run)                                    \
                atomic_add(&mine[run_digit * HSTRIDE], run); \
            run_digit = d_;                             \
            run = 0;                                    \
        }                                               \
        ++run;                                          \
    } while (0)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_count(__global const KT *restrict keys, __global const uint *restrict vals,
                    __global uint *restrict counts, __global uint *restrict totals,
                    const int shift, const int by_row, const long rowlen, const long n,
                    const long tiles)
{
    __local uint hist[RADIX * HSTRIDE];
    const int lid = get_local_id(0);
    const long tile = get_group_id(0), first = tile * TILE;
    const int valid = (int)min((long)TILE, n - first);
    __local uint *mine = hist + lid % NSUB;
    for (int d = lid; d < RADIX * HSTRIDE; d += WG)
        hist[d] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint run_digit = 0, run = 0;
    /* The order of a tile's keys does not matter here: a full tile is read in vectors
       of 4, consecutive work-items taking consecutive vectors (coalesced). */
    if (PER % 4 == 0 && valid == TILE) {
#if HAS_VALUES
        if (by_row) {
            __global const uint4 *vv = (__global const uint4 *)(vals + first);
#pragma unroll
            for (int q = 0; q < PER / 4; ++q) {
                const uint4 w = vv[q * WG + lid];
                ADD(ROW_DIGIT(w.s0));
                ADD(ROW_DIGIT(w.s1));
                ADD(ROW_DIGIT(w.s2));
                ADD(ROW_DIGIT(w.s3));
            }
        } else
#endif
        {
            __global const VKT *kv = (__global const VKT *)(keys + first);
#pragma unroll
            for (int q = 0; q < PER / 4; ++q) {
                const VKT v = kv[q * WG + lid];
                ADD(KEY_DIGIT(v.s0));
                ADD(KEY_DIGIT(v.s1));
                ADD(KEY_DIGIT(v.s2));
                ADD(KEY_DIGIT(v.s3));
            }
        }
    } else {
        for (int k = 0; k < PER; ++k) {
            const int j = k * WG + lid;  /* (coalesced) */
            if (j < valid)
                ADD(DIGIT_OF(keys[first + j], vals[first + j]));
        }
    }
    if (run)
        atomic_add(&mine[run_digit * HSTRIDE], run);
    barrier(CLK_LOCAL_MEM_FENCE);  /* (every copy complete) */
    for (int d = lid; d < RADIX; d += WG) {
        uint c = 0;
        for (int s = 0; s < NSUB; ++s)
            c += hist[d * HSTRIDE + s];
        counts[d * tiles + tile] = c;
        /* the digits' totals (zero before: see fl_radix_keys and fl_radix_scatter) */
        if (c)
            atomic_add(&totals[d], c);
    }
}
"""

_SCAN = r"""
/* Each digit's row of tile counts replaced by where the tile's items of the digit go:
   the digit's start (the items of smaller digits: the totals) plus the exclusive scan
   of the row.  A work-group a digit, taking the row in chunks of WG * PER counts:
   loaded coalesced into local memory, scanned there (block_scan), written back
   coalesced, with the chunks' running total carried in a register. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_scan(__global uint *restrict counts, __global const uint *restrict totals,
                   const long tiles)
{
    __local uint part[PAD(WG * PER)];
    __local uint sums[2 * WG];
    const int lid = get_local_id(0), digit = get_group_id(0);
    __global uint *row = counts + (long)digit * tiles;
    uint before = 0;
    for (int d = lid; d < digit; d += WG)
        before += totals[d];
    part[PAD(lid)] = before;
    barrier(CLK_LOCAL_MEM_FENCE);
    /* (block_scan ends with a barrier: part is free again after it) */
    uint carry = block_scan(part, 1, sums);
    for (long c0 = 0; c0 < tiles; c0 += WG * PER) {
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const long t = c0 + k * WG + lid;
            part[PAD(k * WG + lid)] = t < tiles ? row[t] : 0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);  /* (the chunk loaded) */
        const uint total = block_scan(part, PER, sums);
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const long t = c0 + k * WG + lid;
            if (t < tiles)
                row[t] = carry + part[PAD(k * WG + lid)];
        }
        carry += total;
        barrier(CLK_LOCAL_MEM_FENCE);  /* (read before the next chunk overwrites it) */
    }
}
"""

_SCATTER = r"""
/* the tile in local memory, padded like the table (work-items read PER consecutive
   entries) */
#define LK(j) lk[PAD(j)]
#define LV(j) lv[PAD(j)]
#if HAS_VALUES
#define DIGIT_AT(j) ((j) < valid ? DIGIT_OF(LK(j), LV(j)) : 0xFF)
#define DIGIT_KV(j, k, v) ((j) < valid ? DIGIT_OF(k, v) : 0xFF)
#else
#define DIGIT_AT(j) ((j) < valid ? DIGIT_OF(LK(j), 0) : 0xFF)
#define DIGIT_KV(j, k, v) ((j) < valid ? DIGIT_OF(k, 0) : 0xFF)
#endif
/* a work-item's word w of the counts table: its count of nibble w (low 16 bits) and of
   nibble w + 8 (high 16 bits), digit-major (w, then the work-item) */
#define TW(w) table[PAD((w) * WG + lid)]
/* byte k of packed 8-bit fields */
#define BYTE(a, k) (((a)[(k) >> 2] >> (8 * ((k) & 3))) & 0xFF)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_scatter(__global const KT *restrict keys, __global const uint *restrict vals,
                      __global const uint *restrict counts, __global KT *restrict keys_out,
                      __global uint *restrict vals_out, __global uint *restrict totals,
                      const int shift, const int by_row,
                      const long rowlen, const int out_kind, const int descending,
                      const long n, const long tiles)
{
    __local KT lk[PAD(TILE)];
    __local uint lv[HAS_VALUES ? PAD(TILE) : 1];
    __local uint table[PAD(8 * WG)];
    __local uint sums[2 * WG];
    __local uint off[RADIX];
    const int lid = get_local_id(0);
    const long tile = get_group_id(0), first = tile * TILE;
    const int valid = (int)min((long)TILE, n - first);
    KT key[PER];
#if HAS_VALUES
    uint val[PER];
#endif
    /* A full tile's work-items load their PER consecutive items themselves, in vectors
       of 4 (buffers and tiles are aligned to them), straight into registers for the
       first counting sort; the last tile goes through local memory. */
    const int direct = PER % 4 == 0 && valid == TILE;
    if (direct) {
#if PER % 4 == 0
        __global const VKT *kv = (__global const VKT *)(keys + first + lid * PER);
#if HAS_VALUES
        __global const uint4 *vv = (__global const uint4 *)(vals + first + lid * PER);
#endif
#pragma unroll
        for (int q = 0; q < PER / 4; ++q) {
            const VKT v = kv[q];
            key[4 * q] = v.s0;
            key[4 * q + 1] = v.s1;
            key[4 * q + 2] = v.s2;
            key[4 * q + 3] = v.s3;
#if HAS_VALUES
            const uint4 w = vv[q];
            val[4 * q] = w.s0;
            val[4 * q + 1] = w.s1;
            val[4 * q + 2] = w.s2;
            val[4 * q + 3] = w.s3;
#endif
        }
#endif
    } else {
#pragma unroll
        for (int k = 0; k < PER; ++k) {  /* coalesced loads */
            const int j = k * WG + lid;
            if (j < valid) {
                LK(j) = keys[first + j];
#if HAS_VALUES
                LV(j) = vals[first + j];
#endif
            }
        }
    }
    /* Sort the tile stably by the digit: two counting sorts by its 4-bit halves, each
       work-item taking PER consecutive items.  Items past the array's end (digit 0xFF,
       last already) stay last, so the item at j is one of them exactly when
       j >= valid. */
    int in_local = !direct;
#pragma unroll
    for (int nib = 0; nib < 8; nib += 4) {
        barrier(CLK_LOCAL_MEM_FENCE);
        /* the work-item's counts of each nibble (8-bit fields: nibbles 0-7 in lo, 8-15
           in hi) and each item's rank among its own items of its nibble, all in
           registers: no local memory updated item by item */
        ulong lo = 0, hi = 0;
        uint rank[(PER + 3) / 4];
#pragma unroll
        for (int r = 0; r < (PER + 3) / 4; ++r)
            rank[r] = 0;
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const int j = lid * PER + k;
            if (in_local) {
                key[k] = LK(j);
#if HAS_VALUES
                val[k] = LV(j);
#endif
            }
#if HAS_VALUES
            const uint b = (DIGIT_KV(j, key[k], val[k]) >> nib) & 15;
#else
            const uint b = (DIGIT_KV(j, key[k], 0) >> nib) & 15;
#endif
            const uint sh = 8 * (b & 7);
            const ulong one = (ulong)1 << sh;
            rank[k >> 2] |= (uint)((((b & 8) ? hi : lo) >> sh) & 0xFF) << (8 * (k & 3));
            lo += (b & 8) ? 0 : one;
            hi += (b & 8) ? one : 0;
        }
#pragma unroll
        for (int w = 0; w < 8; ++w)
            TW(w) = (uint)((lo >> (8 * w)) & 0xFF) | ((uint)((hi >> (8 * w)) & 0xFF) << 16);
        barrier(CLK_LOCAL_MEM_FENCE);
        /* One scan of the packed words ranks both halves: a tile has fewer than 2^16
           items, so the low halves never carry into the high ones, and every item of
           nibbles 8-15 comes after all (`low`) of nibbles 0-7. */
        const uint low = block_scan(table, 8, sums) & 0xFFFF;
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const int j = lid * PER + k;
#if HAS_VALUES
            const uint b = (DIGIT_KV(j, key[k], val[k]) >> nib) & 15;
#else
            const uint b = (DIGIT_KV(j, key[k], 0) >> nib) & 15;
#endif
            const uint w = TW(b & 7);
            const uint pos = ((b & 8) ? (w >> 16) + low : (w & 0xFFFF)) + BYTE(rank, k);
            LK(pos) = key[k];
#if HAS_VALUES
            LV(pos) = val[k];
#endif
        }
        in_local = 1;
    }
    /* the count kernel of the next pass adds to zeroed totals (the scan kernel, the
       only reader, is done) */
    if (tile == 0)
        for (int d = lid; d < RADIX; d += WG)
            totals[d] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);  /* (the tile in the digit's order) */
    /* the output position of the tile's item j of digit d: off[d] + j, counts being
       where the tile's items of each digit go (uint arithmetic wraps back into range);
       the items j = m * WG + lid (coalesced writes of a digit's run) stay in registers
       from here, their digits packed 4 a word */
    uint digs[(PER + 3) / 4];
#pragma unroll
    for (int m = 0; m < PER; ++m) {
        const int j = m * WG + lid;
        key[m] = LK(j);
#if HAS_VALUES
        val[m] = LV(j);
        const uint d = DIGIT_KV(j, key[m], val[m]);
#else
        const uint d = DIGIT_KV(j, key[m], 0);
#endif
        if (m % 4 == 0)
            digs[m >> 2] = 0;
        digs[m >> 2] |= d << (8 * (m & 3));
        if (j < valid && (j == 0 || DIGIT_AT(j - 1) != d))
            off[d] = counts[d * tiles + tile] - (uint)j;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int m = 0; m < PER; ++m) {
        const int j = m * WG + lid;
        if (j < valid) {
            const uint pos = off[BYTE(digs, m)] + (uint)j;
            /* (the last pass may write the keys' values: out_kind is their kind) */
            keys_out[pos] = out_kind < 0 ? key[m]
                                         : (KT)from_key((U)key[m], out_kind, descending);
#if HAS_VALUES
            vals_out[pos] = val[m];
#endif
        }
    }
}
"""

# The keys: U is the values' bits (an unsigned type of their width), KT the key type.
# The kind (0 unsigned or bool, 1 signed, 2 floating), the direction and canon (-0.0 as
# 0.0 and every NaN the largest key, for argsort's ties; else one key per value, NaN's
# sign cleared) are arguments: one build per width serves every dtype and direction.
_BITS = r"""
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

_KEYS = r"""

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
                   __global uint *restrict idx, __global KT *restrict ors,
                   __global KT *restrict ands, __global uint *restrict totals,
                   const int kind, const int descending, const int canon,
                   const int positions, const long n)
{
    __local KT lo[WG], la[WG];
    const int lid = get_local_id(0);
    if (get_group_id(0) == 0)  /* (the first count kernel adds to them) */
        for (int d = lid; d < 256; d += WG)
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
        ors[get_group_id(0)] = lo[0];
        ands[get_group_id(0)] = la[0];
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

_UNSIGNED = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}
#: the bits of +inf of a float this wide (unused by the integers)
_INF = {1: "MASK", 2: "0x7C00", 4: "0x7F800000", 8: "0x7FF0000000000000UL"}

# (key bytes, payload, layout) -> count, scan, scatter; (value bytes, group) -> keys, values
_PASSES: dict[tuple, tuple[SourceKernel, SourceKernel, SourceKernel]] = {}
_KEY_KERNELS: dict[tuple, tuple[SourceKernel, SourceKernel]] = {}
_lock = threading.Lock()
_caches.register("ops.radix_sort.passes", _PASSES.clear, lambda: len(_PASSES),
                 why="per key width, payload and layout")
_caches.register("ops.radix_sort.keys", _KEY_KERNELS.clear, lambda: len(_KEY_KERNELS),
                 why="per value width and work-group size")


class Layout(NamedTuple):
    """Work-items per group and keys per work-item of the radix passes."""

    group: int
    per: int

    @property
    def tile(self) -> int:
        return self.group * self.per


def _local_bytes(group: int, per: int, key_size: int, values: bool) -> int:
    """The scatter kernel's local memory (the largest of the three)."""
    def pad(count: int) -> int:
        return count + count // 32

    return (pad(group * per) * (key_size + (4 if values else 0)) + 4 * pad(8 * group)
            + 8 * group + 4 * RADIX + 64)


def local_memory(device: Device) -> int:
    """The bytes of local memory a work-group of ``device`` may use."""
    return getattr(device.cl_device, "local_mem_size", 0) or 32768


def layout_for(device: Device, key_size: int, values: bool, n: int) -> Layout | None:
    """The radix passes' layout on ``device`` for ``n`` keys of ``key_size`` bytes (with
    32-bit positions when ``values``), or None where this sort cannot run: ``n`` of
    2^32 or more (positions are uint), or local memory too small for a tile of one key
    per work-item."""
    if n > MAX_ELEMENTS or not ENABLED:
        return None
    group = CPU_GROUP if device.type == "cpu" else GPU_GROUP
    # (a power of two, at most RADIX: the count kernel's histogram is RADIX words)
    while group > min(device.max_work_group_size, RADIX) or group & (group - 1):
        group //= 2
    if group < 2:
        return None
    local = local_memory(device)
    per = min(MAX_PER_ITEM, 255, ((1 << 16) - 1) // group)
    while per >= 1 and _local_bytes(group, per, key_size, values) > local:
        per //= 2
    return Layout(group, per) if per >= 1 else None


def _plan(name: str, body: str, args: list[str], dtypes: list[str | None], gsize: str,
          group: int, options: list[str]) -> SourceKernel:
    return SourceKernel(KernelPlan(name=name, source=body, arg_names=args, gsize=[gsize],
                                   lsize=[str(group)], arg_dtypes=dtypes,
                                   build_options=options))


def _pass_kernels(key_size: int, values: bool,
                  layout: Layout) -> tuple[SourceKernel, SourceKernel, SourceKernel]:
    """The count, scan and scatter kernels for keys of ``key_size`` bytes."""
    key = (key_size, values, layout)
    found = _PASSES.get(key)
    if found is not None:
        return found
    opts = [f"-DKT={_UNSIGNED[key_size]}", f"-DVKT={_UNSIGNED[key_size]}4",
            f"-DHAS_VALUES={int(values)}",
            f"-DWG={layout.group}", f"-DPER={layout.per}", f"-DU={_UNSIGNED[key_size]}",
            f"-DBITS={8 * key_size}", f"-DINF={_INF[key_size]}"]
    g = layout.group
    pass_args = ["s0", "s1", "s2", "p0", "p1"]
    pass_types: list[str | None] = ["int32", "int32", "int64", "int64", "int64"]
    out_args = ["s0", "s1", "s2", "s3", "s4", "p0", "p1"]
    out_types: list[str | None] = ["int32", "int32", "int64", "int32", "int32", "int64",
                                   "int64"]
    made = (
        _plan("fl_radix_count", _COMMON + _COUNT,
              ["in0", "in1", "out0", "out1", *pass_args],
              [None, None, None, None, *pass_types], "p[1]", g, opts),
        _plan("fl_radix_scan", _COMMON + _SCAN, ["out0", "in0", "p1"],
              [None, None, "int64"], str(RADIX), g, opts),
        _plan("fl_radix_scatter", _COMMON + _BITS + _SCATTER,
              ["in0", "in1", "in2", "out0", "out1", "out2", *out_args],
              [None, None, None, None, None, None, *out_types], "p[1]", g, opts))
    with _lock:
        return _PASSES.setdefault(key, made)


def _key_kernels(size: int, group: int) -> tuple[SourceKernel, SourceKernel]:
    """The kernels making keys of values of ``size`` bytes and values of sorted keys."""
    key = (size, group)
    found = _KEY_KERNELS.get(key)
    if found is not None:
        return found
    opts = [f"-DU={_UNSIGNED[size]}", f"-DKT={_UNSIGNED[max(size, 4)]}",
            f"-DU4={_UNSIGNED[size]}4", f"-DKT4={_UNSIGNED[max(size, 4)]}4",
            f"-DBITS={8 * size}", f"-DINF={_INF[size]}", f"-DWG={group}"]
    made = (
        _plan("fl_radix_keys", _BITS + _KEYS,
              ["in0", "out0", "out1", "out2", "out3", "out4", "s0", "s1", "s2", "s3", "p0"],
              [None, None, None, None, None, None, "int32", "int32", "int32", "int32",
               "int64"],
              "p[1]", group, opts),
        _plan("fl_radix_values", _BITS + _KEYS, ["in0", "out0", "s0", "s1", "p0"],
              [None, None, "int32", "int32", "int64"], "p[1]", group, opts))
    with _lock:
        return _KEY_KERNELS.setdefault(key, made)


def _kind(dt: np.dtype) -> np.int32:
    return np.int32(2 if dt.kind == "f" else 1 if dt.kind == "i" else 0)


def _launch(kernel: SourceKernel, params: tuple[int, ...], outs: list[Storage],
            ins: list[Storage], scalars: list, dev: Device) -> None:
    plan = launching.plan_for(kernel.get(dev), params, 0, 0, dev)
    assert plan is not None  # (only a one-output plan can be refused)
    launching.enqueue(plan, outs, ins, scalars, False, dev)


def _varying_shifts(ors: Storage, ands: Storage, groups: int, key_size: int,
                    bits: int) -> list[int]:
    """The shifts of the digits that differ between keys (from the partial ORs and
    ANDs: one read from the device)."""
    kdt = np.dtype(f"u{key_size}")
    o = np.bitwise_or.reduce(Array._concrete(ors, kdt, (groups,)).get())
    a = np.bitwise_and.reduce(Array._concrete(ands, kdt, (groups,)).get())
    differ = int(o ^ a)
    return [s for s in range(0, bits, RADIX_BITS) if (differ >> s) & (RADIX - 1)]


class Sorted(NamedTuple):
    """The sorted keys (None when the last pass wrote the values instead), each one's
    flat position (uint32) when asked for, and the values when :func:`sort_keys` wrote
    them."""

    keys: Storage | None
    positions: Storage | None
    values: Array | None


def sort_keys(src: Array, row: int, descending: bool, canon: bool, positions: bool,
              layout: Layout, want_values: bool = False) -> Sorted:
    """Sort the rows of ``row`` elements of the contiguous, evaluated ``src`` (its
    bits: bool as uint8) stably by key, with positions when ``positions`` (always
    with more than one row); ``want_values`` (not with ``canon``): the last pass writes
    the sorted values instead of keys where they are as wide (4 or 8 bytes)."""
    dev, n, dt = src.device, src.size, src.dtype
    key_size = max(dt.itemsize, 4)
    rows = n // row
    values = positions or rows > 1
    to_keys, _ = _key_kernels(dt.itemsize, layout.group)
    keys = [allocate(n * key_size, dev), allocate(n * key_size, dev)]
    vals = [allocate(n * 4, dev), allocate(n * 4, dev)] if values else [keys[0], keys[1]]
    # (16 values a work-item at least: 4 vectors of 4 in flight)
    groups = max(1, min(KEY_GROUPS, -(-n // (16 * layout.group))))
    ors, ands = allocate(groups * key_size, dev), allocate(groups * key_size, dev)
    totals = allocate(RADIX * 4, dev)
    assert src._storage is not None
    flags = [_kind(dt), np.int32(descending), np.int32(canon), np.int32(values)]
    _launch(to_keys, (n, groups), [keys[0], vals[0], ors, ands, totals], [src._storage],
            flags, dev)
    shifts = [(s, 0) for s in _varying_shifts(ors, ands, groups, key_size,
                                              8 * dt.itemsize)]
    if rows > 1:
        shifts += [(s, 1) for s in range(0, (rows - 1).bit_length(), RADIX_BITS)]
    out = None
    if want_values and shifts and dt.itemsize == key_size:
        assert not canon  # (canon keys have no values)
        out = Array._concrete(allocate(n * key_size, dev), dt, (n,))
    tiles = -(-n // layout.tile)
    count, scan, scatter = _pass_kernels(key_size, values, layout)
    if shifts:
        counts = allocate(RADIX * tiles * 4, dev)
    params = (n, tiles)
    for p, (shift, by_row) in enumerate(shifts):
        scalars = [np.int32(shift), np.int32(by_row), np.int64(row)]
        _launch(count, params, [counts, totals], [keys[0], vals[0]], scalars, dev)
        _launch(scan, params, [counts], [totals], [], dev)
        last = out is not None and p == len(shifts) - 1
        if last:
            assert out is not None and out._storage is not None  # (a concrete array)
            keys[1] = out._storage
        _launch(scatter, params, [keys[1], vals[1], totals], [keys[0], vals[0], counts],
                [*scalars, _kind(dt) if last else np.int32(-1), np.int32(descending)], dev)
        keys.reverse()
        vals.reverse()
    return Sorted(None if out is not None else keys[0], vals[0] if values else None, out)


def values_of(keys: Storage, dt: np.dtype, n: int, descending: bool,
              layout: Layout, device: Device) -> Array:
    """The values (of ``dt``, bool as uint8) of ``n`` keys sorted by :func:`sort_keys`
    with ``canon=False``."""
    _, from_keys = _key_kernels(dt.itemsize, layout.group)
    out = Array._concrete(allocate(n * dt.itemsize, device), dt, (n,))
    assert out._storage is not None
    _launch(from_keys, (n, -(-n // layout.group)), [out._storage], [keys],
            [_kind(dt), np.int32(descending)], device)
    return out


__all__ = ["Layout", "Sorted", "layout_for", "sort_keys", "values_of"]
