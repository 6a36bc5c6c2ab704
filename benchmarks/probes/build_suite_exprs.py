"""What one lazy call of a broad-suite workload builds before its evaluation, per revision.

Issue 25 (lazy calls never slower than torch eager): on the GPU a lazy call's host part is
as large as its kernel, and its first half is building the expression.  For the suite's
``layernorm``, ``cross-entropy``, ``horner-16``, ``stencil-3d`` and ``distances`` (their
generic functions and inputs, ``fuseloop.bench.broad``, through ``FuseloopOps``) this
probe builds the expression of one call without evaluating it, in each given revision
(loaded side by side, ``compare_host_overhead``), and reports:

* ``bytecodes``: Python bytecodes executed by one build (``sys.settrace`` opcode events:
  exact, the same on any machine);
* ``calls``: Python functions entered by one build;
* ``us``: CPU clock (``time.process_time``) per build, median of interleaved rounds
  (revision A, B, A, B, ...), the collector on.

Run with the host path off (nothing computed at once, as on a GPU)::

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/build_suite_exprs.py a87f94d WT
    python benchmarks/probes/build_suite_exprs.py a87f94d WT --device gpu   (GPU host)
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from compare_host_overhead import copy_packages

NAMES = ("layernorm", "cross-entropy", "horner-16", "stencil-3d", "distances")


def builder(fl: Any, name: str, n: int) -> Callable[[], Any]:
    """One build of workload ``name`` at ``n`` elements (or pairs) in package ``fl``."""
    broad = importlib.import_module(fl.__name__ + ".bench.broad")
    peers = importlib.import_module(fl.__name__ + ".bench.peers")
    w = next(w for w in broad.BROAD if w.name == name)
    inputs = w.make_inputs(n, np.random.default_rng(0))
    arrays = [fl.asarray(inputs[k]) for k in w.inputs]
    ops = peers.FuseloopOps(fl)
    expr = w.peer
    res = expr(ops, *arrays)  # (checked once against the reference, and warm)
    got = [r.get() for r in res] if isinstance(res, tuple) else [res.get()]
    want = w.reference(*[inputs[k] for k in w.inputs])
    want = list(want) if isinstance(want, tuple) else [want]
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-3)
    return lambda: expr(ops, *arrays)


def count(build: Callable[[], Any]) -> tuple[int, int]:
    """Bytecodes executed and Python functions entered by one ``build()``."""
    seen = [0, 0]

    def trace(frame: Any, event: str, arg: Any) -> Any:
        if event == "call":
            seen[1] += 1
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
        elif event == "opcode":
            seen[0] += 1
        return trace

    build()
    sys.settrace(trace)
    try:
        build()
    finally:
        sys.settrace(None)
    return seen[0], seen[1] - 1  # (the lambda itself aside)


def timed(build: Callable[[], Any], reps: int) -> float:
    t0 = time.process_time()
    for _ in range(reps):
        build()
    return (time.process_time() - t0) / reps * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions or folders (WT: the working tree)")
    ap.add_argument("--n", type=int, default=4096, help="elements or pairs")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--device", default="cpu", help="device spec (default: cpu)")
    args = ap.parse_args()
    names = copy_packages(args.revs, "suitebuild")[1]
    builds = {}
    for rev, name in zip(args.revs, names):
        fl = importlib.import_module(name)
        fl.set_device(args.device)
        for w in NAMES:
            builds[w, rev] = builder(fl, w, args.n)
    times: dict[tuple[str, str], list[float]] = {key: [] for key in builds}
    for _ in range(args.rounds):
        for key, build in builds.items():
            times[key].append(timed(build, args.reps))
    print(f"one build of each workload's expression, n={args.n} (us: CPU clock, median of "
          f"{args.rounds} interleaved rounds)")
    print("| workload | revision | bytecodes | calls | us |")
    print("| --- | --- | ---: | ---: | ---: |")
    for (w, rev), build in builds.items():
        ops, calls = count(build)
        print(f"| {w} | {rev} | {ops} | {calls} | {statistics.median(times[w, rev]):.1f} |")


if __name__ == "__main__":
    main()
