"""Run plans per statement length: a loop whose statements have more distinct lengths than
the plans kept (``run_plans.PLANS_MAX``) records every statement afresh (issue 26).

NPBench's trisolv (``x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]``), durbin, covariance and
correlation loop over ``i`` with slices of length ``i``: the kernels are shape-generic, but a
run plan's key holds the shapes, so each length is a structure of its own, and past
``PLANS_MAX`` of them the plans are all dropped, so a repeated run finds none.  This probe
times the trisolv loop (CPU time per statement, each run a fresh ``x``) for ``n`` below and
above the cap, and with the cap raised, on the default device (use ``FUSELOOP_HOST_PATH=0``
on a CPU to see the device path).  Reported, never asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/plans_per_length.py [--n 1000 2000] [--cap 8192]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
import fuseloop as fl
from fuseloop import run_plans


def _runs(n: int, runs: int) -> list[float]:
    rng = np.random.default_rng(0)
    lh = np.tril(rng.random((n, n))) + n * np.eye(n)
    bh = rng.random(n)
    out = []
    for _ in range(runs):
        L, b, x = fl.asarray(lh), fl.asarray(bh), fl.zeros(n)
        fl.synchronize()
        t = time.process_time()
        for i in range(n):
            x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
        fl.synchronize()
        out.append((time.process_time() - t) / n * 1e6)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 2000])
    ap.add_argument("--cap", type=int, default=8192, help="the raised PLANS_MAX")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    default = run_plans.PLANS_MAX
    print(f"device: {fl.get_device().name}; CPU us per statement, run by run")
    for cap in (default, args.cap):
        run_plans.PLANS_MAX = cap
        for n in args.n:
            fl.clear_caches()
            times = " ".join(f"{t:7.0f}" for t in _runs(n, args.runs))
            print(f"PLANS_MAX {cap:6}  n {n:6}: {times}")
    run_plans.PLANS_MAX = default


if __name__ == "__main__":
    main()
