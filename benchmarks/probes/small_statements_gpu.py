"""Loops of small statements whose shapes change every iteration (NPBench's cholesky,
durbin, covariance), and a time loop of the same statements (``stencil-steps``):
kernels compiled, launches and host microseconds per statement.

A GPU recipe that specialises a kernel on a size compiles a kernel per iteration where
a shape-generic one compiles once; this probe tells which patterns do.  Each pattern
runs twice (the second round is what a timed repeat sees); ``--profile`` adds the
functions with the most own time in the second round of the covariance loop.

    python benchmarks/probes/small_statements_gpu.py [--device nvidia] [--n 300] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

import fuseloop as fl

COUNTS = ("kernels_compiled", "kernels_launched", "memory_cache_misses", "disk_cache_hits")


def _patterns(n: int, fl=fl):  # (fl: another revision's package, see small_statements_ab.py)
    rng = np.random.default_rng(0)
    vec = fl.asarray(rng.random(n))
    other = fl.asarray(rng.random(n))
    mat = fl.asarray(rng.random((n, n)))
    data = fl.asarray(rng.random((n + n // 4, n)))

    def dot_varying() -> int:
        for j in range(1, n):
            fl.dot(vec[:j], other[:j]).get()
        return n - 1

    def cholesky_row() -> int:
        for j in range(1, n):
            mat[7, j] -= fl.dot(mat[7, :j], mat[j, :j])
        mat[7, 1].get()
        return n - 1

    def durbin_like() -> int:
        y = fl.zeros_like(vec)
        for k in range(1, n):
            alpha = -(vec[k] + fl.dot(fl.flip(vec[:k]), y[:k]))
            y[:k] += alpha * fl.flip(y[:k])
            y[k] = alpha
        y.get()
        return 3 * (n - 1)

    def covariance_loop() -> int:
        cov = fl.zeros((n, n), dtype=data.dtype)
        for i in range(n):
            cov[i:n, i] = cov[i, i:n] = data[:, i] @ data[:, i:n] / 7.0
        cov.get()
        return 3 * n

    m = min(n, 40)
    spd = rng.random((m, m))
    spd = spd @ spd.T + m * np.eye(m)

    def cholesky() -> int:
        # offsets (i, j) outnumber the launch plans a step keeps: new plans every repeat
        a = fl.asarray(spd)
        a[0, 0] = fl.sqrt(a[0, 0])
        for i in range(1, m):
            for j in range(i):
                a[i, j] -= fl.dot(a[i, :j], a[j, :j])
                a[i, j] /= a[j, j]
            a[i, i] -= fl.dot(a[i, :i], a[i, :i])
            a[i, i] = fl.sqrt(a[i, i])
        a.get()
        return m * (m - 1) + 2 * (m - 1)

    low = fl.asarray(np.tril(rng.random((n, n))) + n * np.eye(n))
    rhs, sol = fl.asarray(rng.random(n)), fl.zeros(n)

    def trisolv() -> int:
        # a length per row: the plan's steps at each length (run_plans._at_lengths)
        for i in range(n):
            sol[i] = (rhs[i] - low[i, :i] @ sol[:i]) / low[i, i]
        sol.get()
        return n

    grid = fl.asarray(rng.random(n))
    plane = fl.asarray(rng.random((n, n)))

    def stencil_steps() -> int:
        # a time loop: the same statements on the same views every step (found by
        # signature and target, issue 26), one through a temporary, one in place
        for _ in range(n // 2):
            grid[1:-1] = 0.5 * (grid[:-2] + grid[2:])
            plane[1] = plane[1] * 0.5 + plane[2]
        plane[1, 1].get()
        return 2 * (n // 2)

    rows = fl.asarray(rng.random((n, 64)))
    sub, diag, rhs2, sweep = (fl.asarray(rng.random(n) + k) for k in (0, 2, 0, 0))

    def row_centre() -> int:
        # a moving view read and written: one plan for every row's offset
        for i in range(n):
            rows[i, :] -= rows[i, :].mean()
        rows[0, 0].get()
        return n

    def tridiagonal() -> int:
        # elements read at i and i - 1, written at i (disjoint from what it reads)
        for i in range(1, n):
            sweep[i] = (rhs2[i] - sub[i] * sweep[i - 1]) / diag[i]
        sweep.get()
        return n - 1

    return {"dot-varying": dot_varying, "cholesky-row": cholesky_row,
            "durbin-like": durbin_like, "covariance": covariance_loop,
            f"cholesky-{m}": cholesky, "trisolv": trisolv, "stencil-steps": stencil_steps,
            "row-centre": row_centre, "tridiagonal": tridiagonal}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--profile", action="store_true")
    ns = parser.parse_args()
    with fl.device(ns.device) if ns.device else _null():
        print(f"device: {fl.get_device()}")
        print(f"{'pattern':14} {'round':>5} {'stmts':>6} {'us/stmt':>9} "
              + " ".join(f"{c:>20}" for c in COUNTS))
        for name, fn in _patterns(ns.n).items():
            for rnd in (1, 2):
                before = dict(fl.stats())
                t0 = time.perf_counter()
                stmts = fn()
                fl.synchronize()
                dt = time.perf_counter() - t0
                after = dict(fl.stats())
                print(f"{name:14} {rnd:5d} {stmts:6d} {dt / stmts * 1e6:9.1f} "
                      + " ".join(f"{after[c] - before[c]:20d}" for c in COUNTS))
            if ns.profile and name == "covariance":
                prof = cProfile.Profile()
                prof.enable()
                fn()
                fl.synchronize()
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(18)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
