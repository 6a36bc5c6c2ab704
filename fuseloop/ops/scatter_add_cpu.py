"""``fl.add.at`` on a CPU device without atomics: per-core partial sums, then a combine.

On a CPU the scatter kernel's atomic update is a compare-and-swap loop (x86 has no
float atomic add) whose locked instruction also orders the core's memory accesses:
a core cannot overlap the cache misses of random bins.  Measured on PoCL (2-core
Xeon, 2^24 float32 values into 2^20 bins): the atomic kernel on both cores 412 ms,
one plain loop on one core 228 ms, numpy 224 ms.

So each work-group (one per compute unit; PoCL runs a group on one core) zeroes a
private row of ``bins`` partial sums in a scratch buffer and adds its contiguous
share of the values into it with plain adds; a second kernel adds the rows into
the target, bin by bin.  The first kernel writes only scratch memory, so it also
checks the indices (a flag, read back between the two): no pass of its own for the
check, and an index out of range leaves the target untouched.  The rows cost
``2 * groups * bins`` elements of traffic, so this is used where that is at most half
the values' count (:func:`takes`); the general scatter kernel (atomics) does the
rest.  Sums over repeated indices are added in another order than numpy's (as with
atomics): equal up to rounding.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import caches as _caches
from .. import launching
from ..array import Array
from ..cache import KernelPlan, SourceKernel
from ..dtypes import c_type_name
from ..expr.nodes import Storage
from ..tracing import host_step

#: fewer values than this take the one-kernel scatter (two launches cost more)
MIN_VALUES = 1 << 16
#: bins of the target combined by one work-item
COMBINE_CHUNK = 4096

_SOURCE = r"""
__kernel void fuseloop_scatter_partials(__global const IT *in0, __global const VT *in1,
                                        __global VT *out0, __global int *out1,
                                        long const s0, long const s1, long const s2)
{
  /* s0 values, s1 bins, s2 values per group; out0: a row of s1 partial sums per group;
     out1[0] set where an index is outside [-s1, s1) (it is skipped) */
  long const g = get_group_id(0);
  __global VT *part = out0 + g * s1;
  for (long b = 0; b < s1; ++b)
    part[b] = 0;
  long const end = min(s0, (g + 1) * s2);
  int bad = 0;
  for (long i = g * s2; i < end; ++i) {
    long k = (long) in0[i];
    k += k < 0 ? s1 : 0;
    if (k < 0 || k >= s1)
      bad = 1;
    else
      part[k] OP in1[i];
  }
  if (bad)
    out1[0] = 1;
}

