"""CPU arg-reductions, max/min and reductions sharing one walk, against numpy in one run.

Workloads: ``X.argmax(axis=1)``, ``X.max(axis=1)``, ``X.argmin(axis=1)`` on an
``R x C`` float32 matrix, ``x.argmin()`` and ``x.max()`` over a 2^N vector, and
``fl.compute(x.min(), x.max(), x.sum())`` (three reductions of one input), and
``X3.sum(axis=(0, 2))`` of a ``64 x R x 64`` float32 array.
Each is timed by process CPU time (``time.process_time``: every thread of this
process, PoCL's included, so another session's load on a shared machine does
not count) and by wall time, fuseloop and numpy interleaved; the results are
checked against numpy.  Ratios > 1 mean fuseloop is faster.

Usage::

    python benchmarks/bench_cpu_argreduce.py [--rows R] [--cols C] [--vec-log2 N]
                                             [--repeat K]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--vec-log2", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    mat = rng.standard_normal((args.rows, args.cols), dtype=np.float32)
    vec = rng.standard_normal(1 << args.vec_log2, dtype=np.float32)
    cube = rng.standard_normal((64, args.rows, 64), dtype=np.float32)
    dm, dv, dc = fl.asarray(mat), fl.asarray(vec), fl.asarray(cube)

    def trio(m: Any, x: Any) -> Any:
        if m is np:
            return x.min(), x.max(), x.sum()
        return fl.compute(x.min(), x.max(), x.sum())

    cases: list[tuple[str, Any, Any, Callable[[Any, Any], Any]]] = [
        ("argmax(axis=1)", dm, mat, lambda m, x: x.argmax(axis=1)),
        ("argmin(axis=1)", dm, mat, lambda m, x: x.argmin(axis=1)),
        ("max(axis=1)", dm, mat, lambda m, x: x.max(axis=1)),
        ("argmin() all", dv, vec, lambda m, x: x.argmin()),
        ("argmax() all", dv, vec, lambda m, x: x.argmax()),
        ("max() all", dv, vec, lambda m, x: x.max()),
        ("min,max,sum", dv, vec, trio),
        ("sum(axis=(0,2))", dc, cube, lambda m, x: x.sum(axis=(0, 2))),
    ]
    print(f"device: {fl.get_device()}  matrix {args.rows}x{args.cols} float32, "
          f"vector 2^{args.vec_log2} float32")
    print(f"{'workload':<16} {'fl cpu ms':>10} {'np cpu ms':>10} {'cpu ratio':>9} "
          f"{'fl wall ms':>10} {'np wall ms':>10} {'wall ratio':>10}  ok")
    for name, d, h, fn in cases:
        def run_fl(d: Any = d, fn: Callable = fn) -> Any:
            out = fn(fl, d)
            return [np.asarray(o) for o in out] if isinstance(out, tuple | list) \
                else np.asarray(out)

        def run_np(h: Any = h, fn: Callable = fn) -> Any:
            return fn(np, h)

        got, want = run_fl(), run_np()  # (warm-up: compiles)
        ok = all(np.allclose(np.asarray(g), np.asarray(w), rtol=1e-3, atol=1e-2)
                 for g, w in zip(got if isinstance(got, list) else [got],
                                 want if isinstance(want, tuple) else [want], strict=True))
        f_t, n_t = [], []
        for _ in range(args.repeat):
            f_t.append(timed(run_fl))
            n_t.append(timed(run_np))
        fc = statistics.median(t[0] for t in f_t) * 1e3
        fw = statistics.median(t[1] for t in f_t) * 1e3
        nc = statistics.median(t[0] for t in n_t) * 1e3
        nw = statistics.median(t[1] for t in n_t) * 1e3
        print(f"{name:<16} {fc:>10.2f} {nc:>10.2f} {nc / fc:>9.2f} {fw:>10.2f} {nw:>10.2f} "
              f"{nw / fw:>10.2f}  {ok}")


if __name__ == "__main__":
    main()
