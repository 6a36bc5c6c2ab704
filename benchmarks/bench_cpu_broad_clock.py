"""Broad-suite workloads on the CPU timed by process CPU time, fuseloop and numpy interleaved.

On a shared machine the suite's wall-clock medians move with other sessions' load;
``time.process_time`` counts only this process's threads (PoCL's among them).  Each
workload's float32 inputs come from the suite's own maker; fuseloop's result (fetched to
the host, as the suite does) is checked against numpy's.  Ratios > 1: fuseloop faster.

Usage (from the checkout's root; ``PYTHONPATH=.`` so this checkout's fuseloop is timed,
not an installed one)::

    PYTHONPATH=. python benchmarks/bench_cpu_broad_clock.py [--size-log2 20] [--repeat 15]
                                               [--workloads argmax-rows,sum-axes02,...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.broad import BROAD, NP_OPS

DEFAULT = ("argmax-rows,argmin-all,sum-axes02,int-max-cols,stencil-3d,cross-entropy,"
           "logsumexp-rows,sum-all-keepdims,int-sum-rows")


def cpu_ms(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        c0 = time.process_time()
        fn()
        times.append(time.process_time() - c0)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-log2", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--workloads", default=DEFAULT)
    args = ap.parse_args()
    by_name = {w.name: w for w in BROAD}
    rng = np.random.default_rng(0)
    print(f"device: {fl.get_device()}  size 2^{args.size_log2}, CPU ms (median of "
          f"{args.repeat})")
    print(f"{'workload':<18} {'fl cpu ms':>10} {'np cpu ms':>10} {'vs numpy':>9}  ok")
    for name in args.workloads.split(","):
        w = by_name[name]
        host = w.make_inputs(1 << args.size_log2, rng)
        arrays = [host[k] for k in w.inputs]
        dev = [fl.asarray(a) for a in arrays]
        run, fetch = w.fuseloop(*dev)

        def run_fl(run: Callable[[], Any] = run, fetch: Callable[[], Any] = fetch) -> Any:
            run()
            return fetch()

        def run_np(w: Any = w, arrays: list[np.ndarray] = arrays) -> Any:
            return w.peer(NP_OPS, *arrays)

        got, want = run_fl(), run_np()
        ok = all(np.allclose(np.asarray(g), np.asarray(r), rtol=1e-3, atol=1e-3)
                 for g, r in zip(got if isinstance(got, tuple) else (got,),
                                 want if isinstance(want, tuple) else (want,), strict=True))
        run_fl(), run_np()
        f = cpu_ms(run_fl, args.repeat)
        n = cpu_ms(run_np, args.repeat)
        print(f"{name:<18} {f:>10.3f} {n:>10.3f} {n / f:>9.2f}  {ok}", flush=True)


if __name__ == "__main__":
    main()
