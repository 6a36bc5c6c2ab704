"""Device factorisations: ``fl.linalg.cholesky`` and ``fl.linalg.solve`` against peers.

For each size n, a symmetric positive definite float32 (or ``--dtype float64``)
matrix (Cholesky) and a well-conditioned general one with a single right-hand side
(solve) are timed, result on the device (synchronised, not read back), as the median
of ``--repeat`` calls after one warm-up call (the build); results are checked against
numpy.  Peers: numpy (LAPACK on the host's CPU) always, cupy (cuSOLVER) when it
imports with a GPU.  GFLOP/s counts n^3/3 for Cholesky and 2n^3/3 + 2n^2 for solve.

Usage::

    python benchmarks/bench_linalg.py [--sizes 1024 2048 4096] [--repeat 5]
                                      [--dtype float32] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import median_time


def _median(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of ``fn`` (which synchronises itself) after one warm-up call."""
    return median_time(fn, lambda: None, repeat, warmup=1)


def _cupy() -> Any:
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        return cupy
    except Exception:
        return None


def _cases(n: int, dev: tuple, host: tuple, gpu: tuple | None, cp: Any) -> list[tuple]:
    """(name, flops, fuseloop, numpy, cupy or None) per operation."""
    d_spd, d_gen, d_b = dev
    spd, gen, b = host

    def ours_chol() -> None:
        fl.linalg.cholesky(d_spd).eval()
        fl.synchronize()

    def ours_solve() -> None:
        fl.linalg.solve(d_gen, d_b).eval()
        fl.synchronize()

    peers: list[Any] = [None, None]
    if gpu is not None:
        c_spd, c_gen, c_b = gpu
        peers = [lambda: cp.linalg.cholesky(c_spd), lambda: cp.linalg.solve(c_gen, c_b)]
    return [("cholesky", n ** 3 / 3, ours_chol, lambda: np.linalg.cholesky(spd), peers[0]),
            ("solve", 2 * n ** 3 / 3 + 2 * n ** 2, ours_solve, lambda: np.linalg.solve(gen, b),
             peers[1])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dt = np.dtype(args.dtype)
    cp = _cupy()
    rng = np.random.default_rng(0)
    rows = []
    print(f"device: {fl.get_device()}; {args.dtype}; median of {args.repeat}")
    for n in args.sizes:
        m = rng.standard_normal((n, n))
        spd = (m @ m.T / n + np.eye(n)).astype(dt)
        gen = (m / np.sqrt(n) + 2 * np.eye(n)).astype(dt)
        b = rng.standard_normal(n).astype(dt)
        d_spd, d_gen, d_b = fl.asarray(spd), fl.asarray(gen), fl.asarray(b)
        tol = 1e-3 if dt == np.float32 else 1e-9
        ref = np.linalg.cholesky(spd)
        got = fl.linalg.cholesky(d_spd).get()
        assert np.abs(got - ref).max() <= tol * np.abs(ref).max() * 10, "cholesky differs"
        x = fl.linalg.solve(d_gen, d_b).get()
        assert np.abs(gen @ x - b).max() <= tol * 10 * np.abs(b).max(), "solve differs"
        c = (cp.asarray(spd), cp.asarray(gen), cp.asarray(b)) if cp else None
        for name, flops, ours, host, peer in _cases(n, (d_spd, d_gen, d_b), (spd, gen, b), c,
                                                     cp):
            row = {"op": name, "n": n, "dtype": args.dtype,
                   "fuseloop_s": _median(ours, args.repeat),
                   "numpy_s": _median(host, args.repeat)}
            if cp and peer:
                def synced(p: Callable[[], Any] = peer) -> None:
                    p()
                    cp.cuda.Device().synchronize()
                row["cupy_s"] = _median(synced, args.repeat)
            text = []
            for peer_name in ("fuseloop", "numpy", "cupy"):
                t = row.get(f"{peer_name}_s")
                if t is not None:
                    row[f"{peer_name}_gflops"] = flops / t / 1e9
                    text.append(f"{peer_name} {t * 1e3:9.1f} ms {flops / t / 1e9:7.1f} GFLOP/s")
            print(f"{name:9s} n={n:5d}  " + "  ".join(text), flush=True)
            rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
