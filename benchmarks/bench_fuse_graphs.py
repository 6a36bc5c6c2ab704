"""``fl.fuse`` with and without CUDA graphs: per-call host cost of a fused function of
several launches, and CuPy running the same operations, in one run.

The function (``chain``) evaluates ``k`` intermediates one after another (``y = (y * a
+ b).eval()``, each one launch) and returns them centred (a reduction and its
consumer): about ``k + 1`` launches per call (the table shows the recorded number), on
1000 float32.  Each variant is a loop of calls synchronising
every 100 (as ``compare_host_overhead.py``), interleaved rounds, median us per call.
"graphs" replays the record as one CUDA graph (``fuseloop.fuse_graphs``), "launches"
the same function traced with graphs off.  Reported, not asserted; on a device
without graphs (OpenCL, CPU) both rows are the launches.

    PYTHONPATH=. python benchmarks/bench_fuse_graphs.py [--device cuda:0] [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import fuseloop as fl
from fuseloop import fuse_graphs


def chain(k: int) -> Callable:
    def f(x, a, b):
        y = x
        for _ in range(k):
            y = (y * a + b).eval()
        return y - fl.sum(y) / y.shape[0]
    return f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--launches", type=int, nargs="+", default=[2, 4, 8])
    args = ap.parse_args()
    dev = fl.set_device(args.device) or fl.get_device()
    xh = np.random.default_rng(0).random(1000, dtype=np.float32)
    x = fl.asarray(xh)
    loops: dict[tuple[int, str], Callable[[int], None]] = {}
    steps: dict[int, int] = {}  # launches per call, as recorded
    for k in args.launches:
        want = xh
        for _ in range(k):
            want = want * np.float32(0.5) + np.float32(1.0)
        want = want - want.sum() / want.shape[0]
        for mode in ("graphs", "launches"):
            fuse_graphs.ENABLED = mode == "graphs"  # (read when a signature is traced)
            f = fl.fuse(chain(k))
            for _ in range(6):  # (traced, then both buffer sets captured)
                np.testing.assert_allclose(f(x, 0.5, 1.0).get(), want, rtol=1e-4, atol=1e-5)

            def loop(n: int, f=f) -> None:
                for i in range(n):
                    f(x, 0.5, 1.0)
                    if i % 100 == 99:
                        fl.synchronize()
                fl.synchronize()
            loops[(k, mode)] = loop
            steps[k] = len(next(iter(f._entries.values())).steps)
        peer = _cupy_loop(xh, k)
        if peer is not None:
            loops[(k, "CuPy")] = peer
    fuse_graphs.ENABLED = True
    times: dict[tuple[int, str], list[float]] = {key: [] for key in loops}
    for loop in loops.values():
        loop(args.calls // 4)  # (warm)
    for _ in range(args.rounds):
        for key, loop in loops.items():
            t = time.perf_counter()
            loop(args.calls)
            times[key].append((time.perf_counter() - t) / args.calls * 1e6)
    print(f"device: {dev.name} ({dev.backend}); us per call, median of {args.rounds} loops")
    print("| launches per call | fl.fuse, graphs | fl.fuse, launches | CuPy | graphs / launches |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for k in args.launches:
        med = {m: statistics.median(times[(k, m)]) for m in ("graphs", "launches", "CuPy")
               if (k, m) in times}
        cupy_us = f"{med['CuPy']:.1f}" if "CuPy" in med else "-"
        print(f"| {steps[k]} | {med['graphs']:.1f} | {med['launches']:.1f} | {cupy_us} "
              f"| {med['graphs'] / med['launches']:.2f} |")


def _cupy_loop(xh: np.ndarray, k: int) -> Callable[[int], None] | None:
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # (no CuPy or no CUDA device: no peer row)
        return None
    x = cupy.asarray(xh)
    a, b = np.float32(0.5), np.float32(1.0)

    def loop(n: int) -> None:
        for i in range(n):
            y = x
            for _ in range(k):
                y = y * a + b
            y - y.sum() / y.shape[0]
            if i % 100 == 99:
                cupy.cuda.get_current_stream().synchronize()
        cupy.cuda.get_current_stream().synchronize()
    return loop


if __name__ == "__main__":
    main()
