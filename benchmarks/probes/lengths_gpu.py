"""Loops whose slices grow every iteration on a GPU (issue 26): fuseloop revisions side
by side with CuPy, wall time per pass and per statement, with the run-plan counters.

Patterns (``n`` iterations each, lengths 1..n): NPBench's durbin as written (four
statements an iteration: a dot of two growing slices, ``y[:k] += alpha * flip(y[:k])``,
``y[k] = alpha``), its update alone, trisolv (``x[i] = (b[i] - L[i, :i] @ x[:i]) /
L[i, i]``) and a growing dot into an element (``s[k] = dot(r[:k], y[:k])``).  Each loop
runs in one process per revision (``compare_host_overhead.import_revisions``): pass 1
builds kernels and records plans (a kernel or a walk per length shows here), then
``--rounds`` repeats (what a timed repeat sees), interleaved across the sides.  Printed:
pass 1's wall ms (the device synchronised at the end), us per statement, kernels
launched and lowered, plans recorded and walked (``fl.stats()``; ``-`` for CuPy) and
whether the result is numpy's; the repeats' median wall time, and the last repeat's
cell.  Reported, never
asserted.

    python benchmarks/probes/lengths_gpu.py WT bdc485f [--device nvidia] \\
        [--n 1000 6000] [--pattern durbin update trisolv dot] [--no-cupy] [--rounds 3]
    FUSELOOP_HOST_PATH=0 FUSELOOP_COMPILE=inline python benchmarks/probes/lengths_gpu.py \
        WT bdc485f --fake-gpu --no-cupy --clock cpu --n 1000  # (GPU rules on a CPU)
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from compare_host_overhead import import_revisions


def _durbin(xp: Any, n: int) -> tuple[Callable[[], Any], int]:
    rh = np.random.default_rng(3).random(n) / n

    def run() -> Any:
        r = xp.asarray(rh)
        y = xp.empty_like(r)
        alpha = -r[0]
        beta = 1.0
        y[0] = -r[0]
        for k in range(1, n):
            beta *= 1.0 - alpha * alpha
            alpha = -(r[k] + xp.dot(xp.flip(r[:k]), y[:k])) / beta
            y[:k] += alpha * xp.flip(y[:k])
            y[k] = alpha
        return y
    return run, 4 * (n - 1)


def _update(xp: Any, n: int) -> tuple[Callable[[], Any], int]:
    yh = np.random.default_rng(4).random(n)

    def run() -> Any:
        y = xp.asarray(yh)
        for k in range(1, n):
            y[:k] += 1e-3 * xp.flip(y[:k])
        return y
    return run, n - 1


def _trisolv(xp: Any, n: int) -> tuple[Callable[[], Any], int]:
    rng = np.random.default_rng(0)
    lh = np.tril(rng.random((n, n))) + n * np.eye(n)
    bh = rng.random(n)

    def run() -> Any:
        L, b, x = xp.asarray(lh), xp.asarray(bh), xp.zeros(n)
        for i in range(n):
            x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
        return x
    return run, n


def _dot(xp: Any, n: int) -> tuple[Callable[[], Any], int]:
    rng = np.random.default_rng(5)
    rh, yh = rng.random(n), rng.random(n)

    def run() -> Any:
        r, y, s = xp.asarray(rh), xp.asarray(yh), xp.zeros(n)
        for k in range(1, n):
            s[k] = xp.dot(r[:k], y[:k])
        return s
    return run, n - 1


PATTERNS = {"durbin": _durbin, "update": _update, "trisolv": _trisolv, "dot": _dot}
_COUNTS = ("kernels_launched", "kernels_lowered", "plans_recorded", "plans_walked")


_clock = [time.perf_counter]


def _pass(xp: Any, sync: Callable[[], None], run: Callable[[], Any], count: int,
          want: np.ndarray, fl: Any | None) -> tuple[float, str]:
    """One pass: its wall seconds and a cell (wall, per statement, counts, numpy's?)."""
    sync()
    if fl is not None:
        fl.reset_stats()
    t = _clock[0]()
    got = run()
    sync()
    wall = _clock[0]() - t
    ok = np.allclose(_as_numpy(got), want, rtol=1e-6, atol=1e-9)
    counts = "/".join(str(fl.stats()[k]) for k in _COUNTS) if fl is not None else "-"
    return wall, (f"{wall * 1e3:8.1f} ms {wall / count * 1e6:6.1f} us/st {counts:>19} "
                  f"{'ok' if ok else 'DIFF'}")


def _as_numpy(a: Any) -> np.ndarray:
    return np.asarray(a.get() if hasattr(a, "get") else a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions or folders (WT: the working tree)")
    ap.add_argument("--device", default=None, help="device spec (default: fuseloop's)")
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 6000])
    ap.add_argument("--pattern", nargs="+", default=list(PATTERNS), choices=list(PATTERNS))
    ap.add_argument("--no-cupy", action="store_true")
    ap.add_argument("--rounds", type=int, default=3, help="repeats per side, interleaved")
    ap.add_argument("--fake-gpu", action="store_true",
                    help="the CPU device presented as a GPU (the GPU's rules, PoCL's kernels)")
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="cpu: the process's CPU time (a shared CPU host), not wall time")
    args = ap.parse_args()
    if args.clock == "cpu":
        _clock[0] = time.process_time
    pkgs = import_revisions(args.revs, "lengths", None if args.fake_gpu else args.device)
    if args.fake_gpu:
        for fl in pkgs:
            fl.set_device(dataclasses.replace(fl.set_device("cpu"), index=9132, type="gpu",
                                              compute_units=132, max_work_group_size=1024))
    sides: list[tuple[str, Any, Callable[[], None], Any]] = [
        (rev[-12:], fl, fl.synchronize, fl) for rev, fl in zip(args.revs, pkgs)]
    if not args.no_cupy:
        try:
            import cupy
        except ImportError:
            print("(no cupy)")
        else:
            sides.append(("cupy", cupy, cupy.cuda.Device().synchronize, None))
    print(f"device: {pkgs[0].get_device().name}; per pass (1: builds, records; 2: as a "
          "repeat, median of --rounds interleaved): wall, per statement, "
          "launched/lowered/recorded/walked, numpy's?")
    for name in args.pattern:
        for n in args.n:
            want = _as_numpy(PATTERNS[name](np, n)[0]())
            runs = [PATTERNS[name](xp, n) for _, xp, _, _ in sides]
            cells = [_pass(xp, sync, run, count, want, fl)[1]
                     for (_, xp, sync, fl), (run, count) in zip(sides, runs)]
            # (repeats interleaved, side by side: each sees the same phases of the host)
            walls: list[list[float]] = [[] for _ in sides]
            lasts = list(cells)
            for _ in range(args.rounds):
                for k, ((_, xp, sync, fl), (run, count)) in enumerate(zip(sides, runs)):
                    wall, lasts[k] = _pass(xp, sync, run, count, want, fl)
                    walls[k].append(wall)
            for (label, *_), first, w, (_, count), cell in zip(sides, cells, walls, runs,
                                                                lasts):
                med = statistics.median(w)
                print(f"{name:8} n {n:5} {label:>12}  1: {first}  repeats: {med * 1e3:8.1f} ms "
                      f"{med / count * 1e6:6.1f} us/st (min {min(w) * 1e3:.1f}; last {cell})",
                      flush=True)

if __name__ == "__main__":
    main()
