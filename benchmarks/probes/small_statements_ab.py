"""Host time per statement of small_statements_gpu.py's patterns for several fuseloop
revisions in one process, rounds interleaved (A, B, A, B, ...), on the CPU clock.

Each revision's ``fuseloop`` package is imported under a name of its own (see
``benchmarks/compare_host_overhead.py``), so every revision sees the same phases of a
shared machine.  Run with ``FUSELOOP_HOST_PATH=0`` on the CPU to time the device path,
as a GPU runs it.  Timings are reported, never asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/small_statements_ab.py REV [REV ...]
        [--n 120] [--rounds 7] [--device SPEC]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]

from small_statements_gpu import _patterns  # noqa: E402

from benchmarks.compare_host_overhead import import_revisions  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions, or WT for the working tree")
    ap.add_argument("--n", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--device", default=None)
    args = ap.parse_args()
    mods = import_revisions(args.revs, "stmt", args.device)
    pats = [_patterns(args.n, fl) for fl in mods]
    for p in pats:  # compile, record the plans, then one untimed repeat
        for fn in p.values():
            fn()
            fn()
    times: dict[str, list[list[float]]] = {k: [[] for _ in mods] for k in pats[0]}
    for _ in range(args.rounds):
        for name in pats[0]:
            for v, p in enumerate(pats):
                t0 = time.process_time()
                count = p[name]()
                mods[v].synchronize()
                times[name][v].append((time.process_time() - t0) / count * 1e6)
    print(f"device: {mods[0].get_device()}; n={args.n}; {args.rounds} interleaved rounds; "
          "CPU-clock us per statement, min / median")
    print("| pattern | " + " | ".join(args.revs) + " |")
    print("| --- |" + " ---: |" * len(args.revs))
    for name, per_rev in times.items():
        print(f"| {name} | " + " | ".join(
            f"{min(t):.1f} / {statistics.median(t):.1f}" for t in per_rev) + " |")


if __name__ == "__main__":
    main()
