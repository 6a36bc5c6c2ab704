"""What a full reduction gains from one launch instead of two (issue 25), before the
lowering is changed to make it: ``sqrt(sum(x * x))`` by hand-written OpenCL kernels.

* ``two``: the shape fuseloop's two-stage split has today: a kernel of per-group
  partial sums, then a one-group kernel combining them and applying the epilogue;
* ``one``: the same first stage, after which every group publishes its partial,
  fences global memory and takes an atomic ticket; the group that draws the last
  ticket combines the partials (read through a ``volatile`` pointer), applies the
  epilogue and resets the ticket to 0 for the next launch;
* ``fuseloop``: ``fl.sum(x * x) ** 0.5`` under ``fl.fuse`` (replayed), and torch's
  ``torch.linalg.vector_norm`` on a GPU (numpy's ``np.linalg.norm`` on a CPU), in the
  same run.

Both hand-written variants use the same first stage (``--groups-per-unit`` groups of
``--group`` work-items per compute unit, a grid-stride loop), so their difference is
the second launch.  Times are medians of ``--repeat`` batches of ``--batch`` calls
(one synchronisation per batch: back-to-back launches, as a program's statements run),
in microseconds per call; every result is checked against numpy.  Reported, never
asserted.

    python benchmarks/probes/one_launch_probe.py [--log2 16,20,24,26] [--dtype float32,float64]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
import pyopencl as cl

import fuseloop as fl
from fuseloop.bench.runner import median_time

_SOURCE = r"""
#if defined(IS_DOUBLE) && __OPENCL_C_VERSION__ < 120
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
// the group's sum of each work-item's ``acc``, left in sh[0]
static T tree_sum(T acc, __local T *sh)
{
  int const lid = get_local_id(0);
  sh[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = GROUP / 2; s > 0; s >>= 1) {
    if (lid < s)
      sh[lid] += sh[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  return sh[0];
}

// each group's sum of squares of its grid-stride share, left in sh[0]
static T group_sum(__global const T *x, long n, __local T *sh)
{
  int const lid = get_local_id(0);
  T acc = 0;
  for (long i = get_global_id(0); i < n; i += get_global_size(0))
    acc += x[i] * x[i];
  return tree_sum(acc, sh);
}

// one group's sum of ``count`` partials, left in sh[0]
static T combine(volatile __global const T *part, int count, __local T *sh)
{
  int const lid = get_local_id(0);
  T acc = 0;
  for (int i = lid; i < count; i += GROUP)
    acc += part[i];
  return tree_sum(acc, sh);
}

__kernel void __attribute__((reqd_work_group_size(GROUP, 1, 1)))
partials(__global const T *x, __global T *part, long n)
{
  __local T sh[GROUP];
  T total = group_sum(x, n, sh);
  if (get_local_id(0) == 0)
    part[get_group_id(0)] = total;
}

__kernel void __attribute__((reqd_work_group_size(GROUP, 1, 1)))
finish(__global const T *part, __global T *out, int count)
{
  __local T sh[GROUP];
  T total = combine(part, count, sh);
  if (get_local_id(0) == 0)
    out[0] = sqrt(total);
}

__kernel void __attribute__((reqd_work_group_size(GROUP, 1, 1)))
one_launch(__global const T *x, __global T *part, __global T *out, __global int *ticket,
           long n)
{
  __local T sh[GROUP];
  __local int last;
  T total = group_sum(x, n, sh);
  if (get_local_id(0) == 0) {
    part[get_group_id(0)] = total;
    mem_fence(CLK_GLOBAL_MEM_FENCE);  // the partial is visible before the ticket
    last = atomic_inc(ticket) == (int) get_num_groups(0) - 1;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (last) {
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    total = combine(part, get_num_groups(0), sh);
    if (get_local_id(0) == 0) {
      out[0] = sqrt(total);
      *ticket = 0;  // (the next launch starts from 0: no host reset)
    }
  }
}
"""


def _row(kernels: tuple[Any, Any, Any], dev: fl.Device, dt: np.dtype, log2: int, groups: int,
         args: argparse.Namespace, torch: Any) -> str:
    """One table row: both hand-written variants, fuseloop and the peer at 2^log2."""
    ctx, queue = dev.context, dev.queue
    k_part, k_finish, k_one = kernels
    n = 1 << log2
    h = np.random.default_rng(log2).standard_normal(n).astype(dt)
    want = float(np.sqrt((h.astype(np.float64) ** 2).sum()))
    mf = cl.mem_flags
    x = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=h)
    part = cl.Buffer(ctx, mf.READ_WRITE, groups * dt.itemsize)
    out = cl.Buffer(ctx, mf.READ_WRITE, dt.itemsize)
    ticket = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(1, np.int32))
    g, lsz = (groups * args.group,), (args.group,)

    def two() -> None:
        k_part(queue, g, lsz, x, part, np.int64(n))
        k_finish(queue, lsz, lsz, part, out, np.int32(groups))

    def one() -> None:
        k_one(queue, g, lsz, x, part, out, ticket, np.int64(n))

    times = []
    for fn in (two, one):
        for _ in range(3):  # (the ticket must be back at 0 after each launch)
            fn()
            got = np.empty(1, dt)
            cl.enqueue_copy(queue, got, out)
            queue.finish()
            assert abs(float(got[0]) - want) <= 1e-4 * want, (fn.__name__, got, want)
        times.append(median_time(fn, queue.finish, args.repeat, 2, args.batch))
    xa = fl.asarray(h)
    fused = fl.fuse(lambda a: fl.sum(a * a) ** 0.5)
    assert abs(float(fused(xa)) - want) <= 1e-4 * want
    t_fl = median_time(lambda: fused(xa), fl.synchronize, args.repeat, 2, args.batch)
    if torch is not None:
        xt = torch.from_numpy(h).cuda()
        t_peer = median_time(lambda: torch.linalg.vector_norm(xt), torch.cuda.synchronize,
                             args.repeat, 2, args.batch)
    else:
        t_peer = median_time(lambda: np.linalg.norm(h), lambda: None, args.repeat, 2,
                             args.batch)
    return (f"| {dt.name} | 2^{log2} | {times[0] * 1e6:.1f} | {times[1] * 1e6:.1f} | "
            f"{times[1] / times[0]:.2f} | {t_fl * 1e6:.1f} | {t_peer * 1e6:.1f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2", default="16,20,24,26")
    ap.add_argument("--dtype", default="float32,float64")
    ap.add_argument("--group", type=int, default=256)
    ap.add_argument("--groups-per-unit", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--batch", type=int, default=20)
    args = ap.parse_args(argv)
    dev = fl.get_device()
    torch = None
    if dev.type != "cpu":
        try:
            import torch as _torch

            torch = _torch if _torch.cuda.is_available() else None
        except ImportError:
            pass
    groups = dev.compute_units * args.groups_per_unit
    print(f"device: {dev}; {groups} groups of {args.group}; medians of {args.repeat} "
          f"batches of {args.batch} calls, us per call")
    peer = "torch" if torch is not None else "numpy"
    print(f"| dtype | n | two launches | one launch | one / two | fuseloop (fuse) | {peer} |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in args.dtype.split(","):
        dt = np.dtype(name)
        ctype = "double" if dt == np.float64 else "float"
        opts = [f"-DT={ctype}", f"-DGROUP={args.group}"]
        if ctype == "double":
            opts.append("-DIS_DOUBLE")
        prg = cl.Program(dev.context, _SOURCE).build(options=opts)
        kernels = (cl.Kernel(prg, "partials"), cl.Kernel(prg, "finish"),
                   cl.Kernel(prg, "one_launch"))
        for log2 in (int(v) for v in args.log2.split(",")):
            print(_row(kernels, dev, dt, log2, groups, args, torch), flush=True)


if __name__ == "__main__":
    main()
