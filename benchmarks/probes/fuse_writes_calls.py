"""What one replayed ``fl.fuse`` call of ``fuse_writes_probe``'s forms does on the host,
counted (robust on a busy machine, unlike a clock): Python function calls (cProfile's
count: fuseloop's, pyopencl's Python layer, C functions of the standard library; not the
calls of a read's polled wait, which depend on how long the device takes), the
OpenCL backend's driver calls (``set_arg``, scalar arguments, kernel enqueues: counted
by wrappers installed before any launcher is made, their own calls left out), pyopencl's
fills and reads, kernels launched and fills enqueued.

    PYTHONPATH=<tree> FUSELOOP_HOST_PATH=0 python benchmarks/probes/fuse_writes_calls.py
        [--log2 16] [--calls 500] [--forms scatter-add,histogram,masked,overwrite]
        [--as-gpu]

``--as-gpu``: the CPU device presented as a GPU (its hand-written scatter kernels).  Run
once per tree (``PYTHONPATH=/tmp/base`` for the session start's) to compare.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import os
import pstats
import sys

import fuseloop as fl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fuse_writes_probe import commands, fl_forms, inputs

PYOPENCL = ("enqueue_fill_buffer", "enqueue_copy")
# the functions a polled wait calls per turn (runtime.transfer._wait): left out
SPIN = ("event_status", "result", "<built-in method time.perf_counter>",
        "<built-in method posix.sched_yield>")
WRAPPED = {"_set_arg": "set_arg", "_set_scalar": "set_scalar",
           "_enqueue_nd_range": "enqueue_kernel"}
tally: dict[str, int] = dict.fromkeys(WRAPPED.values(), 0)


def wrap_driver() -> None:
    """Count the OpenCL backend's driver calls (launchers bind these names when made)."""
    from fuseloop.backends import opencl

    for attr, name in WRAPPED.items():
        def counted(*a: object, _f: object = getattr(opencl, attr), _n: str = name) -> object:
            tally[_n] += 1
            return _f(*a)  # type: ignore[operator]
        setattr(opencl, attr, counted)


def counts(fused: object, arrays: list, calls: int) -> tuple[float, dict[str, float]]:
    """(Python calls per call, the driver's calls per call by name)."""
    for k in tally:
        tally[k] = 0
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fused(*arrays)  # type: ignore[operator]
    fl.synchronize()
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    driver = {k: v / calls for k, v in tally.items() if v}
    for (_, _, name), s in stats.items():
        for d in PYOPENCL:
            if name == d:
                driver[d] = driver.get(d, 0) + s[1] / calls
    total = sum(s[1] for (_, _, name), s in stats.items() if name not in SPIN) / calls \
        - sum(tally.values()) / calls
    return total, driver


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2", type=int, default=16)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--forms", default="scatter-add,histogram,masked,overwrite")
    ap.add_argument("--as-gpu", action="store_true")
    args = ap.parse_args()
    wrap_driver()
    dev = fl.get_device()
    if args.as_gpu:
        from fuseloop.ops import scatter_kernel

        scatter_kernel.ON_CPU = True
        dev = dataclasses.replace(dev, type="gpu", max_work_group_size=256)
    print(f"{dev.name} ({dev.type}); 2^{args.log2}; fuseloop "
          f"{fl.__file__.rsplit('/fuseloop/', 1)[0]}")
    print(f"{'form':12s} {'py calls':>9s} {'kernels':>8s} {'fills':>6s}  driver calls per call")
    with fl.device(dev):
        for form in args.forms.split(","):
            arrays = [fl.asarray(h) for h in inputs(form, 1 << args.log2)]
            fused = fl.fuse(fl_forms()[form])
            for _ in range(3):
                fused(*arrays).get()
            kernels, fills = commands(lambda f=fused, a=arrays: f(*a).get())
            total, driver = counts(fused, arrays, args.calls)
            named = ", ".join(f"{k} {v:.1f}" for k, v in sorted(driver.items()))
            print(f"{form:12s} {total:9.1f} {kernels:8d} {fills:6d}  {named}")


if __name__ == "__main__":
    main()
