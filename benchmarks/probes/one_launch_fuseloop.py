"""A split full reduction through fuseloop in one launch (``splits.ONE_LAUNCH``, the
default) against two (the setting off), in one process: ``sqrt(sum(x*x))``, ``mean``
and ``std`` of float32/float64 vectors, replayed under ``fl.fuse`` and lazily.

Times are medians of ``--repeat`` batches of ``--batch`` calls (one synchronisation per
batch), microseconds per call; every result is checked against numpy.  Reported, never
asserted.

    python benchmarks/probes/one_launch_fuseloop.py [--log2 16,20,24] [--dtype float32,float64]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
import fuseloop as fl
from fuseloop import splits

CASES = {
    "norm": (lambda a: fl.sum(a * a) ** 0.5, lambda h: np.sqrt((h * h).sum())),
    "mean": (lambda a: fl.mean(a), lambda h: h.mean()),
    "std": (lambda a: fl.std(a), lambda h: h.std()),
}


def per_call_us(fn, x, batch: int, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        fl.synchronize()
        t0 = time.perf_counter()
        for _ in range(batch):
            fn(x).eval()  # (each call evaluated: a dropped lazy result never runs)
        fl.synchronize()
        times.append((time.perf_counter() - t0) / batch * 1e6)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log2", default="16,20,24")
    ap.add_argument("--dtype", default="float32,float64")
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    print(f"device: {fl.asarray(np.zeros(1)).device.name}")
    print(f"{'case':6} {'dtype':8} {'n':>6} {'mode':6} {'one us':>9} {'two us':>9} {'ratio':>6}")
    for dt in args.dtype.split(","):
        for k in (int(v) for v in args.log2.split(",")):
            h = np.random.default_rng(k).random(1 << k).astype(dt)
            x = fl.asarray(h)
            for name, (make, ref) in CASES.items():
                for mode in ("fuse", "lazy"):
                    res = {}
                    for one in (True, False):
                        splits.ONE_LAUNCH = one
                        fn = fl.fuse(make) if mode == "fuse" else make
                        got = float(fn(x))  # (records, compiles)
                        np.testing.assert_allclose(got, ref(h.astype(np.float64)),
                                                   rtol=1e-4 if dt == "float32" else 1e-10)
                        res[one] = per_call_us(fn, x, args.batch, args.repeat)
                    splits.ONE_LAUNCH = True
                    print(f"{name:6} {dt:8} 2^{k:<4} {mode:6} {res[True]:9.1f} "
                          f"{res[False]:9.1f} {res[False] / res[True]:6.2f}")


if __name__ == "__main__":
    main()
