"""``reduce_by_key`` on a CPU device: two hand-written kernels instead of the
segmented scan and a compaction.

pyopencl's scan runs several kernels with little work each on PoCL and took
8-20x numpy's ``reduceat`` time there.  Here the keys are split into one block
per work-group (one work-item each, as the CPU compaction does).  The first
kernel walks a block: every segment that *starts* in the block is reduced whole
by its work-item, past the block's end if need be (the tail of a segment begun
in an earlier block is skipped), its key and result written at the block's own
offset of two buffers with room for one result per key, and the block's count
of segments written last.  A second kernel packs the blocks' results one after
the other.  The keys are read once (a first pass counting the segments cost a
third of the time).  A segment's values are read 8 at a time while the next 8
keys all equal its key (8 partial results folded at the end, as numpy's pairwise
``add.reduce`` also splits a sum), then one at a time.  Results equal the scan's
for every op and dtype but for the order in which a float sum or product is
rounded.
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
from ..expr.nodes import Storage
from ..runtime.devices import Device
from ..runtime.transfer import read

_UINT8 = np.dtype(np.uint8)
_OPS = {"add": 0, "mul": 1, "max": 2, "min": 3}

_PRELUDE = r"""
#ifdef FL_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define KT8 CAT(KT, 8)
#define RT8 CAT(RT, 8)
#define CONVERT_RT8 CAT(convert_, RT8)

/* COMB: op on two scalars; VCOMB: on two vectors.  Float max and min propagate NaN
   as numpy's maximum does (the first operand's NaN, else the second's). */
