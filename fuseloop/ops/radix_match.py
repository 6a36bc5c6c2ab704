"""The one-sweep radix pass ranked by warp matching (``radix_sort.RANKING`` "match").

The nibble ranking of ``fl_radix_onesweep`` (:mod:`fuseloop.ops.radix_kernels`) sorts
each tile in local memory by two counting sorts, with a scan of a counts table each,
because portable OpenCL has no way to find the work-items of a warp that hold the same
digit.  NVIDIA's OpenCL takes inline PTX, and PTX has that instruction
(``match.any.sync``): with it a tile is ranked by the full 8-bit digit at once, the way
CUB's one-sweep sort ranks (Adinets and Merrill, "Onesweep", 2022):

1. the tile's keys are loaded warp-striped (warp w takes the keys ``w * 32 * PER`` on,
   lane l its ``k``-th key at ``k * 32 + l``: coalesced, and "earlier in the tile" is
   (warp, k, lane) order);
2. for each k, the lanes holding one digit find each other (``match.any``); the highest
   of them adds their number to its warp's count of the digit in local memory (a local
   atomic, returning the count before) and passes that count to the others
   (``shfl.sync``); a key's rank in its warp is that count plus the matching lanes
   below it;
3. one pass over the warps' counts makes them exclusive across warps and gives the
   tile's count of each digit, published at once for the look-back of later tiles;
   one scan of those counts gives each digit's start in the tile;
4. every key goes to its place in the tile in local memory (digit start + its warp's
   offset + its rank) while each work-item walks the look-back of its digits;
5. the tile is written coalesced, each key to its digit's offset + its place.

Per key that is one match, a local atomic for a digit's last lane, one shuffle, one
local write and one local read, and 4-6 barriers a tile, against about 12 local
accesses a key and 26 barriers a tile for the nibble ranking.

Without inline PTX (``WARP_PTX=0``, any OpenCL device) the three warp instructions are
done through local memory and barriers: far slower, but the same ranking, so that the
kernel is tested on CPUs too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..runtime.devices import Device

#: a warp's lanes (NVIDIA)
WARP = 32

MATCH = r"""
#define NW (WG / 32)
#define PERD (RADIX / WG)
#if WARP_PTX
uint match_any(const uint d, __local uint *xch)
{
    uint m;
    asm volatile("match.any.sync.b32 %0, %1, 0xffffffff;" : "=r"(m) : "r"(d));
    return m;
}
uint shfl_idx(const uint v, const uint src, __local uint *xch)
{
    uint r;
    asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                 : "=r"(r) : "r"(v), "r"(src));
    return r;
}
uint lanes_below(void)
{
    uint m;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
    return m;
}
#else
/* (every work-item of the group calls these: their barriers are uniform) */
uint match_any(const uint d, __local uint *xch)
{
    const int lid = get_local_id(0), base = lid & ~31;
    xch[lid] = d;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint m = 0;
    for (int i = 0; i < 32; ++i)
        m |= (uint)(xch[base + i] == d) << i;
    barrier(CLK_LOCAL_MEM_FENCE);
    return m;
}
uint shfl_idx(const uint v, const uint src, __local uint *xch)
{
    const int lid = get_local_id(0);
    xch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint r = xch[(lid & ~31) + src];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
uint lanes_below(void)
{
    return (1u << (get_local_id(0) & 31)) - 1u;
}
#endif
#if HAS_VALUES
#define DIGIT_KV(k, v) DIGIT_OF(k, v)
#else
#define DIGIT_KV(k, v) DIGIT_OF(k, 0)
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_radix_onesweep(__global const SRC_T *restrict keys,
                       __global const uint *restrict vals,
                       __global const uint *restrict starts, __global KT *restrict keys_out,
                       __global uint *restrict vals_out, __global uint *restrict state,
                       const int shift, const int parity, const int out_kind,
                       const int descending, const int kind, const int canon,
                       const long n, const long tiles)
{
    __local KT lk[TILE];
    __local uint lv[HAS_VALUES ? TILE : 1];
    __local uint wcount[NW * RADIX];  /* a warp's count of each digit, then its offset */
    __local uint tstart[PAD(RADIX)];  /* the tile's count of each digit, then its start */
    __local uint sums[2 * WG];
    __local uint off[RADIX];
    __local uint xch[WARP_PTX ? 1 : WG];
    __local uint tile_id;
    const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
    const int by_row = 0;
    const long rowlen = 1;
    if (lid == 0)
        tile_id = atomic_inc(&state[parity]);
    for (int e = lid; e < NW * RADIX; e += WG)
        wcount[e] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const long tile = tile_id, first = tile * TILE;
    const int valid = (int)min((long)TILE, n - first);
    const int mine = warp * 32 * PER + lane;  /* (the item of k = 0) */
    /* (a key's position, its payload, is read, or made, only when the key is
       placed: no register holds it through the ranking) */
    KT key[PER];
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        const int j = mine + 32 * k;
        if (j < valid) {
#if FROM_SRC
            key[k] = to_key(keys[first + j], kind, descending, canon);
#else
            key[k] = keys[first + j];
#endif
        }
    }
#if FROM_SRC
#define VAL_AT(j) ((uint)(first + (j)))
#else
#define VAL_AT(j) vals[first + (j)]
#endif
    __global uint *st = state + ST_HEAD + (long)parity * tiles * RADIX;
    __global const uint *start = starts + (shift >> 3) * RADIX;
#if SPEC
    /* a pass whose digit is the same in every key (see fl_radix_onesweep) copies its
       tile to its own place */
    __local int same;
    if (lid == 0) {  /* (the tile's first key is work-item 0's first) */
        const uint d = DIGIT_KV(key[0], VAL_AT(0));
        same = start[d] == 0 && (d == RADIX - 1 || start[d + 1] == (uint)n);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (same) {
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const int j = mine + 32 * k;
            if (j < valid) {
                keys_out[first + j] = OUT_KEY(key[k]);
#if HAS_VALUES
                vals_out[first + j] = VAL_AT(j);
#endif
            }
        }
        zero_next(state, parity, tiles, tile, lid);
        return;
    }
#endif
    /* each key's rank among the keys of its digit before it in its warp (items past
       the end: digit RADIX, counted nowhere) */
    const uint below = lanes_below();
    uint rank[(PER + 1) / 2];  /* (two 16-bit ranks a word: below 32 * PER) */
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        const uint d = mine + 32 * k < valid ? DIGIT_KV(key[k], VAL_AT(mine + 32 * k))
                                            : RADIX;
        const uint peers = match_any(d, xch);
        const uint last = 31 - clz(peers);
        uint before = 0;
        if (lane == last && d < RADIX)
            before = atomic_add(&wcount[warp * RADIX + d], popcount(peers));
        const uint r = shfl_idx(before, last, xch) + popcount(peers & below);
        rank[k >> 1] = k & 1 ? rank[k >> 1] | r << 16 : r;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* the warps' counts made exclusive across warps; the tile's counts published */
    uint count[PERD];
#pragma unroll
    for (int i = 0; i < PERD; ++i) {
        const int d = lid * PERD + i;
        uint run = 0;
        for (int w = 0; w < NW; ++w) {
            const uint c = wcount[w * RADIX + d];
            wcount[w * RADIX + d] = run;
            run += c;
        }
        count[i] = run;
        tstart[PAD(d)] = run;
        publish(st, tile, d, run, start[d]);
    }
    block_scan(tstart, PERD, sums);
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        const int j = mine + 32 * k;
        if (j < valid) {
#if HAS_VALUES
            const uint v = VAL_AT(j);
#else
            const uint v = 0;
#endif
            const uint d = DIGIT_KV(key[k], v);
            const uint at = tstart[PAD(d)] + wcount[warp * RADIX + d]
                            + ((rank[k >> 1] >> (16 * (k & 1))) & 0xFFFF);
            lk[at] = key[k];
#if HAS_VALUES
            lv[at] = v;
#endif
        }
    }
