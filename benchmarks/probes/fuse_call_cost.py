"""Python cost of one ``@fl.fuse`` call, with the driver's enqueue and with a no-op (issue 26).

The fused function is the host-overhead expression of ``bench_fuse.py``,
``((x * 2 + y) * x - y) / 3`` (5 operations, 1000 float32 elements), also with the
``3`` a Python float argument.  Each variant is timed as a loop of ``--calls`` calls
with ``fl.synchronize()`` every 100 calls and at the end (the deferred launches'
enqueue is inside the loop), first with the OpenCL backend's entry points
(``enqueue_nd_range_kernel``, ``Kernel.set_arg``), then without the user event that
holds a CPU device's batches of deferred launches ("no gate"), then, in the same
process, with the driver's entry points replaced by a Python no-op: the launch plans
are made again so that their launchers call the no-op, and the functions traced
again.  The last figure is what fuseloop's Python costs per call, independent of the
driver (PoCL here, the NVIDIA driver on the GPU host); the results of the no-op
calls are not computed.
The peer runs in the same process: ``cupy.fuse`` of the function on the GPU where
CuPy is installed, and numpy on the host.  Interleaved rounds (``--loops``), median and
fastest per variant; reported, never asserted.  The clock is the calling thread's CPU
time by default (``--clock thread``: robust on a loaded machine; the driver's own
threads are left out), or wall time.

    python benchmarks/probes/fuse_call_cost.py [--calls 2000] [--loops 7] [--clock wall]
                                               [--profile]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
import fuseloop as fl

_clock = [time.thread_time]


def _loop(call: Callable[[], object], calls: int,
          sync: Callable[[], object] = fl.synchronize) -> float:
    now = _clock[0]
    t = now()
    for i in range(calls):
        call()
        if i % 100 == 99:
            sync()
    sync()
    return (now() - t) / calls * 1e6


def _noop(*args: Any) -> None:
    return None


def _gate_off() -> None:
    """No user event holds a CPU device's batches of deferred launches (a driver call
    per batch, see ``_DeviceRuntime.flush``)."""
    from fuseloop.runtime.devices import _runtime

    fl.synchronize()
    _runtime(fl.get_device()).gate_at = 0


def _use_noop_enqueue(fused: list[Any]) -> None:
    """Launchers made from now on call :func:`_noop` instead of the driver; every kept
    launch plan and fused signature is dropped so that they are made again."""
    from fuseloop import cache, run_plans
    from fuseloop.backends import opencl

    _gate_off()
    opencl._enqueue_nd_range = _noop
    opencl._set_arg = _noop
    opencl._set_scalar = _noop
    for compiled in list(cache._memory.values()):
        plans = getattr(compiled, "launch_plans", None)
        if plans is not None:
            plans.clear()
    run_plans.clear()
    for f in fused:
        f.clear()


def _peers(xh: np.ndarray, yh: np.ndarray) -> dict[str, tuple[Any, Any]]:
    """The peer of the same run: ``cupy.fuse`` of the function where CuPy and a GPU are
    there, numpy on the host always; name -> (call, synchronize)."""
    peers: dict[str, tuple[Any, Any]] = {
        "numpy": (lambda: ((xh * 2 + yh) * xh - yh) / 3, lambda: None)}
    try:
        import cupy as cp

        xc, yc = cp.asarray(xh), cp.asarray(yh)
        cf = cp.fuse(lambda x, y: ((x * 2 + y) * x - y) / 3)
        cf(xc, yc)
        stream = cp.cuda.get_current_stream()
        peers["cupy.fuse"] = (lambda: cf(xc, yc), stream.synchronize)
    except Exception:  # (no CuPy, or no GPU: numpy only)
        pass
    return peers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--loops", type=int, default=7)
    ap.add_argument("--profile", action="store_true", help="cProfile the no-op calls")
    ap.add_argument("--clock", choices=["thread", "wall"], default="thread")
    args = ap.parse_args()
    _clock[0] = time.thread_time if args.clock == "thread" else time.perf_counter
    rng = np.random.default_rng(0)
    xh = rng.random(1000, dtype=np.float32)
    yh = rng.random(1000, dtype=np.float32) + 1
    x, y = fl.asarray(xh), fl.asarray(yh)
    peers = _peers(xh, yh)

    @fl.fuse
    def f(x, y):
        return ((x * 2 + y) * x - y) / 3

    @fl.fuse
    def g(x, y, a):
        return ((x * 2 + y) * x - y) / a

    values = [3.0, 3.5]
    variants = {"f(x, y)": lambda: f(x, y), "g(x, y, a)": lambda: g(x, y, values[0])}
    results: dict[str, dict[str, list[float]]] = {}
    peer_times: dict[str, list[float]] = {k: [] for k in peers}
    for call, sync in peers.values():
        _loop(call, 300, sync)
    for _ in range(args.loops):
        for name, (call, sync) in peers.items():
            peer_times[name].append(_loop(call, args.calls, sync))
    opencl = fl.get_device().backend == "opencl"
    for mode in ("driver", "no gate", "no-op") if opencl else ("driver",):
        if mode == "no gate":
            _gate_off()
        if mode == "no-op":
            _use_noop_enqueue([f, g])
        times: dict[str, list[float]] = {k: [] for k in variants}
        for call in variants.values():
            _loop(call, 300)  # (traces, plans, warms)
        for _ in range(args.loops):
            for name, call in variants.items():
                values.reverse()
                times[name].append(_loop(call, args.calls))
        results[mode] = times
    dev = fl.get_device()
    print(f"device: {dev.name} ({dev.platform}); {args.loops} loops of {args.calls} calls; "
          f"{args.clock} clock")
    print(f"  {'call':12s} {'enqueue':8s} {'median us':>10s} {'fastest':>8s}")
    for mode, times in results.items():
        for name, v in times.items():
            print(f"  {name:12s} {mode:8s} {statistics.median(v):10.2f} {min(v):8.2f}")
    for name, v in peer_times.items():
        print(f"  {name:12s} {'(peer)':8s} {statistics.median(v):10.2f} {min(v):8.2f}")
    if not opencl:
        print("  (the no-op rows replace the OpenCL backend's entry points: this device's "
              "backend is not OpenCL)")
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        _loop(variants["f(x, y)"], 20 * args.calls)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
