"""Run plans per statement length: loops whose statements have a new length every
iteration (issue 26): how many plans they record and what a statement costs.

NPBench's trisolv (``x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]``), cholesky
(``A[i, j] -= A[i, :j] @ A[j, :j]``), lu (``A[i, j] -= A[i, :i] @ A[:i, j]``), durbin,
covariance and correlation loop over ``i`` with slices of length ``i``.  The kernels are
shape-generic; a run plan's key writes each length as a symbol with its class, and a plan
follows the lengths of its key once two records agree (``fuseloop.plan_lengths``).  This
probe times each loop (CPU time per statement, run by run, the first run recording plans:
kernels are built before it) for ``n`` below and above ``run_plans.PLANS_MAX``, and prints
``fl.stats()``'s ``plans_recorded`` per run (``-`` on revisions without the counter).  Run
with ``FUSELOOP_HOST_PATH=0`` on a CPU to see the device path.  Reported, never asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/plans_per_length.py [--n 1000 2000]
        [--pattern trisolv cholesky lu] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
import fuseloop as fl
from fuseloop import run_plans


def _trisolv(n: int) -> Callable[[], int]:
    rng = np.random.default_rng(0)
    lh = np.tril(rng.random((n, n))) + n * np.eye(n)
    bh = rng.random(n)
    L, b = fl.asarray(lh), fl.asarray(bh)

    def run() -> int:
        x = fl.zeros(n)
        for i in range(n):
            x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
        return n
    return run


def _cholesky(n: int) -> Callable[[], int]:
    rng = np.random.default_rng(1)
    m = rng.random((n, n))
    spd = m @ m.T + n * np.eye(n)

    def run() -> int:
        a = fl.asarray(spd)
        a[0, 0] = fl.sqrt(a[0, 0])
        for i in range(1, n):
            for j in range(i):
                a[i, j] -= a[i, :j] @ a[j, :j]
                a[i, j] /= a[j, j]
            a[i, i] = fl.sqrt(a[i, i] - a[i, :i] @ a[i, :i])
        return n * (n - 1) + n
    return run


def _lu(n: int) -> Callable[[], int]:
    rng = np.random.default_rng(2)
    start = rng.random((n, n)) + n * np.eye(n)

    def run() -> int:
        a = fl.asarray(start)
        for i in range(n):
            for j in range(i):
                a[i, j] -= a[i, :j] @ a[:j, j]
                a[i, j] /= a[j, j]
            for j in range(i, n):
                a[i, j] -= a[i, :i] @ a[:i, j]
        return n * n + n * (n - 1) // 2
    return run


PATTERNS = {"trisolv": _trisolv, "cholesky": _cholesky, "lu": _lu}


def _recorded() -> str:
    return str(fl.stats().get("plans_recorded", "-"))


def _runs(make: Callable[[int], Callable[[], int]], n: int, runs: int) -> list[str]:
    run = make(n)
    run()  # (kernels built; plans dropped below)
    fl.synchronize()
    run_plans.clear()
    out = []
    for _ in range(runs):
        fl.synchronize()
        fl.reset_stats()
        t = time.process_time()
        count = run()
        fl.synchronize()
        out.append(f"{(time.process_time() - t) / count * 1e6:6.0f} ({_recorded()})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 2000])
    ap.add_argument("--pattern", nargs="+", default=["trisolv"], choices=sorted(PATTERNS))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"device: {fl.get_device().name}; PLANS_MAX {run_plans.PLANS_MAX}; CPU us per "
          "statement (plans recorded), run by run")
    for name in args.pattern:
        for n in args.n:
            print(f"{name:9} n {n:6}: " + "  ".join(_runs(PATTERNS[name], n, args.runs)))


if __name__ == "__main__":
    main()
