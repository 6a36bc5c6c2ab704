"""The same workloads on every GPU backend present (OpenCL and CUDA), in one run.

For each GPU device fuseloop lists (``fl.devices(type="gpu")``: the NVIDIA OpenCL
device and the CUDA device of the same GPU on an NVIDIA host), times

* ``2*x - sin(y) + x*y`` at ``--log2n`` float32 elements (GB/s, fraction of the
  copy bandwidth measured in the same run with CuPy's device-to-device copy);
* ``fl.sum(x*y)`` at the same size;
* row softmax of a 2^14 x 2^13 float32 matrix;
* ``A @ B``, float32 4096 (TFLOP/s, against cuBLAS through CuPy, TF32 off);
* the host cost of a cached 5-operation ``.eval()`` on 1000 float32 elements, and of
  the same expression as an ``fl.fuse`` function (us per call, median of
  ``--loops`` loops of ``--calls`` calls, synchronised every 100 calls);

and prints one table with each backend's figures and the CUDA/OpenCL ratio.
Every result is checked against numpy (or the first backend's) before timing.

Usage::

    python benchmarks/bench_backends.py [--log2n 27] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl


def _best(run: Callable[[], Any], repeat: int) -> float:
    """Fastest of ``repeat`` timed runs (each synchronised), in seconds."""
    run()
    fl.synchronize()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        run()
        fl.synchronize()
        times.append(time.perf_counter() - t)
    return min(times)


def _host_cost(call: Callable[[], Any], calls: int, loops: int) -> float:
    """Median over ``loops`` of the us per call of ``call``."""
    per = []
    for _ in range(loops):
        t = time.perf_counter()
        for i in range(calls):
            call()
            if i % 100 == 99:
                fl.synchronize()
        fl.synchronize()
        per.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(per)


def _copy_gbs(n: int) -> float:
    import cupy

    a = cupy.ones(n, dtype=cupy.float32)
    b = cupy.empty_like(a)
    cupy.cuda.runtime.deviceSynchronize()
    best = float("inf")
    for _ in range(10):
        t = time.perf_counter()
        cupy.copyto(b, a)
        cupy.cuda.runtime.deviceSynchronize()
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best / 1e9


def _cublas_tflops(n: int) -> float:
    import cupy

    a = cupy.random.random((n, n), dtype=cupy.float32)
    with cupy.cuda.Device(0):
        cupy.cuda.runtime.deviceSynchronize()
        a @ a
        cupy.cuda.runtime.deviceSynchronize()
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            a @ a
            cupy.cuda.runtime.deviceSynchronize()
            best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e12


def _streaming(rng: np.random.Generator, n: int, out: dict[str, float]) -> None:
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    x, y = fl.asarray(a), fl.asarray(b)
    got = (2 * x - fl.sin(y) + x * y).get()
    np.testing.assert_allclose(got, 2 * a - np.sin(b) + a * b, rtol=1e-5, atol=1e-6)
    t = _best(lambda: (2 * x - fl.sin(y) + x * y).eval(), 10)
    out["elementwise GB/s"] = 3 * a.nbytes / t / 1e9
    np.testing.assert_allclose(fl.sum(x * y).get(), np.sum(a.astype(np.float64) * b),
                               rtol=1e-3)
    t = _best(lambda: fl.sum(x * y).eval(), 10)
    out["sum GB/s"] = 2 * a.nbytes / t / 1e9


def _softmax(rng: np.random.Generator, out: dict[str, float]) -> None:
    M = rng.random((1 << 14, 1 << 13), dtype=np.float32)
    X = fl.asarray(M)

    def softmax() -> Any:
        e = fl.exp(X - X.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).eval()
    ref = np.exp(M[:4] - M[:4].max(axis=1, keepdims=True))
    np.testing.assert_allclose(softmax().get()[:4], ref / ref.sum(axis=1, keepdims=True),
                               rtol=1e-4)
    t = _best(softmax, 5)
    out["softmax GB/s"] = 2 * M.nbytes / t / 1e9


def _matmul(rng: np.random.Generator, out: dict[str, float], k: int = 4096) -> None:
    A = rng.random((k, k), dtype=np.float32)
    FA = fl.asarray(A)
    C = (FA @ FA).get()
    np.testing.assert_allclose(C[:8], A[:8].astype(np.float64) @ A, rtol=1e-3)
    t = _best(lambda: (FA @ FA).eval(), 5)
    out["matmul TFLOP/s"] = 2 * k**3 / t / 1e12


def _host(rng: np.random.Generator, out: dict[str, float], calls: int, loops: int) -> None:
    s = fl.asarray(rng.random(1000, dtype=np.float32))
    r = fl.asarray(rng.random(1000, dtype=np.float32))
    out["eval host us"] = _host_cost(lambda: (((s * 2 + r) * s - r) / 3).eval(), calls, loops)
    fused = fl.fuse(lambda p, q: ((p * 2 + q) * p - q) / 3)
    np.testing.assert_allclose(fused(s, r).get(), (((s * 2 + r) * s - r) / 3).get(), rtol=1e-6)
    out["fuse host us"] = _host_cost(lambda: fused(s, r), calls, loops)


def measure(device: Any, n: int, calls: int, loops: int) -> dict[str, float]:
    """Every figure of the module docstring on ``device``."""
    rng = np.random.default_rng(0)
    out: dict[str, float] = {}
    with fl.device(device):
        _streaming(rng, n, out)
        _softmax(rng, out)
        _matmul(rng, out)
        _host(rng, out, calls, loops)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log2n", type=int, default=27)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--loops", type=int, default=7)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    gpus = fl.devices(type="gpu")
    if not gpus:
        raise SystemExit("no GPU device")
    n = 1 << args.log2n
    results = {f"{d.backend}: {d.name}": measure(d, n, args.calls, args.loops) for d in gpus}
    peers: dict[str, float] = {}
    try:
        peers = {"copy GB/s (cupy)": _copy_gbs(n), "cuBLAS TFLOP/s (cupy)": _cublas_tflops(4096)}
    except ImportError:
        pass
    names = list(results)
    metrics = list(next(iter(results.values())))
    print(f"{'metric':<18}" + "".join(f"{name[:28]:>30}" for name in names)
          + ("   cuda/opencl" if len(names) == 2 else ""))
    for m in metrics:
        row = [results[name][m] for name in names]
        ratio = ""
        if len(names) == 2:
            cuda = next((results[k][m] for k in names if k.startswith("cuda")), None)
            ocl = next((results[k][m] for k in names if k.startswith("opencl")), None)
            if cuda and ocl:
                ratio = f"{cuda / ocl:14.3f}"
        print(f"{m:<18}" + "".join(f"{v:30.2f}" for v in row) + ratio)
    for k, v in peers.items():
        print(f"{k:<18}{v:30.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "peers": peers, "n": n}, f, indent=1)


if __name__ == "__main__":
    main()
