"""The front half of a lazy multi-kernel evaluation, revisions side by side (CPU clock).

For each case of ``bench_lazy_multi.py``, per call: build the expression, then
``fuseloop.run_plans.run`` with the replay itself replaced by a no-op, so what is timed is
building, keying (the structure walk, or the look-up by signature) and finding the plan,
not the allocations and launches of the replay (the same for every revision) nor the
device.  The GPU recipes are registered for the CPU device (as in
``compare_lazy_multi_host.py``), since they decide the plans.  Revisions are loaded side by
side (``compare_host_overhead.copy_package``), rounds interleaved, ``time.process_time``
(a shared machine's other work is not counted); median us per call.  Reported, not asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/lazy_front_half.py MAIN_OR_REV WT
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_lazy_multi import CASES
from compare_host_overhead import copy_packages


def prepare(fl: Any, name: str, n: int) -> tuple[Any, Any]:
    """Two loops of ``calls`` calls of case ``name`` in package ``fl``: building only, and
    building with the front half of the evaluation."""
    recipes = importlib.import_module(f"{fl.__name__}.recipes")
    rows = importlib.import_module(f"{fl.__name__}.recipes.rows")
    run_plans = importlib.import_module(f"{fl.__name__}.run_plans")
    fl.register_recipe("cpu", recipes.gpu_coalesced, name="front-gpu-coalesced")
    fl.register_recipe("cpu", rows.make_gpu_rows(256), name="front-gpu-rows", kind="reduction")
    fl.set_device("cpu")
    rng = np.random.default_rng(0)
    X = fl.asarray(rng.random((n, n), dtype=np.float32))
    P = fl.asarray(rng.random((n, 3), dtype=np.float32))
    V = fl.asarray(rng.random(4 * n * n, dtype=np.float32))
    fn = CASES[name]
    for _ in range(2):  # records the plan, then replays it (and remembers what it keeps)
        fl.compute(*fn(fl, X, P, V))
    fl.synchronize()
    device = X.device

    def build(calls: int) -> None:
        for _ in range(calls):
            fn(fl, X, P, V)

    def front(calls: int) -> None:
        real = run_plans._replay
        run_plans._replay = lambda plan, *a, **k: plan.results
        try:
            for _ in range(calls):
                outs = fn(fl, X, P, V)
                run_plans.run([o._node for o in outs], outs[0].shape, device, None)
        finally:
            run_plans._replay = real

    front(1)
    return build, front


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions or folders (WT: the working tree)")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--case", nargs="*", default=sorted(CASES))
    args = ap.parse_args()
    names = copy_packages(args.revs, "front")[1]
    pkgs = [importlib.import_module(name) for name in names]
    print(f"CPU us per call, n={args.n}, median of {args.rounds} interleaved rounds of "
          f"{args.calls}: build | build + key + plan look-up (replay excluded)")
    print(f"{'case':<10} " + " ".join(f"{r[-12:]:>21}" for r in args.revs))
    for case in args.case:
        loops = [prepare(fl, case, args.n) for fl in pkgs]
        times: list[list[list[float]]] = [[[], []] for _ in pkgs]
        for _ in range(args.rounds):
            for k, pair in enumerate(loops):
                for j, loop in enumerate(pair):
                    t0 = time.process_time()
                    loop(args.calls)
                    times[k][j].append((time.process_time() - t0) / args.calls * 1e6)
        print(f"{case:<10} " + " ".join(
            f"{statistics.median(b):>9.1f} | {statistics.median(f):>9.1f}" for b, f in times))


if __name__ == "__main__":
    main()
