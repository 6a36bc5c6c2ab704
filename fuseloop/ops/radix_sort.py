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
high bytes of small integers) are skipped; the host reads them (one copy, not waited
for at once) while the device already counts the lowest digit, which nearly always
varies, so the device does not idle through the round trip.

One pass over tiles of ``WG * PER`` keys (a work-group each):

1. ``count``: each tile's histogram of the digit (local atomics), written digit-major;
2. ``scan``: one work-group per digit scans its row of tile counts (exclusive; the row
   read and written coalesced through local memory) and writes the digit's total;
3. ``scatter``: each tile scans the digits' totals (where each digit starts), sorts
   itself stably by the digit in local memory (two counting sorts by 4-bit halves: each
   work-item counts and ranks its own keys in registers, one work-group prefix sum of
   the counts serves both halves of the nibbles, keys moved in order), then writes every
   key (and its position, the payload) to the digit's start + the tile's start in the
   digit + its rank among the tile's keys of the digit: runs of a digit, coalesced.

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
from ..expr.nodes import Iota, Storage
from ..runtime.devices import Device
from ..runtime.transfer import read_started, wait

#: the sorted digit's bits (256 buckets)
RADIX_BITS = 8
RADIX = 1 << RADIX_BITS
#: work-items per work-group on a GPU, and on a CPU device (PoCL runs a group's work-items
#: in a loop; a small group keeps its barriers cheap): powers of two up to RADIX
GPU_GROUP, CPU_GROUP = 256, 32
#: the most keys a work-item ranks per tile (fewer where local memory is short)
MAX_PER_ITEM = 16
#: the most local memory a tile takes, so that 5 work-groups of 256 share an H100 SM's
#: 228 KiB (argsort's 16 keys a work-item would take 45 KiB: 8 are used)
GROUP_LOCAL_MAX = 40 * 1024
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

/* the work-items' sums are scanned in segments of SEG, one work-item each */
#define SEG (WG < 16 ? WG : 16)
/* words of scratch block_scan needs */
#define SCAN_SCRATCH (PAD(WG) + WG / SEG)

/* a[PAD(0 .. WG * per)) replaced by its exclusive prefix sums, each work-item summing
   `per` consecutive entries; sums: SCAN_SCRATCH words.  Returns the total.  The
   work-items' sums are scanned by WG / SEG work-items, SEG sums each, then each
   work-item adds the segments before its own: three barriers, where a tree over WG
   work-items takes 2 log2(WG) + 2. */
uint block_scan(__local uint *a, const int per, __local uint *sums)
{
    const int lid = get_local_id(0);
    __local uint *seg = sums + PAD(WG);
    uint s = 0;
    for (int k = 0; k < per; ++k)
        s += a[PAD(lid * per + k)];
    sums[PAD(lid)] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < WG / SEG) {
        uint r = 0;
        for (int k = 0; k < SEG; ++k) {
            const uint t = sums[PAD(lid * SEG + k)];
            sums[PAD(lid * SEG + k)] = r;
            r += t;
        }
        seg[lid] = r;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    uint run = sums[PAD(lid)], total = 0;
    for (int g = 0; g < WG / SEG; ++g) {
        run += g < lid / SEG ? seg[g] : 0;
        total += seg[g];
    }
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
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_count(__global const KT *restrict keys, __global const uint *restrict vals,
                    __global uint *restrict counts, const int shift, const int by_row,
                    const long rowlen, const int iota, const long n, const long tiles)
{
    __local uint hist[RADIX];
    const int lid = get_local_id(0);
    const long tile = get_group_id(0), first = tile * TILE;
    for (int d = lid; d < RADIX; d += WG)
        hist[d] = 0;
    /* every load first, then the atomics: PER loads in flight a work-item (an atomic
       between them would wait for each) */
    uint dig[PER];
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        const long i = first + k * WG + lid;  /* (coalesced) */
        dig[k] = i < n ? DIGIT_OF(keys[i], iota ? (uint)i : vals[i]) : RADIX;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int k = 0; k < PER; ++k)
        if (dig[k] < RADIX)
            atomic_inc(&hist[dig[k]]);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int d = lid; d < RADIX; d += WG)
        counts[d * tiles + tile] = hist[d];
}
"""

_SCAN = r"""
/* entries of the table a work-item scans per chunk */
#define SCAN_PER 16

