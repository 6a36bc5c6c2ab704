"""Where one statement of a loop over moving slices spends its host time (issue 26).

NPBench's loop-heavy kernels (cholesky, lu, trisolv, durbin) run statements such as
``A[i, j] -= A[i, :j] @ A[j, :j]`` whose views move every iteration.  This probe runs
such loops (a first run builds kernels and records plans: its CPU time, kernels compiled
and plans recorded are printed at the end of the line; a count growing with ``--n`` means
a kernel or plan per iteration), then one run with the
layers of a statement timed by wrapping the functions that begin them, and prints
the CPU time per statement of each layer (``time.process_time``; each wrapper adds
about a microsecond to the layer it wraps, and the wrapped run is slower than the
plain one by that much per wrapped call), with ``fl.stats()``'s counters of the
timed run per statement.  Layers (nested ones are subtracted from their parents):

  build    operators and indexing: everything outside the assignment
  assign   the assignment's checks before the evaluation (readers, targets)
  evaluate evaluate.run but the layers below: the run plans' look-ups (signature,
           tables, plans at other lengths), flags, the evaluation's frames
  walk     run_plans._key: the structure walk of every statement not found by signature
  replay   run_plans._replay and plan_ready: buffers, parameters, enqueue (or deferral)
  newplan  plan_steps._new_plan: a launch plan for new parameters (offsets, lengths)
  flush    the device runtime's flush of deferred launches (the backend's enqueues)

Run with ``FUSELOOP_HOST_PATH=0`` on a CPU to see the device path.  Reported, never
asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/statement_layers.py [--n 100]
        [--pattern cholesky lu trisolv durbin]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
import fuseloop as fl
from fuseloop import array, assignment, plan_ready, plan_steps, run_plans
from fuseloop.ops import indexing
from fuseloop.runtime import devices


def _cholesky(n: int) -> tuple[Callable[[], Any], int]:
    m = np.random.default_rng(1).random((n, n))
    spd = m @ m.T + n * np.eye(n)

    def run() -> Any:
        a = fl.asarray(spd)
        a[0, 0] = fl.sqrt(a[0, 0])
        for i in range(1, n):
            for j in range(i):
                a[i, j] -= a[i, :j] @ a[j, :j]
                a[i, j] /= a[j, j]
            a[i, i] -= a[i, :i] @ a[i, :i]
            a[i, i] = fl.sqrt(a[i, i])
        return a
    return run, 1 + (n - 1) * n + 2 * (n - 1)


def _lu(n: int) -> tuple[Callable[[], Any], int]:
    m = np.random.default_rng(2).random((n, n)) + n * np.eye(n)

    def run() -> Any:
        a = fl.asarray(m)
        for i in range(n):
            for j in range(i):
                a[i, j] -= a[i, :j] @ a[:j, j]
                a[i, j] /= a[j, j]
            for j in range(i, n):
                a[i, j] -= a[i, :i] @ a[:i, j]
        return a
    return run, n * (n - 1) + n * (n + 1) // 2


def _trisolv(n: int) -> tuple[Callable[[], Any], int]:
    rng = np.random.default_rng(0)
    L = fl.asarray(np.tril(rng.random((n, n))) + n * np.eye(n))
    b = fl.asarray(rng.random(n))

    def run() -> Any:
        x = fl.zeros(n)
        for i in range(n):
            x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
        return x
    return run, n


def _durbin(n: int) -> tuple[Callable[[], Any], int]:
    rh = np.random.default_rng(3).random(n) / n

    def run() -> Any:
        r = fl.asarray(rh)
        y = fl.empty_like(r)
        alpha = -r[0]
        beta = 1.0
        y[0] = -r[0]
        for k in range(1, n):
            beta *= 1.0 - alpha * alpha
            alpha = -(r[k] + fl.dot(fl.flip(r[:k]), y[:k])) / beta
            y[:k] += alpha * fl.flip(y[:k])
            y[k] = alpha
        return y
    return run, 4 * (n - 1)


PATTERNS = {"cholesky": _cholesky, "lu": _lu, "trisolv": _trisolv, "durbin": _durbin}
LAYERS = ("build", "assign", "evaluate", "walk", "replay", "newplan", "flush")


class _Timer:
    """Wrapped functions' CPU time, each less the wrapped functions it calls."""

    def __init__(self) -> None:
        self.own: dict[str, float] = dict.fromkeys(LAYERS, 0.0)
        self.stack: list[list[Any]] = []
        self.calls: dict[str, int] = dict.fromkeys(LAYERS, 0)

    def wrap(self, owner: Any, name: str, layer: str) -> Callable[[], None]:
        """Wrap ``owner.name`` into ``layer``; returns the undo."""
        f = getattr(owner, name)

        @functools.wraps(f)
        def timed(*args: Any, **kw: Any) -> Any:
            self.calls[layer] += 1
            frame = [time.process_time(), 0.0]  # (start, time of nested wrapped calls)
            self.stack.append(frame)
            try:
                return f(*args, **kw)
            finally:
                self.stack.pop()
                spent = time.process_time() - frame[0]
                self.own[layer] += spent - frame[1]
                if self.stack:
                    self.stack[-1][1] += spent
        setattr(owner, name, timed)
        return lambda: setattr(owner, name, f)


def _timed_run(run: Callable[[], Any]) -> tuple[float, _Timer, dict[str, int]]:
    timer = _Timer()
    undo = [timer.wrap(indexing, "assign", "assign"),
            timer.wrap(assignment, "run", "evaluate"),
            timer.wrap(run_plans, "_key", "walk"),
            timer.wrap(run_plans, "_replay", "replay"),
            timer.wrap(plan_ready.Ready, "run", "replay"),
            timer.wrap(plan_steps, "_new_plan", "newplan"),
            timer.wrap(devices._DeviceRuntime, "flush", "flush"),
            # (the array's in-place operators call assign through fuseloop.array's name)
            timer.wrap(array, "assign", "assign")]
    fl.synchronize()
    fl.reset_stats()
    t = time.process_time()
    out = run()
    out.get()
    total = time.process_time() - t
    for u in undo:
        u()
    inside = sum(timer.own.values())
    timer.own["build"] += total - inside
    return total, timer, fl.stats()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--pattern", nargs="+", default=list(PATTERNS), choices=list(PATTERNS))
    args = ap.parse_args()
    print(f"device: {fl.get_device().name}; CPU us per statement, by layer")
    print(f"{'':9s}{'plain':>7s}{'timed':>7s}" + "".join(f"{k:>8s}" for k in LAYERS)
          + "   per statement: launches, launch plans made, plans recorded, walks")
    for name in args.pattern:
        run, statements = PATTERNS[name](args.n)
        fl.synchronize()
        fl.reset_stats()
        t = time.process_time()
        run().get()  # (kernels built, plans recorded)
        first = time.process_time() - t
        built = fl.stats()
        run().get()
        t = time.process_time()
        run().get()
        plain = time.process_time() - t
        total, timer, stats = _timed_run(run)
        own, calls = timer.own, timer.calls
        us = 1e6 / statements
        print(f"{name:9s}{plain * us:7.0f}{total * us:7.0f}"
              + "".join(f"{own[k] * us:8.1f}" for k in LAYERS)
              + f"   {stats['kernels_launched'] / statements:.2f}, "
              f"{calls['newplan'] / statements:.2f}, "
              f"{stats['plans_recorded'] / statements:.3f}, {calls['walk'] / statements:.2f}"
              f"; first run {first:.2f} s, {built['kernels_compiled']} kernels compiled, "
              f"{built['plans_recorded']} plans recorded")


if __name__ == "__main__":
    main()
