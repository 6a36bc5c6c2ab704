"""Python calls per statement of small_statements_gpu.py's patterns, fuseloop revisions
side by side (cProfile's call counts: they do not drift with a shared machine's load).

A change of a few microseconds per statement is lost in the CPU clock's noise on a
loaded machine; the number of Python calls (functions and C methods) each statement
makes is the same run to run (but for a wait's polls, ``event_status`` and
``sched_yield``, which follow the device's speed).  For each pattern this prints the
calls per statement of each revision and the functions whose calls changed most between
the first and the last revision.  Run with ``FUSELOOP_HOST_PATH=0`` to count the device
path, as a GPU runs it.
Reported, never asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/statement_calls_ab.py REV [REV ...]
        [--patterns tridiagonal,durbin-like] [--top 12]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import importlib
import pstats
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]

from small_statements_gpu import _patterns  # noqa: E402

from benchmarks.compare_host_overhead import copy_packages  # noqa: E402


def _calls(fn) -> tuple[int, collections.Counter]:
    """One call of the pattern ``fn`` (warm) under cProfile: its statements and the
    calls made per function (named by file within the package and function name)."""
    prof = cProfile.Profile()
    prof.enable()
    count = fn()
    prof.disable()
    per: collections.Counter = collections.Counter()
    for (path, _, name), row in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        where = path.split("/fuseloop_", 1)[-1].split("/", 1)[-1] if "/fuseloop_" in path \
            else Path(path).name
        per[(where, name)] += row[1]
    return count, per


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions, or WT for the working tree")
    ap.add_argument("--patterns", default="tridiagonal,durbin-like,trisolv,cholesky-row")
    ap.add_argument("--n", type=int, default=120)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    _, names = copy_packages(args.revs, "calls")
    wanted = args.patterns.split(",")
    got: dict[str, list[tuple[int, collections.Counter]]] = {p: [] for p in wanted}
    for name in names:
        fl = importlib.import_module(name)
        pats = _patterns(args.n, fl)
        for p in wanted:
            pats[p]()
            pats[p]()  # (kernels built, plans made)
            got[p].append(_calls(pats[p]))
    for p, per_rev in got.items():
        print(f"{p}: calls per statement " + ", ".join(
            f"{rev} {sum(c.values()) / n:.1f}" for rev, (n, c) in zip(args.revs, per_rev)))
        (n0, first), (n1, last) = per_rev[0], per_rev[-1]
        diff = {k: last.get(k, 0) / n1 - first.get(k, 0) / n0 for k in set(first) | set(last)}
        for k, d in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:args.top]:
            if abs(d) >= 0.05:
                print(f"  {d:+7.2f}  {k[0]}: {k[1]}")


if __name__ == "__main__":
    main()