/* One work-group per digit: its row of tile counts becomes their exclusive scan (where
   each tile's keys of the digit start among the digit's), and its total is written.
   The row goes through local memory in chunks, loaded and stored coalesced.  (The
   digits' totals are scanned by each scatter tile: cheap, where a total over all tiles
   added up by global atomics, 4096 tiles on one address each, could serialise.) */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_scan(__global uint *restrict counts, __global uint *restrict totals,
                   const long tiles)
{
    __local uint chunk[PAD(WG * SCAN_PER)];
    __local uint sums[SCAN_SCRATCH];
    const int lid = get_local_id(0);
    __global uint *row = counts + (long)get_group_id(0) * tiles;
    uint carry = 0;  /* (the same in every work-item) */
    for (long c0 = 0; c0 < tiles; c0 += WG * SCAN_PER) {
        const int m = (int)min((long)(WG * SCAN_PER), tiles - c0);
        for (int j = lid; j < WG * SCAN_PER; j += WG)
            chunk[PAD(j)] = j < m ? row[c0 + j] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        const uint total = block_scan(chunk, SCAN_PER, sums);
        for (int j = lid; j < m; j += WG)
            row[c0 + j] = carry + chunk[PAD(j)];
        barrier(CLK_LOCAL_MEM_FENCE);  /* (before the next chunk is loaded) */
        carry += total;
    }
    if (lid == 0)
        totals[get_group_id(0)] = carry;
}
"""

_SCATTER = r"""
/* the tile in local memory, padded like the table (work-items read PER consecutive
   entries) */
#define LK(j) lk[PAD(j)]
#define LV(j) lv[PAD(j)]
#if HAS_VALUES
#define DIGIT_AT(j) ((j) < valid ? DIGIT_OF(LK(j), LV(j)) : 0xFF)
#else
#define DIGIT_AT(j) ((j) < valid ? DIGIT_OF(LK(j), 0) : 0xFF)
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_scatter(__global const KT *restrict keys, __global const uint *restrict vals,
                      __global const uint *restrict counts,
                      __global const uint *restrict totals, __global KT *restrict keys_out,
                      __global uint *restrict vals_out, const int shift, const int by_row,
                      const long rowlen, const int out_kind, const int descending,
                      const int iota, const long n, const long tiles)
{
    __local KT lk[PAD(TILE)];
    __local uint lv[HAS_VALUES ? PAD(TILE) : 1];
    __local uint table[PAD(8 * WG)];
    __local uint sums[SCAN_SCRATCH];
    __local uint off[PAD(RADIX)];
    const int lid = get_local_id(0);
    const long tile = get_group_id(0), first = tile * TILE;
    const int valid = (int)min((long)TILE, n - first);
#pragma unroll
    for (int k = 0; k < PER; ++k) {  /* coalesced loads */
        const int j = k * WG + lid;
        if (j < valid) {
            LK(j) = keys[first + j];
#if HAS_VALUES
            LV(j) = iota ? (uint)(first + j) : vals[first + j];
#endif
        }
    }
    /* where each digit starts in the output: the exclusive scan of the digits' totals */
    for (int d = lid; d < RADIX; d += WG)
        off[PAD(d)] = totals[d];
    barrier(CLK_LOCAL_MEM_FENCE);
    block_scan(off, RADIX / WG, sums);
    /* Sort the tile stably by the digit: two counting sorts by its 4-bit halves, each
       work-item taking PER consecutive items.  Items past the array's end (digit 0xFF,
       last already) stay last, so the item at j is one of them exactly when
       j >= valid.  Each work-item counts its items' nibbles in registers (a byte per
       nibble value: at most PER of them) and notes each item's rank among its own of
       that nibble, so local memory sees only the counts' column (a row at a time: no
       bank conflicts), their scan, and the moved items. */
    KT key[PER];
#if HAS_VALUES
    uint val[PER];
#endif
    uint nr[PER];  /* the item's nibble << 8 | its rank in this work-item */
    for (int nib = 0; nib < 8; nib += 4) {
        barrier(CLK_LOCAL_MEM_FENCE);
        ulong lo = 0, hi = 0;  /* the counts of nibbles 0-7 and 8-15 */
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const int j = lid * PER + k;
            key[k] = LK(j);
#if HAS_VALUES
            val[k] = LV(j);
#endif
            const uint b = (DIGIT_AT(j) >> nib) & 15, sh = (b & 7) * 8;
            const ulong one = (ulong)1 << sh;
            nr[k] = b << 8 | (uint)(((b < 8 ? lo : hi) >> sh) & 0xFF);
            lo += b < 8 ? one : 0;
            hi += b < 8 ? 0 : one;
        }
        /* this work-item's column: the counts of nibbles b and b + 8 in the low and high
           16 bits of row b, so that one scan of 8 rows serves both halves (neither
           carries into the other: each sums to at most TILE <= 4096) */
#pragma unroll
        for (int b = 0; b < 8; ++b)
            table[PAD(b * WG + lid)] = ((uint)(lo >> (8 * b)) & 0xFF)
                                       | ((uint)(hi >> (8 * b)) & 0xFF) << 16;
        barrier(CLK_LOCAL_MEM_FENCE);
        /* digit-major: a nibble's items of lower work-items come first; nibbles 8-15
           after all of 0-7 */
        const uint upper = block_scan(table, 8, sums) & 0xFFFF;
        /* this column's starts, two rows a word */
        ulong st[4];
#pragma unroll
        for (int q = 0; q < 4; ++q)
            st[q] = (ulong)table[PAD(2 * q * WG + lid)]
                    | (ulong)table[PAD((2 * q + 1) * WG + lid)] << 32;
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const uint b = nr[k] >> 8;
            const ulong w = (b & 4) ? ((b & 2) ? st[3] : st[2]) : ((b & 2) ? st[1] : st[0]);
            const uint pair = (uint)(w >> (32 * (b & 1)));
            const uint pos = (b < 8 ? pair & 0xFFFF : (pair >> 16) + upper)
                             + (nr[k] & 0xFF);
            LK(pos) = key[k];
#if HAS_VALUES
            LV(pos) = val[k];
#endif
        }
    }
    /* the output position of the tile's item j of digit d: off[d] + j, off[d] being
       the digit's start + the tile's start in the digit - the digit's first j (one
       work-item writes it; uint arithmetic wraps back into range) */
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = lid; j < valid; j += WG) {
        const uint d = DIGIT_AT(j);
        if (j == 0 || DIGIT_AT(j - 1) != d)
            off[PAD(d)] += counts[d * tiles + tile] - (uint)j;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = lid; j < valid; j += WG) {  /* runs of a digit: coalesced writes */
        const uint pos = off[PAD(DIGIT_AT(j))] + (uint)j;
        /* (the last pass may write the keys' values: out_kind is their kind) */
        keys_out[pos] = out_kind < 0 ? LK(j) : (KT)from_key((U)LK(j), out_kind, descending);
#if HAS_VALUES
        vals_out[pos] = LV(j);
#endif
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

#define KEY_OF(i, u) do { \
        const KT k_ = to_key((u), kind, descending, canon); \
        keys[i] = k_; \
        o |= k_; \
        a &= k_; \
    } while (0)

