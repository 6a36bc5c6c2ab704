"""The CPU reduction kernels of several fuseloop revisions, launched alone through
pyopencl on the same buffers, interleaved (A, B, A, B, ...), on the CPU clock.

Each revision generates its kernel for each workload (``fl.program(...).compile()``:
source, arguments, grid); this script builds every source in one context and times
only the launches, so fuseloop's host work and its waits do not blur a difference in
the generated code.  Outputs are compared byte for byte.  Timings are reported, never
asserted.  Row reductions of rows of 32 to 1024 (``cpu-rows``), a middle-axis and a
column reduction:

    python benchmarks/probes/cpu_rows_kernels_ab.py REV [REV ...] [--rounds 31]
        [--only NAME,...]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from benchmarks.compare_host_overhead import copy_packages

# name: (shape, dtype, expression)
CASES: dict[str, tuple[tuple[int, ...], str, str]] = {
    "sum-rows-32": ((32768, 32), "float32", "m.sum(x, axis=1)"),
    "sum-rows-64": ((16384, 64), "float32", "m.sum(x, axis=1)"),
    "sum-rows-128": ((8192, 128), "float32", "m.sum(x, axis=1)"),
    "sum-rows-1024": ((1024, 1024), "float32", "m.sum(x, axis=1)"),
    "sum-rows-16": ((65536, 16), "float32", "m.sum(x, axis=1)"),
    "int-sum-rows-256": ((4096, 256), "int32", "m.sum(x, axis=1)"),
    "max-rows-64": ((16384, 64), "float32", "m.max(x, axis=1)"),
    "argmax-rows-64": ((16384, 64), "float32", "m.argmax(x, axis=1)"),
    "argmax-rows-1024": ((1024, 1024), "float32", "m.argmax(x, axis=1)"),
    "var-rows-100": ((10000, 100), "float32", "m.var(x, axis=1)"),
    "sum-last-of-3d": ((128, 128, 64), "float32", "m.sum(x, axis=2)"),
    "softmax-rows-128": ((8192, 128), "float32",
                         "(lambda e: e / m.sum(e, axis=-1, keepdims=True))"
                         "(m.exp(x - m.max(x, axis=-1, keepdims=True)))"),
    "int-max-cols": ((1024, 1024), "int32", "m.max(x, axis=0)"),
}


def _data(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    if np.dtype(dtype).kind == "f":
        return rng.random(shape).astype(dtype)
    return rng.integers(-1000, 1000, shape).astype(dtype)


def _kernel(fl: Any, case: tuple[tuple[int, ...], str, str]) -> dict[str, Any]:
    """Source, argument names, grid and integer argument values of ``case``'s kernel."""
    shape, dtype, text = case
    expr = eval("lambda m, x: " + text)  # (the probe's own table above)
    p = fl.program(expr(fl, fl.asarray(_data(shape, dtype))))
    k = p.compile()
    scalars, params = iter(p.bindings.scalars), iter(p.bindings.params)
    values = {n: int(next(scalars)) for n in k.arg_names if n.startswith("s")}
    values.update({n: int(next(params)) for n in k.arg_names if n.startswith("p")})
    outputs = int(np.prod(p.bindings.out_shape))
    values["NE"] = shape[-1]
    values["N"] = outputs // shape[-1] if "NE" in k.arg_names else outputs
    return {"src": k.source, "args": k.arg_names, "grid": k.grid, "values": values}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions, or WT for the working tree")
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--only", default="", help="comma-separated case names")
    args = ap.parse_args()
    import pyopencl as cl

    _, names = copy_packages(args.revs, "rowsab")
    mods = [importlib.import_module(name) for name in names]
    cases = {k: v for k, v in CASES.items() if not args.only or k in args.only.split(",")}
    # (pip's PoCL, fuseloop's default CPU runtime: the revisions generated for it)
    pocl = [p for p in cl.get_platforms() if "Portable" in p.name]
    ctx = cl.Context(pocl[0].get_devices())
    queue = cl.CommandQueue(ctx)
    flags = cl.mem_flags
    print(f"{args.rounds} interleaved rounds; CPU-clock ms per launch, median")
    print("| case | " + " | ".join(args.revs) + " | outputs |")
    print("| --- |" + " ---: |" * len(args.revs) + " --- |")
    for name, case in cases.items():
        data = cl.Buffer(ctx, flags.READ_ONLY | flags.COPY_HOST_PTR,
                         hostbuf=_data(case[0], case[1]))
        launches, outs = [], []
        for fl in mods:
            k = _kernel(fl, case)
            out = cl.Buffer(ctx, flags.READ_WRITE | flags.COPY_HOST_PTR,
                            hostbuf=np.zeros(1 << 22, np.uint8))
            kern = cl.Program(ctx, k["src"]).build().all_kernels()[0]
            kern.set_args(*[out if a.startswith("out") else data if a.startswith("in")
                            else np.int32(k["values"][a]) for a in k["args"]])
            launches.append((kern, tuple(k["grid"][0]), tuple(k["grid"][1])))
            outs.append(out)
        times: list[list[float]] = [[] for _ in launches]
        for r in range(args.rounds + 1):
            for v, (kern, glob, loc) in enumerate(launches):
                t0 = time.process_time()
                cl.enqueue_nd_range_kernel(queue, kern, glob, loc)
                queue.finish()
                if r:  # (the first round builds caches and pages)
                    times[v].append((time.process_time() - t0) * 1e3)
        got = []
        for out in outs:
            host = np.empty(1 << 22, np.uint8)
            cl.enqueue_copy(queue, host, out)
            got.append(host)
        queue.finish()
        same = all((g == got[0]).all() for g in got)
        print(f"| {name} | " + " | ".join(f"{statistics.median(t):.3f}" for t in times)
              + f" | {'same' if same else 'DIFFER'} |")


if __name__ == "__main__":
    main()
