"""The OpenCL sources of fuseloop's radix sort (:mod:`fuseloop.ops.radix_sort`, whose
docstring describes the passes): each pass's count, scan and scatter kernels (after
``COMMON``; the key kernels and ``BITS``, which the scatter and the one-sweep kernels
take too, are in :mod:`fuseloop.ops.radix_keys`).  Build options: ``WG`` work-items a
group, ``PER`` keys a work-item, ``KT``/``VKT`` the key type and its vector of 4,
``U``/``U4`` the values' bits, ``HAS_VALUES`` (positions sorted with the keys), ``NSUB``
copies of the count's histogram, ``SCAN_LOCAL`` (the scan through local memory),
``BITS``/``INF`` the width and +inf's bits; ``ONESWEEP`` (the scatter with the count and
scan folded in, after ``HIST``'s kernels), ``FROM_SRC`` (the one-sweep histogram and
first pass reading the values, ``U``/``U4`` of their width, instead of keys),
``LOOKBACK`` the status words a look-back step reads, ``LB_VOLATILE`` (read by
volatile loads, not atomics), ``RAKE_SCAN`` (block_scan's raking way), ``NBYTES``
the key's bytes, ``HNSUB`` the copies of ``HIST``'s histograms (``STARTS`` after ``HIST``)
and ``SPEC`` (a one-sweep pass copies its tiles straight where its digit is constant)."""

from __future__ import annotations

COMMON = r"""
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

#ifndef RAKE_SCAN
#define RAKE_SCAN 0
#endif
/* RAKE_SCAN: RAKERS work-items scan RAKE work-items' sums each (stored with a word of
   padding every RAKE: a raker's reads fall in different banks), their totals after */
#define RAKERS (WG < 32 ? WG : 32)
#define RAKE (WG / RAKERS)
#define RP(i) (RAKE > 1 ? (i) + (i) / RAKE : (i))

/* a[PAD(0 .. WG * per)) replaced by its exclusive prefix sums, each work-item summing
   `per` consecutive entries; returns the sum of all of them.  sums: 2 * WG words of
   scratch, a Hillis-Steele scan of the work-items' sums that alternates between its two
   halves, so that each step takes one barrier (reads of one half, writes of the other);
   RAKE_SCAN: a raking scan instead, 2 barriers in all rather than log2(WG) + 1 */
uint block_scan(__local uint *a, const int per, __local uint *sums)
{
    const int lid = get_local_id(0);
    uint s = 0;
    for (int k = 0; k < per; ++k)
        s += a[PAD(lid * per + k)];
#if RAKE_SCAN
    sums[RP(lid)] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < RAKERS) {
        uint t = 0;
        for (int i = 0; i < RAKE; ++i) {
            const uint v = sums[RP(lid * RAKE + i)];
            sums[RP(lid * RAKE + i)] = t;
            t += v;
        }
        sums[RP(WG) + lid] = t;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* every work-item adds the totals of the rakers before its own (the same words
       across the group: broadcast reads) */
    uint run = sums[RP(lid)], total = 0;
    const int mine = lid / RAKE;
    for (int r = 0; r < RAKERS; ++r) {
        const uint t = sums[RP(WG) + r];
        run += r < mine ? t : 0;
        total += t;
    }
#else
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
#endif
    for (int k = 0; k < per; ++k) {
        const uint c = a[PAD(lid * per + k)];
        a[PAD(lid * per + k)] = run;
        run += c;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}
"""

