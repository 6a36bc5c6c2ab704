"""Where the lazy path's time goes against ``fl.fuse`` on the broad suite's losing cases, as
the suite times them (issue 25): each run is a call then ``fl.synchronize()``.

For each case and each of lazy ``.eval()`` and ``fl.fuse``, per call (median of
``--repeat`` runs, after warm-up): the wall time of call + synchronize (what the suite
reports), the wall time until the call returns (the host's part before the wait), the
calling thread's CPU time of the call, the kernels launched per call (``fl.stats()``)
and the bytes allocated per call (the device pool's count).  Equal kernels and a gap in
the first column larger than the gap in the second say the difference is in the
kernels or the wait, not in the host's work.  Revisions side by side
(``compare_host_overhead.copy_packages``).

    python benchmarks/probes/lazy_gpu_gap.py /work/main WT --device gpu
    python benchmarks/probes/lazy_gpu_gap.py WT --case matmul-8rows --n 4096
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from compare_host_overhead import import_revisions

# name: (shapes of the inputs for order n (2^24 elements at n = 4096), function)
CASES: dict[str, tuple[Any, Any]] = {
    "matmul-8rows": (lambda n: [(8, n), (n, n)], lambda fl, a, b: a @ b),
    "matmul-64rows": (lambda n: [(64, n), (n, n)], lambda fl, a, b: a @ b),
    "matmul-8cols": (lambda n: [(n, n), (n, 8)], lambda fl, a, b: a @ b),
    "vecmat": (lambda n: [(n,), (n, n)], lambda fl, a, b: a @ b),
    "small-matvec": (lambda n: [(64, 64), (64,)], lambda fl, a, b: a @ b),
    "argmin-all": (lambda n: [(n * n,)], lambda fl, x: fl.argmin(x)),
    "argmax-rows": (lambda n: [(n, n)], lambda fl, x: fl.argmax(x, axis=1)),
    "sum-all-keepdims": (lambda n: [(n // 16, n // 16, 256)],
                         lambda fl, x: fl.sum(x, axis=(0, 1, 2), keepdims=True)),
    "sum-axes02": (lambda n: [(n // 8, n // 8, 64)], lambda fl, x: fl.sum(x, axis=(0, 2))),
    "row-center": (lambda n: [(n, n)], lambda fl, x: x - fl.mean(x, axis=1, keepdims=True)),
}


def measure(fl: Any, name: str, n: int, repeat: int) -> dict[str, list[float]]:
    shapes, fn = CASES[name]
    rng = np.random.default_rng(0)
    args = [fl.asarray(rng.random(s, dtype=np.float32)) for s in shapes(n)]
    fused = fl.fuse(lambda *a: fn(fl, *a))
    runs = {"lazy": lambda: fn(fl, *args).eval(), "fuse": lambda: fused(*args)}
    out: dict[str, list[float]] = {}
    for kind, run in runs.items():
        for _ in range(5):
            run()
            fl.synchronize()
        walls, hosts, cpus = [], [], []
        fl.reset_stats()
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.thread_time()
            r = run()
            t1, c1 = time.perf_counter(), time.thread_time()
            fl.synchronize()
            walls.append(time.perf_counter() - t0)
            hosts.append(t1 - t0)
            cpus.append(c1 - c0)
            del r
        launched = fl.stats()["kernels_launched"] / repeat
        out[kind] = [statistics.median(walls) * 1e6, statistics.median(hosts) * 1e6,
                     statistics.median(cpus) * 1e6, launched]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions or folders (WT: the working tree)")
    ap.add_argument("--device", default=None, help="device spec (default: fuseloop's)")
    ap.add_argument("--n", type=int, default=4096, help="matrix order (2^24 elements: 4096)")
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--case", nargs="*", default=list(CASES))
    args = ap.parse_args()
    pkgs = import_revisions(args.revs, "gap", args.device)
    print(f"us per call (median of {args.repeat}): wall of call + synchronize | wall until "
          "the call returns | thread CPU of the call | kernels per call; lazy then fuse")
    for case in args.case:
        for rev, fl in zip(args.revs, pkgs):
            got = measure(fl, case, args.n, args.repeat)
            cells = "   ".join(f"{k} {w:7.1f} | {h:6.1f} | {c:6.1f} | {n:g}"
                               for k, (w, h, c, n) in got.items())
            print(f"{case:<17} {rev[-12:]:>12}  {cells}", flush=True)


if __name__ == "__main__":
    main()
