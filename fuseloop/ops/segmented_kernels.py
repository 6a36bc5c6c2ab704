"""Scans by key as fuseloop's own kernels: the segmented scans on backends without
pyopencl's ``GenericScanKernel`` (CUDA).

CuPy, which gives the CUDA backend its sorts and plain scans (CUB), offers no scan by
key and no scan with a custom operator, so the segmented scan is three hand-written
kernels in OpenCL C (built for CUDA through the backend's prelude, like the mask
compaction's), compiled through the kernel cache and launched through
:func:`fuseloop.launching.enqueue`.  A reduce-then-scan over tiles of ``WG * PER``
elements (a work-group each, ``PER`` consecutive elements per work-item):

1. ``reduce``: each tile's running value at its end and whether a segment starts in it;
2. ``carry``: one work-group scans those (each work-item a run of tiles, then the
   group) into the value entering each tile;
3. ``apply``: each tile scans again from its carry and writes the results.

The scan is segmented by a pair operator: ``(a, fa)`` then ``(b, fb)`` combine to
``(fb ? b : op(a, b), fa | fb)``, where a flag says a segment starts in the range (a
key differing from the one before it, as pyopencl's ``is_segment_start_expr``).  The
exclusive scan writes ``op(initial, value before the element)``, the value before a
segment's first element being the neutral element.  Results are the same as
:mod:`fuseloop.ops.segmented`'s on OpenCL (the order of floating-point sums differs).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .. import caches as _caches
from .. import launching
from ..array import Array
from ..cache import KernelPlan, SourceKernel
from ..dtypes import c_type_name
from ..evaluate import allocate
from ..runtime.devices import Device

#: work-items per work-group and consecutive elements per work-item on a GPU ...
GPU_GROUP, GPU_PER_ITEM = 256, 8
#: ... and on a CPU device (where a work-group's barriers cost more than its width gains)
CPU_GROUP, CPU_PER_ITEM = 4, 64

_SOURCE = r"""
#ifndef FL_LOCAL_ARG
#define FL_LOCAL_ARG __local
#endif
typedef KEY_T K;
typedef VALUE_T V;
typedef SCAN_T T;
#define NEUTRAL (NEUTRAL_VALUE)
#define OP(a, b) (OP_EXPR)
#define SEG(a, b, fb) ((fb) ? (b) : OP(a, b))

/* The exclusive segmented scan of (v, f) over the work-group: the value entering this
   work-item; *pf: whether a segment starts in the work-items before it; *tv, *tf: the
   group's total.  vals and flags may be reused once this returns. */
