"""Row reductions with math functions on the CPU device: the reduction recipe's
vector builtins against its scalar loops and numpy, in one run.

Each workload is timed three ways, runs interleaved so that each sees the same
phase of the machine:

* fuseloop with its CPU reduction recipe (``cpu_rows``), which on PoCL applies
  math builtins to 8 lanes at a time in reductions over rows and in the loop over
  a row's elements (``fuseloop.recipes.cpu_vector``);
* fuseloop with the same recipe told the device is not PoCL (the builtins called
  per element, and one accumulator per reduction in kernels of several rows per
  work-item: the recipe as it was before): registered here for this run;
* numpy on the host.

Workloads: row softmax ``e = exp(x - max); e / sum(e)`` (float32 and float64), row
logsumexp ``m + log(sum(exp(x - m)))``, and ``sum(exp(x))`` over long rows (one
row's pieces per work-item).  Every result is compared with numpy in float64
(largest error relative to the largest magnitude of the reference).  GB/s counts
one read of the input and one write of the output.

Usage::

    python benchmarks/bench_cpu_rows.py [--rows-log2 R] [--cols-log2 C] [--repeat N]
                                        [--out F]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import loopy as lp
import numpy as np

import fuseloop as fl
from fuseloop.recipes import recipe_for
from fuseloop.recipes.rows import cpu_rows


def scalar_rows(t_unit: lp.TranslationUnit, device: Any) -> lp.TranslationUnit:
    """The CPU reduction recipe as on a CPU platform other than PoCL (no vectors)."""
    return cpu_rows(t_unit, dataclasses.replace(device, platform="(scalar builtins)"))


def timed(fn: Callable[[], Any], sync: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def workloads(rows: int, cols: int, long_rows: int, long_cols: int
              ) -> list[tuple[str, np.ndarray, Callable, Callable]]:
    """(name, input, fuseloop function of an array, numpy function of an array)."""
    rng = np.random.default_rng(0)

    def softmax_fl(x: Any) -> Any:
        e = fl.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def softmax_np(h: np.ndarray) -> np.ndarray:
        e = np.exp(h - h.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def logsumexp_fl(x: Any) -> Any:
        m = x.max(axis=-1, keepdims=True)
        return m + fl.log(fl.exp(x - m).sum(axis=-1, keepdims=True))

    def logsumexp_np(h: np.ndarray) -> np.ndarray:
        m = h.max(axis=-1, keepdims=True)
        return m + np.log(np.exp(h - m).sum(axis=-1, keepdims=True))

    def sum_exp_fl(x: Any) -> Any:
        return fl.exp(x).sum(axis=-1)

    def sum_exp_np(h: np.ndarray) -> np.ndarray:
        return np.exp(h).sum(axis=-1)

    h32 = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    long32 = rng.uniform(-4, 4, (long_rows, long_cols)).astype(np.float32)
    return [("softmax", h32, softmax_fl, softmax_np),
            ("softmax", h32.astype(np.float64), softmax_fl, softmax_np),
            ("logsumexp", h32, logsumexp_fl, logsumexp_np),
            ("sum(exp) long rows", long32, sum_exp_fl, sum_exp_np)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows-log2", type=int, default=12)
    ap.add_argument("--cols-log2", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    fl.set_device("cpu")
    dev = fl.get_device()
    rows, cols = 1 << args.rows_log2, 1 << args.cols_log2
    total = rows * cols
    long_rows = 16
    vector_recipe = recipe_for(dev, "reduction")
    recipes = {"vector": vector_recipe.transform, "scalar": scalar_rows}

    def use(label: str) -> None:
        fl.register_recipe("cpu", recipes[label], name=f"bench-rows-{label}",
                           version=vector_recipe.version, kind="reduction")

    results = []
    for name, h, fl_fn, np_fn in workloads(rows, cols, long_rows, total // long_rows):
        x = fl.asarray(h)
        want = np_fn(h.astype(np.float64))
        out = fl.empty(want.shape, dtype=h.dtype)
        scale = float(np.max(np.abs(want)))

        def run_fl(x: Any = x, out: Any = out, fl_fn: Any = fl_fn) -> None:
            out[...] = fl_fn(x)

        got: dict[str, np.ndarray] = {}
        times: dict[str, list[float]] = {"vector": [], "scalar": [], "numpy": []}
        for label in ("vector", "scalar"):  # compile and check both first
            use(label)
            run_fl()
            got[label] = out.get()
        got["numpy"] = np_fn(h)
        for _ in range(args.repeat):
            for label in ("vector", "scalar"):
                use(label)
                times[label].append(timed(run_fl, fl.synchronize))
            times["numpy"].append(timed(lambda h=h, np_fn=np_fn: np_fn(h), lambda: None))
        fl.register_recipe("cpu", vector_recipe.transform, name=vector_recipe.name,
                           version=vector_recipe.version, kind="reduction")
        nbytes = h.nbytes + out.nbytes
        row: dict[str, Any] = {"workload": name, "dtype": h.dtype.name, "shape": h.shape}
        for label in ("vector", "scalar", "numpy"):
            t = statistics.median(times[label])
            row[f"{label}_ms"] = t * 1e3
            row[f"{label}_GBps"] = nbytes / t / 1e9
            row[f"{label}_max_rel_err"] = float(np.max(np.abs(got[label] - want)) / scale)
        row["vector_speedup_over_scalar"] = row["scalar_ms"] / row["vector_ms"]
        row["numpy_time_over_vector"] = row["numpy_ms"] / row["vector_ms"]
        results.append(row)
        print(f"{name:18s} {row['dtype']:7s} {h.shape[0]:5d}x{h.shape[1]:<7d} vector "
              f"{row['vector_ms']:7.2f} ms ({row['vector_GBps']:5.2f} GB/s)  scalar "
              f"{row['scalar_ms']:7.2f} ms  numpy {row['numpy_ms']:7.2f} ms  "
              f"speed-up {row['vector_speedup_over_scalar']:5.2f}x  "
              f"vs numpy {row['numpy_time_over_vector']:5.2f}x  max rel err "
              f"{row['vector_max_rel_err']:.1e} / {row['scalar_max_rel_err']:.1e} / "
              f"{row['numpy_max_rel_err']:.1e}", flush=True)
    print(f"{dev.name}: median of {args.repeat} interleaved runs")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": dev.name, "platform": dev.platform, "repeat": args.repeat,
                       "rows": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
