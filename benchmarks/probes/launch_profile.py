"""Where one call of a multi-launch operation spends its device time: every launch of
the call timed alone (a wait before and after it), grouped by kernel name.

Usage: ``python benchmarks/probes/launch_profile.py [--device SPEC] [--n 4096] OP ...``
with OP among ``cholesky``, ``solve``, ``solve_triangular``, ``inv``.  Timings are
reported, never asserted; each includes the device's launch and wait latency, so the
launches sum to more than the call streamed (also printed).
"""

from __future__ import annotations

import argparse
import collections
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop import evaluate, launching, run_plans


def _ops(n: int) -> dict[str, Callable[[], Any]]:
    rng = np.random.default_rng(0)
    h = rng.random((n, n), dtype=np.float32)
    spd = fl.asarray(h @ h.T / n + np.eye(n, dtype=np.float32))
    a = fl.asarray(h + n * np.eye(n, dtype=np.float32))
    b = fl.asarray(rng.random(n, dtype=np.float32))
    rhs = fl.asarray(rng.random((n, 256), dtype=np.float32))
    return {"cholesky": lambda: fl.linalg.cholesky(spd),
            "solve": lambda: fl.linalg.solve(a, b),
            "solve_triangular": lambda: fl.linalg.solve_triangular(fl.linalg.cholesky(spd),
                                                                   rhs, lower=True),
            "inv": lambda: fl.linalg.inv(a)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("ops", nargs="*", default=["cholesky", "solve"])
    args = ap.parse_args()
    if args.device:
        fl.set_device(args.device)
    ops = _ops(args.n)
    stages: dict[str, list[float]] = collections.defaultdict(list)
    original = launching.enqueue

    def timed(plan: Any, *rest: Any, **kw: Any) -> None:
        fl.synchronize()
        t0 = time.perf_counter()
        original(plan, *rest, **kw)
        fl.synchronize()
        stages[plan.compiled.plan.name].append(time.perf_counter() - t0)

    for name in args.ops:
        call = ops[name]
        r = call()
        if hasattr(r, "eval"):
            r.eval()
        fl.synchronize()
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = call()
            if hasattr(r, "eval"):
                r.eval()
            fl.synchronize()
            best = min(best, time.perf_counter() - t0)
        stages.clear()
        for mod in (launching, evaluate, run_plans):
            mod.enqueue = timed  # type: ignore[attr-defined]
        try:
            r = call()
            if hasattr(r, "eval"):
                r.eval()
            fl.synchronize()
        finally:
            for mod in (launching, evaluate, run_plans):
                mod.enqueue = original  # type: ignore[attr-defined]
        total = sum(sum(ts) for ts in stages.values())
        print(f"{name} n={args.n}: {best * 1e3:.2f} ms a call; launches alone sum to "
              f"{total * 1e3:.2f} ms over {sum(len(ts) for ts in stages.values())} launches")
        for kernel, ts in sorted(stages.items(), key=lambda kv: -sum(kv[1])):
            print(f"  {kernel[:44]:<44} x{len(ts):<5} total {sum(ts) * 1e3:8.2f} ms, "
                  f"median {sorted(ts)[len(ts) // 2] * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