T group_scan(T v, int f, FL_LOCAL_ARG T *vals, FL_LOCAL_ARG int *flags, int *pf, T *tv,
             int *tf)
{
    const int lid = get_local_id(0);
    vals[lid] = v;
    flags[lid] = f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int off = 1; off < WG; off <<= 1) {  /* inclusive, Hillis-Steele */
        T pv = NEUTRAL;
        int pfl = 0;
        if (lid >= off) {
            pv = vals[lid - off];
            pfl = flags[lid - off];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid >= off) {
            vals[lid] = SEG(pv, vals[lid], flags[lid]);
            flags[lid] |= pfl;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const T before = lid > 0 ? vals[lid - 1] : NEUTRAL;
    *pf = lid > 0 ? flags[lid - 1] : 0;
    *tv = vals[WG - 1];
    *tf = flags[WG - 1];
    barrier(CLK_LOCAL_MEM_FENCE);
    return before;
}

/* this work-item's elements reduced: the running value at their end, and whether a
   segment starts among them */
T items_total(__global const K *keys, __global const V *src, long first, long n, int *f)
{
    T acc = NEUTRAL;
    int starts = 0;
    for (int k = 0; k < PER; ++k) {
        const long i = first + k;
        if (i < n) {
            const int st = i == 0 || keys[i] != keys[i - 1];
            const T v = (T) src[i];
            acc = st ? v : OP(acc, v);
            starts |= st;
        }
    }
    *f = starts;
    return acc;
}
"""

# each kernel built with the common part only (smaller builds)
_REDUCE = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_segscan_reduce(__global const K *restrict keys, __global const V *restrict src,
                       __global T *restrict agg, __global int *restrict aggf, const long n)
{
    const long tile = get_group_id(0);
    const long first = tile * (long)(WG * PER) + (long)get_local_id(0) * PER;
    int f;
    const T acc = items_total(keys, src, first, n, &f);
    __local T vals[WG];
    __local int flags[WG];
    int pf, tf;
    T tv;
    group_scan(acc, f, vals, flags, &pf, &tv, &tf);
    if (get_local_id(0) == 0) {
        agg[tile] = tv;
        aggf[tile] = tf;
    }
}
"""

_CARRY = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_segscan_carry(__global const T *restrict agg, __global const int *restrict aggf,
                      __global T *restrict carry, const long tiles)
{
    const long per = (tiles + WG - 1) / WG;
    const long first = (long)get_local_id(0) * per;
    const long stop = min(first + per, tiles);
    T acc = NEUTRAL;
    int f = 0;
    for (long t = first; t < stop; ++t) {
        acc = SEG(acc, agg[t], aggf[t]);
        f |= aggf[t];
    }
    __local T vals[WG];
    __local int flags[WG];
    int pf, tf;
    T tv;
    acc = group_scan(acc, f, vals, flags, &pf, &tv, &tf);
    for (long t = first; t < stop; ++t) {
        carry[t] = acc;
        acc = SEG(acc, agg[t], aggf[t]);
    }
}
"""

_APPLY = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fl_segscan_apply(__global const K *restrict keys, __global const V *restrict src,
                      __global const T *restrict carry, __global T *restrict dst,
                      const T init, const long n)
{
    const long tile = get_group_id(0);
    const long first = tile * (long)(WG * PER) + (long)get_local_id(0) * PER;
    int f;
    const T acc = items_total(keys, src, first, n, &f);
    __local T vals[WG];
    __local int flags[WG];
    int pf, tf;
    T tv;
    const T before = group_scan(acc, f, vals, flags, &pf, &tv, &tf);
    /* the value entering this work-item: its group's prefix, after the tile's carry
       unless a segment starts in between */
    T run = pf ? before : OP(carry[tile], before);
    for (int k = 0; k < PER; ++k) {
        const long i = first + k;
        if (i < n) {
            const int st = i == 0 || keys[i] != keys[i - 1];
            const T v = (T) src[i];
            const T prev = st ? NEUTRAL : run;
            run = st ? v : OP(run, v);
            dst[i] = EXCLUSIVE ? OP(init, prev) : run;
        }
    }
}
"""


def _op_expr(op: str, floating: bool) -> str:
    if op == "add":
        return "(a) + (b)"
    if op == "mul":
        return "(a) * (b)"
    cmp = ">" if op == "max" else "<"
    nan = "(a) != (a) || " if floating else ""  # (numpy's maximum: NaN propagates)
    return f"({nan}(a) {cmp} (b)) ? (a) : (b)"


# (op, key, value and scan dtypes, exclusive, group, per item) -> the three kernels
_KERNELS: dict[tuple, tuple[SourceKernel, SourceKernel, SourceKernel]] = {}
_lock = threading.Lock()
_caches.register("ops.segmented_kernels.kernels", _KERNELS.clear, lambda: len(_KERNELS),
                 why="per operation, dtypes, scan kind and work-group layout")


def _kernels(op: str, kdt: np.dtype, vdt: np.dtype, sdt: np.dtype, exclusive: bool,
             group: int, per: int) -> tuple[SourceKernel, SourceKernel, SourceKernel]:
    key = (op, kdt, vdt, sdt, exclusive, group, per)
    found = _KERNELS.get(key)
    if found is not None:
        return found
    from .segmented import _neutral

    source = _SOURCE
    for name, value in (("KEY_T", c_type_name(kdt)), ("VALUE_T", c_type_name(vdt)),
                        ("SCAN_T", c_type_name(sdt)), ("NEUTRAL_VALUE", _neutral(op, sdt)),
                        ("OP_EXPR", _op_expr(op, sdt.kind == "f"))):
        source = source.replace(name, value)
    options = [f"-DWG={group}", f"-DPER={per}"]
    s = sdt.name

    def plan(name: str, body: str, args: list[str], dtypes: list[str | None],
             gsize: str, extra: tuple[str, ...] = ()) -> KernelPlan:
        return KernelPlan(name=name, source=source + body, arg_names=args, gsize=[gsize],
                          lsize=[str(group)], build_options=[*options, *extra],
                          arg_dtypes=dtypes)

    made = (
        SourceKernel(plan("fl_segscan_reduce", _REDUCE, ["in0", "in1", "out0", "out1", "p0"],
                          [None, None, None, None, "int64"], "p[1]")),
        SourceKernel(plan("fl_segscan_carry", _CARRY, ["in0", "in1", "out0", "p1"],
                          [None, None, None, "int64"], "1")),
        SourceKernel(plan("fl_segscan_apply", _APPLY,
                          ["in0", "in1", "in2", "out0", "s0", "p0"],
                          [None, None, None, None, s, "int64"], "p[1]",
                          (f"-DEXCLUSIVE={int(exclusive)}",))))
    with _lock:
        return _KERNELS.setdefault(key, made)


def layout_for(device: Device) -> tuple[int, int]:
    """(work-items per group, elements per work-item) on ``device``."""
    if device.type == "cpu":
        return CPU_GROUP, CPU_PER_ITEM
    group = GPU_GROUP
    while group > device.max_work_group_size:
        group //= 2
    return group, GPU_PER_ITEM


def scan(keys: Array, values: Array, op: str, sdt: np.dtype, exclusive: bool,
         initial: Any) -> Array:
    """The segmented scan in ``sdt`` of contiguous ``keys`` and ``values`` (evaluated,
    one device; see :func:`fuseloop.ops.segmented._scan`)."""
    dev, n = keys.device, keys.shape[0]
    out = Array._concrete(allocate(n * sdt.itemsize, dev), sdt, (n,))
    if not n:
        return out
    group, per = layout_for(dev)
    tiles = -(-n // (group * per))
    reduce_k, carry_k, apply_k = _kernels(op, keys.dtype, values.dtype, sdt, exclusive,
                                          group, per)
    params = (n, tiles)
    agg = allocate(tiles * sdt.itemsize, dev)
    aggf = allocate(tiles * 4, dev)
    carry = allocate(tiles * sdt.itemsize, dev)
    k, v, o = keys._storage, values._storage, out._storage
    assert k is not None and v is not None and o is not None  # (concrete: see _scan)
    init = [sdt.type(initial)]
    for kernel, ins, outs, scalars in (
            (reduce_k, [k, v], [agg, aggf], []), (carry_k, [agg, aggf], [carry], []),
            (apply_k, [k, v, carry], [o], init)):
        plan = launching.plan_for(kernel.get(dev), params, 0, 0, dev)
        assert plan is not None  # (only a one-output plan can be refused)
        # (not counted as kernels launched, as pyopencl's scans are not on OpenCL)
        launching.enqueue(plan, outs, ins, scalars, False, dev, 0, 0)
    return out


__all__ = ["layout_for", "scan"]
