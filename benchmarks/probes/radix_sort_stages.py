"""Where fuseloop's OpenCL radix sort spends its time: each launch of one sort timed
alone (a wait before and after it), by kernel, against the whole sort streamed.

Usage: ``python benchmarks/probes/radix_sort_stages.py [--device SPEC] [--log2 24]``
(timings are reported, never asserted; the waits add the device's launch latency to
each figure, so the stages sum to more than the streamed sort).
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np

import fuseloop as fl
from fuseloop.ops import radix_sort


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--log2", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with fl.device(args.device) if args.device else fl.device(fl.get_device()):
        rng = np.random.default_rng(0)
        for dtype in (np.float32, np.int32):
            h = rng.standard_normal(1 << args.log2).astype(dtype) if dtype == np.float32 \
                else rng.integers(-2**31, 2**31 - 1, 1 << args.log2, dtype=np.int32)
            x = fl.asarray(h)
            np.testing.assert_array_equal(fl.sort(x).get(), np.sort(h))
            best = float("inf")
            for _ in range(args.repeat):
                fl.synchronize()
                t0 = time.perf_counter()
                for _ in range(10):
                    fl.sort(x).eval()
                fl.synchronize()
                best = min(best, (time.perf_counter() - t0) / 10)
            stages: dict[str, list[float]] = collections.defaultdict(list)
            launch = radix_sort._launch

            def timed(kernel, *rest, _launch=launch, _stages=stages):
                fl.synchronize()
                t0 = time.perf_counter()
                _launch(kernel, *rest)
                fl.synchronize()
                _stages[kernel.plan.name[:40]].append(
                    time.perf_counter() - t0)

            radix_sort._launch = timed
            try:
                for _ in range(args.repeat):
                    fl.sort(x).eval()
                fl.synchronize()
            finally:
                radix_sort._launch = launch
            print(f"sort {np.dtype(dtype).name} 2^{args.log2}: streamed {best * 1e3:.3f} ms")
            for name, ts in stages.items():
                per_sort = len(ts) // args.repeat
                med = sorted(ts)[len(ts) // 2]
                print(f"  {name:<40} x{per_sort} per sort, median {med * 1e6:8.1f} us alone")


if __name__ == "__main__":
    main()
