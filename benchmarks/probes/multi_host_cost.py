"""Host microseconds per split call (issue 29): the time until the first part's launch
is handed to its device, and until the call returns, for ``2*x - sin(y) + x*y`` (then
``.eval()``), ``fl.sum(x*y)`` and a 5-point stencil step on a 64 x 64 grid, with tiny
parts whose launches are not deferred (so what is timed is the host's work, not the
device's).  Medians of ``--repeat`` calls,
each after ``fl.synchronize()``.

Run it from the repository root with ``PYTHONPATH=.`` to time this checkout (the script's
own folder, not the current one, comes first on ``sys.path``).  Two distinct devices on
one OpenCL platform can be had from PoCL on a CPU::

    POCL_DEVICES="pthread pthread" FUSELOOP_HOST_PATH=0 \\
        python benchmarks/probes/multi_host_cost.py --devices 0,1
    # the same with a context per device (the host combines the partial sums):
    FUSELOOP_OPENCL_SHARED_CONTEXT=0 POCL_DEVICES="pthread pthread" FUSELOOP_HOST_PATH=0 \\
        python benchmarks/probes/multi_host_cost.py --devices 0,1
    # a first part past 2 GiB (as each part of 2**30 float32 over two GPUs; ~7 GB of RAM):
    POCL_DEVICES="pthread pthread" FUSELOOP_HOST_PATH=0 python \\
        benchmarks/probes/multi_host_cost.py --devices 0,1 --elements 537919488 \\
        --weights 1,0.001 --repeat 20 --cpu
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import fuseloop as fl
import fuseloop.launching
from fuseloop.multi import trace


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", default="0,0")
    p.add_argument("--log2n", type=int, default=12)
    p.add_argument("--elements", type=int, default=None,
                   help="elements of x and y (default 2**log2n)")
    p.add_argument("--weights", default=None,
                   help="comma-separated weights of the devices (fl.device's), e.g. "
                        "'1,0.001' with --elements 537919488: a first part past 2 GiB, as "
                        "each of two GPUs' parts at 2**30 float32")
    p.add_argument("--repeat", type=int, default=400)
    p.add_argument("--cpu", action="store_true",
                   help="time with the host thread's CPU clock (on a shared machine: what "
                        "other processes take is not counted)")
    args = p.parse_args()
    fuseloop.launching.DEFER_MAX_ELEMENTS = 0  # (every launch enqueued at once)
    spec = [int(s) for s in args.devices.split(",")]
    n = args.elements or 1 << args.log2n
    weights = None if args.weights is None else [float(w) for w in args.weights.split(",")]
    with fl.device(spec, weights=weights):
        x = fl.random.uniform(n, dtype=np.float32, key=1).eval()
        y = fl.random.uniform(n, dtype=np.float32, key=2).eval()
        u = fl.random.uniform((64, 64), dtype=np.float32, key=3).eval()
    lap = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    work = {"2*x - sin(y) + x*y": lambda: (2 * x - fl.sin(y) + x * y).eval(),
            "sum(x*y)": lambda: fl.sum(x * y),
            "stencil step 64^2": lambda: (u + np.float32(0.1) * fl.stencil(u, lap)).eval()}
    clock = time.thread_time if args.cpu else time.perf_counter

    def noted(what: str, part: int, device: Any) -> None:
        if trace.events is not None:
            trace.events.append((what, part, device.index, clock()))

    print(f"devices {spec}, {n} elements; host microseconds (median of {args.repeat}; "
          f"{'the host thread CPU clock' if args.cpu else 'wall clock'}): until the known "
          "parts' staging began (the expression built, the call dispatched; - where none "
          "was staged), until the first and the last part's launch was handed to its "
          "device, the mean gap between two parts' launches, the whole call")
    print(f"{'workload':22s} {'staging':>8s} {'first launch':>13s} {'last launch':>12s} "
          f"{'gap':>6s} {'call':>8s}")
    for name, fn in work.items():
        for _ in range(20):
            fn()
        fl.synchronize()
        staged, first, last, gap, call = [], [], [], [], []
        for _ in range(args.repeat):
            fl.synchronize()
            saved = trace.note
            trace.note = noted  # (the trace's stamps on the same clock)
            try:
                with trace.tracing() as events:
                    t0 = clock()
                    fn()
                    t1 = clock()
            finally:
                trace.note = saved
            launches = [t for what, _, _, t in events if what == "enqueued"]
            staged += [t - t0 for what, _, _, t in events if what == "staging begun"][:1]
            first.append(launches[0] - t0)
            last.append(launches[-1] - t0)
            gap.append((launches[-1] - launches[0]) / max(1, len(launches) - 1))
            call.append(t1 - t0)
        staging = f"{np.median(staged) * 1e6:8.0f}" if staged else f"{'-':>8s}"
        print(f"{name:22s} {staging} {np.median(first) * 1e6:13.0f} "
              f"{np.median(last) * 1e6:12.0f} {np.median(gap) * 1e6:6.0f} "
              f"{np.median(call) * 1e6:8.0f}")


if __name__ == "__main__":
    main()
