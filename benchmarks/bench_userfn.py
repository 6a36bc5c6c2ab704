"""Issue 28 figures: user functions with pointer parameters (N-body) and triangular solves.

* N-body accelerations, 3-D, float32: each body sums over all bodies in a loop inside
  a user function reading whole arrays through pointer parameters (VexCL's README
  example). Reported in G pair-interactions/s (n^2 per step). Peers: numpy's pairwise
  broadcast (CPU, small n); torch's pairwise broadcast (GPU).
* ``fl.linalg.solve_triangular`` of a lower n x n float32 system with k right-hand
  sides, in GFLOP/s (n^2 k). Peers: ``scipy.linalg.solve_triangular`` (CPU);
  ``torch.linalg.solve_triangular`` (GPU).
* ``.get()`` of a triangular view (packed, n (n+1)/2 elements) against ``.get()`` of
  the full matrix, in ms.

Times are medians of repeated runs after warm-up; every fuseloop result is checked
against numpy/scipy once.  Usage::

    python benchmarks/bench_userfn.py [--device SPEC] [--bodies N] [--tri N] [--rhs K]
        [--repeat R]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import median_time

ACCEL = """
    float s = 0;
    const float xi = x[i], yi = y[i], zi = z[i];
    for (int j = 0; j < n; ++j) {
        float dx = x[j] - xi, dy = y[j] - yi, dz = z[j] - zi;
        float r2 = dx * dx + dy * dy + dz * dz + eps;
        s += m[j] * D / (r2 * sqrt(r2));
    }
    return s;
"""


def row(workload: str, impl: str, value: float | None, unit: str, note: str = "") -> None:
    shown = "skipped" if value is None else f"{value:10.2f} {unit}"
    print(f"{workload:22s} {impl:34s} {shown} {note}", flush=True)


def attempt(workload: str, impl: str, unit: str, fn: Callable[[], float]) -> None:
    try:
        row(workload, impl, fn(), unit)
    except Exception as exc:  # a missing or failing peer is reported, not fatal
        row(workload, impl, None, unit, f"({type(exc).__name__}: {str(exc)[:70]})")


def _accel_numpy(p: list[np.ndarray], m: np.ndarray, eps: float, axis: int) -> np.ndarray:
    d = [q[None, :] - q[:, None] for q in p]
    r2 = d[0] ** 2 + d[1] ** 2 + d[2] ** 2 + eps
    return (m[None, :] * d[axis] / (r2 * np.sqrt(r2))).sum(axis=1)


def bench_nbody(n: int, repeat: int, gpu: bool) -> None:
    eps = 1e-2
    rng = np.random.default_rng(0)
    ph = [rng.random(n, dtype=np.float32) for _ in range(3)]
    mh = rng.random(n, dtype=np.float32)
    fns = [fl.function("float accel_" + a + "(int i, int n, float eps, global const float *x, "
                       "global const float *y, global const float *z, global const float *m)",
                       ACCEL.replace("D", "d" + a)) for a in "xyz"]
    p = [fl.asarray(q) for q in ph]
    m = fl.asarray(mh)

    def step() -> Any:
        return fl.compute(*(f(fl.index, n, eps, *p, m) for f in fns))

    got = [a.get() for a in step()]
    small = min(n, 2048)
    ref = _accel_numpy([q[:small] for q in ph], mh[:small], eps, 0)
    if small == n:
        err = float(np.abs(got[0] - ref).max() / np.abs(ref).max())
    else:
        err = float("nan")
    w = f"nbody n={n}"
    pairs = float(n) * n
    row(w, "fuseloop (3 user fns, 1 kernel)", pairs / median_time(
        step, fl.synchronize, repeat) / 1e9, "Gpair/s", f"rel err {err:.1e}")
    if not gpu:
        nn = min(n, 2048)
        attempt(f"nbody n={nn}", "numpy pairwise broadcast", "Gpair/s", lambda: float(nn) * nn
                / median_time(lambda: [_accel_numpy([q[:nn] for q in ph], mh[:nn], eps, a)
                                       for a in range(3)], lambda: None, repeat) / 1e9)
        return

    def torch_peer() -> float:
        import torch

        pt = [torch.from_numpy(q).cuda() for q in ph]
        mt = torch.from_numpy(mh).cuda()

        def run() -> Any:
            d = [q[None, :] - q[:, None] for q in pt]
            r2 = d[0] ** 2 + d[1] ** 2 + d[2] ** 2 + eps
            w = mt[None, :] / (r2 * torch.sqrt(r2))
            return [(w * di).sum(dim=1) for di in d]

        return pairs / median_time(run, torch.cuda.synchronize, repeat) / 1e9

    attempt(w, "torch pairwise broadcast", "Gpair/s", torch_peer)


def bench_solve(n: int, k: int, repeat: int, gpu: bool) -> None:
    rng = np.random.default_rng(1)
    ah = (np.tril(rng.random((n, n))) + n * np.eye(n)).astype(np.float32)
    bh = rng.random((n, k)).astype(np.float32)
    a, b = fl.tril_view(fl.asarray(ah)), fl.asarray(bh)
    x = fl.linalg.solve_triangular(a, b).get()
    err = float(np.abs(ah.astype(np.float64) @ x - bh).max())
    w = f"trsm n={n} k={k}"
    flops = float(n) * n * k
    row(w, "fl.linalg.solve_triangular", flops / median_time(
        lambda: fl.linalg.solve_triangular(a, b).eval(), fl.synchronize, repeat) / 1e9,
        "GFLOP/s", f"residual {err:.1e}")
    if not gpu:
        import scipy.linalg as sl

        attempt(w, "scipy.linalg.solve_triangular", "GFLOP/s", lambda: flops / median_time(
            lambda: sl.solve_triangular(ah, bh, lower=True), lambda: None, repeat) / 1e9)
    else:
        def torch_peer() -> float:
            import torch

            at, bt = torch.from_numpy(ah).cuda(), torch.from_numpy(bh).cuda()
            return flops / median_time(
                lambda: torch.linalg.solve_triangular(at, bt, upper=False),
                torch.cuda.synchronize, repeat) / 1e9

        attempt(w, "torch.linalg.solve_triangular", "GFLOP/s", torch_peer)
    full = fl.asarray(ah)
    row(f"get n={n}", "full matrix .get()", 1e3 * median_time(full.get, lambda: None,
                                                               repeat), "ms")
    row(f"get n={n}", "tril_view .get() (packed)", 1e3 * median_time(a.get, lambda: None,
                                                                      repeat), "ms")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--bodies", type=int, default=None)
    p.add_argument("--tri", type=int, default=None)
    p.add_argument("--rhs", type=int, default=None)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)
    if args.device:
        fl.set_device(args.device)
    dev = fl.get_device()
    gpu = dev.type == "gpu"
    print(f"device: {dev.name} ({dev.type}); fuseloop {fl.__version__}", flush=True)
    bench_nbody(args.bodies or (32768 if gpu else 2048), args.repeat, gpu)
    bench_solve(args.tri or (4096 if gpu else 512), args.rhs or (256 if gpu else 16),
                args.repeat, gpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