/* ``bits``: each work-group's OR of the keys, then (after the groups' ORs) its AND, so
   that one read brings both to the host */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_keys(__global const U *restrict src, __global KT *restrict keys,
                   __global KT *restrict bits, const int kind, const int descending,
                   const int canon, const long n)
{
    __local KT lo[WG], la[WG];
    const int lid = get_local_id(0);
    const long step = get_global_size(0);
    KT o = 0, a = (KT)~(KT)0;
    long i = get_global_id(0);
    /* four loads in flight a work-item (coalesced across the group) before any store */
    for (; i + 3 * step < n; i += 4 * step) {
        const U u0 = src[i], u1 = src[i + step], u2 = src[i + 2 * step],
                u3 = src[i + 3 * step];
        KEY_OF(i, u0);
        KEY_OF(i + step, u1);
        KEY_OF(i + 2 * step, u2);
        KEY_OF(i + 3 * step, u3);
    }
    for (; i < n; i += step)
        KEY_OF(i, src[i]);
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
            + 4 * (pad(group) + group) + 4 * pad(RADIX) + 64)


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
    # (a power of two, at most RADIX: the digits' totals are scanned RADIX / WG a
    # work-item)
    while group > min(device.max_work_group_size, RADIX) or group & (group - 1):
        group //= 2
    if group < 2:
        return None
    local = min(local_memory(device), GROUP_LOCAL_MAX)
    per = MAX_PER_ITEM
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
    opts = [f"-DKT={_UNSIGNED[key_size]}", f"-DHAS_VALUES={int(values)}",
            f"-DWG={layout.group}", f"-DPER={layout.per}", f"-DU={_UNSIGNED[key_size]}",
            f"-DBITS={8 * key_size}", f"-DINF={_INF[key_size]}"]
    g = layout.group
    out_args = ["s0", "s1", "s2", "s3", "s4", "s5", "p0", "p1"]
    out_types: list[str | None] = ["int32", "int32", "int64", "int32", "int32", "int32",
                                   "int64", "int64"]
    made = (
        _plan("fl_radix_count", _COMMON + _COUNT,
              ["in0", "in1", "out0", "s0", "s1", "s2", "s3", "p0", "p1"],
              [None, None, None, "int32", "int32", "int64", "int32", "int64", "int64"],
              "p[1]", g, opts),
        _plan("fl_radix_scan", _COMMON + _SCAN, ["out0", "out1", "p1"],
              [None, None, "int64"], str(RADIX), g, opts),
        _plan("fl_radix_scatter", _COMMON + _BITS + _SCATTER,
              ["in0", "in1", "in2", "in3", "out0", "out1", *out_args],
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
            f"-DBITS={8 * size}", f"-DINF={_INF[size]}", f"-DWG={group}"]
    made = (
        _plan("fl_radix_keys", _BITS + _KEYS,
              ["in0", "out0", "out1", "s0", "s1", "s2", "p0"],
              [None, None, None, "int32", "int32", "int32", "int64"],
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


def _varying_shifts(bits: np.ndarray, bits_of_values: int) -> list[int]:
    """The shifts of the digits that differ between keys, from the key kernel's
    partial ORs and ANDs (``bits``: the ORs, then the ANDs)."""
    half = bits.size // 2
    differ = int(np.bitwise_or.reduce(bits[:half]) ^ np.bitwise_and.reduce(bits[half:]))
    return [s for s in range(0, bits_of_values, RADIX_BITS)
            if (differ >> s) & (RADIX - 1)]


def _positions(n: int, dev: Device) -> Storage:
    """A new buffer of 0, 1, ..., n - 1 (uint32)."""
    done = Array._lazy(Iota((n,), np.dtype(np.uint32)), dev).eval()
    assert done._storage is not None
    return done._storage


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
    groups = max(1, min(KEY_GROUPS, -(-n // layout.group)))
    bits = allocate(2 * groups * key_size, dev)
    assert src._storage is not None
    flags = [_kind(dt), np.int32(descending), np.int32(canon)]
    _launch(to_keys, (n, groups), [keys[0], bits], [src._storage], flags, dev)
    # the ORs and ANDs come back while the device counts the lowest digit, which nearly
    # every array needs (a wasted count where it is the same in every key: all keys
    # equal, or floats that are all small whole numbers)
    host_bits = np.empty(2 * groups, f"u{key_size}")
    event = read_started(host_bits, bits.buffer, dev)
    tiles = -(-n // layout.tile)
    count, scan, scatter = _pass_kernels(key_size, values, layout)
    counts, totals = allocate(RADIX * tiles * 4, dev), allocate(RADIX * 4, dev)
    params = (n, tiles)
    _launch(count, params, [counts], [keys[0], vals[0]],
            [np.int32(0), np.int32(0), np.int64(row), np.int32(1)], dev)
    wait(event, dev)
    shifts = [(s, 0) for s in _varying_shifts(host_bits, 8 * dt.itemsize)]
    if rows > 1:
        shifts += [(s, 1) for s in range(0, (rows - 1).bit_length(), RADIX_BITS)]
    out = None
    if want_values and shifts and dt.itemsize == key_size:
        assert not canon  # (canon keys have no values)
        out = Array._concrete(allocate(n * key_size, dev), dt, (n,))
    # the first pass makes the positions (the payload) itself, where it reads them
    iota = np.int32(1)
    for p, (shift, by_row) in enumerate(shifts):
        scalars = [np.int32(shift), np.int32(by_row), np.int64(row)]
        if shift or by_row:  # (else counted above)
            _launch(count, params, [counts], [keys[0], vals[0]], [*scalars, iota], dev)
        _launch(scan, params, [counts, totals], [], [], dev)
        last = out is not None and p == len(shifts) - 1
        if last:
            assert out is not None and out._storage is not None  # (a concrete array)
            keys[1] = out._storage
        _launch(scatter, params, [keys[1], vals[1]], [keys[0], vals[0], counts, totals],
                [*scalars, _kind(dt) if last else np.int32(-1), np.int32(descending),
                 iota], dev)
        keys.reverse()
        vals.reverse()
        iota = np.int32(0)
    if values and not shifts:  # (one row of equal keys: the positions in order)
        vals[0] = _positions(n, dev)
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
