"""Stream compaction: the positions of the true bytes of a device mask, in order.

``x[mask]``, ``nonzero``, ``flatnonzero`` and ``argwhere`` all start here.  The
mask is split into blocks, one per work-group: a first kernel counts each
block's true bytes, a second gives each group its first output position (the
sum of the counts before it) and writes the positions of its block.  A mask of
one block needs only the second kernel.  On a GPU a work-group scans its block
in chunks through local memory (reading the mask by words, staging the chunk's
positions so that they are written coalesced); on a CPU a work-group is one
work-item that walks its block with a branch-free loop.

The kernels are two programs of one source each (a shared prelude), compiled
through the kernel cache (:class:`fuseloop.cache.SourceKernel`: memory and disk
caches, compile workers, ``fl.stats()``) and launched through
:func:`fuseloop.launching.enqueue`, like every generated kernel.

These two kernels replace pyopencl's generic scan (``copy_if``'s pattern), which
launches three kernels and does more host work per call: it took 3 to 8 times as
long on PoCL's CPU device and 2 to 5.5 times as long on the H200 (see
``docs/design.md``).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import caches as _caches
from .. import launching
from ..backends import backend_for
from ..cache import KernelPlan, SourceKernel
from ..evaluate import allocate
from ..expr.nodes import Storage
from ..runtime.devices import Device
from ..runtime.transfer import read
from ..stats import increment as _increment  # (fl.stats, a function, shadows the module)

_PRELUDE = r"""
/* WG: work-items per group; PER: consecutive mask bytes per work-item and chunk */

/* read a work-item's bytes as 32-bit words where byte k of a word is the k-th byte */
#if defined(__ENDIAN_LITTLE__) && PER % 4 == 0
#define BY_WORDS 1
#else
#define BY_WORDS 0
#endif

/* how a pointer to local memory is declared as a parameter (a CUDA build: plainly) */
#ifndef FL_LOCAL_ARG
#define FL_LOCAL_ARG __local
#endif

/* the top bit of each byte of the result is set where that byte of w is nonzero */
inline uint nonzero_bytes(const uint w)
{
    return (((w & 0x7F7F7F7Fu) + 0x7F7F7F7Fu) | w) & 0x80808080u;
}

#if WG > 1
/* the sum of v over the work-group, returned to every work-item; part may be
   reused as soon as this returns */
