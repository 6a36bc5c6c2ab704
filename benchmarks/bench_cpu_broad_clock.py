"""Broad-suite workloads on the CPU timed by process CPU time, fuseloop and numpy interleaved.

On a shared machine the suite's wall-clock medians move with other sessions' load;
``time.process_time`` counts only this process's threads (PoCL's among them).  Each
workload's float32 inputs come from the suite's own maker; fuseloop's result (fetched to
the host, as the suite does) is checked against numpy's.  Ratios > 1: fuseloop faster.
The wall-clock median is printed alongside (PoCL's threads use both cores: its wall time
can be half its CPU time).

``--revs`` times several revisions of fuseloop in the same process (``WT``: the working
tree; a git revision; a folder holding ``fuseloop/``), in turn with numpy: each round
runs every revision once and numpy once, so all see the same phases of the machine.

Usage (from the checkout's root; ``PYTHONPATH=.`` so this checkout's fuseloop is timed,
not an installed one)::

    PYTHONPATH=. python benchmarks/bench_cpu_broad_clock.py [--sizes 16,20] [--repeat 15]
        [--matmul-sizes 256] [--workloads argmax-rows,sum-axes02,...|all] [--revs bdc485f,WT]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT = ("argmax-rows,argmin-all,sum-axes02,int-max-cols,stencil-3d,cross-entropy,"
           "logsumexp-rows,sum-all-keepdims,int-sum-rows")


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def _same(got: Any, want: Any) -> bool:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    return all(np.allclose(np.asarray(g), np.asarray(r), rtol=1e-3, atol=1e-3)
               for g, r in zip(got, want, strict=True))


def _modules(revs: str) -> list[Any]:
    if not revs:
        import fuseloop
        return [fuseloop]
    import fuseloop.bench.broad  # (this checkout's, imported first)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from compare_host_overhead import import_revisions
    mods = import_revisions(revs.split(","), "clock", device="cpu")
    # a copy's modules that ``import fuseloop as fl`` must bind the copy: imported now,
    # with the name pointing at it
    mine = sys.modules["fuseloop"]
    for mod in mods:
        sys.modules["fuseloop"] = mod
        try:
            for sub in (".bench.broad", ".numpy_misc", ".numpy_more", ".numpy_select",
                        ".numpy_sets", ".numpy_io"):
                importlib.import_module(mod.__name__ + sub)
        finally:
            sys.modules["fuseloop"] = mine
    return mods


def _case(mods: list[Any], name: str, size: int, repeat: int) -> list[str]:
    """One workload at one size: CPU ms of each revision and numpy, rounds interleaved."""
    broads = [importlib.import_module(m.__name__ + ".bench.broad") for m in mods]
    w0 = next(w for w in broads[0].BROAD if w.name == name)
    host = w0.make_inputs(size, np.random.default_rng(0))
    arrays = [host[k] for k in w0.inputs]
    runs: list[Callable[[], Any]] = []
    for fl, broad in zip(mods, broads):
        w = next(w for w in broad.BROAD if w.name == name)
        run, fetch = w.fuseloop(*[fl.asarray(a) for a in arrays])
        runs.append(lambda run=run, fetch=fetch: (run(), fetch())[1])
    np_ops = broads[0].NP_OPS
    runs.append(lambda: w0.peer(np_ops, *arrays))
    want = runs[-1]()
    ok = all(_same(r(), want) for r in runs[:-1])
    for r in runs:
        r()
    cpu: list[list[float]] = [[] for _ in runs]
    wall: list[list[float]] = [[] for _ in runs]
    for _ in range(repeat):
        for k, r in enumerate(runs):
            c, t = _timed(r)
            cpu[k].append(c)
            wall[k].append(t)
    c_med = [statistics.median(c) * 1e3 for c in cpu]
    w_med = [statistics.median(t) * 1e3 for t in wall]
    cols = [f"{c:9.3f} {c_med[-1] / c:6.2f} {w_med[-1] / t:6.2f}"
            for c, t in zip(c_med[:-1], w_med[:-1])]
    return [*cols, f"{c_med[-1]:9.3f}", "ok" if ok else "MISMATCH"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="20", help="log2 element counts, comma-separated")
    ap.add_argument("--matmul-sizes", default="256", help="orders of the matmul workloads")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--workloads", default=DEFAULT, help="names, comma-separated, or all")
    ap.add_argument("--revs", default="", help="revisions timed in turn (WT: working tree)")
    args = ap.parse_args()
    mods = _modules(args.revs)
    from fuseloop.bench.broad import BROAD
    by_name = {w.name: w for w in BROAD}
    names = list(by_name) if args.workloads == "all" else args.workloads.split(",")
    labels = args.revs.split(",") if args.revs else ["fuseloop"]
    print(f"device: {mods[0].get_device()}; CPU ms (median of {args.repeat}), numpy's CPU "
          "and wall time over each revision's")
    head = "".join(f" {lab[:9]:>9} {'cpu x':>6} {'wall x':>6}" for lab in labels)
    print(f"{'workload':<18} {'size':>6}{head} {'numpy ms':>9}")
    for name in names:
        w = by_name[name]
        sizes = (w.sizes or [int(s) for s in args.matmul_sizes.split(",")]
                 if w.sizes or w.kind == "matmul"
                 else [1 << int(s) for s in args.sizes.split(",")])
        for size in sizes:
            cols = _case(mods, name, size, args.repeat)
            label = str(size) if w.kind == "matmul" or w.sizes else f"2^{size.bit_length() - 1}"
            print(f"{name:<18} {label:>6} {' '.join(cols)}", flush=True)


if __name__ == "__main__":
    main()
