"""Whether huge pages under a PoCL buffer speed CPU kernels up (issue 25): the same kernels
over the same values in three buffers, timed in turn (median CPU ms: every thread of the
process, PoCL's workers too), numpy beside.

* ``copy``: PoCL's own allocation (``COPY_HOST_PTR``, as fuseloop's buffers are made):
  4 KiB pages where transparent huge pages are ``madvise`` only;
* ``madvise``: PoCL's allocation, mapped, ``madvise(MADV_HUGEPAGE)`` on it before anything
  is written, then filled through the map;
* ``numpy``: ``USE_HOST_PTR`` of a numpy array (numpy asks for huge pages for large arrays).

Run with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (glibc >= 2.35), PoCL's own allocations
get huge pages too (``copy`` then times as the others).

The kernels: a column sum of a float32 square, 256 or 4096 columns per work-item (the
``cpu-rows`` recipe's ``column_width`` before and after session 20), and a contiguous sum.

``--fuseloop``: fuseloop's own evaluations instead, on the default device, with the device's
buffer pool swapped between one that advises huge pages (``fuseloop.runtime.huge_pages``)
and one that does not, inputs uploaded through each: median CPU ms per case of ``.eval()``
then ``fl.synchronize()`` (the previous result alive meanwhile, as in ``fuseloop bench``).

    python benchmarks/probes/pocl_huge_pages.py [--side 4096] [--repeats 11] [--fuseloop]
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import statistics
import time

import numpy as np
import pyopencl as cl

COLUMNS = r"""
__kernel void __attribute__ ((reqd_work_group_size(1, 1, 1)))
cols(__global float *restrict out, __global const float *restrict x, int n) {
  float acc[W];
  for (int i = 0; i < W; ++i) acc[i] = 0.0f;
  for (long j = 0; j < n; ++j)
    for (int i = 0; i < W; ++i) acc[i] += x[j * n + get_group_id(0) * W + i];
  for (int i = 0; i < W; ++i) out[get_group_id(0) * W + i] = acc[i];
}
__kernel void __attribute__ ((reqd_work_group_size(1, 1, 1)))
flat(__global float *restrict out, __global const float *restrict x, long chunk) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (long i = get_group_id(0) * chunk; i < (get_group_id(0) + 1) * chunk; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += x[i + k];
  out[get_group_id(0)] = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
}
"""


def _madvised(ctx: cl.Context, queue: cl.CommandQueue, h: np.ndarray) -> cl.Buffer:
    buf = cl.Buffer(ctx, cl.mem_flags.READ_ONLY, h.nbytes)
    view, _ = cl.enqueue_map_buffer(queue, buf, cl.map_flags.WRITE, 0, h.shape, h.dtype)
    start = view.ctypes.data // mmap.PAGESIZE * mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(view.ctypes.data + h.nbytes - start),
                 14)  # (MADV_HUGEPAGE)
    view[...] = h
    view.base.release(queue)
    return buf


def _fuseloop(n: int, repeats: int) -> None:
    import fuseloop as fl
    from fuseloop.backends.opencl import OpenCLBufferPool
    from fuseloop.runtime.devices import _runtime
    from fuseloop.runtime.huge_pages import page_size

    device = fl.get_device()
    memory = _runtime(device).pool
    pools = {"4 KiB": OpenCLBufferPool(device.context, device.queue),
             "advised": OpenCLBufferPool(device.context, device.queue, page_size())}
    rng = np.random.default_rng(0)
    h, g = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    cases = {"column sum": lambda x, y: x.sum(axis=0), "row sum": lambda x, y: x.sum(axis=1),
             "sum": lambda x, y: x.sum(), "2x + y": lambda x, y: 2 * x + y,
             "column var": lambda x, y: ((x - x.mean(axis=0)) ** 2).mean(axis=0)}
    inputs = {}
    for name, pool in pools.items():
        memory.pool = pool
        inputs[name] = (fl.asarray(h), fl.asarray(g))
    print(f"{device}, {n}x{n} float32: CPU ms, median of {repeats}")
    for case, fn in cases.items():
        times: dict[str, list[float]] = {k: [] for k in [*pools, "numpy"]}
        kept = {}
        for r in range(repeats + 2):
            for name, pool in pools.items():
                memory.pool = pool
                c0 = time.process_time()
                kept[name] = fn(*inputs[name]).eval()
                fl.synchronize()
                if r > 1:
                    times[name].append(time.process_time() - c0)
            c0 = time.process_time()
            fn(h, g)
            if r > 1:
                times["numpy"].append(time.process_time() - c0)
        cols = "  ".join(f"{k} {statistics.median(v) * 1e3:7.3f}" for k, v in times.items())
        print(f"{case:12} {cols}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--side", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--fuseloop", action="store_true")
    args = ap.parse_args()
    n = args.side
    if args.fuseloop:
        return _fuseloop(n, args.repeats)
    ctx = cl.Context([d for p in cl.get_platforms() if "Portable" in p.name
                      for d in p.get_devices()][:1])
    queue = cl.CommandQueue(ctx)
    h = np.random.default_rng(0).random((n, n), dtype=np.float32)
    bufs = {"copy": cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                              hostbuf=h),
            "madvise": _madvised(ctx, queue, h),
            "numpy": cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.USE_HOST_PTR,
                               hostbuf=h)}
    out = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, n * 4)
    print(f"{ctx.devices[0].name}, {n}x{n} float32: CPU ms, median of {args.repeats}")
    cases = [(f"column sum, {w} wide", w, n // w, lambda: h.sum(0)) for w in (256, 4096)
             if n % w == 0]
    for name, width, items, ref in [*cases, ("contiguous sum", 0, 16, h.sum)]:
        src = COLUMNS.replace("W", str(max(width, 1)))
        prg = cl.Program(ctx, src).build()
        kernel = cl.Kernel(prg, "cols" if width else "flat")
        times: dict[str, list[float]] = {k: [] for k in [*bufs, "numpy's own"]}
        for r in range(args.repeats + 1):
            for k, b in bufs.items():
                kernel.set_args(out, b, np.int32(n) if width else np.int64(n * n // items))
                c0 = time.process_time()
                cl.enqueue_nd_range_kernel(queue, kernel, (items,), (1,))
                queue.finish()
                if r:
                    times[k].append(time.process_time() - c0)
            c0 = time.process_time()
            ref()
            if r:
                times["numpy's own"].append(time.process_time() - c0)
        cols = "  ".join(f"{k} {statistics.median(v) * 1e3:7.3f}" for k, v in times.items())
        print(f"{name:22} {cols}", flush=True)


if __name__ == "__main__":
    main()
