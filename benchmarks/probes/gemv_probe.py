"""Vector-matrix and matrix-vector products on a GPU (issue 25/26): where the time goes.

Part 1, per product (float64 unless said; CuPy beside it when present): the wall time of
one evaluation, as the median of batches of ``--batch`` evaluations and one synchronize
(device-bound when it exceeds the host's CPU time per evaluation, printed beside it),
the bytes of the matrix read per second at that time, and the kernels launched per
evaluation.  Part 2: NPBench's covariance statement (``cov[i:M, i] = cov[i, i:M] =
data[:, i] @ data[:, i:M] / (n - 1)``) at preset M, whole loops: wall and host CPU per
statement, launches and run plans recorded per loop (a second loop recording plans again
says the plans of the first were dropped).  Reported, never asserted.

    python benchmarks/probes/gemv_probe.py [--batch 20] [--skip-loop]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import fuseloop as fl


def _cases(scale: float) -> list[tuple[str, list, object, object]]:
    """(name, operand shapes, dtype, product); sizes times ``scale``."""
    out = []

    def add(name, shapes, dtype, fn):
        shapes = [tuple(max(1, int(e * scale)) for e in s) for s in shapes]
        out.append((name, shapes, dtype, fn))

    f8, f4 = np.float64, np.float32
    for i in (0, 700, 1300):
        add(f"cov i={i} (1800x1400)", [(1800, 1400)], f8,
            lambda xp, d, i=i: d[:, int(i * d.shape[1] / 1400)] @ d[:, int(i * d.shape[1] / 1400):])
    for n in (3000, 11000):
        add(f"x @ A {n}", [(n,), (n, n)], f8, lambda xp, x, a: x @ a)
        add(f"A @ x {n}", [(n, n), (n,)], f8, lambda xp, a, x: a @ x)
        add(f"A.T @ x {n}", [(n, n), (n,)], f8, lambda xp, a, x: a.T @ x)
        add(f"x @ A.T {n}", [(n,), (n, n)], f8, lambda xp, x, a: x @ a.T)
    add("x @ A 8192 f32", [(8192,), (8192, 8192)], f4, lambda xp, x, a: x @ a)
    add("A @ x 8192 f32", [(8192, 8192), (8192,)], f4, lambda xp, a, x: a @ x)
    add("x @ A 100000x64", [(100000,), (100000, 64)], f8, lambda xp, x, a: x @ a)
    add("A @ x 64x100000", [(64, 100000), (100000,)], f8, lambda xp, a, x: a @ x)
    add("x @ A 64x100000", [(64,), (64, 100000)], f8, lambda xp, x, a: x @ a)
    add("A @ x 100000x64", [(100000, 64), (64,)], f8, lambda xp, a, x: a @ x)
    return out


def _time(fn, sync, batch: int, reps: int = 5) -> tuple[float, float]:
    """(wall s, host CPU s) per call: medians over ``reps`` batches."""
    fn()
    sync()
    walls, cpus = [], []
    for _ in range(reps):
        w, c = time.perf_counter(), time.process_time()
        for _ in range(batch):
            fn()
        c = time.process_time() - c
        sync()
        walls.append((time.perf_counter() - w) / batch)
        cpus.append(c / batch)
    return statistics.median(walls), statistics.median(cpus)


def products(batch: int, scale: float) -> None:
    try:
        import cupy
    except ImportError:
        cupy = None
    rng = np.random.default_rng(0)
    print(f"device: {fl.get_device()}")
    print(f"{'product':26} {'fuseloop us':>11} {'host us':>8} {'GB/s':>6} {'launch':>6}"
          f" {'cupy us':>8}  max err")
    for name, shapes, dtype, fn in _cases(scale):
        ops = [rng.random(s).astype(dtype) for s in shapes]
        nbytes = max(o.nbytes for o in ops)
        xs = [fl.asarray(o) for o in ops]
        ref = fn(np, *ops)
        got = fn(fl, *xs)
        err = float(np.max(np.abs(got.get() - ref)) / max(1.0, np.max(np.abs(ref))))
        fl.reset_stats()
        fn(fl, *xs).eval()
        fl.synchronize()
        launches = fl.stats()["kernels_launched"]
        wall, cpu = _time(lambda fn=fn, xs=xs: fn(fl, *xs).eval(), fl.synchronize, batch)
        line = (f"{name:26} {wall * 1e6:11.1f} {cpu * 1e6:8.1f} {nbytes / wall / 1e9:6.0f}"
                f" {launches:6d}")
        if cupy is not None:
            cs = [cupy.asarray(o) for o in ops]
            cw, _ = _time(lambda fn=fn, cs=cs: fn(cupy, *cs),
                          cupy.cuda.get_current_stream().synchronize,
                          batch)
            line += f" {cw * 1e6:8.1f}"
        print(f"{line}  {err:.1e}", flush=True)


def covariance_loop(scale: float) -> None:
    M, N = int(1400 * scale), int(1800 * scale)
    rng = np.random.default_rng(1)
    dh = rng.random((N, M))
    dh -= dh.mean(axis=0)
    for rep in range(3):
        d = fl.asarray(dh)
        cov = fl.zeros((M, M))
        fl.synchronize()
        fl.reset_stats()
        w, c = time.perf_counter(), time.process_time()
        for i in range(M):
            cov[i:M, i] = cov[i, i:M] = d[:, i] @ d[:, i:M] / (N - 1.0)
        c = time.process_time() - c
        fl.synchronize()
        w = time.perf_counter() - w
        s = fl.stats()
        print(f"covariance loop {rep}: {w * 1e6 / M:.1f} us wall, {c * 1e6 / M:.1f} us host CPU"
              f" per statement; {s['kernels_launched'] / M:.2f} launches, "
              f"{s['plans_recorded']} plans recorded, {s['kernels_compiled']} compiled",
              flush=True)
    ref = np.cov(dh, rowvar=False)
    print(f"covariance max err {np.abs(cov.get() - ref).max():.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--skip-loop", action="store_true")
    ap.add_argument("--scale", type=float, default=1.0, help="sizes times this (a CPU: 0.1)")
    args = ap.parse_args()
    products(args.batch, args.scale)
    if not args.skip_loop:
        covariance_loop(args.scale)


if __name__ == "__main__":
    main()
