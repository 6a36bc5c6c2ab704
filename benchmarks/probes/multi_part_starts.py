"""When each part of a split ``float(fl.sum(x*y))`` starts and ends on its GPU (issue 29:
the time from the first part's start to the last one's decides how far the sum scales),
on the CUDA backend, fuseloop revisions interleaved call by call in one process.

Per call, on each part's stream: an event recorded at the call's start (the device is
idle, so it completes as it is recorded: the host clock's anchor), one before the
part's first kernel (``trace``'s ``enqueue begun``) and one after its last (``enqueued``);
their elapsed times put each part's GPU start and end on the host clock (microseconds
after the call's start; the events' own recording adds about a microsecond per part to
both revisions).  Printed per revision, medians over ``--calls`` calls: each part's
host start (``started``: its first submit, or ``enqueued`` in a revision without it),
GPU start and end, ``spread`` (the last part's GPU start after the first's), ``run``
(part 0's start to end: one part's kernels), ``end`` (the last GPU end), ``tail`` (from
there until the float is in Python) and ``call``.  ``--skews``: arrays split with weights
favouring the parts launched first (part ``k`` of ``p``: ``1 + s * ((p - 1) / 2 - k)``,
so with ``s`` = the launch delay between two parts over one part's run they would end
together), one row per skew.  Usage (a 4-GPU host)::

    python benchmarks/probes/multi_part_starts.py ../base WT --log2n 30
    python benchmarks/probes/multi_part_starts.py WT --skews 0,0.02,0.035,0.05
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from compare_host_overhead import import_revisions


def _setup(fl: Any, count: int, n: int, backend: str, skew: float
           ) -> tuple[Any, Any, Any, Any]:
    """(x, y, the revision's trace module, its runtime look-up) over ``count`` GPUs."""
    devs = [d for d in fl.devices() if d.backend == backend]
    devs = devs[:count] if count else devs
    if len(devs) < max(count, 2):
        raise SystemExit(f"{len(devs)} {backend} devices, {count or 2} asked for")
    count = len(devs)
    weights = [1 + skew * ((count - 1) / 2 - k) for k in range(count)]
    with fl.device(devs, weights=weights):
        x = fl.random.uniform(n, dtype=np.float32, key=1).eval()
        y = fl.random.uniform(n, dtype=np.float32, key=2).eval()
    for _ in range(10):  # (kernels, plans and the kept call made)
        float(fl.sum(x * y))
    fl.synchronize()
    return x, y, import_module(fl.__name__ + ".multi.trace"), \
        import_module(fl.__name__ + ".runtime.devices")._runtime


def one_call(fl: Any, x: Any, y: Any, trace: Any, runtime: Any) -> dict[str, Any]:
    """One traced call's GPU and host times (us after its start)."""
    import cupy

    fl.synchronize()
    devs = {d.index: d for d in x.devices}
    anchors: dict[int, tuple[Any, float]] = {}
    marks: dict[tuple[str, int], Any] = {}
    host: dict[int, float] = {}
    saved = trace.note

    def record(device: Any) -> Any:
        with cupy.cuda.Device(getattr(device.cl_device, "ordinal", 0)):
            event = cupy.cuda.Event()
            event.record(runtime(device).queue)
        return event

    def note(what: str, part: int, device: Any) -> None:
        saved(what, part, device)
        if what == "enqueue begun":
            marks[("start", part)] = (record(device), device.index)
        elif what == "enqueued" and part >= 0:
            marks[("end", part)] = (record(device), device.index)
            host.setdefault(part, time.perf_counter())
        elif what == "started":
            host[part] = time.perf_counter()

    t0 = time.perf_counter()
    for index, d in devs.items():
        anchors[index] = (record(d), time.perf_counter())
    trace.note = note
    try:
        with trace.tracing():
            float(fl.sum(x * y))
            t1 = time.perf_counter()
    finally:
        trace.note = saved
    fl.synchronize()
    out: dict[str, Any] = {"call": (t1 - t0) * 1e6, "host": [], "start": [], "end": []}
    for part in sorted(k for kind, k in marks if kind == "start"):
        out["host"].append((host.get(part, t1) - t0) * 1e6)
        for kind in ("start", "end"):
            event, index = marks[(kind, part)]
            anchor, at = anchors[index]
            ms = cupy.cuda.get_elapsed_time(anchor, event)
            out[kind].append((at - t0) * 1e6 + ms * 1e3)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("revs", nargs="+", help="git revisions (WT: the working tree) or folders")
    p.add_argument("--count", type=int, default=0, help="GPUs (0: every one found)")
    p.add_argument("--log2n", type=int, default=30)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--skews", default="0")
    p.add_argument("--backend", default="cuda", help="(another: only with a stand-in cupy)")
    args = p.parse_args()
    mods = import_revisions(args.revs, "mstart")
    skews = [float(v) for v in args.skews.split(",")]
    cases = [(rev, fl, skew) for skew in skews for rev, fl in zip(args.revs, mods)]
    ready = [_setup(fl, args.count, 1 << args.log2n, args.backend, skew)
             for _, fl, skew in cases]
    got: list[list[dict[str, Any]]] = [[] for _ in cases]
    for _ in range(args.calls):
        for k, ((_, fl, _), setup) in enumerate(zip(cases, ready)):
            got[k].append(one_call(fl, *setup))
    print(f"float(fl.sum(x*y)) over {len(ready[0][0].parts)} {args.backend} GPUs, "
          f"2^{args.log2n} float32; us after the call's start, medians of {args.calls} calls")
    for (rev, _, skew), rows in zip(cases, got):
        rows = [r for r in rows if r["start"]]
        parts = min(len(r["start"]) for r in rows)

        def med(key: str, k: int, rows: list[dict[str, Any]] = rows) -> float:
            return statistics.median(r[key][k] for r in rows)

        spread = statistics.median(max(r["start"]) - min(r["start"]) for r in rows)
        end = statistics.median(max(r["end"]) for r in rows)
        tail = statistics.median(r["call"] - max(r["end"]) for r in rows)
        run = statistics.median(r["end"][0] - r["start"][0] for r in rows)
        call = statistics.median(r["call"] for r in rows)
        print(f"{rev[-12:]:>12s} s={skew:<5g} host " + " ".join(
            f"{med('host', k):4.0f}" for k in range(parts))
            + " | gpu start " + " ".join(f"{med('start', k):4.0f}" for k in range(parts))
            + " | end " + " ".join(f"{med('end', k):4.0f}" for k in range(parts)))
        print(f"{'':>20s} spread {spread:4.0f} run {run:5.0f} end {end:5.0f} tail {tail:4.0f} "
              f"call {call:5.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