long group_sum(const long v, FL_LOCAL_ARG long *part)
{
    const int lid = get_local_id(0);
    part[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int width = WG / 2; width > 0; width >>= 1) {
        if (lid < width)
            part[lid] += part[lid + width];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const long sum = part[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return sum;
}
#endif
"""

_COUNT = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_mask_count(__global const uchar *restrict mask,
                         __global long *restrict counts, const long n, const long block)
{
    const long start = (long)get_group_id(0) * block;
    const long stop = min(start + block, n);
    const int lid = get_local_id(0);
    long c = 0;
#if WG > 1
    /* 16 bytes per load (a block starts on a whole chunk, so on a 16-byte boundary) */
    const long whole = start + ((stop - start) & ~15L);
    for (long i = start + 16L * lid; i < whole; i += 16L * WG) {
        const uint4 w = *(__global const uint4 *)(mask + i);
        c += popcount(nonzero_bytes(w.x)) + popcount(nonzero_bytes(w.y))
             + popcount(nonzero_bytes(w.z)) + popcount(nonzero_bytes(w.w));
    }
    for (long i = whole + lid; i < stop; i += WG)
        c += mask[i] != 0;
    __local long part[WG];
    c = group_sum(c, part);
#else
    for (long i = start; i < stop; ++i)
        c += mask[i] != 0;
#endif
    if (lid == 0)
        counts[get_group_id(0)] = c;
}
"""

_COMPACT = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_mask_compact(__global const uchar *restrict mask,
                           __global const long *restrict counts,
                           __global long *restrict out, __global long *restrict total,
                           const long n, const long block)
{
    const long g = get_group_id(0);
    const long groups = get_num_groups(0);
    const int lid = get_local_id(0);
    const long start = g * block;
    const long stop = min(start + block, n);

    /* this group's first position: the true bytes of the blocks before it */
    long base = 0;
    for (long h = lid; h < g; h += WG)
        base += counts[h];
#if WG > 1
    __local long part[WG];
    base = group_sum(base, part);

    __local int scan[WG];
    __local int staged[WG * PER];  /* the chunk's positions, relative to its start */
    for (long first = start; first < stop; first += (long)WG * PER) {
        const long mine = first + (long)lid * PER;
        int c = 0;
#if BY_WORDS
        /* PER / 4 words, each with the top bit of every nonzero byte set */
        uint flags[PER / 4];
        for (int k = 0; k < PER / 4; ++k) {
            const long at = mine + 4 * k;
            uint w = 0;
            if (at + 4 <= stop)
                w = *(__global const uint *)(mask + at);
            else
                for (int b = 0; b < 4; ++b)
                    if (at + b < stop && mask[at + b] != 0)
                        w |= 1u << (8 * b);
            flags[k] = nonzero_bytes(w);
            c += popcount(flags[k]);
        }
#else
        for (int k = 0; k < PER; ++k)
            c += (mine + k < stop && mask[mine + k] != 0);
#endif
        scan[lid] = c;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int off = 1; off < WG; off <<= 1) {  /* inclusive, Hillis-Steele */
            const int v = lid >= off ? scan[lid - off] : 0;
            barrier(CLK_LOCAL_MEM_FENCE);
            scan[lid] += v;
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        /* staged in local memory first, so that consecutive work-items write
           consecutive positions to global memory */
        int at = scan[lid] - c;
        const int own = lid * PER;
#if BY_WORDS
        for (int k = 0; k < PER / 4; ++k)
            for (int b = 0; b < 4; ++b)
                if ((flags[k] >> (8 * b + 7)) & 1u)
                    staged[at++] = own + 4 * k + b;
#else
        for (int k = 0; k < PER; ++k)
            if (mine + k < stop && mask[mine + k] != 0)
                staged[at++] = own + k;
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        const int found = scan[WG - 1];
        for (int j = lid; j < found; j += WG)
            out[base + j] = first + staged[j];
        base += found;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#else
    /* Every element is written at the current position, which advances past the
       true ones only: no branch.  A write at or after this block's last position
       would land in the next block's, so the loop stops there; a single block has
       no next one (and its position never passes the element's own index). */
    const long end = groups > 1 ? base + counts[g] : n;
    long i = start;
    for (; i < stop && base < end; ++i) {
        out[base] = i;
        base += mask[i] != 0;
    }
#endif
    if (g == groups - 1 && lid == 0)
        total[0] = base;
}
"""


@dataclass(frozen=True)
class Layout:
    """How a device's work-groups split a mask."""

    group: int  # work-items per work-group (a power of two)
    per_item: int  # consecutive mask bytes per work-item and chunk (when group > 1)
    min_block: int  # the fewest mask bytes per work-group before another is used
    max_groups: int


# On a CPU one work-item per group walks its block: the branch-free loop
# compacts about 1 ns per byte on this project's PoCL machine, and below 2^15
# bytes a second launch costs more than a second core saves.  On a GPU 256
# work-items scan chunks of 8 bytes each.  Both measured with
# benchmarks/bench_masks.py --layouts (figures in benchmarks/NOTES.md).
CPU_MIN_BLOCK = 1 << 15
CPU_GROUPS_PER_UNIT = 4
GPU_GROUP = 256
GPU_PER_ITEM = 8
GPU_MIN_BLOCK = 1 << 13
GPU_MAX_GROUPS = 4096


def layout_for(device: Device) -> Layout:
    """The :class:`Layout` used on ``device``."""
    if device.type == "cpu":
        return Layout(1, 1, CPU_MIN_BLOCK, device.compute_units * CPU_GROUPS_PER_UNIT)
    group = GPU_GROUP
    while group > device.max_work_group_size:
        group //= 2
    return Layout(group, GPU_PER_ITEM, GPU_MIN_BLOCK, GPU_MAX_GROUPS)


def _plan(name: str, body: str, args: list[str], layout: Layout) -> KernelPlan:
    """A kernel's plan: buffers ``in<k>``/``out<k>``, then the int64 scalars ``n`` and
    ``block`` (``s0``, ``s1``); ``p[0]`` work-groups of ``layout.group``."""
    return KernelPlan(
        name=name, source=_PRELUDE + body, arg_names=[*args, "s0", "s1"],
        gsize=["p[0]"], lsize=[str(layout.group)],
        build_options=[f"-DWG={layout.group}", f"-DPER={layout.per_item}"],
        arg_dtypes=[*([None] * len(args)), "int64", "int64"])


# (group, items per work-item) -> (count kernel, compact kernel): their plans and
# digests, not compiled kernels (those are in the kernel cache)
_kernels: dict[tuple[int, int], tuple[SourceKernel, SourceKernel]] = {}
_kernels_lock = threading.Lock()
_caches.register("ops.compaction.kernels", _kernels.clear, lambda: len(_kernels),
                 why="one per work-group layout (one layout per device)")


def _kernels_for(layout: Layout) -> tuple[SourceKernel, SourceKernel]:
    key = (layout.group, layout.per_item)
    found = _kernels.get(key)
    if found is None:
        with _kernels_lock:
            found = _kernels.get(key)
            if found is None:
                found = _kernels[key] = (
                    SourceKernel(_plan("fuseloop_mask_count", _COUNT, ["in0", "out0"],
                                       layout)),
                    SourceKernel(_plan("fuseloop_mask_compact", _COMPACT,
                                       ["in0", "in1", "out0", "out1"], layout)))
    return found


# (device index, work-groups, group, items per work-item) -> [count plan or None,
# compact plan, the last call's (n, block) and its scalar arguments]: kept while
# their kernels are in the kernel cache (as launching.launch_cached keeps a
# structure's plan), so that a repeated compaction skips the look-ups, and one of
# the same size passes the same scalar objects, which the launcher does not set again
_plans: dict[tuple[int, int, int, int], list[Any]] = {}
MAX_PLANS = 64
_caches.register("ops.compaction.plans", _plans.clear, lambda: len(_plans), MAX_PLANS)


def _plans_for(device: Device, layout: Layout, groups: int) -> tuple[list[Any], int]:
    """The kept entry of :data:`_plans` and the memory-cache hits to count."""
    key = (device.index, groups, layout.group, layout.per_item)
    found = _plans.get(key)
    if found is not None and found[1].compiled.in_cache \
            and (found[0] is None or found[0].compiled.in_cache):
        return found, 1
    count_kernel, compact_kernel = _kernels_for(layout)
    count = None
    if groups > 1:
        count = launching.plan_for(count_kernel.get(device), (groups,), 0, 0, device)
    compact = launching.plan_for(compact_kernel.get(device), (groups,), 0, 0, device)
    if len(_plans) >= MAX_PLANS:
        _plans.clear()
    found = _plans[key] = [count, compact, None, None]
    return found, 0  # (the look-ups counted theirs)


def blocks(n: int, layout: Layout) -> tuple[int, int]:
    """(number of work-groups, mask bytes per group) for a mask of ``n`` bytes."""
    groups = max(1, min(layout.max_groups, n // layout.min_block))
    block = -(-n // groups)
    if layout.group > 1:
        # whole chunks (only the last group's last one is partial), starting on 16-byte
        # boundaries (the count kernel reads 16 bytes at once)
        unit = math.lcm(layout.group * layout.per_item, 16)
        block = -(-block // unit) * unit
    return -(-n // block), block


def true_positions(mask: Any, n: int, device: Device) -> tuple[Storage, int]:
    """The positions (int64) of the nonzero bytes among the first ``n`` of the
    buffer ``mask``, ascending, in a new storage with room for ``n``, and how
    many there are (read back: the caller needs it for the result's shape)."""
    layout = layout_for(device)
    groups, block = blocks(n, layout)
    kept, hit = _plans_for(device, layout, groups)
    count_plan, compact_plan, sizes, scalars = kept
    if sizes != (n, block):
        scalars = [np.int64(n), np.int64(block)]
        kept[2:] = (n, block), scalars  # (one store: other threads see both or neither)
    out = allocate(n * 8, device)
    total = allocate(8, device)
    counts = allocate(groups * 8, device) if groups > 1 else out  # (unread when one)
    source = Storage(mask, n, device)
    # (launched now, not deferred: deferred launches go first, and one may compute
    # the mask; the in-order queue runs the count before the compaction)
    # (counted as one scan, not as kernels launched: see docs/api.md)
    if count_plan is not None:
        launching.enqueue(count_plan, [counts], [source], scalars, False, device, hit, 0)
    launching.enqueue(compact_plan, [out, total], [source, counts], scalars, False, device,
                      hit, 0)
    _increment("scans")
    found = np.empty(1, np.int64)
    read(found, total.buffer, device)
    count = int(found[0])
    return out, count


def _positions_storage(out: Storage, count: int, n: int, device: Device) -> Storage:
    """``out`` cut to ``count`` positions (a buffer of its own when much is unused)."""
    if count == n:
        return out
    if count == 0:
        return allocate(0, device)
    if (n - count) * 8 > SPARE_BYTES_KEPT:
        # a mask selecting few of many elements keeps little memory
        fit = allocate(count * 8, device)
        backend_for(device).copy(device, fit.buffer, out.buffer, count * 8)
        return fit
    return Storage(out.buffer, count * 8, device)


# unused position bytes a result may keep rather than be copied to a buffer of its own
SPARE_BYTES_KEPT = 1 << 16


def compact(mask: Any, n: int, device: Device) -> tuple[Storage, int]:
    """:func:`true_positions`, with the result's buffer fitted to its length."""
    out, count = true_positions(mask, n, device)
    return _positions_storage(out, count, n, device), count


__all__ = ["compact", "true_positions"]
