"""Per-call host cost of lazy ``.eval()`` against the same function under ``fl.fuse``
(issue 25), revisions side by side, calling thread's CPU clock.

Cases are the broad suite's single reductions, products with a short side (``matmul-*``,
``vecmat``, ``small-matvec``), ``fl.add.at`` and long element-wise chains at a small
size, and (``SUITE``) the suite's normalisations, stencils and pairwise workloads as the
suite runs them (its functions and inputs, ``fl.compute`` of several results) at 4096
elements or pairs (the host's work dominates; the driver's threads are not counted by
``time.thread_time``). The GPU recipes (reductions, contractions) are registered for the
CPU device, as ``lazy_front_half.py`` does, so plans are the GPU's. Median us per call
of interleaved rounds; reported, not asserted. ``--profile CASE`` prints a cProfile of
the lazy loop of the first revision (by own time; ``LVF_SORT=cumulative`` in the
environment: by cumulative time). ``--big`` uses the suite's shapes at 2^24 elements (as
on the GPU) with ``--no-launch`` implied: the driver's enqueue is replaced by a no-op
(nothing is computed, so results are not checked), which leaves what the host does per
call at the sizes where the GPU figures were taken (allocations of large buffers
included).

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/lazy_vs_fuse.py /work/main WT [--big]
    python benchmarks/probes/lazy_vs_fuse.py /work/main WT --big --device fake-gpu
    python benchmarks/probes/lazy_vs_fuse.py MAIN_REV WT --big --device gpu   (GPU host)
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import importlib
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from compare_host_overhead import copy_packages

HORNER = [0.5 / (k + 1) * (-1) ** k for k in range(17)]


def _horner(fl: Any, x: Any, y: Any) -> Any:
    r = x * 0 + HORNER[0]
    for c in HORNER[1:]:
        r = r * x + c
    return r


def _chain(fl: Any, x: Any, y: Any) -> Any:
    r = x
    for i in range(32):
        r = r * y if i % 2 == 0 else r + x
    return r


def _scatter_add(fl: Any, v: Any, idx: Any) -> Any:
    out = fl.zeros(v.shape[0] // 16, dtype=v.dtype)
    fl.add.at(out, idx, v)
    return out


Case = Callable[..., Any]
BIG = {"sum-all-keepdims": (256, 256, 256), "sum-axes02": (512, 512, 64),
       "sum-middle": (512, 512, 64), "argmin-all": (1 << 24,), "chain-32": (1 << 24,),
       "horner-16": (1 << 24,), "scatter-add": (1 << 24,)}
# the second operand's shape where it is not the first's (small, big)
SECOND = {"matmul-8rows": ((64, 64), (4096, 4096)), "matmul-64rows": ((64, 64), (4096, 4096)),
          "matmul-8cols": ((64, 8), (4096, 8)), "vecmat": ((64, 64), (4096, 4096)),
          "small-matvec": ((64,), (64,))}
BIG.update({"matmul-8rows": (8, 4096), "matmul-64rows": (64, 4096), "vecmat": (4096,),
            "small-matvec": (64, 64)})
# name: (input shape, function of (fl, x, y))
CASES: dict[str, tuple[tuple[int, ...], Case]] = {
    "sum-all-keepdims": ((16, 16, 16), lambda fl, x, y: fl.sum(x, axis=(0, 1, 2),
                                                               keepdims=True)),
    "sum-axes02": ((4, 16, 64), lambda fl, x, y: fl.sum(x, axis=(0, 2))),
    "sum-middle": ((4, 16, 64), lambda fl, x, y: fl.sum(x, axis=1)),
    "row-center": ((64, 64), lambda fl, x, y: x - fl.mean(x, axis=1, keepdims=True)),
    "int-max-cols": ((64, 64), lambda fl, x, y: fl.max(x, axis=0)),
    "argmin-all": ((4096,), lambda fl, x, y: fl.argmin(x)),
    "argmax-rows": ((64, 64), lambda fl, x, y: fl.argmax(x, axis=1)),
    "colstat": ((64, 64), lambda fl, x, y: fl.mean((x - fl.mean(x, axis=0)) ** 2, axis=0)),
    "scatter-add": ((4096,), _scatter_add),
    "matmul-8rows": ((8, 64), lambda fl, a, b: a @ b),
    "matmul-64rows": ((64, 64), lambda fl, a, b: a @ b),
    "matmul-8cols": ((64, 64), lambda fl, a, b: a @ b),
    "vecmat": ((64,), lambda fl, a, b: a @ b),
    "small-matvec": ((64, 64), lambda fl, a, b: a @ b),
    "chain-32": ((4096,), _chain),
    "horner-16": ((4096,), _horner),
}
# the broad suite's workloads run as the suite runs them (fuseloop.bench.broad: its
# inputs and generic functions, through FuseloopOps of each revision's package)
SUITE = ("stencil-1d-5", "stencil-2d", "stencil-3d", "kernel-sum", "distances", "nbody",
         "layernorm", "logsumexp-rows", "batchnorm-stats", "cross-entropy", "black-scholes")
ALL = [*CASES, *SUITE]


def _suite_loops(fl: Any, name: str, big: bool) -> tuple[Callable[[], Any], Callable[[], Any],
                                                         Callable[[], Any]]:
    """One call of suite workload ``name`` lazily and under ``fl.fuse``, and its
    numpy reference (float64)."""
    from fuseloop.bench import broad
    from fuseloop.bench.peers import FuseloopOps
    w = next(w for w in broad.BROAD if w.name == name)
    assert w.peer is not None
    inputs = w.make_inputs(1 << 24 if big else 4096, np.random.default_rng(0))
    host = [inputs[k] for k in w.inputs]
    arrays = [fl.asarray(a) for a in host]
    ops = FuseloopOps(fl)
    expr = w.peer

    def lazy() -> Any:
        res = expr(ops, *arrays)
        return fl.compute(*res) if isinstance(res, tuple) else res.eval()

    fused = fl.fuse(lambda *a: expr(ops, *a))
    return lazy, lambda: fused(*arrays), lambda: w.reference(*host)


def prepare(fl: Any, name: str, big: bool = False, device: str = "cpu"
            ) -> tuple[Callable[[int], None], Callable[[int], None]]:
    if device == "cpu":  # (the GPU's plans on this CPU)
        recipes = importlib.import_module(f"{fl.__name__}.recipes")
        rows = importlib.import_module(f"{fl.__name__}.recipes.rows")
        fl.register_recipe("cpu", recipes.gpu_coalesced, name="lvf-gpu-coalesced")
        fl.register_recipe("cpu", rows.make_gpu_rows(256), name="lvf-gpu-rows",
                           kind="reduction")
        contraction = importlib.import_module(f"{fl.__name__}.recipes.contraction")
        fl.register_recipe("cpu", contraction.gpu_tiled, name="lvf-gpu-tiled",
                           kind="contraction")
    if device == "fake-gpu":  # (as lazy_fuse_parity.py's --fake-gpu; its builds inline)
        os.environ["FUSELOOP_COMPILE"] = "inline"
        fl.set_device(dataclasses.replace(fl.set_device("cpu"), index=9132, type="gpu",
                                          compute_units=132, max_work_group_size=1024))
    else:
        fl.set_device(device)
    if name in SUITE:
        return _suite_prepare(fl, name, big)
    shape, fn = CASES[name]
    if big:
        shape = BIG.get(name, (4096, 4096))
    rng = np.random.default_rng(0)
    if name.startswith("int"):
        xh = rng.integers(-1000, 1000, shape, dtype=np.int32)
    else:
        xh = rng.random(shape, dtype=np.float32)
    x = fl.asarray(xh)
    second = SECOND.get(name, (shape, shape))[1 if big else 0]
    if name == "scatter-add":  # (y: the bins)
        y = fl.asarray(rng.integers(0, shape[0] // 16, shape[0], dtype=np.int64))
    else:
        y = fl.asarray(rng.random(second, dtype=np.float32))
    fused = fl.fuse(lambda a, b: fn(fl, a, b))

    def lazy(calls: int) -> None:
        for i in range(calls):
            fn(fl, x, y).eval()
            if i % 100 == 99:
                fl.synchronize()
        fl.synchronize()

    def fuse(calls: int) -> None:
        for i in range(calls):
            fused(x, y)
            if i % 100 == 99:
                fl.synchronize()
        fl.synchronize()

    for loop in (lazy, fuse):
        loop(3)
    if big:
        launching = importlib.import_module(f"{fl.__name__}.launching")
        launching.enqueue_or_defer = lambda go, args, small, device: None
        return lazy, fuse
    if name == "scatter-add":
        want = np.zeros(shape[0] // 16, np.float32)
        np.add.at(want, y.get(), xh)
    else:
        want = fn(np, xh, y.get())
    got = np.asarray(fn(fl, x, y).eval().get())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(np.asarray(fused(x, y).get()), want, rtol=1e-4, atol=1e-3)
    return lazy, fuse


def _timed(call: Callable[[], Any], sync: Callable[[], None]) -> Callable[[int], None]:
    """A loop of ``calls`` calls, synchronised every 100 and at its end."""
    def loop(calls: int) -> None:
        for i in range(calls):
            call()
            if i % 100 == 99:
                sync()
        sync()
    return loop


def _suite_prepare(fl: Any, name: str, big: bool
                   ) -> tuple[Callable[[int], None], Callable[[int], None]]:
    lazy, fused, reference = _suite_loops(fl, name, big)
    loops = _timed(lazy, fl.synchronize), _timed(fused, fl.synchronize)
    for loop in loops:
        loop(3)
    if big:
        launching = importlib.import_module(f"{fl.__name__}.launching")
        launching.enqueue_or_defer = lambda go, args, small, device: None
        return loops
    want = reference()
    for got in (lazy(), fused()):
        got, want_t = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for g, r in zip(got, want_t):
            np.testing.assert_allclose(np.asarray(g.get()), r, rtol=1e-3, atol=1e-3)
    return loops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions or folders (WT: the working tree)")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--case", nargs="*", default=ALL)
    ap.add_argument("--big", action="store_true",
                    help="the suite's 2^24-element shapes, launches replaced by a no-op")
    ap.add_argument("--device", default="cpu",
                    help="device spec (default cpu, with the GPU recipes registered for it; "
                         "fake-gpu: the CPU device presented as a 132-unit GPU to every "
                         "rule, run by PoCL; on a GPU host --device gpu)")
    ap.add_argument("--profile", help="cProfile the lazy loop of this case (first revision)")
    args = ap.parse_args()
    names = copy_packages(args.revs, "lvf")[1]
    pkgs = [importlib.import_module(name) for name in names]
    if args.profile:
        lazy, _ = prepare(pkgs[0], args.profile, args.big, args.device)
        prof = cProfile.Profile()
        prof.runcall(lazy, 2000)
        pstats.Stats(prof).sort_stats(os.environ.get("LVF_SORT", "tottime")).print_stats(40)
        return
    print(f"thread CPU us per call, median of {args.rounds} interleaved rounds of "
          f"{args.calls}: lazy .eval() | fl.fuse call")
    print(f"{'case':<17} " + " ".join(f"{r[-12:]:>19}" for r in args.revs))
    for case in args.case:
        loops = [prepare(fl, case, args.big, args.device) for fl in pkgs]
        times: list[list[list[float]]] = [[[], []] for _ in pkgs]
        for _ in range(args.rounds):
            for k, pair in enumerate(loops):
                for j, loop in enumerate(pair):
                    t0 = time.thread_time()
                    loop(args.calls)
                    times[k][j].append((time.thread_time() - t0) / args.calls * 1e6)
        print(f"{case:<17} " + " ".join(
            f"{statistics.median(a):>8.1f} | {statistics.median(b):>8.1f}" for a, b in times),
            flush=True)


if __name__ == "__main__":
    main()