COUNT = r"""
/* NSUB (a build option) copies of the histogram, copy c of digit d at
   hist[d * (NSUB + 1) + c] (an odd stride: the combine's reads of a digit's copies by
   consecutive work-items fall in different banks); work-item lid adds to copy
   lid % NSUB, so that the lanes of a warp that share a digit (skewed keys: a float's
   top byte has few values) add to NSUB words in different banks instead of queueing
   on one */
#define HSTRIDE (NSUB > 1 ? NSUB + 1 : 1)
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

SCAN = r"""
/* Each digit's row of tile counts replaced by where the tile's items of the digit go:
   the digit's start (the items of smaller digits: the totals) plus the exclusive scan
   of the row, i.e. the exclusive scan of the sequence "the totals of the smaller
   digits, then the row" at the row's entries.  A work-group a digit, taking that
   sequence in chunks of WG * per entries (per at most PER + 1: a row of WG * PER tiles
   and its start in one chunk; fewer for short rows: no empty slots scanned): loaded
   coalesced into local memory, scanned there (block_scan), written back coalesced,
   with the chunks' running total carried in a register (SCAN_LOCAL: a GPU's way; a
   CPU's below). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_scan(__global uint *restrict counts, __global const uint *restrict totals,
                   const long tiles)
{
    const int lid = get_local_id(0), digit = get_group_id(0);
    __global uint *row = counts + (long)digit * tiles;
#if SCAN_LOCAL
    __local uint part[PAD(WG * (PER + 1))];
    __local uint sums[2 * WG];
    const long len = digit + tiles;
    const int per = (int)min((long)PER + 1, (len + WG - 1) / WG);
    uint carry = 0;
    for (long c0 = 0; c0 < len; c0 += WG * per) {
#pragma unroll
        for (int k = 0; k < PER + 1; ++k) {
            const long v = c0 + k * WG + lid;
            if (k < per)
                part[PAD(k * WG + lid)] = v < digit ? totals[v]
                                                    : v < len ? row[v - digit] : 0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);  /* (the chunk loaded) */
        const uint total = block_scan(part, per, sums);
#pragma unroll
        for (int k = 0; k < PER + 1; ++k) {
            const long v = c0 + k * WG + lid;
            if (k < per && v >= digit && v < len)
                row[v - digit] = carry + part[PAD(k * WG + lid)];
        }
        carry += total;
        barrier(CLK_LOCAL_MEM_FENCE);  /* (read before the next chunk overwrites it) */
    }
#else
    /* (a CPU: each work-item scans its own consecutive stretch of the row, straight
       from global memory; the stretches' sums and the totals' are scanned together) */
    __local uint sums[2 * WG], starts[2 * WG];
    const long per = (tiles + WG - 1) / WG, first = lid * per;
    const long stop = min(first + per, tiles);
    uint s = 0, before = 0;
    for (long t = first; t < stop; ++t)
        s += row[t];
    for (int d = lid; d < digit; d += WG)
        before += totals[d];
    sums[lid] = s;
    starts[lid] = before;
    barrier(CLK_LOCAL_MEM_FENCE);
    int from = 0;  /* (two halves: a barrier a step, as in block_scan) */
    for (int off = 1; off < WG; off <<= 1) {
        const uint v = sums[from + lid] + (lid >= off ? sums[from + lid - off] : 0);
        const uint b = starts[from + lid] + (lid >= off ? starts[from + lid - off] : 0);
        from ^= WG;
        sums[from + lid] = v;
        starts[from + lid] = b;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    uint run = starts[from + WG - 1] + sums[from + lid] - s;
    for (long t = first; t < stop; ++t) {
        const uint c = row[t];
        row[t] = run;
        run += c;
    }
#endif
}
"""

SWEEP_COMMON = r"""
#if ONESWEEP
/* One kernel a pass (count and scan folded in): `starts` holds each digit's start (the
   keys of smaller digits) for every byte of the key (fl_radix_hist, fl_radix_starts);
   `state` two tile counters, then two status arrays of tiles x RADIX words (parity: the
   pass's), each word a tile's count of a digit with a flag in its top bits: AGG (the
   tile's own count) or INC (the count of the tile and every tile before it, the
   digit's start included); 0: not yet published. */
#define ST_AGG 0x40000000u
#define ST_INC 0x80000000u
#define ST_COUNT 0x3FFFFFFFu
#define ST_HEAD 32
/* a status word read by the look-back: LB_VOLATILE, a volatile load (on NVIDIA one
   that skips the L1 and reads the L2, where the atomics publish; a whole warp's words
   of a tile in one transaction), else an atomic (the L2's atomic unit, a lane at a
   time).  A word holds its count and flag together, so either sees a whole one. */
#if LB_VOLATILE
#define LB_READ(p) (*(volatile __global uint *)(p))
#else
#define LB_READ(p) atomic_or((p), 0u)
#endif
/* FROM_SRC: the first pass reads the values (U) and makes their keys and positions as
   fl_radix_keys would (kind, descending, canon) */
#if FROM_SRC
#define SRC_T U
#else
#define SRC_T KT
#endif
#ifndef SPEC
#define SPEC 0
#endif

