"""``bincount`` of a few bins: counts in each work-group's local memory, then added once
per group and bin to the result.

The general path (``fl.add.at``) updates the result element by element with a
compare-and-swap loop on 8 bytes: with 2^24 values and a thousand bins every update
contends with thousands of others (on an H100's OpenCL, 124 ms against CuPy's
0.5 ms).  Here each work-group counts its share of the values in 32-bit local
counters (``atomic_inc``: one hardware atomic, contended only within the group), and
adds its non-zero counts to the 64-bit result with ``atom_add``.  Used when the bins
fit :data:`MAX_BINS` local counters; a group counts at most :data:`MAX_PER_GROUP`
values, so its 32-bit counters cannot overflow.
"""

from __future__ import annotations

import threading

import numpy as np

from .. import caches as _caches
from .. import launching
from ..array import Array
from ..cache import KernelPlan, SourceKernel
from ..dtypes import c_type_name
from ..runtime.devices import Device

#: the most bins counted in local memory (16 KiB of counters: every GPU and CPU has it)
MAX_BINS = 4096
#: the most values one work-group counts (its counters are 32-bit)
MAX_PER_GROUP = 1 << 30
#: work-items of a group on a GPU (a CPU runs groups of one, each with its own counters)
GPU_GROUP = 256
GROUPS_PER_UNIT = 4

_SOURCE = r"""
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
__kernel void fuseloop_bincount(__global const IT *in0, __global long *out0,
                                long const s0, long const s1)
{
  __local int counts[MAX_BINS];
  int const lid = get_local_id(0), lsize = get_local_size(0);
  for (int b = lid; b < s1; b += lsize)
    counts[b] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  long const step = (long) get_global_size(0);
  for (long i = get_global_id(0); i < s0; i += step)
    atomic_inc(&counts[(int) in0[i]]);
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int b = lid; b < s1; b += lsize)
    if (counts[b] != 0)
      atom_add(&out0[b], (long) counts[b]);
}
"""

_kernels: dict[np.dtype, SourceKernel] = {}
_lock = threading.Lock()
_caches.register("ops.bincount_kernel.kernels", _kernels.clear, lambda: len(_kernels),
                 why="one per index dtype")


def supported(x: Array, bins: int) -> bool:
    """Whether :func:`count` takes ``x`` (a contiguous integer array) with ``bins`` bins."""
    return 0 < bins <= MAX_BINS and x.dtype.kind in "iu" and x.is_contiguous


def _kernel(dtype: np.dtype) -> SourceKernel:
    found = _kernels.get(dtype)
    if found is None:
        plan = KernelPlan(name="fuseloop_bincount", source=_SOURCE,
                          arg_names=["in0", "out0", "s0", "s1"], gsize=["p[0]"],
                          lsize=["p[1]"], arg_dtypes=[None, None, "int64", "int64"],
                          build_options=[f"-DIT={c_type_name(dtype)}",
                                         f"-DMAX_BINS={MAX_BINS}"])
        with _lock:
            found = _kernels.setdefault(dtype, SourceKernel(plan))
    return found


def _grid(n: int, device: Device) -> tuple[int, int]:
    """(work-groups, work-items per group) for ``n`` values."""
    group = 1 if device.type == "cpu" else min(GPU_GROUP, device.max_work_group_size)
    groups = max(device.compute_units * GROUPS_PER_UNIT, -(-n // MAX_PER_GROUP))
    return max(1, min(groups, -(-n // group))), group


def count(x: Array, out: Array) -> None:
    """Add the counts of the values of ``x`` (all in ``[0, out.size)``) into the int64
    ``out`` (zeros), in one launch."""
    dev = x.device
    groups, group = _grid(x.size, dev)
    plan = launching.plan_for(_kernel(x.dtype).get(dev), (groups, group), 0, 0, dev)
    assert plan is not None  # (None only with one_output=True)
    assert x._storage is not None and out._storage is not None
    launching.enqueue(plan, [out._storage], [x._storage],
                      [np.int64(x.size), np.int64(out.size)], False, dev)
