"""The ``partition`` variant of :mod:`fuseloop.ops.scatter_kernel` (see its docstring):
a count of each bucket's indices beside the check, a partition of the wrapped positions
and values by bucket, then the store reading them in order."""

from __future__ import annotations

import numpy as np

from ..array import Array
from ..cache import KernelPlan, SourceKernel
from ..dtypes import c_type_name
from .scatter_kernel import MAX_BUCKETS, _kernel, _kernels, _launch, _lock, span_shift

_PARTITION = r"""
#ifdef SCALAR
#define VALUE(i) in1[0]
#else
#define VALUE(i) in1[i]
#endif
__kernel void fuseloop_scatter_count(__global const IT *in0, __global int *out0,
                                     __global int *out1, long const s0, long const s1,
                                     int const s2, int const s3)
{
  /* s0 indices into an axis of length s1: out0[0] = 1 where one is out of range; the
     count of each bucket (position >> s2, s3 buckets) added into out1[0..s3) */
  __local int hist[MAX_BUCKETS];
  int const lid = get_local_id(0), lsize = get_local_size(0);
  for (int b = lid; b < s3; b += lsize)
    hist[b] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  long const base = (long) get_group_id(0) * (lsize * ITEMS) + lid;
  int bad = 0;
  #pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    long const i = base + (long) j * lsize;
    if (i < s0) {
      long k = (long) in0[i];
      if (k < -s1 || k >= s1) {
        bad = 1;
      } else {
        k += k < 0 ? s1 : 0;
        atomic_inc(&hist[(int) (k >> s2)]);
      }
    }
  }
  if (bad)
    out0[0] = 1;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int b = lid; b < s3; b += lsize)
    if (hist[b] != 0)
      atomic_add(&out1[b], hist[b]);
}

__kernel void fuseloop_scatter_partition(__global int *out0, __global VT *out1,
                                         __global const IT *in0, __global const VT *in1,
                                         __global int *in2, __global const int *in3,
                                         long const s0, long const s1, int const s2,
                                         int const s3)
{
  /* each index wrapped (out0) and its value (out1) moved to its bucket's part of the
     scratch arrays: bucket b starts at the sum of the counts in2[0..b), and in2[s3 + b]
     hands out its places to the work-groups; nothing when the gate in3[0] is set */
  if (in3[0] != 0)
    return;
  __local int hist[MAX_BUCKETS];
  __local int start[MAX_BUCKETS];
  int const lid = get_local_id(0), lsize = get_local_size(0);
  for (int b = lid; b < s3; b += lsize)
    hist[b] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  long const base = (long) get_group_id(0) * (lsize * ITEMS) + lid;
  int q[ITEMS], rank[ITEMS];
  VT v[ITEMS];
  #pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    long const i = base + (long) j * lsize;
    if (i < s0) {
      long k = (long) in0[i];
      k += k < 0 ? s1 : 0;
      q[j] = (int) k;
      v[j] = VALUE(i);
      rank[j] = atomic_inc(&hist[q[j] >> s2]);
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int b = lid; b < s3; b += lsize) {
    if (hist[b] != 0) {
      int first = 0;
      for (int c = 0; c < b; ++c)
        first += in2[c];
      start[b] = first + atomic_add(&in2[s3 + b], hist[b]);
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  #pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    if (base + (long) j * lsize < s0) {
      int const d = start[q[j] >> s2] + rank[j];
      out0[d] = q[j];
#ifndef SCALAR
      out1[d] = v[j];  /* (one value for all: the store reads it itself) */
#endif
    }
  }
}
"""


def _partition_kernel(name: str, idx: np.dtype, val: np.dtype, k: int,
                      scalar: bool = False) -> SourceKernel:
    """The count or partition kernel of the ``partition`` variant."""
    key = (name, "partition", idx, val, "", k, scalar)
    found = _kernels.get(key)
    if found is None:
        if name == "fuseloop_scatter_count":
            args = ["in0", "out0", "out1", "s0", "s1", "s2", "s3"]
        else:
            args = ["out0", "out1", "in0", "in1", "in2", "in3", "s0", "s1", "s2", "s3"]
        dtypes: list[str | None] = [None] * (len(args) - 4) + ["int64", "int64", "int32",
                                                                "int32"]
        plan = KernelPlan(name=name, source=f"#define VT {c_type_name(val)}\n" + _PARTITION,
                          arg_names=args, gsize=["p[0]"], lsize=["p[1]"], arg_dtypes=dtypes,
                          build_options=[f"-DITEMS={k}", f"-DIT={c_type_name(idx)}",
                                         f"-DMAX_BUCKETS={MAX_BUCKETS}"]
                          + (["-DSCALAR"] if scalar else []))
        with _lock:
            found = _kernels.setdefault(key, SourceKernel(plan))
    return found


def _run_partition(mode: str, a: Array, key: Array, values: Array, gate: Array,
                   update: str, grid: tuple[int, int, bool]) -> None:
    """``partition``: the check counting each bucket's indices, the indices (wrapped,
    32-bit) and values moved to their buckets' parts of scratch arrays, then the store
    reading those in order: the stores of a bucket land in one span of the target."""
    k, group, scalar = grid
    from ..creation import empty, zeros

    dev, n, m = a.device, a.size, key.size
    shift, buckets = span_shift(n, a.dtype.itemsize)
    groups = -(-m // (group * k))
    counters = zeros(2 * buckets, dtype=np.int32, device=dev).eval()
    positions = empty(m, dtype=np.int32, device=dev).eval()
    moved = values if scalar else empty(m, dtype=a.dtype, device=dev).eval()
    sizes = [np.int64(m), np.int64(n), np.int32(shift), np.int32(buckets)]
    count = _partition_kernel("fuseloop_scatter_count", key.dtype, a.dtype, k)
    _launch(count, groups, group, [gate._storage, counters._storage], [key._storage], sizes,
            dev)
    part = _partition_kernel("fuseloop_scatter_partition", key.dtype, a.dtype, k, scalar)
    _launch(part, groups, group, [positions._storage, moved._storage],
            [key._storage, values._storage, counters._storage, gate._storage], sizes, dev)
    store = _kernel("fuseloop_scatter_store", "narrow", key.dtype, a.dtype, update, k, scalar)
    _launch(store, groups, group, [a._storage],
            [positions._storage, moved._storage, gate._storage], [np.int64(m), np.int32(n)],
            dev)
