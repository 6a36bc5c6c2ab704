"""CPU time of broad-suite workloads (``fuseloop bench --suite broad``) on the CPU device
against numpy, the two interleaved run by run: median CPU ms (every thread of the
process: PoCL's workers too) and numpy's over fuseloop's.  CPU time, not the suite's wall
time, so that a loaded machine's waiting counts less; run it once per checkout to compare
revisions (``PYTHONPATH=<checkout>``), alternating them.

    python benchmarks/probes/cpu_broad_cpu_time.py [--groups reduction-layout,normalisation]
        [--sizes 2^20,2^22] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import fuseloop as fl
from fuseloop.bench.broad import BROAD, NP_OPS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", default="reduction-layout,normalisation,stencil")
    ap.add_argument("--sizes", default="2^20,2^22")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    groups = args.groups.split(",")
    sizes = [2 ** int(s[2:]) if s.startswith("2^") else int(s) for s in args.sizes.split(",")]
    print(f"{fl.__file__}\n{fl.get_device()}: CPU ms, median of {args.repeats}")
    for wl in (w for w in BROAD if w.group in groups and w.peer is not None):
        for size in wl.sizes or sizes:
            inputs = wl.make_inputs(size, np.random.default_rng(0))
            arrays = [fl.asarray(inputs[k]) for k in wl.inputs]
            run, _ = wl.fuseloop(*arrays)
            host = [inputs[k] for k in wl.inputs]
            cpu: list[list[float]] = [[], []]
            for r in range(args.repeats + 1):
                c0 = time.process_time()
                run()
                fl.synchronize()
                c1 = time.process_time()
                wl.peer(NP_OPS, *host)
                if r:
                    cpu[0].append(c1 - c0)
                    cpu[1].append(time.process_time() - c1)
            a, b = (statistics.median(c) * 1e3 for c in cpu)
            print(f"{wl.name:20} 2^{size.bit_length() - 1:<3} fuseloop {a:8.3f}  numpy {b:8.3f}"
                  f"  numpy/fuseloop {b / a:6.2f}", flush=True)


if __name__ == "__main__":
    main()
