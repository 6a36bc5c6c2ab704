"""Where the microseconds of one lazy operator go: a 400-node build split into parts.

Issue 26 ("Small arrays") asks for the per-operation cost of building a lazy expression
to be halved.  This probe times, per operator of ``bench_lazy_build.py``'s chain
(``r = r * 0.999 + y``, 200 times) and tree (200 products with distinct scalars summed
pairwise), in each given revision (loaded side by side, ``compare_host_overhead``):

* ``floor``: the same Python loop with the operators replaced by a function that returns
  an operand (the caller's bytecode and Python's operator dispatch: what no change to
  the operator's body can remove);
* ``build``: the real build; ``build, gc off``: with Python's cyclic collector disabled
  (the difference is the collector's share: every node, array, scalar node and tuple
  an operator leaves alive counts towards its next young-generation collection);
* ``young collections``: collections per build, and ``objects``: tracked objects the
  built expression holds per node (nodes, arrays, tuples), what those collections scan.

CPU clock (``time.process_time``), fastest of ``--rounds`` rounds.  Reported, never
asserted.  Run with the host path off so that nothing is computed at once::

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/build_op_breakdown.py WT /work/main/.baseline
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_lazy_build import chain, tree
from compare_host_overhead import copy_packages

NODES = 400


def per_node(fn: Callable[[], Any], reps: int, rounds: int) -> float:
    """Fastest us per node of ``fn`` (one build) over ``rounds`` rounds of ``reps``."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(reps):
            fn()
        best = min(best, (time.process_time() - t0) / reps / NODES * 1e6)
    return best


def young_collections(fn: Callable[[], Any], reps: int) -> float:
    """Young-generation collections per build."""
    seen = [0]

    def count(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 0:
            seen[0] += 1
    gc.callbacks.append(count)
    try:
        for _ in range(reps):
            fn()
    finally:
        gc.callbacks.remove(count)
    return seen[0] / reps


def held_objects(array: Any) -> int:
    """Tracked objects (nodes, their tuples) reachable from ``array``'s node."""
    seen: set[int] = set()
    todo = [array._node]
    while todo:
        o = todo.pop()
        if id(o) in seen or not gc.is_tracked(o):
            continue
        seen.add(id(o))
        for name in ("args", "operands"):
            v = getattr(o, name, None)
            if isinstance(v, tuple) and gc.is_tracked(v) and id(v) not in seen:
                seen.add(id(v))
                todo.extend(c for c in v if hasattr(c, "dtype") and not hasattr(c, "nbytes"))
    return len(seen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions or folders (WT: the working tree)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    names = copy_packages(args.revs, "breakdown")[1]
    rng = np.random.default_rng(0)
    xh, yh = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    print(f"us per node of a {NODES}-node build (CPU clock, fastest of {args.rounds})")
    print("| revision | case | floor | build | build, gc off | collector | "
          "young collections / build | objects / node |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for rev, name in zip(args.revs, names):
        fl = importlib.import_module(name)
        x, y = fl.asarray(xh), fl.asarray(yh)
        for case, f in (("chain", chain), ("tree", tree)):
            np.testing.assert_allclose(f(fl, x, y).get(), f(np, xh, yh), rtol=1e-4)
            print(f"| {rev} | {case} | " + row(partial(f, fl, x, y), args.reps, args.rounds))


def row(build: Callable[[], Any], reps: int, rounds: int) -> str:
    """The table's figures for one build."""
    full = per_node(build, reps, rounds)
    gc.disable()
    try:
        quiet = per_node(build, reps, rounds)
    finally:
        gc.enable()
    collections = young_collections(build, reps)
    objects = held_objects(build()) / NODES
    cls = type(build.args[1])  # type: ignore[attr-defined]  # (the Array class)
    saved = cls.__mul__, cls.__add__
    cls.__mul__ = cls.__add__ = lambda a, b: a
    try:
        floor = per_node(build, reps, rounds)
    finally:
        cls.__mul__, cls.__add__ = saved
    return (f"{floor:.3f} | {full:.3f} | {quiet:.3f} | {full - quiet:.3f} | "
            f"{collections:.1f} | {objects:.2f} |")

if __name__ == "__main__":
    main()