/* the next pass's status words of this tile and its counter: zero (the pass before
   this one, their last user, is done) */
void zero_next(__global uint *state, const int parity, const long tiles, const long tile,
               const int lid)
{
    __global uint *next = state + ST_HEAD + (long)(parity ^ 1) * tiles * RADIX;
    for (int d = lid; d < RADIX; d += WG)
        next[tile * RADIX + d] = 0;
    if (tile == 0 && lid == 0)
        state[parity ^ 1] = 0;
}

/* Decoupled look-back, a digit a work-item: a tile publishes its count of digit d
   (the first tile: with the digit's start, final), sums the counts of the tiles before
   it back to the nearest final one, and publishes its own final sum.  The status words
   are written by atomics (the L2 on a GPU: coherent between work-groups). */
void publish(__global uint *st, const long tile, const int d, const uint count,
             const uint start)
{
    if (tile == 0)
        atomic_xchg(&st[d], ST_INC | (start + count));
    else
        atomic_xchg(&st[tile * RADIX + d], ST_AGG | count);
}

/* the keys of digit d before tile `tile` (> 0; its count published), the digit's
   start included; publishes the tile's final sum.  LOOKBACK words are read at once
   (loads in flight, not a chain of them), then taken in order, one not yet published
   read again until it is (a stale AGG where the tile has since published INC only
   walks on further); tile 0 is INC, so the walk ends there at the latest. */
uint look_back(__global uint *st, const long tile, const int d, const uint count)
{
    uint before = 0;
    for (long t = tile - 1;; t -= LOOKBACK) {
        uint s[LOOKBACK];
#pragma unroll
        for (int i = 0; i < LOOKBACK; ++i)
            s[i] = t - i >= 0 ? LB_READ(&st[(t - i) * RADIX + d]) : 0u;
        int found = 0;
#pragma unroll
        for (int i = 0; i < LOOKBACK; ++i) {
            if (found || t - i < 0)
                continue;
            while (!(s[i] & (ST_AGG | ST_INC)))
                s[i] = LB_READ(&st[(t - i) * RADIX + d]);
            before += s[i] & ST_COUNT;
            found = (s[i] & ST_INC) != 0;
        }
        if (found) {
            atomic_xchg(&st[tile * RADIX + d], ST_INC | (before + count));
            return before;
        }
    }
}
#else
#define SPEC 0
#endif
/* (the last pass may write the keys' values: out_kind is their kind) */
#define OUT_KEY(k) (out_kind < 0 ? (k) : (KT)from_key((U)(k), out_kind, descending))
"""

SCATTER = SWEEP_COMMON + r"""
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

#if ONESWEEP
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_onesweep(__global const SRC_T *restrict keys,
                       __global const uint *restrict vals,
                       __global const uint *restrict starts, __global KT *restrict keys_out,
                       __global uint *restrict vals_out, __global uint *restrict state,
                       const int shift, const int parity, const int out_kind,
                       const int descending, const int kind, const int canon,
                       const long n, const long tiles)
#else
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_scatter(__global const KT *restrict keys, __global const uint *restrict vals,
                      __global const uint *restrict counts, __global KT *restrict keys_out,
                      __global uint *restrict vals_out, __global uint *restrict totals,
                      const int shift, const int by_row,
                      const long rowlen, const int out_kind, const int descending,
                      const long n, const long tiles)
