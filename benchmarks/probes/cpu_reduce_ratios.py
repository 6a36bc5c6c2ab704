"""Broad-suite workloads on the CPU device against numpy, interleaved run by run: the
fastest wall time of each (on a machine other processes load, the minimum is the figure
least moved by them), the median wall time, and median CPU time (every thread of the
process: PoCL's workers count).  Ratios are numpy's over fuseloop's (above 1: faster).
Run it once per checkout (``PYTHONPATH=<checkout>``), alternating checkouts, to compare
revisions; ``--names`` picks workloads, ``--groups`` whole groups.

    PYTHONPATH=. python benchmarks/probes/cpu_reduce_ratios.py --names argmin-all,sum-axes02 \\
        [--sizes 2^16,2^22] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.broad import BROAD, NP_OPS


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", default="")
    ap.add_argument("--names", default="")
    ap.add_argument("--sizes", default="2^22")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    groups, names = set(args.groups.split(",")) - {""}, set(args.names.split(",")) - {""}
    sizes = [2 ** int(s[2:]) if s.startswith("2^") else int(s) for s in args.sizes.split(",")]
    print(f"{fl.__file__}\n{fl.get_device()}: ms, {args.repeats} interleaved runs; "
          "numpy over fuseloop: min wall, median wall, median CPU")
    for w in BROAD:
        if w.peer is None or not (w.group in groups or w.name in names):
            continue
        for size in w.sizes or sizes:
            inputs = w.make_inputs(size, np.random.default_rng(0))
            run, _ = w.fuseloop(*[fl.asarray(inputs[k]) for k in w.inputs])
            host = [inputs[k] for k in w.inputs]

            def ours(run: Any = run) -> None:
                run()
                fl.synchronize()

            def theirs(peer: Any = w.peer, host: Any = host) -> None:
                peer(NP_OPS, *host)

            t: list[list[tuple[float, float]]] = [[], []]
            for r in range(args.repeats + 2):
                a, b = _timed(ours), _timed(theirs)
                if r >= 2:
                    t[0].append(a)
                    t[1].append(b)
            mins = [min(x[0] for x in s) * 1e3 for s in t]
            med = [statistics.median(x[0] for x in s) * 1e3 for s in t]
            cpu = [statistics.median(x[1] for x in s) * 1e3 for s in t]
            print(f"{w.name:18} 2^{size.bit_length() - 1:<3} min {mins[0]:7.3f} / "
                  f"{mins[1]:7.3f} = {mins[1] / mins[0]:5.2f}  med {med[1] / med[0]:5.2f}  "
                  f"cpu {cpu[0]:7.3f} / {cpu[1]:7.3f} = {cpu[1] / cpu[0]:5.2f}", flush=True)


if __name__ == "__main__":
    main()
