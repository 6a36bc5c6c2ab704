"""Run plans per statement length: loops whose statements have a new length every
iteration (issue 26): how many plans they record and what a statement costs.

NPBench's trisolv (``x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]``), cholesky
(``A[i, j] -= A[i, :j] @ A[j, :j]``), lu (``A[i, j] -= A[i, :i] @ A[:i, j]``), durbin,
covariance (``cov[i:, i] = cov[i, i:] = d[:, i] @ d[:, i:]``, 1800 rows) and correlation
loop over ``i`` with slices of length ``i``; ``lagsum`` (``s[i] = sum(x[i:] * y[:n-i])``)
is a loop of the kind tuned for none of them.  The kernels are shape-generic; a run
plan's key writes each length as a symbol with its class, and a plan follows the lengths
of its key once two records agree (``fuseloop.plan_lengths``).  This probe times each loop
(process CPU time per statement, run by run, with the main thread's CPU time after ``/``:
the host's share on a CPU device, whose kernels run on other threads; the first run
records plans: kernels are built before it) for ``n`` below and above
``run_plans.PLANS_MAX``, and prints ``fl.stats()``'s ``plans_recorded``, ``replayed``
and ``walked`` per run (``-`` on revisions without a counter).  Run with
``FUSELOOP_HOST_PATH=0`` on a CPU to see the device path.  Reported, never asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/plans_per_length.py [--n 1000 2000]
        [--pattern trisolv cholesky lu durbin covariance lagsum] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
from statement_layers import PATTERNS as LAYER_PATTERNS  # (shared with the per-layer probe)

import fuseloop as fl
from fuseloop import run_plans


def _covariance(n: int) -> tuple[Callable[[], Any], int]:
    d = fl.asarray(np.random.default_rng(4).random((1800, n)))

    def run() -> Any:
        cov = fl.zeros((n, n))
        for i in range(n):
            cov[i:n, i] = cov[i, i:n] = d[:, i] @ d[:, i:n]
        return cov
    return run, 2 * n


def _lagsum(n: int) -> tuple[Callable[[], Any], int]:
    rng = np.random.default_rng(5)
    x, y = fl.asarray(rng.random(n)), fl.asarray(rng.random(n))

    def run() -> Any:
        s = fl.zeros(n)
        for i in range(n):
            s[i] = fl.sum(x[i:] * y[:n - i])
        return s
    return run, n


PATTERNS = {**LAYER_PATTERNS, "covariance": _covariance, "lagsum": _lagsum}


def _counts() -> str:
    s = fl.stats()
    return "/".join(str(s.get(k, "-")) for k in ("plans_recorded", "plans_replayed",
                                                 "plans_walked"))


def _runs(make: Callable[[int], tuple[Callable[[], Any], int]], n: int,
          runs: int) -> list[str]:
    run, count = make(n)
    run()  # (kernels built; plans dropped below)
    fl.synchronize()
    run_plans.clear()
    out = []
    for _ in range(runs):
        fl.synchronize()
        fl.reset_stats()
        t, host = time.process_time(), time.thread_time()
        run()
        fl.synchronize()
        out.append(f"{(time.process_time() - t) / count * 1e6:5.0f}/"
                   f"{(time.thread_time() - host) / count * 1e6:.0f} ({_counts()})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 2000])
    ap.add_argument("--pattern", nargs="+", default=["trisolv"], choices=sorted(PATTERNS))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"device: {fl.get_device().name}; PLANS_MAX {run_plans.PLANS_MAX}; CPU us per "
          "statement/its host thread's (plans recorded/replayed/walked), run by run")
    for name in args.pattern:
        for n in args.n:
            print(f"{name:9} n {n:6}: " + "  ".join(_runs(PATTERNS[name], n, args.runs)))


if __name__ == "__main__":
    main()
