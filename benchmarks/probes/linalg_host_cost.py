"""The host's share of ``fl.linalg``'s factorisations: each call timed with every kernel
enqueue skipped (after a real, warm-up call), so what is left is the Python work of the
blocked loops, per trailing-update kernel (``fuseloop.linalg_factor.UPDATE``).

Where this host time comes near a GPU's measured time, the GPU waits on the host (issue
27: on the H100 cholesky 4096 took 17.5 ms, about what this probe gives the contraction
updates on a 2-core Xeon).  Results are garbage (nothing runs): timings only, best of
``--rounds``, reported, never asserted.

    PYTHONPATH=. python benchmarks/probes/linalg_host_cost.py [--n 4096] [--block 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import inspect
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# every evaluation as a kernel, as on a GPU (the CPU's host path maps buffers instead)
os.environ.setdefault("FUSELOOP_HOST_PATH", "0")
import fuseloop as fl
import fuseloop.backends.opencl as ocl
from fuseloop import linalg_factor


def _skip_enqueues() -> None:
    """Make every OpenCL launch a no-op: the module's enqueue function and the copies
    of it that launchers made so far keep in their closures."""
    real = ocl._enqueue_nd_range

    def skip(*args: Any) -> None:
        return None

    ocl._enqueue_nd_range = skip
    for obj in gc.get_objects():
        cells = getattr(obj, "__closure__", None) if inspect.isfunction(obj) else None
        for cell in cells or ():
            if cell.cell_contents is real:
                cell.cell_contents = skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--block", type=int, default=64, help="block size (64: a GPU's)")
    ap.add_argument("--rhs", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not hasattr(linalg_factor, "update_kernel"):
        ap.error(f"the fuseloop imported ({fl.__file__}) has no choice of update kernel: run "
                 "with PYTHONPATH=<the checkout>")
    n = args.n
    linalg_factor.block_size = lambda device: args.block
    rng = np.random.default_rng(0)
    g = (rng.standard_normal((n, n)) / np.sqrt(n) + 4 * np.eye(n)).astype(np.float32)
    a, gen = fl.asarray(g + g.T), fl.asarray(g)
    b = fl.asarray(rng.standard_normal(n).astype(np.float32))
    bb = fl.asarray(rng.standard_normal((n, args.rhs)).astype(np.float32))
    low = fl.asarray(np.tril(g))
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("cholesky", lambda: fl.linalg.cholesky(a)),
        ("solve 1 rhs", lambda: fl.linalg.solve(gen, b)),
        (f"solve_triangular x {args.rhs}",
         lambda: fl.linalg.solve_triangular(low, bb, lower=True))]
    modes = ("contraction", "kernel")
    for mode in modes:  # builds and warms every kernel, with real launches
        linalg_factor.UPDATE = mode
        for _, f in calls:
            f().eval()
    fl.synchronize()
    _skip_enqueues()
    best: dict[tuple[str, str], float] = {}
    launches: dict[tuple[str, str], int] = {}
    for _ in range(args.rounds):
        for mode in modes:
            linalg_factor.UPDATE = mode
            for name, f in calls:
                fl.synchronize()
                fl.reset_stats()
                t = time.perf_counter()
                f().eval()
                fl.synchronize()
                t = time.perf_counter() - t
                best[name, mode] = min(best.get((name, mode), t), t)
                launches[name, mode] = fl.stats()["kernels_launched"]
    print(f"host time, kernels skipped, n={n}, block {args.block}, float32 "
          f"(best of {args.rounds}); {fl.get_device()}")
    print(f"{'op':26s} {'update':12s} {'host ms':>8s} {'launches':>8s} {'us/launch':>9s}")
    for name, _ in calls:
        for mode in modes:
            t, k = best[name, mode], launches[name, mode]
            print(f"{name:26s} {mode:12s} {t * 1e3:8.2f} {k:8d} {t / max(k, 1) * 1e6:9.1f}")


if __name__ == "__main__":
    main()
