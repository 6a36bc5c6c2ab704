"""Arrays with more than 2^31 elements (64-bit indexing), checked element by element.

Usage: ``python benchmarks/large_arrays.py [--log2 31.1] [--device SPEC]``.  Needs a
device whose largest allocation holds the arrays (int8: one byte per element).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import fuseloop as fl


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--elements", type=int, default=2**31 + 12345)
    p.add_argument("--device", default=None)
    args = p.parse_args(argv)
    if args.device:
        fl.set_device(args.device)
    n = args.elements
    dev = fl.get_device()
    print(f"device {dev.name}: {n} int8 elements ({n / 2**31:.3f} x 2^31)", flush=True)
    t0 = time.perf_counter()
    x = fl.arange(n, dtype=np.int64)
    y = ((x % 7) - 3).astype(np.int8).eval()  # the flat index itself exceeds int32
    fl.synchronize()
    print(f"elementwise over {n}: {time.perf_counter() - t0:.2f} s", flush=True)
    tail = y[-6:].get()
    want = ((np.arange(n - 6, n, dtype=np.int64) % 7) - 3).astype(np.int8)
    ok = np.array_equal(tail, want)
    print("last elements", tail.tolist(), "expected", want.tolist(), "OK" if ok else "MISMATCH")
    total = int(y.sum())  # int8 sums to int64 (numpy's rule)
    full_cycles, rest = divmod(n, 7)
    want_total = full_cycles * sum((k % 7) - 3 for k in range(7)) + sum(
        (k % 7) - 3 for k in range(rest))
    print("sum", total, "expected", want_total, "OK" if total == want_total else "MISMATCH")
    picks = [0, n - 1, min(2**31 + 5, n - 2)]
    idx = fl.asarray(np.array(picks, dtype=np.int64))
    g = y[idx].get()
    want_g = np.array([((k % 7) - 3) for k in picks], np.int8)
    print("gather", g.tolist(), "expected", want_g.tolist(),
          "OK" if np.array_equal(g, want_g) else "MISMATCH")
    return 0 if ok and total == want_total and np.array_equal(g, want_g) else 1


if __name__ == "__main__":
    sys.exit(main())
