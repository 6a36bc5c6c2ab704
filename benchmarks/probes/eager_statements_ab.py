"""Host time per statement of the small statements NPBench's worst CPU ratios run
(preset S: floyd_warshall's row update, nussinov's element maximum, seidel_2d's element
updates, crc16's bit tests, jacobi_1d's statement) and of two small lazy expressions the
host path evaluates, for several fuseloop revisions in one process, rounds interleaved
(A, B, A, B, ...), on the CPU clock, with numpy running the same statement alongside
(issue 26).  Each revision's package is imported under a name of its own
(``benchmarks/compare_host_overhead.py``).  Reported, never asserted.

    python benchmarks/probes/eager_statements_ab.py REV [REV ...] [--rounds 7]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]

from benchmarks.compare_host_overhead import copy_packages  # noqa: E402

N = 200


def _patterns(m: Any, asarray: Any) -> dict[str, Any]:
    """Statement loops of ``m`` (numpy, or a fuseloop revision) on arrays made by
    ``asarray``; each returns how many statements it ran."""
    rng = np.random.default_rng(0)
    path = asarray(rng.random((N, N)))
    table = asarray(rng.integers(0, 9, (40, 40)).astype(np.int32))
    grid = asarray(rng.random((40, 40)))
    data = asarray(rng.integers(0, 255, 64).astype(np.uint8))

    def floyd_rows() -> int:
        for i in range(N):
            path[i, :] = m.minimum(path[i, :], path[i, 7] + path[7, :])
        return N

    def nussinov_max() -> int:
        for j in range(2, 40):
            for k in range(1, j):
                table[1, j] = max(table[1, j], table[1, k] + table[k + 1, j])
        return 39 * 38 // 2

    def seidel_elements() -> int:
        for j in range(1, 39):
            grid[5, j] += grid[5, j - 1]
            grid[5, j] /= 9.0
        return 2 * 38

    def crc16_bits() -> int:
        crc = 0xFFFF
        for b in data:
            cur = 0xFF & b
            for _ in range(8):
                if (crc & 0x0001) ^ (cur & 0x0001):
                    crc = (crc >> 1) ^ 0x8408
                else:
                    crc >>= 1
                cur >>= 1
        return 64 * 8

    ja, jb = asarray(rng.random(3200)), asarray(rng.random(3200))

    def jacobi_1d() -> int:
        for _ in range(10):
            jb[1:-1] = 0.33333 * (ja[:-2] + ja[1:-1] + ja[2:])
            ja[1:-1] = 0.33333 * (jb[:-2] + jb[1:-1] + jb[2:])
        return 20

    x, y = asarray(rng.random((64, 64))), asarray(rng.random((64, 64)))
    v = asarray(rng.random(4096))

    def lazy_sum() -> int:  # (lazy expressions evaluated by the host path)
        for _ in range(20):
            _done(m.sum(v * v))
        return 20

    def lazy_center() -> int:
        for _ in range(20):
            _done(x - x.mean(axis=1, keepdims=True) * y)
        return 20

    return {"floyd-row": floyd_rows, "nussinov-max": nussinov_max,
            "seidel-element": seidel_elements, "crc16-bits": crc16_bits,
            "jacobi-1d-3200": jacobi_1d, "lazy-sum-4096": lazy_sum,
            "lazy-center-64x64": lazy_center}


def _done(value: Any) -> Any:
    return value.eval() if hasattr(value, "eval") else value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions, or WT for the working tree")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    _, names = copy_packages(args.revs, "eager")
    mods = [importlib.import_module(name) for name in names]
    pats = [_patterns(np, np.array)] + [_patterns(fl, fl.asarray) for fl in mods]
    labels = ["numpy", *args.revs]
    for p in pats:  # (views taken once, plans recorded, kernels built)
        for fn in p.values():
            fn()
    times: dict[str, list[list[float]]] = {k: [[] for _ in pats] for k in pats[0]}
    for _ in range(args.rounds):
        for name in pats[0]:
            for v, p in enumerate(pats):
                t0 = time.process_time()
                count = p[name]()
                if v:
                    mods[v - 1].synchronize()
                times[name][v].append((time.process_time() - t0) / count * 1e6)
    print(f"{args.rounds} interleaved rounds; CPU-clock us per statement, min / median")
    print("| pattern | " + " | ".join(labels) + " |")
    print("| --- |" + " ---: |" * len(labels))
    for name, per_rev in times.items():
        print(f"| {name} | " + " | ".join(
            f"{min(t):.2f} / {statistics.median(t):.2f}" for t in per_rev) + " |")


if __name__ == "__main__":
    main()
