"""Elements per work-item of the GPU elementwise recipe against kernel length: cold build
time and run time.

For each case and each ``items`` value, a new process with empty fuseloop, Loopy and NVIDIA
(``CUDA_CACHE_PATH``) caches evaluates the expression once (the first result: lowering,
code generation and the driver's build) and then times it (median of 20 launches with a
wait, 2^24 float32 elements).  Cases: ``rep<R>`` (``r = sin(r)*0.5 + r*y``, R times: 4
operations each), ``horner<K>`` (a degree-K polynomial), ``bs`` (Black-Scholes-like).

    python benchmarks/probes/gpu_items_rule.py --device nvidia rep12:1,2,4 rep50:1,2,4
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import sys, time
import numpy as np
import fuseloop as fl
from fuseloop.recipes import gpu_coalesced
case, items = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
n = 1 << 24
x = fl.asarray(rng.random(n, dtype=np.float32))
y = fl.asarray(rng.random(n, dtype=np.float32))
def build():
    if case.startswith("rep"):
        e = x
        for _ in range(int(case[3:])):
            e = fl.sin(e) * 0.5 + e * y
        return e
    if case.startswith("horner"):
        e = x * 0 + 0.5
        for k in range(int(case[6:])):
            e = e * x + (0.1 + 0.01 * k)
        return e
    d1 = (fl.log(x + 1) + (0.05 + 0.5 * y * y)) / (y + 0.1)
    return x * fl.exp(-d1 * d1 * 0.5) - y * fl.exp(-0.05 * d1)
with fl.recipes.use(gpu_coalesced.with_params(items=items)):
    t0 = time.perf_counter()
    build().eval(); fl.synchronize()
    first = time.perf_counter() - t0
    times = []
    for _ in range(20):
        t0 = time.perf_counter(); build().eval(); fl.synchronize()
        times.append(time.perf_counter() - t0)
print(f"{case:10s} items {items}: first result {first:7.2f} s, "
      f"run {1e3 * sorted(times)[10]:7.3f} ms")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("cases", nargs="+", help="CASE:ITEMS,ITEMS,...")
    args = parser.parse_args()
    for spec in args.cases:
        case, values = spec.split(":")
        for items in values.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(os.environ, FUSELOOP_CACHE_DIR=f"{tmp}/fl", XDG_CACHE_HOME=f"{tmp}/x",
                           CUDA_CACHE_PATH=f"{tmp}/nv", POCL_CACHE_DIR=f"{tmp}/pocl",
                           FUSELOOP_PROGRESS="0", PYTHONPATH=os.pathsep.join(
                               p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
                if args.device:
                    env["FUSELOOP_DEVICE"] = args.device
                out = subprocess.run([sys.executable, "-c", _CHILD, case, items], env=env,
                                     text=True, capture_output=True, cwd=ROOT, timeout=300)
                print(out.stdout.strip() or f"{case} items {items}: failed\n{out.stderr[-1500:]}",
                      flush=True)


if __name__ == "__main__":
    main()