#if OP == 0
#define COMB(a, b) ((a) + (b))
#define VCOMB(a, b) ((a) + (b))
#elif OP == 1
#define COMB(a, b) ((a) * (b))
#define VCOMB(a, b) ((a) * (b))
#elif FLOATING
#define CMP(a, b) ((OP == 2) ? ((a) > (b)) : ((a) < (b)))
#define COMB(a, b) (((a) != (a) || CMP(a, b)) ? (a) : (b))
#define VCOMB(a, b) select((b), (a), ((a) != (a)) | CMP(a, b))
#elif OP == 2
#define COMB(a, b) max((a), (b))
#define VCOMB(a, b) max((a), (b))
#else
#define COMB(a, b) min((a), (b))
#define VCOMB(a, b) min((a), (b))
#endif
"""

_REDUCE = r"""
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void fuseloop_rbk_reduce(__global const KT *restrict keys, __global const VT *restrict vals,
                         __global KT *restrict part_keys, __global RT *restrict part_vals,
                         __global long *restrict counts, const long n, const long block)
{
    const long g = get_group_id(0);
    const long start = g * block;
    const long stop = min(start + block, n);
    long at = start;  /* (a block has at most as many segments as keys) */
    long i = start;
    if (i > 0) {  /* the rest of a segment begun in an earlier block is not ours */
        const KT before = keys[i - 1];
        const KT8 before8 = (KT8)(before);
        while (i + 8 <= stop && all(vload8(0, keys + i) == before8))
            i += 8;
        while (i < stop && keys[i] == before)
            ++i;
    }
    while (i < stop) {  /* i starts a segment */
        const KT k = keys[i];
        const KT8 k8 = (KT8)(k);
        RT acc = (RT)vals[i];
        ++i;
        if (i + 8 <= n && all(vload8(0, keys + i) == k8)) {
            RT8 acc8 = CONVERT_RT8(vload8(0, vals + i));
            i += 8;
            while (i + 8 <= n && all(vload8(0, keys + i) == k8)) {
                acc8 = VCOMB(acc8, CONVERT_RT8(vload8(0, vals + i)));
                i += 8;
            }
            const CAT(RT, 4) a4 = VCOMB(acc8.lo, acc8.hi);
            const CAT(RT, 2) a2 = VCOMB(a4.lo, a4.hi);
            acc = COMB(acc, COMB(a2.x, a2.y));
        }
        while (i < n && keys[i] == k) {
            acc = COMB(acc, (RT)vals[i]);
            ++i;
        }
        part_keys[at] = k;
        part_vals[at] = acc;
        ++at;
    }
    counts[g] = at - start;
}
"""

_PACK = r"""
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void fuseloop_rbk_pack(__global const KT *restrict part_keys,
                       __global const RT *restrict part_vals,
                       __global const long *restrict counts,
                       __global KT *restrict out_keys, __global RT *restrict out_vals,
                       const long n, const long block)
{
    const long g = get_group_id(0);
    long at = 0;  /* this block's first output: the segments of the blocks before it */
    for (long h = 0; h < g; ++h)
        at += counts[h];
    const long start = g * block;
    const long c = counts[g];
    for (long j = 0; j < c; ++j) {
        out_keys[at + j] = part_keys[start + j];
        out_vals[at + j] = part_vals[start + j];
    }
}
"""

_TAIL = r"""
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void fuseloop_sbk_tail(__global const KT *restrict keys, __global const VT *restrict vals,
                       __global RT *restrict tails, __global int *restrict open,
                       const long n, const long block)
{
    const long g = get_group_id(0);
    const long start = g * block;
    const long stop = min(start + block, n);
    const KT last = keys[stop - 1];
    const KT8 last8 = (KT8)(last);
    long j = stop - 1;  /* back to the block's last segment start (or its first key) */
    while (j - 8 >= start && all(vload8(0, keys + j - 8) == last8))
        j -= 8;
    while (j > start && keys[j - 1] == last)
        --j;
    /* whether the block's last segment began in an earlier block */
    open[g] = j == start && start > 0 && keys[start] == keys[start - 1];
    RT acc = (RT)vals[j];
    long i = j + 1;
    if (i + 8 <= stop) {  /* (8 partial results, as reduce_by_key's) */
        RT8 acc8 = CONVERT_RT8(vload8(0, vals + i));
        for (i += 8; i + 8 <= stop; i += 8)
            acc8 = VCOMB(acc8, CONVERT_RT8(vload8(0, vals + i)));
        const CAT(RT, 4) a4 = VCOMB(acc8.lo, acc8.hi);
        const CAT(RT, 2) a2 = VCOMB(a4.lo, a4.hi);
        acc = COMB(acc, COMB(a2.x, a2.y));
    }
    for (; i < stop; ++i)
        acc = COMB(acc, (RT)vals[i]);
    tails[g] = acc;
}
"""

_SCAN = r"""
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void fuseloop_sbk_scan(__global const KT *restrict keys, __global const VT *restrict vals,
                       __global const RT *restrict tails, __global const int *restrict open,
                       __global RT *restrict dst, const long n, const long block,
                       const RT init)
{
    const long g = get_group_id(0);
    const long start = g * block;
    const long stop = min(start + block, n);
    RT acc = (RT)vals[start];
    if (start > 0 && keys[start] == keys[start - 1]) {
        /* the running value where the previous block ends: its tail, after those of
           the blocks before it while their last segment began earlier still */
        long h = g - 1;
        RT carry = tails[h];
        while (open[h] && h > 0) {
            --h;
            carry = COMB(tails[h], carry);
        }
#if EXCLUSIVE
        dst[start] = COMB(init, carry);
#endif
        acc = COMB(carry, acc);
    }
#if EXCLUSIVE
    else
        dst[start] = init;
#else
    dst[start] = acc;
#endif
    for (long i = start + 1; i < stop; ++i) {
        const RT v = (RT)vals[i];
        if (keys[i] == keys[i - 1]) {
#if EXCLUSIVE
            dst[i] = COMB(init, acc);
#endif
            acc = COMB(acc, v);
        } else {
#if EXCLUSIVE
            dst[i] = init;
#endif
            acc = v;
        }
#if !EXCLUSIVE
        dst[i] = acc;
#endif
    }
}
"""

# fewest keys per block, and blocks per compute unit (as the CPU compaction:
# below 2^15 keys a second launch costs more than a second core saves)
MIN_BLOCK = 1 << 15
BLOCKS_PER_UNIT = 4

# (op, key, value, result dtypes) -> (count kernel, reduce kernel)
_kernels: dict[tuple, tuple[SourceKernel, SourceKernel]] = {}
_lock = threading.Lock()
_caches.register("ops.segmented_cpu.kernels", _kernels.clear, lambda: len(_kernels),
                 why="one pair per operation and dtypes")


def supported(device: Device, *dtypes: np.dtype) -> bool:
    """Whether :func:`reduce_by_key` runs these dtypes on ``device`` (a CPU OpenCL
    device; booleans, integers, float32 and float64)."""
    return (device.type == "cpu" and getattr(device, "backend", "opencl") == "opencl"
            and all(dt.kind in "biu" or dt in (np.float32, np.float64) for dt in dtypes))


def _plan(name: str, body: str, args: list[str], options: list[str],
          extra: tuple[str, ...] = ()) -> KernelPlan:
    """A kernel's plan: buffers ``args``, then the int64 scalars ``n`` and ``block``
    (``s0``, ``s1``) and scalars of the dtypes ``extra``; ``p[0]`` work-groups of one."""
    scalars = [f"s{k}" for k in range(2 + len(extra))]
    return KernelPlan(name=name, source=_PRELUDE + body, arg_names=[*args, *scalars],
                      gsize=["p[0]"], lsize=["1"], build_options=options,
                      arg_dtypes=[*([None] * len(args)), "int64", "int64", *extra])


def _kernels_for(op: str, kdt: np.dtype, vdt: np.dtype, rdt: np.dtype,
                 scan: int | None = None) -> tuple[SourceKernel, SourceKernel]:
    """The two kernels of a reduction (``scan`` None) or of a scan (1: exclusive)."""
    key = (op, kdt, vdt, rdt, scan)
    found = _kernels.get(key)
    if found is None:
        options = [f"-DKT={c_type_name(kdt)}", f"-DVT={c_type_name(vdt)}",
                   f"-DRT={c_type_name(rdt)}", f"-DOP={_OPS[op]}",
                   f"-DFLOATING={int(rdt.kind == 'f')}", f"-DEXCLUSIVE={int(bool(scan))}"]
        if np.dtype(np.float64) in (kdt, vdt, rdt):
            options.append("-DFL_FP64")
        if scan is None:
            pair = (_plan("fuseloop_rbk_reduce", _REDUCE,
                          ["in0", "in1", "out0", "out1", "out2"], options),
                    _plan("fuseloop_rbk_pack", _PACK,
                          ["in0", "in1", "in2", "out0", "out1"], options))
        else:
            init = str(_UINT8 if rdt == np.bool_ else rdt)
            pair = (_plan("fuseloop_sbk_tail", _TAIL, ["in0", "in1", "out0", "out1"],
                          options),
                    _plan("fuseloop_sbk_scan", _SCAN, ["in0", "in1", "in2", "in3", "out0"],
                          options, (init,)))
        with _lock:
            found = _kernels.get(key)
            if found is None:
                found = _kernels[key] = (SourceKernel(pair[0]), SourceKernel(pair[1]))
    return found


def blocks(n: int, device: Device) -> tuple[int, int]:
    """(number of blocks, keys per block) for ``n`` keys."""
    groups = max(1, min(device.compute_units * BLOCKS_PER_UNIT, n // MIN_BLOCK))
    block = -(-n // groups)
    return -(-n // block), block


def reduce_by_key(kc: Array, vc: Array, op: str, rdt: np.dtype) -> tuple[Array, Array]:
    """``(run keys, reductions)`` of the concrete, contiguous, non-empty 1-D ``kc``
    and ``vc`` (booleans as uint8) on a CPU device; reductions of dtype ``rdt``."""
    dev: Device = kc.device
    n = kc.shape[0]
    kdt = kc.dtype
    reduce_kernel, pack_kernel = _kernels_for(op, kdt, vc.dtype, rdt)
    groups, block = blocks(n, dev)
    scalars = [np.int64(n), np.int64(block)]
    keys, vals = kc._storage, vc._storage  # (contiguous: offset 0)
    assert keys is not None and vals is not None
    # each block's results at the block's own offset (room for one per key) ...
    part_k, part_v = allocate(n * kdt.itemsize, dev), allocate(n * rdt.itemsize, dev)
    counts = allocate(groups * 8, dev)
    plan = launching.plan_for(reduce_kernel.get(dev), (groups,), 0, 0, dev)
    assert plan is not None  # (None only with one_output=True)
    launching.enqueue(plan, [part_k, part_v, counts], [keys, vals], scalars, False, dev)
    found = np.empty(groups, np.int64)
    read(found, counts.buffer, dev)  # (the result's length)
    total = int(found.sum())
    if groups == 1 and (n - total) * (kdt.itemsize + rdt.itemsize) <= SPARE_BYTES_KEPT:
        out_k = Storage(part_k.buffer, total * kdt.itemsize, dev)
        out_v = Storage(part_v.buffer, total * rdt.itemsize, dev)
    else:  # ... then packed, one block after the other
        out_k = allocate(total * kdt.itemsize, dev)
        out_v = allocate(total * rdt.itemsize, dev)
        plan = launching.plan_for(pack_kernel.get(dev), (groups,), 0, 0, dev)
        assert plan is not None
        launching.enqueue(plan, [out_k, out_v], [part_k, part_v, counts], scalars, False,
                          dev)
    return (Array._concrete(out_k, kdt, (total,)), Array._concrete(out_v, rdt, (total,)))


def scan_by_key(kc: Array, vc: Array, op: str, rdt: np.dtype, exclusive: bool,
                initial: Any) -> Array:
    """The segmented scan (``op`` within runs of equal consecutive keys) of the
    concrete, contiguous, non-empty 1-D ``kc`` and ``vc`` (booleans as uint8) on a CPU
    device, of dtype ``rdt``; an exclusive one starts each run with ``initial``.

    A first kernel gives each block its last segment's partial result and whether
    that segment began before the block (it reads only that segment's values); the
    second scans each block, carrying in the partial results of the blocks before
    it where its first segment began earlier."""
    dev: Device = kc.device
    n = kc.shape[0]
    tail_kernel, scan_kernel = _kernels_for(op, kc.dtype, vc.dtype, rdt, int(exclusive))
    groups, block = blocks(n, dev)
    itype = _UINT8 if rdt == np.bool_ else rdt
    scalars = [np.int64(n), np.int64(block), itype.type(rdt.type(initial))]
    keys, vals = kc._storage, vc._storage  # (contiguous: offset 0)
    assert keys is not None and vals is not None
    tails, opened = allocate(groups * rdt.itemsize, dev), allocate(groups * 4, dev)
    out = allocate(n * rdt.itemsize, dev)
    plan = launching.plan_for(tail_kernel.get(dev), (groups,), 0, 0, dev)
    assert plan is not None
    launching.enqueue(plan, [tails, opened], [keys, vals], scalars[:2], False, dev)
    plan = launching.plan_for(scan_kernel.get(dev), (groups,), 0, 0, dev)
    assert plan is not None
    launching.enqueue(plan, [out], [keys, vals, tails, opened], scalars, False, dev)
    return Array._concrete(out, rdt, (n,))


# unused bytes a result of one block may keep rather than be packed into its own buffers
SPARE_BYTES_KEPT = 1 << 16


__all__ = ["reduce_by_key", "scan_by_key", "supported"]
