"""Host CPU time per split call with each selectable mechanism of the split path off in
turn (issue 29), in one process: ``fl.sum(x*y)`` read with ``float()`` and a 5-point
stencil step ``u + 0.1 * laplacian(u)`` (periodic) evaluated and its first row read,
over every device listed.  Per row: the host thread's CPU microseconds per call
(``time.thread_time``: not PoCL's worker threads) and the process's
(``time.process_time``: the devices' threads too, on a CPU device): the means over
``--repeat`` calls after ``--warm`` ones, rows interleaved ``--rounds`` times so drift
spreads over all of them; the smallest and the median of the rounds' means (a loaded
machine adds to some rounds).  Waits sleep at once (``transfer.SPIN_S = 0``; ``--spin``:
they poll first, as by default), so the host thread's time is its own work, not the
polling while the devices run.  Rows: ``all on`` (page-locked reads forced on, as on GPUs),
``-pinned`` (reads into ordinary memory), ``+deferred`` (halo uploads left to each
device's deferred work: on GPUs by default, here on the CPU too), ``+chained`` (halo rows
through the host uploaded by writes the devices hold back until the reads are done: no
host wait), ``again`` (all on).  Four PoCL
devices, a context each (the host combines and exchanges) or one shared context::

    POCL_DEVICES="pthread pthread pthread pthread" FUSELOOP_OPENCL_SHARED_CONTEXT=0 \\
        python benchmarks/probes/multi_variants_cost.py --devices 0,1,2,3
    POCL_DEVICES="pthread pthread pthread pthread" FUSELOOP_OPENCL_SHARED_CONTEXT=1 \\
        python benchmarks/probes/multi_variants_cost.py --devices 0,1,2,3
"""

from __future__ import annotations

import argparse
import importlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl

#: row name -> (module, attribute, value) settings applied for it
ROWS: dict[str, list[tuple[str, str, Any]]] = {
    "all on": [],
    "-pinned": [("fuseloop.backends.opencl_staging", "PINNED_READS", "0")],
    # (on GPUs by default: on for every device, this CPU's included)
    "+deferred": [("fuseloop.multi.uploads", "DEFERRED_UPLOADS", "1")],
    # (off by default: on, for every OpenCL device, this CPU's included)
    "+chained": [("fuseloop.backends.opencl_staging", "HALO_EVENTS", "1")],
    "again": [],  # (all on, last: the drift over a round)
}


def _timed(fn: Callable[[], Any], settings: list[tuple[str, str, Any]], warm: int,
           repeat: int) -> tuple[float, float]:
    saved = []
    for module, name, value in settings:
        m = importlib.import_module(module)
        saved.append((m, name, getattr(m, name)))
        setattr(m, name, value)
    try:
        for _ in range(warm):
            fn()
        fl.synchronize()
        t0, p0 = time.thread_time(), time.process_time()
        for _ in range(repeat):
            fn()
        fl.synchronize()
        return (time.thread_time() - t0) / repeat, (time.process_time() - p0) / repeat
    finally:
        for m, name, value in saved:
            setattr(m, name, value)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", default="0,1,2,3")
    p.add_argument("--log2n", type=int, default=16)
    p.add_argument("--grid", type=int, default=256)
    p.add_argument("--repeat", type=int, default=100)
    p.add_argument("--warm", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", default=",".join(ROWS),
                   help="the rows to time, comma-separated (default: all)")
    p.add_argument("--spin", action="store_true",
                   help="waits poll first, as by default (their polling counts as host time)")
    args = p.parse_args()
    try:
        importlib.import_module("fuseloop.backends.opencl_staging").PINNED_READS = "1"
    except ImportError:  # (an older fuseloop, for a comparison: ``--rows "all on"``)
        pass
    if not args.spin:  # (a wait sleeps at once: the thread's time is the host's work)
        importlib.import_module("fuseloop.runtime.transfer").SPIN_S = 0.0
    spec = [int(s) for s in args.devices.split(",")]
    with fl.device(spec):
        x = fl.random.uniform(1 << args.log2n, dtype=np.float32, key=1).eval()
        y = fl.random.uniform(1 << args.log2n, dtype=np.float32, key=2).eval()
        u = fl.random.uniform((args.grid, args.grid), dtype=np.float32, key=3).eval()
    lap = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    work = {"sum(x*y) + float": lambda: float(fl.sum(x * y)),
            f"stencil {args.grid}^2 + row": lambda: (
                u + np.float32(0.1) * fl.stencil(u, lap, boundary="wrap"))[0].get()}
    shared = fl.devices()[spec[0]].context is fl.devices()[spec[-1]].context
    print(f"devices {spec} ({'one context' if shared else 'a context each'}); host thread and "
          f"process CPU us per call (means of {args.repeat}, {args.rounds} rounds)")
    for name, fn in work.items():
        rows = [r.strip() for r in args.rows.split(",")]
        got: dict[str, list[tuple[float, float]]] = {r: [] for r in rows}
        for _ in range(args.rounds):
            for row in rows:
                got[row].append(_timed(fn, ROWS[row], args.warm, args.repeat))
        print(f"  {name:24s} {'thread min':>10s} {'median':>7s} {'process min':>11s} "
              f"{'median':>7s}")
        for row, values in got.items():
            th = [v[0] * 1e6 for v in values]
            pr = [v[1] * 1e6 for v in values]
            print(f"    {row:22s} {min(th):10.0f} {np.median(th):7.0f} {min(pr):11.0f} "
                  f"{np.median(pr):7.0f}")


if __name__ == "__main__":
    main()
