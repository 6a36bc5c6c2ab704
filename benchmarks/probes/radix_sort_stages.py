"""Where fuseloop's OpenCL radix sort spends its time: each launch of one sort (and
argsort) timed alone (a wait before and after it), by kernel, against the whole call
streamed and, on a GPU, cupy's (CUB's) time for the same call in the same run.

Each of the passes' ways (``radix_sort.VARIANT``: classic count/scan/scatter kernels a
pass, one-sweep, one-sweep fused with the key kernel) in turn, cupy once per workload after them.

Usage: ``python benchmarks/probes/radix_sort_stages.py [--device SPEC] [--log2 24]
[--variants classic,onesweep,fused]`` (timings are reported, never asserted; the waits add
the device's launch latency to each figure, so the stages sum to more than the
streamed sort).
"""

from __future__ import annotations

import argparse
import collections
import time
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.ops import radix_sort


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--log2", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--variants", default="classic,onesweep,fused",
                    help="radix_sort.VARIANT values to time, comma-separated")
    args = ap.parse_args()
    variants = args.variants.split(",")
    with fl.device(args.device) if args.device else fl.device(fl.get_device()):
        print(f"a 1-element evaluation alone: median {_tiny(args.repeat) * 1e6:.1f} us (the "
              "launch and wait that each stage's figure below includes)", flush=True)
        rng = np.random.default_rng(0)
        for dtype in (np.float32, np.int32):
            h = rng.standard_normal(1 << args.log2).astype(dtype) if dtype == np.float32 \
                else rng.integers(-2**31, 2**31 - 1, 1 << args.log2, dtype=np.int32)
            x = fl.asarray(h)
            for op in ("sort", "argsort"):
                for variant in variants:
                    radix_sort.VARIANT = variant
                    try:
                        _stages(x, h, op, args.repeat, variant)
                    finally:
                        radix_sort.VARIANT = None
                print(f"  cupy {op}: {_cupy(h, op, args.repeat)}", flush=True)


def _tiny(repeat: int) -> float:
    """The median time of a 1-element evaluation launched alone (waits before and after)."""
    y = fl.asarray(np.ones(1, np.float32))
    (y + 1).eval()
    ts = []
    for _ in range(10 * repeat):
        fl.synchronize()
        t0 = time.perf_counter()
        (y + 1).eval()
        fl.synchronize()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


def _streamed(fn: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        fl.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            fn().eval()
        fl.synchronize()
        best = min(best, (time.perf_counter() - t0) / 10)
    return best


def _stages(x: fl.Array, h: np.ndarray, op: str, repeat: int, variant: str) -> None:
    fn = getattr(fl, op)
    ref = np.sort(h) if op == "sort" else np.argsort(h, kind="stable")
    np.testing.assert_array_equal(fn(x).get(), ref)
    best = _streamed(lambda: fn(x), repeat)
    stages: dict[str, list[float]] = collections.defaultdict(list)
    launch = radix_sort._launch

    def timed(kernel, *rest, _launch=launch, _stages=stages):
        fl.synchronize()
        t0 = time.perf_counter()
        _launch(kernel, *rest)
        fl.synchronize()
        _stages[kernel.plan.name[:40]].append(time.perf_counter() - t0)

    radix_sort._launch = timed
    try:
        for _ in range(repeat):
            fn(x).eval()
        fl.synchronize()
    finally:
        radix_sort._launch = launch
    print(f"{op} {h.dtype.name} 2^{int(np.log2(h.size))} ({variant}): streamed "
          f"{best * 1e3:.3f} ms")
    for name, ts in stages.items():
        per_sort = len(ts) // repeat
        med = sorted(ts)[len(ts) // 2]
        print(f"  {name:<40} x{per_sort} per call, median {med * 1e6:8.1f} us alone")


def _cupy(h: np.ndarray, op: str, repeat: int) -> str:
    """cupy's time for ``op`` of ``h`` (best of ``repeat`` rounds of 10), or why not."""
    try:
        import cupy as cp

        x = cp.asarray(h)
        fn = getattr(cp, op)
        fn(x)
        best = float("inf")
        for _ in range(repeat):
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            for _ in range(10):
                fn(x)
            cp.cuda.Device().synchronize()
            best = min(best, (time.perf_counter() - t0) / 10)
        return f"{best * 1e3:.3f} ms"
    except Exception as exc:  # (no cupy, no CUDA device: reported, not fatal)
        return f"skipped ({type(exc).__name__}: {str(exc)[:60]})"


if __name__ == "__main__":
    main()
