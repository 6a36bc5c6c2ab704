"""Math functions on the CPU device: the CPU recipe's vector builtins against its
scalar loop and numpy, in one run.

Each row times ``out[...] = fl.f(x)`` (and ``fl.f(x, y)``) on 2^N elements three
ways, their runs interleaved so that each sees the same phase of the machine:

* fuseloop with its CPU recipe, which applies math builtins to 8 lanes at a time
  (``fuseloop.recipes.cpu_vector``);
* fuseloop with the recipe's chunked loop alone (the builtins called per element,
  as before the vector form): registered here as a recipe for this run;
* numpy on the host, into a preallocated array.

float32 ``sin`` goes through ``double4`` in the recipe (PoCL's float8 ``sin`` is
wrong in mixed lanes; see ``probes/cpu_vector_math_probe.py --lanes``).  Every result is
compared with numpy in float64 (largest error relative to ``max(|want|, 1)`` for
float32, ``|want|`` for float64).

Usage::

    python benchmarks/bench_cpu_math.py [--size LOG2] [--repeat R] [--out F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import loopy as lp
import numpy as np

import fuseloop as fl
from fuseloop.recipes import CPU_CHUNK

CASES = [  # (function, dtype, argument range of x, of y or None)
    ("exp", np.float32, (-10, 10), None),
    ("log", np.float32, (1e-3, 100), None),
    ("tanh", np.float32, (-5, 5), None),
    ("expm1", np.float32, (-5, 5), None),
    ("cbrt", np.float32, (-100, 100), None),
    ("arctan2", np.float32, (-10, 10), (-10, 10)),
    ("power", np.float32, (0.1, 10), (-3, 3)),
    ("sin", np.float32, (-100, 100), None),
    ("exp", np.float64, (-10, 10), None),
    ("sin", np.float64, (-100, 100), None),
    ("log", np.float64, (1e-3, 100), None),
]


def scalar_chunks(t_unit: lp.TranslationUnit, device: Any) -> lp.TranslationUnit:
    """The CPU recipe without vector builtins: one chunk per work-item."""
    return lp.split_iname(t_unit, "i", CPU_CHUNK, outer_tag="g.0")


def timed(fn: Any, sync: Any) -> float:
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=22)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    fl.set_device("cpu")
    dev = fl.get_device()
    n = 1 << args.size
    rng = np.random.default_rng(0)
    from fuseloop.recipes import recipe_for

    vector_recipe = recipe_for(dev)
    rows = []
    for op, dtype, xr, yr in CASES:
        xh = rng.uniform(*xr, n).astype(dtype)
        yh = rng.uniform(*yr, n).astype(dtype) if yr else None
        x = fl.asarray(xh)
        y = fl.asarray(yh) if yh is not None else None
        out = fl.empty_like(x)
        host_out = np.empty_like(xh)
        fn = getattr(fl, op)
        np_fn = getattr(np, op)
        want = (np_fn(xh.astype(np.float64)) if yh is None
                else np_fn(xh.astype(np.float64), yh.astype(np.float64)))

        def run_fl(fn: Any = fn, x: Any = x, y: Any = y, out: Any = out) -> None:
            out[...] = fn(x) if y is None else fn(x, y)

        def run_np(np_fn: Any = np_fn, xh: Any = xh, yh: Any = yh,
                   host_out: Any = host_out) -> None:
            if yh is None:
                np_fn(xh, out=host_out)
            else:
                np_fn(xh, yh, out=host_out)

        results: dict[str, Any] = {}
        times: dict[str, list[float]] = {"vector": [], "scalar": [], "numpy": []}
        for label in ("vector", "scalar"):  # compile and check both first
            fl.register_recipe("cpu", vector_recipe.transform if label == "vector"
                               else scalar_chunks, name=f"bench-{label}",
                               version=vector_recipe.version)
            run_fl()
            results[label] = out.get()
        run_np()
        for _ in range(args.repeat):
            for label in ("vector", "scalar"):
                fl.register_recipe("cpu", vector_recipe.transform if label == "vector"
                                   else scalar_chunks, name=f"bench-{label}",
                                   version=vector_recipe.version)
                times[label].append(timed(run_fl, fl.synchronize))
            times["numpy"].append(timed(run_np, lambda: None))
        fl.register_recipe("cpu", vector_recipe.transform, name=vector_recipe.name,
                           version=vector_recipe.version)
        scale = np.maximum(np.abs(want), 1.0 if dtype is np.float32 else 1e-300)
        row = {"function": op, "dtype": np.dtype(dtype).name, "elements": n}
        for label in ("vector", "scalar", "numpy"):
            row[f"{label}_ms"] = statistics.median(times[label]) * 1e3
        for label, got in (("vector", results["vector"]), ("scalar", results["scalar"]),
                           ("numpy", host_out)):
            with np.errstate(invalid="ignore"):
                row[f"{label}_max_rel_err"] = float(np.nanmax(np.abs(got - want) / scale))
        row["vector_speedup_over_scalar"] = row["scalar_ms"] / row["vector_ms"]
        row["vector_over_numpy_time"] = row["vector_ms"] / row["numpy_ms"]
        rows.append(row)
        print(f"{op:8s} {row['dtype']:8s} vector {row['vector_ms']:7.2f} ms  scalar "
              f"{row['scalar_ms']:7.2f} ms  numpy {row['numpy_ms']:7.2f} ms  "
              f"speed-up {row['vector_speedup_over_scalar']:5.2f}x  "
              f"vector/numpy time {row['vector_over_numpy_time']:5.2f}  "
              f"max rel err {row['vector_max_rel_err']:.1e} / "
              f"{row['scalar_max_rel_err']:.1e} / {row['numpy_max_rel_err']:.1e}",
              flush=True)
    print(f"{dev.name}: 2^{args.size} elements, median of {args.repeat} interleaved runs")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": dev.name, "elements": n, "repeat": args.repeat,
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
