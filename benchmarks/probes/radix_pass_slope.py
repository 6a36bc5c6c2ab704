"""The one-sweep pass kernel's time alone, for each of bench_sort.py's PASS_VARIANTS.

``fl.sort`` of 2^LOG2 uint32 (uniform) whose values vary in their low 1, 2, 3 and 4 bytes
runs the fused one-sweep way with that many passes (constant bytes are skipped; the
histogram kernel reads every byte in each case), so the slope of the time over the
passes is one pass kernel's time and the intercept the rest (histograms, starts,
launches).  Usage (the lead's GPU run)::

    python benchmarks/probes/radix_pass_slope.py [--log2 24] [--repeat 10] [--only LABEL,...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

# (this checkout's fuseloop, not an installed one: the settings timed are this branch's)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import fuseloop as fl
from fuseloop.bench.runner import median_time
from fuseloop.ops import radix_sort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_sort import PASS_VARIANTS  # (one list of variants for both)


def _times(data: list[np.ndarray], settings: dict[str, Any], repeat: int) -> list[float]:
    """Median ms of fl.sort of each array with ``settings`` on radix_sort, fused."""
    saved = {k: getattr(radix_sort, k) for k in (*settings, "VARIANT")}
    try:
        for k, v in {**settings, "VARIANT": "fused"}.items():
            setattr(radix_sort, k, v)
        out = []
        for a in data:
            x = fl.asarray(a)
            if not np.array_equal(fl.sort(x).get(), np.sort(a)):
                raise AssertionError(f"{settings}: sort of {a.dtype} mismatches numpy")
            out.append(1e3 * median_time(lambda x=x: fl.sort(x).eval(), fl.synchronize,
                                         repeat))
        return out
    finally:
        for k, v in saved.items():
            setattr(radix_sort, k, v)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log2", type=int, default=24)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--only", default="", help="PASS_VARIANTS labels, comma-separated")
    args = p.parse_args(argv)
    n = 1 << args.log2
    rng = np.random.default_rng(27)
    full = rng.integers(0, 2**32, n, dtype=np.uint32)
    # (the top value of each range set once: every low byte varies, no high one does)
    data = [full & np.uint32((1 << (8 * b)) - 1) for b in (1, 2, 3, 4)]
    chosen = [s for s in args.only.split(",") if s] or list(PASS_VARIANTS)
    print(f"device: {fl.get_device().name}; fl.sort of 2^{args.log2} uint32 varying in "
          "1-4 bytes (fused); ms, then the least-squares slope (us a pass)", flush=True)
    print(f"{'variant':45s} {'1 pass':>8s} {'2':>8s} {'3':>8s} {'4':>8s} "
          f"{'us/pass':>8s} {'rest us':>8s}")
    for label in chosen:
        t = _times(data, PASS_VARIANTS[label], args.repeat)
        slope, rest = np.polyfit([1, 2, 3, 4], t, 1)
        print(f"{label:45s} " + " ".join(f"{v:8.3f}" for v in t)
              + f" {1e3 * slope:8.1f} {1e3 * rest:8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
