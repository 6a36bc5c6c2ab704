"""Host microseconds per small statement on the device path, fuseloop revisions in one
process, rounds interleaved (A, B, A, B, ...), on the main thread's CPU clock (PoCL's
worker threads, which run the kernels, are left out; issue 26).

Each pattern is a loop of one statement whose views move (a new offset every
iteration), as NPBench's loop kernels run them:

* ``floyd-row``: ``path[i, :] = minimum(path[i, :], path[i, k] + path[k, :])`` (int32);
* ``shift``: ``x[1:] = x[:-1] * 2`` (the value overlaps the target);
* ``durbin``: ``y[:k] += a * y[k-1::-1]`` (``a`` a 0-d array, ``k`` up to ``4 n``);
* ``seidel-row``: seidel_2d's row update ``A[i, 1:-1] += (7 neighbour views)``;
* ``seidel-elem``: ``A[i, j] += A[i, j - 1]``;
* ``nussinov``: ``T[r, 0] = max(T[r, 0], T[r, k] + T[k + 1, 0])`` (int32 elements);
* ``trisolv``: ``x[k] = (b[k] - L[k, :k] @ x[:k]) / L[k, k]``;
* ``cholesky``: ``A[r, j] -= dot(A[r, :j], A[j, :j]); A[r, j] /= A[j, j]``;
* ``zero-d``: ``s = s + x[i]`` (a 0-d array updated, evaluated every statement).

Run with ``FUSELOOP_HOST_PATH=0`` on the CPU to time what a GPU's host pays; each
pattern runs twice untimed first (kernels compiled, plans recorded).  Revisions as
``benchmarks/compare_host_overhead.py`` takes them (``WT``: the working tree).
``--launches`` adds the kernels launched per statement of one more run; on a GPU,
``--wall --cupy`` times wall-clock microseconds with cupy's loops as a last column.
Reported, never asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/statement_host_ab.py REV [REV ...]
        [--n 64] [--rounds 7] [--device SPEC] [--only NAME ...] [--wall] [--cupy]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from benchmarks.compare_host_overhead import import_revisions


def statements(xp: Any, n: int) -> dict[str, tuple[Callable[[int], None], int]]:
    """Each pattern's statement as a function of the iteration ``i`` on the array module
    ``xp`` (a fuseloop revision, or CuPy), and the iterations of one loop of it.  The
    views move on from one loop to the next (a running count), as in NPBench, where a
    loop meets more offsets than any cache of them keeps."""
    rng = np.random.default_rng(0)
    path = xp.asarray(rng.integers(1, 100, (n, n)).astype(np.int32))
    vec = xp.asarray(rng.random(4 * n))
    grid = xp.asarray(rng.random((n, n)))
    a = xp.asarray(np.float64(1e-3))
    s = [xp.asarray(np.float64(0.0))]
    count = [0]

    def moved() -> int:
        count[0] += 1
        return count[0]

    def floyd_row(i: int) -> None:
        c = moved()
        k, r = (c // n) % n, c % n
        path[r, :] = xp.minimum(path[r, :], path[r, k] + path[k, :])

    def shift(i: int) -> None:
        vec[1:] = vec[:-1] * 0.5

    def durbin(i: int) -> None:
        k = 1 + moved() % (4 * n - 1)
        vec[:k] += a * vec[k - 1::-1]

    def seidel_row(i: int) -> None:
        A, r = grid, 1 + i % (n - 2)
        A[r, 1:-1] += (A[r - 1, :-2] + A[r - 1, 1:-1] + A[r - 1, 2:] + A[r, 2:]
                       + A[r + 1, :-2] + A[r + 1, 1:-1] + A[r + 1, 2:])

    def seidel_elem(i: int) -> None:
        c = moved()
        r, j = 1 + (c // (n - 2)) % (n - 2), 1 + c % (n - 2)
        grid[r, j] += grid[r, j - 1]

    def nussinov(i: int) -> None:  # (an element, two elements' sum, Python's max)
        c = moved()
        r, k = 1 + (c // (n - 2)) % (n - 2), 1 + c % (n - 2)
        path[r, 0] = max(path[r, 0], path[r, k] + path[k + 1, 0])

    def trisolv(i: int) -> None:  # (a growing dot, an element's update)
        k = moved() % n
        vec[k] = (vec[n + k] - grid[k, :k] @ vec[:k]) / grid[k, k]

    def cholesky(i: int) -> None:  # (a dot of two rows into an element, a division)
        c = moved()
        r = 1 + (c // (n - 1)) % (n - 1)
        j = c % r
        grid[r, j] -= xp.dot(grid[r, :j], grid[j, :j])
        grid[r, j] /= grid[j, j]

    def zero_d(i: int) -> None:
        s[0] = s[0] + vec[i % n]
        if hasattr(s[0], "eval"):  # (fuseloop's lazy 0-d array: computed every statement)
            s[0].eval()

    return {"floyd-row": (floyd_row, 2 * n), "shift": (shift, n), "durbin": (durbin, 2 * n),
            "seidel-row": (seidel_row, n - 2), "seidel-elem": (seidel_elem, n),
            "nussinov": (nussinov, n), "trisolv": (trisolv, n), "cholesky": (cholesky, n),
            "zero-d": (zero_d, n)}


def patterns(xp: Any, n: int, sync: Callable[[], None]) -> dict[str, Callable[[], int]]:
    """Each of :func:`statements`' loops, ending with ``sync()``: returns its statements."""
    def loop(step: Callable[[int], None], count: int) -> Callable[[], int]:
        def run() -> int:
            for i in range(count):
                step(i)
            sync()
            return count
        return run
    return {name: loop(*sc) for name, sc in statements(xp, n).items()}


