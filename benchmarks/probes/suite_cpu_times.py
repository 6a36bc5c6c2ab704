"""CPU time of each test of the suite, for finding its slow tests on a shared machine.

A pytest plugin: each test's CPU time (setup, call and teardown) on the CPU clock,
this process's and its children's (compile workers, subprocesses: live ones read from
/proc, finished ones from ``getrusage``).  Wall times on a loaded machine mostly tell
the load; CPU time tells what the test costs wherever it runs.  One line per test,
appended as it ends (an interrupted run keeps what it measured), one file per xdist
worker.  Linux only (``/proc``).

    SUITE_CPU_TIMES=/tmp/cpu PYTHONPATH=benchmarks/probes \\
        python -m pytest -q -n 2 -p suite_cpu_times tests
    python benchmarks/probes/suite_cpu_times.py /tmp/cpu [--top 30]

The second command sums the files ``/tmp/cpu.*.tsv``: the slowest tests, the slowest
files and the total.  Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

_TICKS = os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    """CPU seconds of this process's live children (and their finished children)."""
    me, total = os.getpid(), 0.0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue  # (ended meanwhile)
        fields = text.rpartition(")")[2].split()  # (the command name may hold spaces)
        if int(fields[1]) == me:
            total += sum(int(v) for v in fields[11:15]) / _TICKS
    return total


def _cpu() -> tuple[float, float]:
    """(this process's CPU seconds, its children's)."""
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time(), done.ru_utime + done.ru_stime + _children_cpu()


def _hookwrapper(fn: Any) -> Any:
    import pytest

    return pytest.hookimpl(hookwrapper=True)(fn)


@_hookwrapper
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    wall = time.perf_counter()
    own, children = _cpu()
    yield
    own2, children2 = _cpu()
    prefix = os.environ.get("SUITE_CPU_TIMES")
    if prefix:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(f"{prefix}.{worker}.tsv", "a") as f:
            f.write(f"{item.nodeid}\t{own2 - own:.3f}\t{children2 - children:.3f}\t"
                    f"{time.perf_counter() - wall:.3f}\n")


def summary(prefix: str, top: int) -> None:
    rows = []
    for path in sorted(glob.glob(f"{prefix}.*.tsv")):
        with open(path) as f:
            for line in f:
                nodeid, own, children, wall = line.rstrip("\n").split("\t")
                rows.append((float(own) + float(children), float(own), float(children),
                             float(wall), nodeid))
    rows.sort(reverse=True)
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for total, *_, nodeid in rows:
        entry = files[nodeid.split("::")[0]]
        entry[0] += total
        entry[1] += 1
    print(f"{len(rows)} tests, {sum(r[0] for r in rows):.1f} CPU s "
          f"({sum(r[2] for r in rows):.1f} of them in child processes)")
    print(f"\nslowest {top} tests: CPU s (own + children), wall s")
    for total, own, children, wall, nodeid in rows[:top]:
        print(f"{total:7.2f} ({own:6.2f} + {children:5.2f}) {wall:7.1f}  {nodeid}")
    print(f"\nslowest {top} files: CPU s, tests")
    for name, (total, n) in sorted(files.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{total:7.1f} {int(n):4d}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prefix", help="the SUITE_CPU_TIMES prefix of a run")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    summary(args.prefix, args.top)


if __name__ == "__main__":
    main()
