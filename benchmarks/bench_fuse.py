"""Host cost of a fused function (``@fl.fuse``) against the same expression's ``.eval()``.

The workload is the host-overhead expression of ``bench_elementwise.py``,
``((x * 2 + y) * x - y) / 3`` (5 operations) on 1000 float32 elements, called in a
loop of ``--calls`` calls with ``fl.synchronize()`` every 100 calls and at the end
(so the device's work is inside the loop, as in the other host-overhead figures):

* ``fl.fuse``: ``f(x, y)`` with ``f`` the fused function of the expression;
* ``fl.fuse, scalar``: ``g(x, y, a)``, the expression with ``3`` a Python float
  argument (a kernel argument, a new value every call);
* ``.eval()``: the expression built and evaluated each call (the flat cached path);
* ``numpy``: the expression on host arrays.

Loops of the variants are interleaved (``--loops`` rounds); the report gives each
variant's median and fastest loop in us per call.  ``--breakdown`` also times the
pieces of one fused call with ``time.perf_counter`` (the key, the scalar slots,
the output allocation, the enqueue, the flush of deferred launches, the result
array) and ``--profile`` prints a cProfile of fused calls.

Usage::

    python benchmarks/bench_fuse.py                      # default device
    python benchmarks/bench_fuse.py --calls 2000 --loops 15 --breakdown
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

import fuseloop as fl


def _loop(call: Callable[[], object], calls: int) -> float:
    """Seconds per call of ``call``, synchronised every 100 calls and at the end."""
    sync = fl.synchronize
    t = time.perf_counter()
    for i in range(calls):
        call()
        if i % 100 == 99:
            sync()
    sync()
    return (time.perf_counter() - t) / calls


def _breakdown(f: fl.fuse, x: fl.Array, y: fl.Array, calls: int) -> dict[str, float]:
    """Median us of single calls of the pieces of a fused call ``f(x, y)``: the whole
    call, the replay of its record alone (``_Entry.run``: so the rest is the key and
    its look-up), and within the replay the output's allocation and the result array;
    then the enqueue of the deferred launches (a flush of 63, per launch), which the
    call's median leaves out (one call in 64 pays it)."""
    from fuseloop.expr.nodes import Storage
    from fuseloop.runtime.devices import _runtime

    entry = next(iter(f._entries.values()))
    dev = x.device
    rt = _runtime(dev)
    nbytes = x.nbytes
    storages = [x._storage, y._storage]

    def median_us(fn: Callable[[], object]) -> float:
        times = []
        for i in range(calls):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
            if i % 50 == 49:
                fl.synchronize()
        fl.synchronize()
        return statistics.median(times) * 1e6

    def flush_share() -> float:
        fl.synchronize()
        for _ in range(63):
            f(x, y)
        t = time.perf_counter()
        rt.flush()
        return time.perf_counter() - t

    flushes = [flush_share() for _ in range(max(3, calls // 64))]
    fl.synchronize()
    whole = median_us(lambda: f(x, y))
    replay = median_us(lambda: entry.run(storages, [], (x, y)))
    return {
        "whole call (median; flushes left out)": whole,
        "replay of the record (_Entry.run)": replay,
        "  of which: output allocation": median_us(
            lambda: Storage(rt.pool.allocate(nbytes), nbytes, dev)),
        "  of which: result Array": median_us(
            lambda: fl.Array._concrete(storages[0], x.dtype, x.shape)),
        "signature key and look-up (whole - replay)": whole - replay,
        "enqueue at flush, per launch (63 deferred)": statistics.median(flushes) / 63 * 1e6,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--loops", type=int, default=9)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)

    rng = np.random.default_rng(1)
    xh = rng.random(args.n, dtype=np.float32)
    yh = rng.random(args.n, dtype=np.float32) + 1
    x, y = fl.asarray(xh), fl.asarray(yh)

    @fl.fuse
    def f(x, y):
        return ((x * 2 + y) * x - y) / 3

    @fl.fuse
    def g(x, y, a):
        return ((x * 2 + y) * x - y) / a

    want = ((xh * 2 + yh) * xh - yh) / 3
    for name, got in (("fl.fuse", f(x, y).get()), ("fl.fuse, scalar", g(x, y, 3.0).get()),
                      (".eval()", (((x * 2 + y) * x - y) / 3).eval().get())):
        if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
            sys.exit(f"{name}: wrong result")
    values = [3.0, 3.5]
    variants: dict[str, Callable[[], object]] = {
        "fl.fuse": lambda: f(x, y),
        "fl.fuse, scalar": lambda: g(x, y, values[0]),
        ".eval()": lambda: (((x * 2 + y) * x - y) / 3).eval(),
        "numpy": lambda: ((xh * 2 + yh) * xh - yh) / 3,
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for call in variants.values():  # warm
        _loop(call, 200)
    for _ in range(args.loops):
        for name, call in variants.items():
            values.reverse()  # (a new scalar value per loop)
            times[name].append(_loop(call, args.calls) * 1e6)
    dev = fl.get_device()
    report: dict = {"device": f"{dev.name} ({dev.platform})", "n": args.n, "calls": args.calls,
                    "loops": args.loops, "us_per_call": {
                        k: {"median": statistics.median(v), "fastest": min(v)}
                        for k, v in times.items()},
                    "traces": {"f": f.traces, "g": g.traces}}
    print(f"device: {report['device']}; {args.n} float32 elements, {args.loops} loops of "
          f"{args.calls} calls")
    for k, v in report["us_per_call"].items():
        print(f"  {k:18s} median {v['median']:7.2f} us/call   fastest {v['fastest']:7.2f}")
    if args.breakdown:
        report["breakdown_us"] = parts = _breakdown(f, x, y, max(args.calls, 2000))
        print("breakdown (medians of single calls, us):")
        for k, v in parts.items():
            print(f"  {k:45s} {v:6.2f}")
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        _loop(variants["fl.fuse"], 20 * args.calls)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=1)
    return report


if __name__ == "__main__":
    main()