def _cupy_loops(n: int) -> dict[str, Callable[[], int]] | None:
    try:
        import cupy as cp
    except ImportError:
        print("# cupy not installed: no reference column")
        return None
    return patterns(cp, n, cp.cuda.Device().synchronize)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+",
                    help="git revisions, WT for the working tree, or a folder holding fuseloop/")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--device", default=None)
    ap.add_argument("--only", nargs="*", help="pattern names (default: all)")
    ap.add_argument("--launches", action="store_true")
    ap.add_argument("--wall", action="store_true",
                    help="wall-clock us per statement, the loop's synchronisation included "
                         "(on a GPU: what the host pays while the device keeps up)")
    ap.add_argument("--cupy", action="store_true", help="cupy's loops as a last column")
    args = ap.parse_args()
    clock = time.perf_counter if args.wall else time.thread_time
    mods = import_revisions(args.revs, "sh", args.device)
    pats = [patterns(fl, args.n, fl.synchronize) for fl in mods]
    labels = list(args.revs)
    theirs = _cupy_loops(args.n) if args.cupy else None
    if theirs is not None:
        pats.append(theirs)
        labels.append("cupy")
    names = args.only or list(pats[0])
    for p in pats:
        for name in names:
            p[name]()
            p[name]()
    times: dict[str, list[list[float]]] = {k: [[] for _ in pats] for k in names}
    for _ in range(args.rounds):
        for name in names:
            for v, p in enumerate(pats):
                t0 = clock()
                count = p[name]()
                times[name][v].append((clock() - t0) / count * 1e6)
    what = "wall-clock" if args.wall else "main-thread CPU"
    print(f"device: {mods[0].get_device()}; n={args.n}; {args.rounds} interleaved rounds; "
          f"{what} us per statement, min / median")
    print("| pattern | " + " | ".join(labels) + " |")
    print("| --- |" + " ---: |" * len(labels))
    for name, per_rev in times.items():
        print(f"| {name} | " + " | ".join(
            f"{min(t):.1f} / {statistics.median(t):.1f}" for t in per_rev) + " |")
    if args.launches:
        for name in names:
            per = []
            for fl, p in zip(mods, pats):
                before = fl.stats()["kernels_launched"]
                count = p[name]()
                per.append(f"{(fl.stats()['kernels_launched'] - before) / count:.2f}")
            print(f"launches per statement, {name}: " + ", ".join(per))


if __name__ == "__main__":
    main()
