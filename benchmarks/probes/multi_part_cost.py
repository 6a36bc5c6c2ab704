"""Where a split call's host time goes before each part runs (issue 29), on the GPUs: per
device set, the host microseconds to build ``2*x - sin(y) + x*y`` over the parts and to
launch each part (:func:`fuseloop.multi.array.launch_part`: the part's cached
``.eval()`` and its queue's submit), and for ``fl.sum(x*y)`` the time until each part's
launch (``fuseloop.multi.trace``), at a large and a small size, each call after
``fl.synchronize()``; then the functions taking the most host time in the large size's
part launches (cProfile). On the H100 hosts a
part's launch took 60-70 us at 2**29 elements per part, against 29 us for a small cached
``.eval()``: this says whether the size, the backend or the submit makes the difference.
Then a 5-point stencil step on a square of as many elements: the host microseconds to
build it (halo exchange, the parts' expressions: how many were substituted from another
part's or from the templates an earlier step kept, ``exchange.LAST_TEMPLATES``,
``LAST_PLAN_HIT``) and to launch its parts, and the functions taking the most wall time
in its build (waits included). The cProfile table uses
the host thread's CPU clock (``time.thread_time``: not PoCL's worker threads, which run
the kernels on a CPU device). On a CPU, ``POCL_DEVICES="pthread pthread"`` lists two
devices (a context each with ``FUSELOOP_OPENCL_SHARED_CONTEXT=0``)::

    python benchmarks/probes/multi_part_cost.py [--devices "cuda:0,cuda:1;opencl:0,opencl:1"]
        [--log2n 30] [--small-log2n 16] [--repeat 20]
    POCL_DEVICES="pthread pthread" python benchmarks/probes/multi_part_cost.py \
        --devices "opencl:0,opencl:1" --log2n 16 --small-log2n 12
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.multi import exchange, trace
from fuseloop.multi.array import launch_part
from fuseloop.runtime.devices import find_device


def _sets(spec: str | None) -> list[list[Any]]:
    if spec:
        return [[find_device(s.strip()) for s in g.split(",")] for g in spec.split(";")
                if g.strip()]
    by: dict[str, list[Any]] = {}
    for d in fl.devices(type="gpu"):
        by.setdefault(d.backend, []).append(d)
    return list(by.values())


def _one(devs: list[Any], log2n: int, repeat: int, profile: bool) -> None:
    with fl.device(devs):
        x = fl.random.uniform(1 << log2n, dtype=np.float32, key=1).eval()
        y = fl.random.uniform(1 << log2n, dtype=np.float32, key=2).eval()
    build, parts, heads = [], [], []
    prof = cProfile.Profile(time.thread_time) if profile else None
    for i in range(repeat + 2):
        fl.synchronize()
        t0 = time.perf_counter()
        e = 2 * x - fl.sin(y) + x * y
        t1 = time.perf_counter()
        marks = [t1]
        if prof is not None and i >= 2:
            prof.enable()
        for k, p in enumerate(e.parts):
            launch_part(k, p)
            marks.append(time.perf_counter())
        if prof is not None and i >= 2:
            prof.disable()
        del e
        fl.synchronize()
        with trace.tracing() as events:
            s0 = time.perf_counter()
            fl.sum(x * y)
        if i >= 2:
            build.append(t1 - t0)
            parts.append(np.diff(marks))
            heads.append([t - s0 for what, _, _, t in events if what == "enqueued"])
        fl.synchronize()
    us = 1e6
    print(f"  2**{log2n}: build {np.median(build) * us:.0f} us; each part's launch "
          + ", ".join(f"{v * us:.0f}" for v in np.median(parts, axis=0))
          + " us; sum(x*y): part k launched at "
          + ", ".join(f"{v * us:.0f}" for v in np.median(heads, axis=0)) + " us")
    if prof is not None:
        # (pstats' raw table, in seconds: get_stats_profile() rounds to milliseconds;
        # typeshed does not declare it)
        stats: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:15]
        print("  most host time in the part launches (us per call of the split eval):")
        for (file, line, name), v in top:
            print(f"    {v[2] * us / repeat:8.1f} own {v[3] * us / repeat:8.1f} with callees "
                  f"{file.rsplit('/', 2)[-1]}:{line} {name}")
    del x, y
    _stencil(devs, log2n, repeat)
    fl.synchronize()


LAPLACE = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)


def _stencil(devs: list[Any], log2n: int, repeat: int) -> None:
    """Host microseconds (CPU clock of this thread) to build a stencil step over the
    parts, and to launch each part."""
    side = 1 << (log2n // 2)
    with fl.device(devs):
        u = fl.random.uniform((side, side), dtype=np.float32, key=3).eval()
    build, parts = [], []
    for i in range(repeat + 2):
        fl.synchronize()
        t0 = time.thread_time()
        e = u + np.float32(0.1) * fl.stencil(u, LAPLACE)
        marks = [time.thread_time()]
        for k, p in enumerate(e.parts):
            launch_part(k, p)
            marks.append(time.thread_time())
        if i >= 2:
            build.append(marks[0] - t0)
            parts.append(np.diff(marks))
        del e
    built, substituted = exchange.LAST_TEMPLATES
    print(f"  stencil step {side}^2: build {np.median(build) * 1e6:.0f} us CPU ({built} "
          f"parts built, {substituted} substituted, templates kept from an earlier step: "
          f"{bool(exchange.LAST_PLAN_HIT[0])}); each part's launch "
          + ", ".join(f"{v * 1e6:.0f}" for v in np.median(parts, axis=0)) + " us CPU")
    # (wall clock: a wait for a halo's read, or a copy the driver makes synchronous,
    # shows as the own time of the call that waits)
    prof = cProfile.Profile(time.perf_counter)
    for _ in range(repeat):
        fl.synchronize()
        prof.enable()
        e = u + np.float32(0.1) * fl.stencil(u, LAPLACE)
        prof.disable()
        del e
    stats: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    print("  most wall time in the stencil's build (us per step, own / with callees):")
    for (file, line, name), v in sorted(stats.items(), key=lambda kv: -kv[1][2])[:12]:
        print(f"    {v[2] * 1e6 / repeat:8.1f} own {v[3] * 1e6 / repeat:8.1f} with callees "
              f"{file.rsplit('/', 2)[-1]}:{line} {name}")
    del u


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", default=None)
    p.add_argument("--log2n", type=int, default=30)
    p.add_argument("--small-log2n", type=int, default=16)
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args()
    for devs in _sets(args.devices):
        print(", ".join(str(d) for d in devs))
        _one(devs, args.small_log2n, args.repeat, False)
        _one(devs, args.log2n, args.repeat, True)


if __name__ == "__main__":
    main()