#endif
{
    __local KT lk[PAD(TILE)];
    __local uint lv[HAS_VALUES ? PAD(TILE) : 1];
    __local uint table[PAD(8 * WG)];
    __local uint sums[2 * WG];
    __local uint off[RADIX];
    const int lid = get_local_id(0);
#if ONESWEEP
    /* Tiles are numbered in the order work-groups start (not by group id), so that the
       tiles a work-group waits for below have all started: a running work-group is never
       waiting on one the device has not scheduled. */
    const int by_row = 0;
    const long rowlen = 1;
    __local uint tile_id;
    __local uint run_end[RADIX];  /* (off: the runs' starts, then their offsets) */
    if (lid == 0)
        tile_id = atomic_inc(&state[parity]);
    for (int d = lid; d < RADIX; d += WG) {
        off[d] = 0;
        run_end[d] = 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const long tile = tile_id, first = tile * TILE;
#else
    const long tile = get_group_id(0), first = tile * TILE;
#endif
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
#if !FROM_SRC
        __global const VKT *kv = (__global const VKT *)(keys + first + lid * PER);
#if HAS_VALUES
        __global const uint4 *vv = (__global const uint4 *)(vals + first + lid * PER);
#endif
#endif
#if FROM_SRC
#pragma unroll
        for (int q = 0; q < PER / 4; ++q) {
            const U4 u = vload4(q, keys + first + lid * PER);
            key[4 * q] = to_key(u.s0, kind, descending, canon);
            key[4 * q + 1] = to_key(u.s1, kind, descending, canon);
            key[4 * q + 2] = to_key(u.s2, kind, descending, canon);
            key[4 * q + 3] = to_key(u.s3, kind, descending, canon);
#if HAS_VALUES
            for (int i = 0; i < 4; ++i)
                val[4 * q + i] = (uint)(first + lid * PER + 4 * q + i);
#endif
        }
#else
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
#endif
    } else {
#pragma unroll
        for (int k = 0; k < PER; ++k) {  /* coalesced loads */
            const int j = k * WG + lid;
            if (j < valid) {
#if FROM_SRC
                LK(j) = to_key(keys[first + j], kind, descending, canon);
#if HAS_VALUES
                LV(j) = (uint)(first + j);
#endif
#else
                LK(j) = keys[first + j];
#if HAS_VALUES
                LV(j) = vals[first + j];
#endif
#endif
            }
        }
    }
    /* Sort the tile stably by the digit: two counting sorts by its 4-bit halves, each
       work-item taking PER consecutive items.  Items past the array's end (digit 0xFF,
       last already) stay last, so the item at j is one of them exactly when
       j >= valid. */
    int in_local = !direct;
#if SPEC
    /* SPEC (the fused variant's passes enqueued before the host knows which bytes
       vary, see radix_sort.SPECULATE): a pass whose digit is the same in every key
       (the tile's first key's digit counts all n keys: it starts at 0 and the next
       digit at n) is a stable identity, so the tile is copied to its own place
       (coalesced, from local memory) without ranking or look-back; the same for every
       tile, so the branch is uniform. */
    __local int same;
    if (lid == 0) {  /* (the tile's first key: its own, in registers or local) */
        const uint d = DIGIT_KV(0, direct ? key[0] : LK(0), 0);
        __global const uint *at = starts + (shift >> 3) * RADIX;
        same = at[d] == 0 && (d == RADIX - 1 || at[d + 1] == (uint)n);
    }
#endif
#pragma unroll
    for (int nib = 0; nib < 8; nib += 4) {
        barrier(CLK_LOCAL_MEM_FENCE);
#if SPEC
        if (nib == 0 && same) {
            if (direct)
                for (int k = 0; k < PER; ++k) {
                    LK(lid * PER + k) = key[k];
#if HAS_VALUES
                    LV(lid * PER + k) = val[k];
#endif
                }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int m = 0; m < PER; ++m) {
                const int j = m * WG + lid;
                if (j < valid) {
                    keys_out[first + j] = OUT_KEY(LK(j));
#if HAS_VALUES
                    vals_out[first + j] = LV(j);
#endif
                }
            }
            zero_next(state, parity, tiles, tile, lid);
            return;
        }
#endif
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
#if ONESWEEP
    zero_next(state, parity, tiles, tile, lid);
#else
    /* the count kernel of the next pass adds to zeroed totals (the scan kernel, the
       only reader, is done) */
    if (tile == 0)
        for (int d = lid; d < RADIX; d += WG)
            totals[d] = 0;
#endif
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
#if ONESWEEP
        if (j < valid && (j == 0 || DIGIT_AT(j - 1) != d))
            off[d] = (uint)j;
        if (j < valid && (j == valid - 1 || DIGIT_AT(j + 1) != d))
            run_end[d] = (uint)j + 1;
#else
        if (j < valid && (j == 0 || DIGIT_AT(j - 1) != d))
            off[d] = counts[d * tiles + tile] - (uint)j;
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#if ONESWEEP
    /* where the tile's digits go: decoupled look-back, a digit a work-item */
    {
        __global uint *st = state + ST_HEAD + (long)parity * tiles * RADIX;
        __global const uint *start = starts + (shift >> 3) * RADIX;
        for (int d = lid; d < RADIX; d += WG)
            publish(st, tile, d, run_end[d] - off[d], start[d]);
        for (int d = lid; d < RADIX; d += WG) {
            const uint before = tile > 0 ? look_back(st, tile, d, run_end[d] - off[d])
                                         : start[d];
            off[d] = before - off[d];  /* (uint arithmetic wraps back into range) */
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
#pragma unroll
    for (int m = 0; m < PER; ++m) {
        const int j = m * WG + lid;
        if (j < valid) {
            const uint pos = off[BYTE(digs, m)] + (uint)j;
            keys_out[pos] = OUT_KEY(key[m]);
#if HAS_VALUES
            vals_out[pos] = val[m];
#endif
        }
    }
}
"""

HIST = r"""
/* The one-sweep passes' digit starts.  fl_radix_hist: each varying byte's histogram of
   all keys (`mask`: bit b for byte b), HNSUB copies in local memory as in fl_radix_count,
   added to `hist` (zeroed by fl_radix_keys); it also zeroes the first pass's status
   words and counters (`zero` words of `state`).  fl_radix_starts: each histogram
   replaced by its exclusive scan, where the byte's digits start. */
#define HS (HNSUB > 1 ? HNSUB + 1 : 1)
#define HIST_ONE(k) do {                                                   \
        const KT k_ = (k);                                                 \
        for (int b_ = 0; b_ < NBYTES; ++b_)                                \
            if ((mask >> b_) & 1)                                          \
                atomic_inc(&mine[(b_ * RADIX + (uint)((k_ >> (8 * b_)) & 0xFF)) * HS]); \
    } while (0)
/* FROM_SRC: the keys made from the values (U) here, as fl_radix_keys makes them */
#if FROM_SRC
#define SRC_T U
#define SRC_V U4
#define KEY_OF(u) to_key((u), kind, descending, canon)
#else
#define SRC_T KT
#define SRC_V VKT
#define KEY_OF(u) (u)
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_hist(__global const SRC_T *restrict keys, __global uint *restrict hist,
                   __global uint *restrict state, const int mask, const int kind,
                   const int descending, const int canon, const long zero, const long n)
{
    __local uint lh[NBYTES * RADIX * HS];
    const int lid = get_local_id(0);
    __local uint *mine = lh + lid % HNSUB;
    for (int e = lid; e < NBYTES * RADIX * HS; e += WG)
        lh[e] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    /* consecutive work-items take consecutive vectors of 4 keys (coalesced) */
    const long nv = n / 4, size = get_global_size(0);
    for (long w = get_global_id(0); w < nv; w += size) {
        const SRC_V v = vload4(w, keys);
        HIST_ONE(KEY_OF(v.s0));
        HIST_ONE(KEY_OF(v.s1));
        HIST_ONE(KEY_OF(v.s2));
        HIST_ONE(KEY_OF(v.s3));
    }
    const long i = 4 * nv + get_global_id(0);  /* (the last n % 4 keys) */
    if (i < n)
        HIST_ONE(KEY_OF(keys[i]));
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < NBYTES * RADIX; e += WG) {
        uint c = 0;
        for (int s = 0; s < HNSUB; ++s)
            c += lh[e * HS + s];
        if (c)
            atomic_add(&hist[e], c);
    }
    for (long w = get_global_id(0); w < zero; w += size)
        state[w] = 0;
}

"""

# (built with WG, PER and NBYTES only: one build a work-group size)
STARTS = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_starts(__global uint *restrict hist, const int mask)
{
    __local uint part[PAD(RADIX)];
    __local uint sums[2 * WG];
    const int lid = get_local_id(0);
    for (int b = 0; b < NBYTES; ++b) {
        if (!((mask >> b) & 1))
            continue;
        for (int d = lid; d < RADIX; d += WG)
            part[PAD(d)] = hist[b * RADIX + d];
        barrier(CLK_LOCAL_MEM_FENCE);
        block_scan(part, RADIX / WG, sums);
        for (int d = lid; d < RADIX; d += WG)
            hist[b * RADIX + d] = part[PAD(d)];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
"""


__all__ = ["COMMON", "COUNT", "HIST", "SCAN", "SCATTER", "STARTS"]