#pragma unroll
    for (int i = 0; i < PERD; ++i) {
        const int d = lid * PERD + i;
        const uint before = tile > 0 ? look_back(st, tile, d, count[i]) : start[d];
        off[d] = before - tstart[PAD(d)];  /* (uint arithmetic wraps back into range) */
    }
    zero_next(state, parity, tiles, tile, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int m = 0; m < PER; ++m) {
        const int j = m * WG + lid;
        if (j < valid) {
            const KT k = lk[j];
#if HAS_VALUES
            const uint v = lv[j];
            const uint pos = off[DIGIT_KV(k, v)] + (uint)j;
            vals_out[pos] = v;
#else
            const uint pos = off[DIGIT_KV(k, 0)] + (uint)j;
#endif
            keys_out[pos] = OUT_KEY(k);
        }
    }
}
"""


def match_local_bytes(group: int, per: int, key_size: int, values: bool, ptx: bool) -> int:
    """The match-ranked pass kernel's local memory."""
    words = ((group // WARP) * 256 + 2 * (256 + 256 // 32) + 2 * group
             + (0 if ptx else group) + 8)
    return group * per * (key_size + (4 if values else 0)) + 4 * words


def warp_ptx(device: Device) -> bool:
    """Whether ``device`` takes inline PTX warp instructions (NVIDIA's OpenCL GPUs)."""
    return (device.type != "cpu" and device.backend == "opencl"
            and "nvidia" in (device.vendor or "").lower())


__all__ = ["MATCH", "WARP", "match_local_bytes", "warp_ptx"]