__kernel void fuseloop_scatter_combine(__global const VT *in0, __global VT *out0,
                                       long const s0, long const s1, long const s2)
{
  /* out0[b] += the s1 rows' partial sums of bin b, for s2 bins from this group's */
  long const start = get_group_id(0) * s2, end = min(s0, start + s2);
  for (long g = 0; g < s1; ++g)
    for (long b = start; b < end; ++b)
      out0[b] += in0[g * s0 + b];
}
"""

_kernels: dict[tuple, SourceKernel] = {}
_lock = threading.Lock()
_caches.register("ops.scatter_add_cpu.kernels", _kernels.clear, lambda: len(_kernels),
                 why="one per (kernel, index dtype, value dtype, operation)")


def takes(op: str, a: Array, indices: object, values: object) -> bool:
    """Whether :func:`scatter_add` does ``fl.<op>.at(a, indices, values)``: on a CPU,
    an add or subtract into a 1-D contiguous ``a`` at a 1-D integer device array, of
    values of ``a``'s dtype and the indices' shape, each contiguous or lazy (computed
    first, :func:`computed`), many values into few enough bins."""
    if op not in ("add", "subtract") or a.device.type != "cpu" or a.ndim != 1:
        return False
    if not (isinstance(indices, Array) and isinstance(values, Array)):
        return False
    if indices.device != a.device or values.device != a.device:
        return False
    n = indices.size
    return (a.is_contiguous and (indices.is_contiguous or indices.is_lazy)
            and (values.is_contiguous or values.is_lazy)
            and indices.ndim == 1 and indices.dtype.kind in "iu"
            and values.shape == indices.shape and values.dtype == a.dtype
            and n >= MIN_VALUES and 2 * _groups(a, n) * a.size <= n // 2)


def computed(indices: Array, values: Array) -> tuple[Array, Array]:
    """Lazy ``indices`` and ``values`` computed (in one kernel where both are): the
    partial sums read buffers.  A histogram's bins and weights, computed by the
    atomic scatter instead, were computed twice (its index check, then its stores)
    and stored by compare-and-swap."""
    from ..assignment import compute

    lazy = [x for x in (indices, values) if x.is_lazy]
    if lazy:
        compute(*lazy)
    return indices, values


def _groups(a: Array, n: int) -> int:
    return max(1, min(a.device.compute_units, n // MIN_VALUES))


def _kernel(name: str, idx: np.dtype, val: np.dtype, op: str) -> SourceKernel:
    key = (name, idx, val, op)
    found = _kernels.get(key)
    if found is None:
        args = ["in0", "in1", "out0", "out1", "s0", "s1", "s2"] \
            if name.endswith("partials") else ["in0", "out0", "s0", "s1", "s2"]
        plan = KernelPlan(name=name, source=_SOURCE, arg_names=args, gsize=["p[0]"],
                          lsize=["1"], arg_dtypes=[None] * (len(args) - 3) + ["int64"] * 3,
                          build_options=[f"-DIT={c_type_name(idx)}",
                                         f"-DVT={c_type_name(val)}",
                                         f"-DOP={'+=' if op == 'add' else '-='}"])
        with _lock:
            found = _kernels.setdefault(key, SourceKernel(plan))
    return found


def scatter_add(op: str, a: Array, indices: Array, values: Array) -> None:
    """``fl.<op>.at(a, indices, values)`` where :func:`takes` says so: the partial sums
    (which also check the indices, writing only scratch memory), their flag read
    back, then the combine into ``a``; numpy's ``IndexError`` for an index out of
    range leaves ``a`` untouched."""
    from ..creation import empty, zeros

    n, bins, dev = indices.size, a.size, a.device
    groups = _groups(a, n)
    part = empty(groups * bins, dtype=a.dtype, device=dev).eval()
    flag = zeros(1, dtype=np.int32, device=dev).eval()
    assert a._storage is not None and part._storage is not None and flag._storage is not None
    assert indices._storage is not None and values._storage is not None
    _launch(_kernel("fuseloop_scatter_partials", indices.dtype, a.dtype, op), groups,
            [part._storage, flag._storage], [indices._storage, values._storage],
            [np.int64(n), np.int64(bins), np.int64(-(-n // groups))], dev)
    host_step(_flag_read(indices.dtype, bins), [flag._storage, indices._storage], [])
    _launch(_kernel("fuseloop_scatter_combine", indices.dtype, a.dtype, op),
            -(-bins // COMBINE_CHUNK), [a._storage], [part._storage],
            [np.int64(bins), np.int64(groups), np.int64(COMBINE_CHUNK)], dev)


def _launch(kernel: SourceKernel, groups: int, outs: list[Storage], ins: list[Storage],
            scalars: list[Any], dev: Any) -> None:
    """Launch ``kernel`` (a step of the record while ``fl.fuse`` traces)."""
    plan = launching.plan_for(kernel.get(dev), (groups,), 0, 0, dev)
    assert plan is not None  # (None only with one_output=True)

    def go(ins: list[Storage], outs: list[Storage]) -> None:
        launching.enqueue(plan, outs, ins, scalars, False, dev)
    host_step(go, ins, outs)


def _flag_read(index_dtype: np.dtype, bins: int) -> Callable[[list[Storage], list[Storage]],
                                                             None]:
    """The action reading the partial sums' flag (inputs: the flag, the indices): numpy's
    IndexError, naming the first index out of range, before the combine."""
    def flag_read(ins: list[Storage], outs: list[Storage]) -> None:
        from .indexing import _host_wrapped
        from .scatter_kernel import host_copy

        if host_copy(ins[0], np.dtype(np.int32))[0]:
            _host_wrapped(host_copy(ins[1], index_dtype), bins, 0)  # (raises)
    return flag_read
