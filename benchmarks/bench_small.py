"""Host cost of small arrays and loops of small statements (issue 26), versions interleaved.

Cases, on the CPU device unless ``--device`` says otherwise:

* ``build``: 100 repetitions of ``r = fl.sin(r) * 0.5 + r * y`` (400 nodes), no
  evaluation; reported per node;
* ``chain``: 10 iterations of ``r = sin(r) * 0.5 + r * 0.25`` on 1000 float32, then
  ``.eval()``; reported per call;
* ``recur``: ``for i in range(1, n): x[i] = y[i] * 2 + x[i - 1]`` (n = 200); per statement;
* ``trisolv``: ``x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]`` (n = 60); per statement;
* ``seidel``: ``A[i, j] += A[i, j - 1]; A[i, j] /= 9.0`` over a 30 x 30 float64 array
  (seidel_2d's inner loop); per statement;
* ``stencil``: ``x[1:-1] = 0.5 * (x[:-2] + x[2:])`` on 200 float64, 100 times; per statement.

Each named version (git revisions, ``WT`` for the working tree: see
``compare_host_overhead.py``, whose copying this reuses) is imported under its own name
into one process and the cases run in turn, A, B, A, B, ..., so each sees the same phases
of a loaded machine.  numpy's time of the statement loops is measured alike.  Medians and
minima are reported, never asserted.

Usage::

    python benchmarks/bench_small.py REV [REV ...] [--rounds N] [--device SPEC]
                                     [--profile CASE] [--clock thread]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import pstats
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_host_overhead import copy_packages

N_RECUR = 200
N_TRI = 60
N_SEIDEL = 30
N_STENCIL = 200


def make_cases(fl: Any) -> dict[str, tuple[Any, float]]:
    """case -> (a function running it once, how many units it counts)."""
    rng = np.random.default_rng(1)
    rh = rng.random(1000, dtype=np.float32)
    r0 = fl.asarray(rh)
    y = fl.asarray(rng.random(1000, dtype=np.float32))
    xh = rng.random(N_RECUR, dtype=np.float32)
    yh = rng.random(N_RECUR, dtype=np.float32)
    xr, yr = fl.asarray(xh), fl.asarray(yh)
    lh = np.tril(rng.random((N_TRI, N_TRI))) + np.eye(N_TRI) * N_TRI
    bh = rng.random(N_TRI)
    L, b = fl.asarray(lh), fl.asarray(bh)
    xt = fl.zeros(N_TRI, np.float64)
    ah = rng.random((N_SEIDEL, N_SEIDEL))
    A = fl.asarray(ah)
    sh = rng.random(N_STENCIL)
    xs = fl.asarray(sh)

    def build() -> None:
        r = r0
        for _ in range(100):
            r = fl.sin(r) * 0.5 + r * y

    def chain() -> None:
        r = r0
        for _ in range(10):
            r = fl.sin(r) * 0.5 + r * 0.25
        r.eval()

    def recur() -> None:
        for i in range(1, N_RECUR):
            xr[i] = yr[i] * 2 + xr[i - 1]

    def trisolv() -> None:
        for i in range(N_TRI):
            xt[i] = (b[i] - L[i, :i] @ xt[:i]) / L[i, i]

    def seidel() -> None:
        _seidel(A)

    def stencil() -> None:
        _stencil(xs)

    # correctness first (also warms every kernel)
    r = rh
    for _ in range(10):
        r = np.sin(r) * np.float32(0.5) + r * np.float32(0.25)
    rr = r0
    for _ in range(10):
        rr = fl.sin(rr) * 0.5 + rr * 0.25
    np.testing.assert_allclose(rr.get(), r, rtol=1e-6)
    x_np = xh.copy()
    for i in range(1, N_RECUR):
        x_np[i] = yh[i] * 2 + x_np[i - 1]
    recur()
    np.testing.assert_allclose(xr.get(), x_np, rtol=1e-5)
    trisolv()
    np.testing.assert_allclose(xt.get(), np.linalg.solve(lh, bh), rtol=1e-10)
    seidel()
    _seidel(ah)
    np.testing.assert_allclose(A.get(), ah, rtol=1e-12)
    stencil()
    _stencil(sh)
    np.testing.assert_allclose(xs.get(), sh, rtol=1e-12)
    return {"build": (build, 400), "chain": (chain, 1), "recur": (recur, N_RECUR - 1),
            "trisolv": (trisolv, N_TRI), "seidel": (seidel, 2 * (N_SEIDEL - 2) ** 2),
            "stencil": (stencil, 100)}


def _seidel(A: Any) -> None:
    for i in range(1, N_SEIDEL - 1):
        for j in range(1, N_SEIDEL - 1):
            A[i, j] += A[i, j - 1]
            A[i, j] /= 9.0


def _stencil(x: Any) -> None:
    for _ in range(100):
        x[1:-1] = 0.5 * (x[:-2] + x[2:])


def numpy_cases() -> dict[str, tuple[Any, float]]:
    rng = np.random.default_rng(1)
    x = rng.random(N_RECUR, dtype=np.float32)
    y = rng.random(N_RECUR, dtype=np.float32)
    lh = np.tril(rng.random((N_TRI, N_TRI))) + np.eye(N_TRI) * N_TRI
    b = rng.random(N_TRI)
    xt = np.zeros(N_TRI)
    r0 = rng.random(1000, dtype=np.float32)
    A = rng.random((N_SEIDEL, N_SEIDEL))
    xs = rng.random(N_STENCIL)

    def chain() -> None:
        r = r0
        for _ in range(10):
            r = np.sin(r) * np.float32(0.5) + r * np.float32(0.25)

    def recur() -> None:
        for i in range(1, N_RECUR):
            x[i] = y[i] * 2 + x[i - 1]

    def trisolv() -> None:
        for i in range(N_TRI):
            xt[i] = (b[i] - lh[i, :i] @ xt[:i]) / lh[i, i]

    return {"chain": (chain, 1), "recur": (recur, N_RECUR - 1), "trisolv": (trisolv, N_TRI),
            "seidel": (lambda: _seidel(A), 2 * (N_SEIDEL - 2) ** 2),
            "stencil": (lambda: _stencil(xs), 100)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--profile", help="profile this case of the last version instead")
    ap.add_argument("--clock", choices=["wall", "thread"], default="wall",
                    help="wall time, or the main thread's CPU time (steadier on a loaded "
                         "machine; leaves out the OpenCL driver's threads)")
    args = ap.parse_args()
    now = time.perf_counter if args.clock == "wall" else time.thread_time

    tmp, names = copy_packages(args.revs, "small")
    versions: list[tuple[str, Any, dict]] = []
    for rev, name in zip(args.revs, names):
        fl = importlib.import_module(name)
        fl.set_device(args.device)
        versions.append((rev, fl, make_cases(fl)))
    versions.append(("numpy", np, numpy_cases()))

    if args.profile:
        fl, cases = versions[-2][1], versions[-2][2]
        run, _ = cases[args.profile]
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.rounds):
            run()
        fl.synchronize()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        shutil.rmtree(tmp, ignore_errors=True)
        return

    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for rev, fl, cases in versions:
            for case, (run, units) in cases.items():
                t0 = now()
                run()
                if fl is not np:
                    fl.synchronize()
                times.setdefault((case, rev), []).append((now() - t0) / units * 1e6)
    print(f"us per unit ({args.rounds} interleaved rounds, {args.clock} clock): "
          "median / fastest")
    print("| case | " + " | ".join(r for r, _, _ in versions) + " |")
    print("| --- |" + " ---: |" * len(versions))
    for case in ("build", "chain", "recur", "trisolv", "seidel", "stencil"):
        cells = []
        for rev, _, _ in versions:
            ts = times.get((case, rev))
            cells.append(f"{statistics.median(ts):.1f} / {min(ts):.1f}" if ts else "-")
        print(f"| {case} | " + " | ".join(cells) + " |")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
