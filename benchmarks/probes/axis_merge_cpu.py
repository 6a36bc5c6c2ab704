"""Reductions on the CPU device with the axis merge (``fuseloop.passes.axis_merge``) on and
off, one checkout, the two in alternating processes.

Per case (a float32 array's shape and the axes summed): the least CPU time
(``time.process_time``: PoCL's worker threads too) and the least and median wall time
of ``x.sum(axis=...).eval()`` then ``fl.synchronize()`` over ``--reps`` calls, with the
pass as it is (``on``) and with evaluation's call of it replaced by one returning None
(``off``: the layouts before it).  Reported, never asserted.

    python benchmarks/probes/axis_merge_cpu.py [--cases "256x256x64:0,2;256x256x64:0"]
        [--rounds 2] [--reps 25]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

_CHILD = r"""
import sys, time
import numpy as np
import fuseloop as fl
from fuseloop import evaluate
if sys.argv[1] == "off":
    evaluate._merged_reductions = lambda *a: None
shape = tuple(int(v) for v in sys.argv[2].split("x"))
axes = tuple(int(v) for v in sys.argv[3].split(","))
x = fl.asarray(np.random.default_rng(0).random(shape, dtype=np.float32))
def call():
    x.sum(axis=axes).eval()
    fl.synchronize()
call(); call()
cpu, wall = [], []
for _ in range(int(sys.argv[4])):
    c, t = time.process_time(), time.perf_counter()
    call()
    cpu.append(time.process_time() - c); wall.append(time.perf_counter() - t)
wall.sort()
print(f"{sys.argv[1]:3s} {sys.argv[2]:>14s} axes {sys.argv[3]:6s} least CPU "
      f"{min(cpu) * 1e3:7.3f} ms, wall least {wall[0] * 1e3:7.3f} median "
      f"{wall[len(wall) // 2] * 1e3:7.3f}")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="256x256x64:0,2;256x256x64:0;1024x64x64:0")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=25)
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root)
    for _ in range(a.rounds):
        for case in a.cases.split(";"):
            shape, axes = case.split(":")
            for mode in ("off", "on"):
                out = subprocess.run([sys.executable, "-c", _CHILD, mode, shape, axes,
                                      str(a.reps)], env=env, check=True, capture_output=True,
                                     text=True).stdout
                print(out.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
