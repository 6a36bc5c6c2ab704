"""The broad suite's workloads at one size on the CPU device, CPU clock: numpy,
fuseloop's kernels (FUSELOOP host path off) and fuseloop's host path (its limit
raised past the size), rounds interleaved; where the host path's column beats the
kernels', a measured-cost limit would send the workload there (issue 25's "none
slower than numpy" at 2^16).  Reported, never asserted.

    python benchmarks/probes/host_vs_kernel_2p16.py [--size 65536] [--only a,b]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop import host_path
from fuseloop.bench.broad import NP_OPS, SUITE


def _per_call(run: Any, sync: Any, budget: float = 0.05) -> float:
    """CPU seconds per call of ``run`` (then ``sync``), over about ``budget`` seconds."""
    n, spent = 0, 0.0
    t0 = time.process_time()
    while spent < budget or n < 3:
        run()
        sync()
        n += 1
        spent = time.process_time() - t0
    return spent / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1 << 16)
    ap.add_argument("--only", default="")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    saved = host_path.HOST_MAX_WORK
    print("| workload | numpy us | kernels us | host path us | kernels/numpy | host/numpy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for wl in SUITE:
        if (only and wl.name not in only) or wl.kind == "matmul" or wl.name == "copy":
            continue
        sizes = wl.sizes or (args.size,)
        for size in sizes:
            inputs = wl.make_inputs(size, np.random.default_rng(0))
            arrays = [inputs[k] for k in wl.inputs]
            dev = [fl.asarray(a) for a in arrays]
            fl_run = wl.fuseloop(*dev)[0]

            def np_run(wl: Any = wl, arrays: list = arrays) -> Any:
                return wl.peer(NP_OPS, *arrays)

            rows: list[list[float]] = [[], [], []]
            try:
                for _ in range(args.rounds):
                    rows[0].append(_per_call(np_run, lambda: None))
                    host_path.HOST_MAX_WORK = 0
                    rows[1].append(_per_call(fl_run, fl.synchronize))
                    host_path.HOST_MAX_WORK = 1 << 40
                    rows[2].append(_per_call(fl_run, fl.synchronize))
            except Exception as e:  # (a workload one form cannot run: said, not raised)
                print(f"| {wl.name} {size} | {type(e).__name__} | | | | |")
                continue
            finally:
                host_path.HOST_MAX_WORK = saved
            t = [statistics.median(r) * 1e6 for r in rows]
            print(f"| {wl.name} {size} | {t[0]:.1f} | {t[1]:.1f} | {t[2]:.1f} | "
                  f"{t[1] / t[0]:.2f} | {t[2] / t[0]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
