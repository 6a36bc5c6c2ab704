"""Per-call host cost of enqueueing a prebuilt trivial kernel through pyopencl's entry points.

Compares ``cl._cl.enqueue_nd_range_kernel`` (private: what pyopencl's own invoker calls),
``cl.enqueue_nd_range_kernel`` (public) and ``kernel(queue, g, l, *args)`` (public, sets
every argument).  Interleaved rounds, best per variant; reported, never asserted.

    python benchmarks/probes/enqueue_cost.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyopencl as cl

SRC = "__kernel void k(__global float *a, int n) { int i = get_global_id(0); if (i < n) a[i] = 1; }"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    ctx = cl.create_some_context(interactive=False)
    queue = cl.CommandQueue(ctx)
    prg = cl.Program(ctx, SRC).build()
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * 64)
    kern = cl.Kernel(prg, "k")
    kern.set_scalar_arg_dtypes([None, np.int32])
    kern.set_arg(0, buf)
    kern.set_arg(1, np.int32(64))
    g, l = (64,), (64,)  # noqa: E741
    private, public = cl._cl.enqueue_nd_range_kernel, cl.enqueue_nd_range_kernel

    def run_private(n: int) -> None:
        for _ in range(n):
            private(queue, kern, g, l, None, None, False, False)

    def run_public(n: int) -> None:
        for _ in range(n):
            public(queue, kern, g, l)

    def run_call(n: int) -> None:
        for _ in range(n):
            kern(queue, g, l, buf, 64)

    variants = {"cl._cl.enqueue_nd_range_kernel": run_private,
                "cl.enqueue_nd_range_kernel": run_public, "kernel(queue, ...)": run_call}
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(args.rounds):
        for name, fn in variants.items():
            t = time.perf_counter()
            fn(args.calls)
            queue.finish()
            best[name] = min(best[name], (time.perf_counter() - t) / args.calls * 1e6)
    print(f"device: {queue.device.name} ({queue.device.platform.name})")
    for name, us in best.items():
        print(f"{name:34s} {us:6.2f} us/call")


if __name__ == "__main__":
    main()
