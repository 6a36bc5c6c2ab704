"""Where a split stencil step's host time goes, by driver call (issue 29): per device set,
the host microseconds of one 5-point stencil step ``u + 0.1 * laplacian(u)`` (after
``fl.synchronize()``, then evaluated) and of a step in a loop of ten (one wait at the end),
split into the driver calls the split path makes (reads, writes, queue submits, waits,
event queries, copies between devices, kernel enqueues on OpenCL: count and microseconds
per step, each call timed around it) and the rest (Python: building the parts, the halos'
bookkeeping, the replays).  With the phase stamps of ``fuseloop.multi.trace`` (when the
halo reads were enqueued, the parts built, the halos uploaded, each part launched), this
says whether a step's host time is the driver's or fuseloop's own.  Medians over
``--repeat`` steps, wall clock (``time.perf_counter``: a wait counts as the host's time).
``--sum-log2 N`` also times ``float(fl.sum(x*y))`` over 2^N float32 elements the same way
(each part's launch, its partial's read enqueued, the read done: whether the host's
launches or its waits separate the devices).

    python benchmarks/probes/multi_step_calls.py [--devices "cuda:0,cuda:1;opencl:0,opencl:1"]
        [--grid-log2 14] [--repeat 30]
    # four PoCL devices of a context each, on a CPU:
    POCL_DEVICES="pthread pthread pthread pthread" FUSELOOP_HOST_PATH=0 \\
        python benchmarks/probes/multi_step_calls.py \\
        --devices "opencl:0,opencl:1,opencl:2,opencl:3" --grid-log2 8
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.backends import backend_for
from fuseloop.backends import opencl as _opencl
from fuseloop.multi import trace
from fuseloop.runtime.devices import _runtime, find_device

LAPLACE = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
#: call kind -> [count, seconds] while counting
CALLS: dict[str, list[float]] = {}
COUNTING = [False]


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if not COUNTING[0]:
            return fn(*args, **kwargs)
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            got = CALLS.setdefault(name, [0, 0.0])
            got[0] += 1
            got[1] += time.perf_counter() - t0
    return call


# (before fuseloop launches anything: its OpenCL launchers take the enqueue function when
# they are made)
_opencl._enqueue_nd_range = _timed("kernel enqueue (OpenCL)", _opencl._enqueue_nd_range)


def _instrument(devices: list[Any]) -> None:
    for d in {d.index: d for d in devices}.values():
        rt = _runtime(d)
        for name in ("enqueue_read", "enqueue_write", "submit", "wait_event", "event_status"):
            if not hasattr(getattr(rt, name), "__wrapped_by_probe__"):
                wrapped = _timed(f"{name} ({d.backend})", getattr(rt, name))
                wrapped.__wrapped_by_probe__ = True  # type: ignore[attr-defined]
                setattr(rt, name, wrapped)
        backend = backend_for(d)
        for name in ("copy_from", "copy", "fill"):
            if not hasattr(getattr(backend, name), "__wrapped_by_probe__"):
                wrapped = _timed(f"{name} ({d.backend})", getattr(backend, name))
                wrapped.__wrapped_by_probe__ = True  # type: ignore[attr-defined]
                setattr(backend, name, wrapped)


def _sets(spec: str | None) -> list[list[Any]]:
    if spec:
        return [[find_device(s.strip()) for s in g.split(",")] for g in spec.split(";")
                if g.strip()]
    by: dict[str, list[Any]] = {}
    for d in fl.devices(type="gpu"):
        by.setdefault(d.backend, []).append(d)
    return list(by.values())


def _measure(fn: Callable[[], Any], repeat: int, steps: int) -> tuple[float, dict, dict]:
    """(median host seconds per step, per call kind [count, seconds] per step, the
    phases' median times from the step's start)"""
    totals, per_call, phases = [], [], []
    for _ in range(repeat):
        fl.synchronize()
        CALLS.clear()
        COUNTING[0] = True
        with trace.tracing() as events:
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
        COUNTING[0] = False
        totals.append((t1 - t0) / steps)
        per_call.append({k: (c / steps, s / steps) for k, (c, s) in CALLS.items()})
        seen: dict[str, float] = {}
        for what, part, _, t in events:
            name = what if part < 0 else f"{what} {part}"
            seen.setdefault(name, t - t0)  # (the first step's)
        phases.append(seen)
    fl.synchronize()
    kinds = sorted({k for p in per_call for k in p})
    calls = {k: (float(np.median([p.get(k, (0, 0))[0] for p in per_call])),
                 float(np.median([p.get(k, (0, 0))[1] for p in per_call]))) for k in kinds}
    names = list(phases[-1])
    marks = {n: float(np.median([p[n] for p in phases if n in p])) for n in names}
    return float(np.median(totals)), calls, marks


def _report(name: str, total: float, calls: dict, marks: dict) -> None:
    us = 1e6
    driver = sum(s for _, s in calls.values())
    print(f"  {name}: {total * us:.0f} us host per step; driver calls {driver * us:.0f} us, "
          f"the rest (fuseloop's Python) {(total - driver) * us:.0f} us")
    for kind, (count, seconds) in sorted(calls.items(), key=lambda kv: -kv[1][1]):
        print(f"    {kind:34s} {count:5.1f} calls {seconds * us:8.1f} us "
              f"({seconds / max(count, 1e-9) * us:.1f} us each)")
    if marks:
        print("    first step's phases (us from its start): " + ", ".join(
            f"{k} {v * us:.0f}" for k, v in marks.items()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", default=None)
    p.add_argument("--grid-log2", type=int, default=14)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--sum-log2", type=int, default=0,
                   help="also time a split sum of 2^N float32 elements (0: not)")
    args = p.parse_args()
    for devs in _sets(args.devices):
        print(", ".join(str(d) for d in devs))
        _instrument(devs)
        _one(devs, 1 << args.grid_log2, args.repeat)
        if args.sum_log2:
            _sum(devs, 1 << args.sum_log2, args.repeat)


def _one(devs: list[Any], side: int, repeat: int) -> None:
    with fl.device(devs):
        u = fl.random.uniform((side, side), dtype=np.float32, key=3).eval()

    def step(v: Any = u) -> Any:
        return (v + np.float32(0.1) * fl.stencil(v, LAPLACE)).eval()

    def ten() -> None:
        v = u
        for _ in range(10):
            v = step(v)

    for _ in range(3):  # (kernels built, plans and templates kept)
        ten()
    _report("one step", *_measure(step, repeat, 1))
    _report("a step of ten", *_measure(ten, max(3, repeat // 5), 10))
    fl.synchronize()


def _sum(devs: list[Any], n: int, repeat: int) -> None:
    """The split sum read back (``float(fl.sum(x*y))``): per part its launch, its partial's
    read enqueued and waited for, by driver call and phase."""
    with fl.device(devs):
        x = fl.random.uniform(n, dtype=np.float32, key=1).eval()
        y = fl.random.uniform(n, dtype=np.float32, key=2).eval()

    def total() -> float:
        return float(fl.sum(x * y))

    for _ in range(5):  # (kernels built, plans kept)
        total()
    _report(f"float(fl.sum(x*y)), {n} elements", *_measure(total, repeat, 1))
    fl.synchronize()

if __name__ == "__main__":
    main()
