"""Broad-suite workloads on the CPU device, two checkouts and numpy (issue 25's rows).

Each checkout runs in its own process (``PYTHONPATH`` set to it), the processes
alternating ``--rounds`` times; within a process each workload's fuseloop call (the
suite's runner: build and ``.eval()``/``fl.compute``, then ``fl.synchronize()``) and
numpy's form alternate call by call, so both see the same load.  Per workload and
checkout: the least CPU time (``time.process_time``: every thread, PoCL's workers too)
and the median wall time over the rounds' calls, and numpy's wall time over fuseloop's
(above 1: fuseloop faster), and numpy's least CPU time.  On a shared machine the
least CPU time is the figure to compare; reported, never asserted.

    python benchmarks/probes/suite_rows_ab.py /tmp/base . --size 2^22 \\
        --workloads argmax-rows,argmin-all,sum-axes02 [--rounds 3] [--reps 15]
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
from fuseloop.bench.broad import SUITE
from fuseloop.bench.peers import Ops

size, reps, names = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",")
np_ops, out = Ops(np), {}
for name in names:
    w = next(w for w in SUITE if w.name == name)
    host = w.make(size, np.random.default_rng(0))
    args = [host[k] for k in w.inputs]
    run, _ = w.fuseloop(*[fl.asarray(a) for a in args])
    def ours():
        run(); fl.synchronize()
    def numpy_form():
        w.peer(np_ops, *args)
    ours(); ours(); numpy_form()
    rec = {"cpu": [], "wall": [], "np": [], "np_cpu": []}
    for _ in range(reps):
        c, t = time.process_time(), time.perf_counter()
        ours()
        rec["cpu"].append(time.process_time() - c); rec["wall"].append(time.perf_counter() - t)
        c, t = time.process_time(), time.perf_counter()
        numpy_form()
        rec["np"].append(time.perf_counter() - t); rec["np_cpu"].append(time.process_time() - c)
    out[name] = rec
print(json.dumps(out))
"""


def _size(text: str) -> int:
    return 2 ** int(text[2:]) if text.startswith("2^") else int(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkouts", nargs="+")
    ap.add_argument("--size", default="2^22")
    ap.add_argument("--workloads", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args()
    got: dict[str, dict[str, dict[str, list[float]]]] = {c: {} for c in a.checkouts}
    for _ in range(a.rounds):
        for c in a.checkouts:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(c))
            text = subprocess.run([sys.executable, "-c", _CHILD, str(_size(a.size)),
                                   str(a.reps), a.workloads], env=env, check=True,
                                  capture_output=True, text=True).stdout
            for name, rec in json.loads(text.splitlines()[-1]).items():
                acc = got[c].setdefault(name, {"cpu": [], "wall": [], "np": [], "np_cpu": []})
                for k, v in rec.items():
                    acc[k].extend(v)
    print(f"size {a.size}; per checkout: least CPU ms / median wall ms, numpy wall over "
          "fuseloop wall (median); numpy's least CPU ms last")
    for name in a.workloads.split(","):
        cells = []
        for c in a.checkouts:
            r = got[c][name]
            wall, npw = statistics.median(r["wall"]), statistics.median(r["np"])
            cells.append(f"{min(r['cpu']) * 1e3:7.3f} / {wall * 1e3:7.3f}  x{npw / wall:4.2f}")
        np_cpu = min(min(got[c][name]["np_cpu"]) for c in a.checkouts)
        print(f"{name:18s}", " | ".join(cells), f"| np {np_cpu * 1e3:7.3f}")


if __name__ == "__main__":
    main()
