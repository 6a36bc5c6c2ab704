"""Issue 29's two target workloads on 1, 2 and 4 GPUs, fuseloop revisions side by side in
one process (``compare_host_overhead.import_revisions``): ``(2*x - sin(y) + x*y).eval()``
and ``fl.sum(x*y).get()`` over ``2**log2n`` float32, each split call's host timeline.

Per backend, workload, GPU count and revision: ms per call (each call followed by a wait
for its devices, as ``multi_gpu_scaling.py`` times it; the median of ``--repeat`` calls,
rounds interleaved between the revisions ``--rounds`` times, the median of the rounds),
the ratio to that revision's one-GPU time, and for a split call the host microseconds
(medians of ``--traced`` calls after an idle wait, ``fuseloop.multi.trace``'s events):
``build`` (the call's start until its parts' staging began: the expression built, the
call dispatched), ``stage`` (until part 0's first enqueue), ``launch`` (part 0's first
enqueue until the last part's submit), ``last`` (the call's start until the last part's
submit: the host time every device but the first waits before its part, the sum of the
three), ``after`` (the last submit until the call returns: a sum's reads and combine)
and each part's submit after the call's start.  The call's time is about ``last`` plus
one part's kernel plus ``after``'s wait: ``part ms`` is part 0 alone on its device.
``--profile``: then a cProfile (wall clock) of ``--profile-calls`` split calls of each
workload on the last revision over the most GPUs, the functions taking the most time
(driver calls are listed as built-ins).  Usage::

    python benchmarks/probes/multi_scaling_ab.py bdc485f WT [--backends cuda,opencl]
        [--counts 1,2,4] [--log2n 30] [--repeat 10] [--rounds 3] [--traced 10] [--profile]
    # the machinery on this CPU (four PoCL devices; the ratios say nothing):
    POCL_DEVICES="pthread pthread pthread pthread" FUSELOOP_HOST_PATH=0 python \\
        benchmarks/probes/multi_scaling_ab.py bdc485f WT --type cpu --log2n 16
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from compare_host_overhead import import_revisions

WORKLOADS = {
    "2*x - sin(y) + x*y": (12, lambda fl, x, y: (2 * x - fl.sin(y) + x * y).eval()),
    "sum(x*y)": (8, lambda fl, x, y: fl.sum(x * y).get()),
}


def _syncer(fl: Any, arrays: tuple) -> Any:
    """A wait for the devices of ``arrays`` (each queue submitted, then each finished)."""
    from importlib import import_module

    rt_of = import_module(fl.__name__ + ".runtime.devices")._runtime
    finish = import_module(fl.__name__ + ".runtime.transfer").finish
    devs: dict[int, Any] = {}
    for a in arrays:
        for d in a.devices if hasattr(a, "parts") else (a.device,):
            devs.setdefault(d.index, d)

    def sync() -> None:
        for d in devs.values():
            rt = rt_of(d)
            rt.flush()
            rt.submit(rt.queue)
        for d in devs.values():
            finish(d)
    return sync


def timed(fn: Any, sync: Any, repeat: int) -> float:
    """Median seconds of ``fn()`` followed by ``sync()``."""
    out = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def timeline(fl: Any, fn: Any, sync: Any, calls: int) -> dict[str, Any]:
    """Medians over ``calls`` traced calls: build, stage, launch, last, after (us) and
    each part's submit after the call's start."""
    from importlib import import_module

    trace = import_module(fl.__name__ + ".multi.trace")
    got: dict[str, list[Any]] = {k: [] for k in ("build", "stage", "launch", "last", "after",
                                                 "parts")}
    for _ in range(calls):
        sync()
        with trace.tracing() as events:
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
        staged = [t for what, _, _, t in events if what == "staging begun"]
        begun = [t for what, part, _, t in events if what == "enqueue begun"]
        done: dict[int, float] = {}
        for what, part, _, t in events:
            if what == "enqueued" and part >= 0:
                done[part] = t  # (the last submit of each part)
        if not done:
            continue
        last = max(done.values())
        first = min(begun) if begun else min(done.values())
        start = staged[-1] if staged else first
        got["build"].append((start - t0) * 1e6)
        got["stage"].append((first - start) * 1e6)
        got["launch"].append((last - first) * 1e6)
        got["last"].append((last - t0) * 1e6)
        got["after"].append((t1 - last) * 1e6)
        got["parts"].append([(done[k] - t0) * 1e6 for k in sorted(done)])
    sync()
    out: dict[str, Any] = {k: statistics.median(v) for k, v in got.items()
                           if v and k != "parts"}
    if got["parts"]:
        width = min(len(p) for p in got["parts"])
        out["parts"] = [statistics.median(p[k] for p in got["parts"]) for k in range(width)]
    return out


def profile(fl: Any, fn: Any, sync: Any, calls: int, top: int = 30) -> str:
    """cProfile (wall clock) of ``calls`` calls of ``fn`` (each after ``sync``)."""
    prof = cProfile.Profile(time.perf_counter)
    for _ in range(calls):
        sync()
        prof.enable()
        fn()
        prof.disable()
    sync()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("revs", nargs="+", help="git revisions (WT: the working tree)")
    p.add_argument("--backends", default=None)
    p.add_argument("--type", default="gpu")
    p.add_argument("--counts", default="1,2,4")
    p.add_argument("--log2n", type=int, default=30)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--traced", type=int, default=10)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--profile-calls", type=int, default=200)
    args = p.parse_args()
    n = 1 << args.log2n
    counts = [int(c) for c in args.counts.split(",")]
    mods = import_revisions(args.revs, "mscale")
    backends = sorted({d.backend for d in mods[0].devices(type=args.type)})
    if args.backends:
        backends = [b for b in args.backends.split(",") if b in backends]
    rows: list[dict[str, Any]] = []
    for backend in backends:
        # (per revision: its devices, and per count its inputs, made once)
        sets = []
        for fl in mods:
            devs = [d for d in fl.devices(type=args.type) if d.backend == backend]
            per = {}
            for c in counts:
                if c > len(devs):
                    continue
                where = devs[0] if c == 1 else devs[:c]
                with fl.device(where):
                    x = fl.random.uniform(n, dtype=np.float32, key=1).eval()
                    y = fl.random.uniform(n, dtype=np.float32, key=2).eval()
                per[c] = (x, y, _syncer(fl, (x, y)))
            sets.append(per)
        print(f"{backend}: {[str(d) for d in devs]}", flush=True)
        for name, (bpe, work) in WORKLOADS.items():
            for c in counts:
                if c not in sets[0]:
                    continue
                times: list[list[float]] = [[] for _ in mods]
                for fl, per in zip(mods, sets):  # (warm: kernels, plans, kept calls)
                    x, y, sync = per[c]
                    for _ in range(5):
                        work(fl, x, y)
                    sync()
                for _ in range(args.rounds):
                    for k, (fl, per) in enumerate(zip(mods, sets)):
                        x, y, sync = per[c]
                        times[k].append(timed(functools.partial(work, fl, x, y), sync, args.repeat))
                for rev, fl, per, ts in zip(args.revs, mods, sets, times):
                    x, y, sync = per[c]
                    row: dict[str, Any] = dict(backend=backend, workload=name, gpus=c,
                                               rev=rev, ms=statistics.median(ts) * 1e3)
                    if c > 1:
                        call = functools.partial(work, fl, x, y)
                        row.update(timeline(fl, call, sync, args.traced))
                        x0, y0 = x.parts[0], y.parts[0]
                        row["part_ms"] = timed(functools.partial(work, fl, x0, y0),
                                               _syncer(fl, (x0, y0)), args.repeat) * 1e3
                    one = next((r for r in rows if r["backend"] == backend and r["rev"] == rev
                                and r["workload"] == name and r["gpus"] == 1), None)
                    row["ratio"] = one["ms"] / row["ms"] if one else float("nan")
                    row["gbs"] = bpe * n / (row["ms"] * 1e-3) / 1e9
                    rows.append(row)
                    parts = " ".join(f"{t:.0f}" for t in row.get("parts", []))
                    phases = "" if c == 1 else (
                        f"build {row['build']:.0f} stage {row['stage']:.0f} launch "
                        f"{row['launch']:.0f} last {row['last']:.0f} after {row['after']:.0f}"
                        f" | parts {parts} | part 0 {row['part_ms']:.3f} ms")
                    print(f"{backend:7s} {name:20s} x{c} {rev:>10s} {row['ms']:8.3f} ms "
                          f"{row['gbs']:8.1f} GB/s ratio {row['ratio']:5.2f}  {phases}",
                          flush=True)
        if args.profile:
            fl, per = mods[-1], sets[-1]
            c = max(per)
            x, y, sync = per[c]
            for name, (_, work) in WORKLOADS.items():
                print(f"\n{backend} {name} x{c} {args.revs[-1]}: cProfile of "
                      f"{args.profile_calls} calls (wall clock)")
                print(profile(fl, functools.partial(work, fl, x, y), sync, args.profile_calls))
        del sets, per
        for fl in mods:
            fl.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
