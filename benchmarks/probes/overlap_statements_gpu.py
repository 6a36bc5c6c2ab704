"""Statements that write elements other work-items read (issue 26): fuseloop against
CuPy, microseconds and launches per statement.

numpy's semantics compute the whole value from the old elements before any is written;
fuseloop runs such a write as one work-group (value into private memory, a barrier,
the stores) up to a limit, else as a temporary and a copy.  The patterns, each a loop
of one statement: a shift (``x[1:] = x[:-1] * 2``), a row shift in place
(``A[i, 1:] += A[i, :-1]``), durbin's reversed update (``y[:k] += a * flip(y[:k])``)
and floyd_warshall's row update (an element of the written row, broadcast).  Each runs
twice (round 2 is what a timed repeat sees); runs in well under two minutes.

    python benchmarks/probes/overlap_statements_gpu.py [--device nvidia] [--n 2000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl


def _patterns(xp: Any, n: int, sync: Callable[[], None]) -> dict[str, Callable[[], int]]:
    """Each pattern's loop on the array module ``xp`` (fuseloop or CuPy); returns how
    many statements it ran (each loop ends with a synchronisation).  CuPy's
    elementwise kernels do not guard against overlap: its results may differ from
    numpy's here; only its time is compared."""
    rng = np.random.default_rng(0)
    vec = xp.asarray(rng.random(n))
    mat = xp.asarray(rng.random((n // 4, n)))
    path = xp.asarray(rng.integers(1, 100, (n // 8, n // 8)).astype(np.int32))
    steps = 200

    def shift() -> int:
        x = vec.copy()
        for _ in range(steps):
            x[1:] = x[:-1] * 0.5
        sync()
        return steps

    def row_shift() -> int:
        rows = mat.shape[0]
        for i in range(rows):
            mat[i, 1:] += mat[i, :-1]
        sync()
        return rows

    def durbin_like() -> int:
        y = vec.copy()
        for k in range(1, n):
            y[:k] += (0.5 / k) * xp.flip(y[:k])
        sync()
        return n - 1

    def floyd_rows() -> int:
        m = path.shape[0]
        for k in range(min(m, 16)):
            for i in range(m):
                path[i, :] = xp.minimum(path[i, :], path[i, k] + path[k, :])
        sync()
        return min(m, 16) * m

    return {"shift": shift, "row-shift": row_shift, "durbin-like": durbin_like,
            "floyd-rows": floyd_rows}


def _run(name: str, xp: Any, n: int, sync: Callable[[], None],
         launches: Callable[[], int]) -> dict[str, tuple[float, float]]:
    out = {}
    for pattern, fn in _patterns(xp, n, sync).items():
        for rnd in (1, 2):
            before = launches()
            t0 = time.perf_counter()
            stmts = fn()
            dt = time.perf_counter() - t0
            per = (launches() - before) / stmts
            print(f"{name:9} {pattern:12} {rnd:5d} {stmts:6d} {dt / stmts * 1e6:9.1f} "
                  f"{per:9.2f}")
        out[pattern] = (dt / stmts * 1e6, per)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--n", type=int, default=2000)
    ns = parser.parse_args()
    print(f"{'library':9} {'pattern':12} {'round':>5} {'stmts':>6} {'us/stmt':>9} "
          f"{'launches':>9}")
    with fl.device(ns.device) if ns.device else fl.device(fl.get_device()):
        print(f"# fuseloop on {fl.get_device()}")
        ours = _run("fuseloop", fl, ns.n, fl.synchronize,
                    lambda: fl.stats()["kernels_launched"])
    try:
        import cupy as cp
    except ImportError:
        print("# cupy not installed: no reference")
        return
    theirs = _run("cupy", cp, ns.n, cp.cuda.Device().synchronize, lambda: 0)
    print("# round 2, cupy us / fuseloop us (above 1: fuseloop faster)")
    for pattern, (us, _) in ours.items():
        print(f"{pattern:12} {theirs[pattern][0] / us:6.3f}")


if __name__ == "__main__":
    main()
