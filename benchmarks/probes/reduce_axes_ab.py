"""Reductions over the trailing axis and others not next to it (``X.sum(axis=(0, 2))``),
two checkouts against each other and numpy, on the CPU device.

``ops.reductions`` reduces such an array in two steps on a CPU: the trailing rows first,
or, where the other reduced axes shrink the array ``COLUMNS_FIRST_MIN`` times or more,
those first (a column walk keeping the trailing run).  This probe times one shape list
(float32 and float64, ``sum`` and ``max``) under each checkout in its own process,
alternating the processes ``--rounds`` times; each process reports, per case, the least
and the median time of ``--reps`` calls (``.eval()`` then ``fl.synchronize()``; CPU
clock and wall clock) and numpy's.  The least is the figure to compare on a loaded
machine; reported, never asserted.

    python benchmarks/probes/reduce_axes_ab.py /work/main /work/wt/cpuslow
        [--shapes 128x128x64,64x1024x64,32x256x256,16x64x1024,4x256x1024] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import json, sys, time
import numpy as np
import fuseloop as fl

def timed(f, reps):
    for _ in range(3):
        f()
    cpu, wall = [], []
    for _ in range(reps):
        c, w = time.process_time(), time.perf_counter()
        f()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return min(cpu), sorted(cpu)[reps // 2], min(wall), sorted(wall)[reps // 2]

out = {}
for text in sys.argv[1].split(","):
    shape = tuple(int(v) for v in text.split("x"))
    axes = (0, len(shape) - 1)
    for dt in (np.float32, np.float64):
        h = np.random.default_rng(0).random(shape).astype(dt)
        x = fl.asarray(h)
        for op in ("sum", "max"):
            got = getattr(x, op)(axis=axes).get()
            assert np.allclose(got, getattr(h, op)(axis=axes), rtol=1e-4), (text, op)
            name = f"{text} {np.dtype(dt).name} {op}"
            out[name] = {
                "fl": timed(lambda: (getattr(x, op)(axis=axes).eval(), fl.synchronize()),
                            int(sys.argv[2])),
                "np": timed(lambda: getattr(h, op)(axis=axes), int(sys.argv[2]))}
print(json.dumps({"file": fl.__file__, "cases": out}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkouts", nargs=2, help="two checkout roots (A, then B)")
    ap.add_argument("--shapes", default="128x128x64,64x1024x64,32x256x256,16x64x1024,"
                    "4x256x1024")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {c: [] for c in args.checkouts}
    for _ in range(args.rounds):
        for root in args.checkouts:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(root)}
            done = subprocess.run([sys.executable, "-c", _CHILD, args.shapes, str(args.reps)],
                                  env=env, cwd=os.path.abspath(root), capture_output=True,
                                  text=True, check=True)
            runs[root].append(json.loads(done.stdout.strip().splitlines()[-1]))
    a, b = args.checkouts
    print(f"A = {runs[a][0]['file']}\nB = {runs[b][0]['file']}")
    print("ms: least over rounds of each process's least (median of medians); CPU clock")
    print("| case | A | B | numpy | numpy/A | numpy/B |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for case in runs[a][0]["cases"]:
        least = {(root, lib): min(r["cases"][case][lib][0] for r in runs[root]) * 1e3
                 for root in (a, b) for lib in ("fl", "np")}
        median = {root: statistics.median(r["cases"][case]["fl"][1] for r in runs[root]) * 1e3
                  for root in (a, b)}
        ta, tb, tn = least[a, "fl"], least[b, "fl"], least[a, "np"]
        print(f"| {case} | {ta:.3f} ({median[a]:.3f}) | {tb:.3f} ({median[b]:.3f})"
              f" | {tn:.3f} | {tn / ta:.2f} | {tn / tb:.2f} |")

if __name__ == "__main__":
    main()
