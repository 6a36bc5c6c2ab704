"""Host time of one lazy call of a large expression for several fuseloop revisions in
one process, rounds interleaved (issues 25/26): the calling thread's CPU time from the
call to its enqueue (the synchronize after it is not timed), median us per call.

Cases: NPBench's hdiff as NPBench runs it (its CuPy kernel with ``cupy`` bound to each
revision's package; ``--npbench``, default ``.npbench``; skipped when missing), and
stencils of stencils written here (a 2-D biharmonic of 5-point Laplacians, a 3-D
7-point Laplacian of a Laplacian times a field, a 5-point stencil of ``where`` of a
product of views).  Run with ``FUSELOOP_HOST_PATH=0`` on the CPU to time the device path
as a GPU host runs it; ``--profile CASE`` prints a cProfile of the first revision's
calls.  Results are checked against the first revision's; timings are reported, never
asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/big_lazy_ab.py 604190b WT [--preset S]
        [--rounds 7] [--calls 30] [--case hdiff biharmonic] [--device SPEC]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(HERE.parent), str(ROOT)]

from benchmarks.compare_host_overhead import import_revisions  # noqa: E402

Made = tuple[Callable[..., Any], Callable[[], tuple]]


def _hdiff(npbench: Path, preset: str) -> Callable[[Any], Made]:
    import npbench_swap as swap

    info = json.loads((npbench / "bench_info" / "hdiff.json").read_text())["benchmark"]
    bench_dir = npbench / "npbench" / "benchmarks"
    values = swap.bench_inputs(bench_dir, info, preset)
    path = bench_dir / info["relative_path"] / f"{info['module_name']}_cupy.py"
    names = info["input_args"]

    def make(fl: Any) -> Made:
        cupy = types.ModuleType("cupy")
        cupy.__getattr__ = lambda name: getattr(fl, name)  # type: ignore[method-assign]
        sys.modules["cupy"] = cupy
        kernel = getattr(swap._load(path, f"big_hdiff_{fl.__name__}"), info["func_name"])
        def fn(*args: Any) -> Any:
            kernel(*args)
            return args[names.index("out_field")]

        def fresh() -> tuple:  # (new arrays per call, as NPBench's runs make them)
            return tuple(fl.asarray(np.copy(values[a])) if a in info["array_args"]
                         else values[a] for a in names)
        return fn, fresh
    return make


def _lap5(a: Any) -> Any:
    return a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] - 4.0 * a[1:-1, 1:-1]


def _lap7(a: Any) -> Any:
    return (a[:-2, 1:-1, 1:-1] + a[2:, 1:-1, 1:-1] + a[1:-1, :-2, 1:-1]
            + a[1:-1, 2:, 1:-1] + a[1:-1, 1:-1, :-2] + a[1:-1, 1:-1, 2:]
            - 6.0 * a[1:-1, 1:-1, 1:-1])


def _biharmonic(n: int) -> Callable[[Any], Made]:
    u = np.random.default_rng(1).random((n, n), dtype=np.float32)

    def make(fl: Any) -> Made:
        x = fl.asarray(u)
        return (lambda a: _lap5(_lap5(a)).eval()), lambda: (x,)
    return make


def _lap2_3d(n: int) -> Callable[[Any], Made]:
    rng = np.random.default_rng(2)
    u, c = rng.random((n, n, n)), rng.random((n - 4, n - 4, n - 4))

    def make(fl: Any) -> Made:
        x, k = fl.asarray(u), fl.asarray(c)
        return (lambda a, b: (b * _lap7(_lap7(a))).eval()), lambda: (x, k)
    return make


def _limited_flux(n: int) -> Callable[[Any], Made]:
    rng = np.random.default_rng(3)
    u, v = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)

    def make(fl: Any) -> Made:
        x, y = fl.asarray(u), fl.asarray(v)

        def fn(a: Any, b: Any) -> Any:
            g = a[1:, :] - a[:-1, :]
            f = fl.where(g * (b[1:, :] - b[:-1, :]) > 0, 0.0, g)
            return (f[1:, 1:] - f[:-1, 1:] + f[1:, :-1] - f[:-1, :-1]).eval()
        return fn, lambda: (x, y)
    return make


def _cases(npbench: Path, preset: str) -> dict[str, Callable[[Any], Made]]:
    small = preset == "S"
    cases = {}
    if (npbench / "bench_info" / "hdiff.json").exists():
        cases["hdiff"] = _hdiff(npbench, preset)
    else:
        print(f"(no NPBench at {npbench}: hdiff is skipped)")
    cases["biharmonic"] = _biharmonic(256 if small else 2048)
    cases["lap2-3d"] = _lap2_3d(24 if small else 128)
    cases["limited-flux"] = _limited_flux(256 if small else 2048)
    return cases


def _loop(fl: Any, fn: Callable[..., Any], fresh: Callable[[], tuple]
          ) -> Callable[[int], float]:
    """``calls`` calls, each's enqueue timed on this thread's CPU clock, a synchronize
    after each (untimed): the total seconds."""
    def loop(calls: int) -> float:
        total = 0.0
        for _ in range(calls):
            args = fresh()
            t0 = time.thread_time()
            fn(*args)
            total += time.thread_time() - t0
            fl.synchronize()
        return total
    return loop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions, or WT for the working tree")
    ap.add_argument("--npbench", type=Path, default=ROOT / ".npbench")
    ap.add_argument("--preset", default="S", help="hdiff's preset; S: small own cases too")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--case", nargs="*", default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--profile", help="cProfile this case's calls (first revision)")
    args = ap.parse_args()
    mods = import_revisions(args.revs, "big", args.device)
    cases = _cases(args.npbench, args.preset)
    if args.profile:
        fn, fresh = cases[args.profile](mods[0])
        loop = _loop(mods[0], fn, fresh)
        loop(3)
        prof = cProfile.Profile()
        prof.runcall(loop, args.calls * args.rounds)
        pstats.Stats(prof).sort_stats("tottime").print_stats(40)
        return
    print(f"thread CPU us per lazy call (enqueue only), median of {args.rounds} interleaved "
          f"rounds of {args.calls}; preset {args.preset}")
    print(f"{'case':<14} " + " ".join(f"{r[-12:]:>12}" for r in args.revs))
    for name, make in cases.items():
        if args.case and name not in args.case:
            continue
        made = [make(fl) for fl in mods]
        outs = [np.asarray(fn(*fresh()).get()) for fn, fresh in made]
        for got in outs[1:]:
            np.testing.assert_allclose(got, outs[0], rtol=1e-6, atol=1e-9)
        loops = [_loop(fl, fn, fresh) for fl, (fn, fresh) in zip(mods, made)]
        for loop in loops:
            loop(3)
        times: list[list[float]] = [[] for _ in loops]
        for _ in range(args.rounds):
            for k, loop in enumerate(loops):
                times[k].append(loop(args.calls) / args.calls * 1e6)
        print(f"{name:<14} " + " ".join(f"{statistics.median(t):>12.1f}" for t in times),
              flush=True)


if __name__ == "__main__":
    main()
