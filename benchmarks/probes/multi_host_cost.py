"""Host microseconds per split call (issue 29): the time until the first part's launch
is handed to its device, and until the call returns, for ``2*x - sin(y) + x*y`` (then
``.eval()``), ``fl.sum(x*y)`` and a 5-point stencil step on a 64 x 64 grid, with tiny
parts whose launches are not deferred (so what is timed is the host's work, not the
device's).  Medians of ``--repeat`` calls,
each after ``fl.synchronize()``.

Two distinct devices on one OpenCL platform can be had from PoCL on a CPU::

    POCL_DEVICES="pthread pthread" FUSELOOP_HOST_PATH=0 \\
        python benchmarks/probes/multi_host_cost.py --devices 0,1
    # the same with a context per device (the host combines the partial sums):
    FUSELOOP_OPENCL_SHARED_CONTEXT=0 POCL_DEVICES="pthread pthread" FUSELOOP_HOST_PATH=0 \\
        python benchmarks/probes/multi_host_cost.py --devices 0,1
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import fuseloop as fl
import fuseloop.launching
from fuseloop.multi import trace


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", default="0,0")
    p.add_argument("--log2n", type=int, default=12)
    p.add_argument("--repeat", type=int, default=400)
    args = p.parse_args()
    fuseloop.launching.DEFER_MAX_ELEMENTS = 0  # (every launch enqueued at once)
    spec = [int(s) for s in args.devices.split(",")]
    n = 1 << args.log2n
    with fl.device(spec):
        x = fl.random.uniform(n, dtype=np.float32, key=1).eval()
        y = fl.random.uniform(n, dtype=np.float32, key=2).eval()
        u = fl.random.uniform((64, 64), dtype=np.float32, key=3).eval()
    lap = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    work = {"2*x - sin(y) + x*y": lambda: (2 * x - fl.sin(y) + x * y).eval(),
            "sum(x*y)": lambda: fl.sum(x * y),
            "stencil step 64^2": lambda: (u + np.float32(0.1) * fl.stencil(u, lap)).eval()}
    print(f"devices {spec}, {n} elements; host microseconds (median of {args.repeat})")
    print(f"{'workload':22s} {'first launch':>13s} {'call':>8s}")
    for name, fn in work.items():
        for _ in range(20):
            fn()
        fl.synchronize()
        first, call = [], []
        for _ in range(args.repeat):
            fl.synchronize()
            with trace.tracing() as events:
                t0 = time.perf_counter()
                fn()
                t1 = time.perf_counter()
            first.append(events[0][3] - t0)
            call.append(t1 - t0)
        print(f"{name:22s} {np.median(first) * 1e6:13.0f} {np.median(call) * 1e6:8.0f}")


if __name__ == "__main__":
    main()
