"""Issue 3 figures: fused reduction, row softmax and matmul against peers in one run.

* ``sum(x * y)`` over float32 vectors: GB/s counting both inputs read once, and
  the fraction of the device's buffer-copy bandwidth (read + write) measured in
  the same run.  Peers: numpy ``(x * y).sum()`` on the CPU; torch eager,
  torch.compile, ``torch.dot`` (cuBLAS), jax.jit and pyopencl's
  ReductionKernel on the GPU.
* Row softmax of a float32 matrix: GB/s counting one read and one write.
  Peers: numpy (CPU); torch eager and torch.compile (GPU).
* float32 matmul: TFLOP/s (2 n^3 flops).  Peer: torch with TF32 disabled.

Times are medians of repeated runs after warm-up; every result is checked once
against a float64 numpy reference.  Usage::

    python benchmarks/bench_reductions.py [--device SPEC] [--sum-log2 N] [--rows-log2 R]
        [--cols-log2 C] [--matmul N] [--repeat K] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import copy_bandwidth, median_time


class Report:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, workload: str, impl: str, value: float | None, unit: str,
            note: str = "") -> None:
        self.rows.append(dict(workload=workload, impl=impl, value=value, unit=unit, note=note))
        shown = "skipped" if value is None else f"{value:9.1f} {unit}"
        print(f"{workload:12s} {impl:28s} {shown} {note}", flush=True)


def attempt(report: Report, workload: str, impl: str, unit: str,
            fn: Callable[[], float]) -> float | None:
    try:
        v = fn()
    except Exception as exc:  # a missing or failing peer is reported, not fatal
        report.add(workload, impl, None, unit, f"({type(exc).__name__}: {str(exc)[:80]})")
        return None
    report.add(workload, impl, v, unit)
    return v


def bench_sum(report: Report, n: int, repeat: int, gpu: bool) -> None:
    rng = np.random.default_rng(1)
    xh, yh = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    ref = float((xh.astype(np.float64) * yh).sum())
    x, y = fl.asarray(xh), fl.asarray(yh)
    got = float(fl.sum(x * y))
    ok = abs(got - ref) <= 1e-5 * abs(ref)
    nbytes = 2 * 4 * n
    w = "sum(x*y)"

    def fl_run() -> float:
        t = median_time(lambda: fl.sum(x * y).eval(), fl.synchronize, repeat)
        return nbytes / t / 1e9

    report.add(w, "fuseloop", fl_run(), "GB/s", "" if ok else f"MISMATCH {got} vs {ref}")
    if not gpu:
        attempt(report, w, "numpy (x*y).sum()", "GB/s", lambda: nbytes / median_time(
            lambda: (xh * yh).sum(), lambda: None, repeat) / 1e9)
        return

    def torch_peers() -> None:
        import torch

        xt, yt = torch.from_numpy(xh).cuda(), torch.from_numpy(yh).cuda()
        sync = torch.cuda.synchronize
        attempt(report, w, "torch eager", "GB/s",
                lambda: nbytes / median_time(lambda: (xt * yt).sum(), sync, repeat) / 1e9)
        attempt(report, w, "torch.dot (cuBLAS)", "GB/s",
                lambda: nbytes / median_time(lambda: torch.dot(xt, yt), sync, repeat) / 1e9)
        f = torch.compile(lambda a, b: (a * b).sum())
        attempt(report, w, "torch.compile", "GB/s",
                lambda: nbytes / median_time(lambda: f(xt, yt), sync, repeat, 3) / 1e9)

    try:
        torch_peers()
    except Exception as exc:
        report.add(w, "torch", None, "GB/s", f"({type(exc).__name__})")

    def jax_peer() -> float:
        import jax
        import jax.numpy as jnp

        xj, yj = jnp.asarray(xh), jnp.asarray(yh)
        f = jax.jit(lambda a, b: (a * b).sum())
        return nbytes / median_time(lambda: f(xj, yj).block_until_ready(), lambda: None,
                                    repeat) / 1e9

    attempt(report, w, "jax.jit", "GB/s", jax_peer)

    def pyopencl_peer() -> float:
        from pyopencl.reduction import ReductionKernel

        dev = fl.get_device()
        krnl = ReductionKernel(dev.context, np.float32, neutral="0", reduce_expr="a+b",
                               map_expr="x[i]*y[i]",
                               arguments="__global const float *x, __global const float *y")
        import pyopencl.array as cla

        xa, ya = cla.to_device(dev.queue, xh), cla.to_device(dev.queue, yh)
        return nbytes / median_time(lambda: krnl(xa, ya), dev.queue.finish, repeat) / 1e9

    attempt(report, w, "pyopencl ReductionKernel", "GB/s", pyopencl_peer)


def bench_softmax(report: Report, rows: int, cols: int, repeat: int, gpu: bool) -> None:
    rng = np.random.default_rng(2)
    h = rng.standard_normal((rows, cols), dtype=np.float32)
    x = fl.asarray(h)
    out = fl.empty_like(x)

    def fl_softmax() -> None:
        e = fl.exp(x - x.max(axis=-1, keepdims=True))
        out[...] = e / e.sum(axis=-1, keepdims=True)

    fl_softmax()
    h64 = h[:64].astype(np.float64)
    ref = np.exp(h64 - h64.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    ok = np.allclose(out.get()[:64], ref, rtol=1e-4, atol=1e-7)
    fl.reset_stats()
    fl_softmax()
    fl.synchronize()
    kernels = fl.stats()["kernels_launched"]
    nbytes = 2 * 4 * rows * cols
    w = "softmax"
    t = median_time(fl_softmax, fl.synchronize, repeat)
    report.add(w, "fuseloop", nbytes / t / 1e9, "GB/s",
               f"{kernels} kernel(s)" + ("" if ok else " MISMATCH"))
    if not gpu:
        def np_softmax() -> None:
            e = np.exp(h - h.max(axis=1, keepdims=True))
            e / e.sum(axis=1, keepdims=True)

        attempt(report, w, "numpy", "GB/s",
                lambda: nbytes / median_time(np_softmax, lambda: None, repeat) / 1e9)
        return
    try:
        import torch

        xt = torch.from_numpy(h).cuda()
        sync = torch.cuda.synchronize
        attempt(report, w, "torch eager", "GB/s", lambda: nbytes / median_time(
            lambda: torch.softmax(xt, dim=-1), sync, repeat) / 1e9)
        f = torch.compile(lambda a: torch.softmax(a, dim=-1))
        attempt(report, w, "torch.compile", "GB/s", lambda: nbytes / median_time(
            lambda: f(xt), sync, repeat, 3) / 1e9)
    except Exception as exc:
        report.add(w, "torch", None, "GB/s", f"({type(exc).__name__})")


def bench_matmul(report: Report, n: int, repeat: int, gpu: bool) -> None:
    rng = np.random.default_rng(3)
    ah, bh = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    a, b = fl.asarray(ah), fl.asarray(bh)
    got = (a @ b).get()
    ref = ah[:8].astype(np.float64) @ bh
    ok = np.allclose(got[:8], ref, rtol=1e-4)
    flops = 2.0 * n ** 3
    w = f"matmul {n}"
    t = median_time(lambda: (a @ b).eval(), fl.synchronize, max(3, repeat // 2), 1)
    report.add(w, "fuseloop", flops / t / 1e12, "TFLOP/s", "" if ok else "MISMATCH")
    if not gpu:
        attempt(report, w, "numpy (BLAS)", "TFLOP/s", lambda: flops / median_time(
            lambda: ah @ bh, lambda: None, max(3, repeat // 2)) / 1e12)
        return

    def torch_peer() -> float:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        at, bt = torch.from_numpy(ah).cuda(), torch.from_numpy(bh).cuda()
        return flops / median_time(lambda: at @ bt, torch.cuda.synchronize, repeat) / 1e12

    attempt(report, w, "torch (TF32 off)", "TFLOP/s", torch_peer)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--sum-log2", type=int, default=None)
    p.add_argument("--rows-log2", type=int, default=None)
    p.add_argument("--cols-log2", type=int, default=None)
    p.add_argument("--matmul", type=int, default=None)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.device:
        fl.set_device(args.device)
    dev = fl.get_device()
    gpu = dev.type == "gpu"
    n = 1 << (args.sum_log2 or (27 if gpu else 24))
    rows = 1 << (args.rows_log2 or (14 if gpu else 11))
    cols = 1 << (args.cols_log2 or (13 if gpu else 11))
    mm = args.matmul or (4096 if gpu else 512)
    print(f"device: {dev.name} ({dev.type}); fuseloop {fl.__version__}", flush=True)
    report = Report()
    copy = copy_bandwidth(4 * n, args.repeat)
    report.add("copy", "OpenCL enqueue_copy", copy, "GB/s", f"{n} float32")
    bench_sum(report, n, args.repeat, gpu)
    bench_softmax(report, rows, cols, args.repeat, gpu)
    bench_matmul(report, mm, args.repeat, gpu)
    print("\nfractions of the copy bandwidth (same run):")
    for r in report.rows:
        if r["unit"] == "GB/s" and r["value"] and r["workload"] != "copy":
            print(f"  {r['workload']:10s} {r['impl']:28s} {100 * r['value'] / copy:5.1f}%")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=dev.name, device_type=dev.type, copy_gb_per_s=copy,
                           sum_n=n, softmax_shape=[rows, cols], matmul_n=mm,
                           results=report.rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
