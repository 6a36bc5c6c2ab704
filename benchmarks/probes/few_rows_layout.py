"""gpu-rows on few short rows: the short layout (a work-item per row) against a group per
row, which the rule gives launches of fewer than ``short_rows`` rows (issue 26: a loop's
dot products, one row each, then share one kernel for all lengths up to 511).

For ``R`` rows of ``p`` float32 elements (``sum(x, axis=1)``; ``--op max`` too), times
each call (eval then synchronize: a loop's statement) and pipelined calls (``--batch``
evals, one synchronize: the device's own rate), with ``short_rows=1`` (every count of
short rows walked by a work-item each: the rule before) and the default
(``short_rows=32``), the variants interleaved.  Prints microseconds per call; checks
results against numpy.  Timings are reported, never asserted.

    python benchmarks/probes/few_rows_layout.py [--rows 1 4 16 31 32 64 256]
        [--lengths 3 16 32] [--op sum max] [--repeat 200] [--batch 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
os.environ.setdefault("FUSELOOP_HOST_PATH", "0")  # (small work on a CPU device: kernels too)
import numpy as np

import fuseloop as fl
from fuseloop.recipes import gpu_rows


def _per_call(fn: Callable[[], Any], repeat: int) -> float:
    fl.synchronize()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        fl.synchronize()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def _pipelined(fn: Callable[[], Any], batch: int) -> float:
    fl.synchronize()
    t = time.perf_counter()
    for _ in range(batch):
        fn()
    fl.synchronize()
    return (time.perf_counter() - t) / batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 31, 32, 64, 256])
    ap.add_argument("--lengths", type=int, nargs="+", default=[3, 16, 32])
    ap.add_argument("--op", nargs="+", default=["sum"], choices=["sum", "max"])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"device: {fl.get_device().name}", flush=True)
    variants = {"short_rows=1": gpu_rows.with_params(short_rows=1), "default": gpu_rows}
    rng = np.random.default_rng(0)
    for op in args.op:
        for p in args.lengths:
            for r in args.rows:
                h = rng.random((r, p), dtype=np.float32)
                x = fl.asarray(h)
                best: dict[str, list[float]] = {k: [1e9, 1e9] for k in variants}
                for _ in range(args.rounds):
                    for name, recipe in variants.items():
                        with fl.recipes.use(recipe):
                            def call(x: Any = x, op: str = op) -> Any:
                                return getattr(x, op)(axis=1).eval()
                            got = getattr(x, op)(axis=1).get()
                            np.testing.assert_allclose(got, getattr(h, op)(axis=1),
                                                       rtol=1e-5)
                            best[name][0] = min(best[name][0], _per_call(call, args.repeat))
                            best[name][1] = min(best[name][1], _pipelined(call, args.batch))
                line = "  ".join(f"{k}: {1e6 * v[0]:6.1f} / {1e6 * v[1]:6.1f} us"
                                 for k, v in best.items())
                print(f"{op} {r:5d} x {p:3d}  (per call / pipelined)  {line}", flush=True)


if __name__ == "__main__":
    main()
