"""Host work of replaying multi-kernel evaluations, two revisions in one process.

For each case of ``bench_lazy_multi.py`` the expression is built once and its
evaluation (``fuseloop.run_plans.run``: structure key, plan look-up, replay) timed in a
loop with the device enqueue itself replaced by a no-op, so only the Python host work
of the lazy path is timed, not the kernels nor the enqueue call (the same for
``fl.fuse``).  The GPU recipes are registered for the CPU device (as
``tests/test_gpu_recipes_on_cpu.py`` does) since they decide how many kernels run.
Revisions are loaded side by side as ``compare_host_overhead.py`` does, rounds
interleaved; median us per evaluation.  Reported, not asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/compare_lazy_multi_host.py HEAD WT [--n 256]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_lazy_multi import CASES
from compare_host_overhead import copy_packages


def prepare(fl: Any, name: str, n: int) -> tuple[Any, int]:
    """A loop of ``calls`` host-only evaluations of case ``name`` in the package ``fl``,
    and the kernels one evaluation enqueues."""
    from_pkg = importlib.import_module(f"{fl.__name__}.recipes")
    rows = importlib.import_module(f"{fl.__name__}.recipes.rows")
    run_plans = importlib.import_module(f"{fl.__name__}.run_plans")
    fl.register_recipe("cpu", from_pkg.gpu_coalesced, name="cmp-gpu-coalesced")
    fl.register_recipe("cpu", rows.make_gpu_rows(256), name="cmp-gpu-rows", kind="reduction")
    fl.set_device("cpu")
    rng = np.random.default_rng(0)
    X = fl.asarray(rng.random((n, n), dtype=np.float32))
    P = fl.asarray(rng.random((n, 3), dtype=np.float32))
    V = fl.asarray(rng.random(4 * n * n, dtype=np.float32))
    fn = CASES[name]
    fl.compute(*fn(fl, X, P, V))  # records the plan, builds the kernels
    captured: list[tuple] = []
    real_run = run_plans.run

    def capture(*args: Any) -> Any:
        captured.append(args)
        return real_run(*args)

    run_plans.run = capture
    try:
        fl.compute(*fn(fl, X, P, V))
    finally:
        run_plans.run = real_run
    fl.synchronize()
    steps = 0

    def count(*args: Any) -> None:
        nonlocal steps
        steps += 1

    def loop(calls: int) -> None:
        saved = run_plans.enqueue
        run_plans.enqueue = count
        try:
            for _ in range(calls):
                for args in captured:
                    real_run(*args)
        finally:
            run_plans.enqueue = saved

    loop(1)
    return loop, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions (WT: the working tree)")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--case", nargs="*", default=sorted(CASES))
    args = ap.parse_args()
    names = copy_packages(args.revs, "multi")[1]
    pkgs = [importlib.import_module(name) for name in names]
    print(f"host us per evaluation (enqueue excluded), n={args.n}, "
          f"median of {args.rounds} interleaved rounds of {args.calls}")
    print(f"{'case':<10} {'kernels':>7} " + " ".join(f"{r:>10}" for r in args.revs))
    for case in args.case:
        prepared = [prepare(fl, case, args.n) for fl in pkgs]
        times: list[list[float]] = [[] for _ in pkgs]
        for _ in range(args.rounds):
            for k, (loop, _steps) in enumerate(prepared):
                t0 = time.perf_counter()
                loop(args.calls)
                times[k].append((time.perf_counter() - t0) / args.calls * 1e6)
        print(f"{case:<10} {prepared[0][1]:>7} "
              + " ".join(f"{statistics.median(t):>10.1f}" for t in times))


if __name__ == "__main__":
    main()
