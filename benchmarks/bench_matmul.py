"""Issue 3's contraction figure: fuseloop's matmul against peers, plus fusion cases.

* float32 ``A @ B`` (n x n): TFLOP/s (2 n^3 flops) and the fraction of the peer's
  figure.  Peers on GPUs: torch with TF32 disabled (cuBLAS), cupy (cuBLAS); on
  CPUs: numpy (BLAS).
* ``--probe``: the same matmul with several tile configurations of the
  contraction recipe (registered through ``fl.register_recipe``), and the
  untiled reference (one output per work-item, no local memory).
* ``--extra``: fused epilogue ``tanh(A @ B + c)`` (kernels launched), fused
  producers ``(A * 2) @ B`` and ``sin(A) @ B`` (against materialising
  ``sin(A)`` first), a transposed operand ``A.T @ B``, sizes that are not tile
  multiples, batched matmul (against ``torch.bmm``), float64, and the
  reduction kernel that contractions used before this recipe existed.

Times are medians of repeated calls after warm-up (each call then a
synchronize); every result is checked against a float64 reference.  Usage::

    python benchmarks/bench_matmul.py [--device SPEC] [--n N] [--repeat K]
        [--probe] [--extra] [--time-limit S] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
import fuseloop.expr.contraction as fl_contraction
import fuseloop.ops.linalg as linalg
from fuseloop.bench.runner import median_time
from fuseloop.recipes import contraction as rc

SCALE: list = [1e12, "TFLOP/s"]  # GFLOP/s on CPUs


class Report:
    def __init__(self, deadline: float) -> None:
        self.rows: list[dict[str, Any]] = []
        self.deadline = deadline

    def add(self, workload: str, impl: str, value: float | None, unit: str | None = None,
            note: str = "") -> None:
        unit = unit or SCALE[1]
        self.rows.append(dict(workload=workload, impl=impl, value=value, unit=unit, note=note))
        shown = "skipped" if value is None else f"{value:8.2f} {unit}"
        print(f"{workload:26s} {impl:40s} {shown} {note}", flush=True)

    def late(self) -> bool:
        return time.time() > self.deadline


def attempt(report: Report, workload: str, impl: str, fn: Callable[[], tuple[float, str]],
            unit: str | None = None) -> float | None:
    if report.late():
        report.add(workload, impl, None, unit, "(time limit)")
        return None
    try:
        v, note = fn()
    except Exception as exc:  # a missing or failing peer is reported, not fatal
        report.add(workload, impl, None, unit, f"({type(exc).__name__}: {str(exc)[:100]})")
        return None
    report.add(workload, impl, v, unit, note)
    return v


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-300))


class Peers:
    """Reference results and peer timings (torch, cupy on GPUs; numpy on CPUs)."""

    def __init__(self, gpu: bool) -> None:
        self.gpu = gpu
        self.torch = None
        if gpu:
            try:
                import torch

                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
                torch.set_float32_matmul_precision("highest")
                self.torch = torch
            except Exception:
                self.torch = None

    def reference(self, fn: Callable[..., Any], *arrays: np.ndarray) -> np.ndarray:
        """``fn`` of the arrays in float64 (on the GPU when torch is there)."""
        if self.torch is not None:
            t = self.torch
            out = fn(*(t.from_numpy(a.astype(np.float64)).cuda() for a in arrays), t)
            return out.cpu().numpy()
        return fn(*(a.astype(np.float64) for a in arrays), np)


def fl_case(report: Report, peers: Peers, workload: str, impl: str, expr: Callable[[], Any],
            ref: np.ndarray, flops: float, repeat: int, tol: float = 1e-4,
            count_kernels: bool = False) -> float | None:
    def run() -> tuple[float, str]:
        got = expr().get()
        err = rel_error(got, ref)
        note = f"rel.err {err:.1e}" + ("" if err <= tol else " MISMATCH")
        if count_kernels:
            fl.reset_stats()
            expr().eval()
            fl.synchronize()
            note += f", {fl.stats()['kernels_launched']} kernel(s)"
        t = median_time(lambda: expr().eval(), fl.synchronize, repeat, warmup=1)
        return flops / t / SCALE[0], note

    return attempt(report, workload, impl, run)


def peer_matmul(report: Report, peers: Peers, workload: str, ah: np.ndarray, bh: np.ndarray,
                repeat: int, flops: float, batched: bool = False) -> float | None:
    best = None
    if not peers.gpu:
        v = attempt(report, workload, "numpy (BLAS)", lambda: (flops / median_time(
            lambda: ah @ bh, lambda: None, repeat, warmup=1) / SCALE[0], ""))
        return v
    if peers.torch is not None:
        torch = peers.torch

        def torch_run() -> tuple[float, str]:
            at, bt = torch.from_numpy(ah).cuda(), torch.from_numpy(bh).cuda()
            f = torch.bmm if batched else torch.matmul
            return flops / median_time(lambda: f(at, bt), torch.cuda.synchronize,
                                       repeat, warmup=1) / SCALE[0], ""

        best = attempt(report, workload, "torch (TF32 off)", torch_run)

    def cupy_run() -> tuple[float, str]:
        import cupy as cp

        ac, bc = cp.asarray(ah), cp.asarray(bh)
        sync = cp.cuda.Device().synchronize
        return flops / median_time(lambda: cp.matmul(ac, bc), sync, repeat,
                                   warmup=1) / SCALE[0], ""

    attempt(report, workload, "cupy (cuBLAS)", cupy_run)
    return best


PROBE_GPU = [  # float32
    rc.TileConfig(128, 128, 8, 16, 16, "blocked"),
    rc.TileConfig(128, 128, 16, 16, 16, "blocked"),
    rc.TileConfig(128, 128, 8, 16, 16, "blocked", pad=False),
    rc.TileConfig(128, 128, 8, 16, 16, "strided"),
    rc.TileConfig(64, 64, 8, 16, 16, "blocked"),
]
PROBE_GPU64 = [  # float64
    rc.TileConfig(64, 64, 8, 16, 16, "strided"),
    rc.TileConfig(64, 64, 8, 16, 16, "blocked"),
    rc.TileConfig(128, 64, 8, 16, 16, "blocked"),
    rc.TileConfig(128, 128, 8, 16, 16, "blocked"),
]
PROBE_CPU = [
    rc.CpuBlocks(6, 16, 1),
    rc.CpuBlocks(4, 16, 1),
    rc.CpuBlocks(8, 8, 1),
    rc.CpuBlocks(6, 16, 8),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--probe", action="store_true")
    p.add_argument("--extra", action="store_true")
    p.add_argument("--time-limit", type=float, default=1e9)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.device:
        fl.set_device(args.device)
    dev = fl.get_device()
    gpu = dev.type == "gpu"
    if not gpu:
        SCALE[:] = [1e9, "GFLOP/s"]
    kind = "nvidia" if gpu and "nvidia" in dev.vendor.lower() else dev.type
    n = args.n or (4096 if gpu else 1024)
    repeat = args.repeat
    report = Report(time.time() + args.time_limit)
    peers = Peers(gpu)
    default = fl.recipe_for(dev, "contraction")
    print(f"device: {dev.name} ({dev.type}); fuseloop {fl.__version__}; contraction recipe "
          f"{default.name} v{default.version}", flush=True)

    rng = np.random.default_rng(3)
    ah = rng.random((n, n), dtype=np.float32) - 0.5
    bh = rng.random((n, n), dtype=np.float32) - 0.5
    a, b = fl.asarray(ah), fl.asarray(bh)
    flops = 2.0 * n ** 3
    ref = peers.reference(lambda x, y, m: x @ y, ah, bh)
    w = f"matmul {n}^3 f32"
    mine = fl_case(report, peers, w, f"fuseloop ({default.name})", lambda: a @ b, ref, flops,
                   repeat)
    peer = peer_matmul(report, peers, w, ah, bh, repeat, flops)
    if mine and peer:
        print(f"  fuseloop / peer: {mine / peer:.1%}", flush=True)

    if args.probe:
        configs = PROBE_GPU if gpu else PROBE_CPU
        for cfg in configs:
            recipe = rc.tiled(cfg) if gpu else rc.blocked(cfg)
            fl.register_recipe(kind, recipe, name=f"probe-{recipe.__name__}",
                               kind="contraction")
            v = fl_case(report, peers, w, recipe.__name__, lambda: a @ b, ref, flops, repeat)
            if v and peer:
                print(f"  {v / peer:.1%} of the peer", flush=True)
        if gpu:
            fl.register_recipe(kind, rc.untiled, name="probe-untiled", kind="contraction")
            fl_case(report, peers, w, "untiled (1 output/work-item)", lambda: a @ b, ref, flops,
                    max(2, repeat // 3))
        if gpu and dev.has_fp64:
            a64, b64 = fl.asarray(ah.astype(np.float64)), fl.asarray(bh.astype(np.float64))
            for cfg in PROBE_GPU64:
                recipe = rc.tiled(cfg)
                fl.register_recipe(kind, recipe, name=f"probe64-{recipe.__name__}",
                                   kind="contraction")
                fl_case(report, peers, f"matmul {n}^3 f64", recipe.__name__,
                        lambda: a64 @ b64, ref, flops, repeat, tol=1e-10)
        fl.register_recipe(kind, default.transform, name=default.name, version=default.version,
                           kind="contraction")

    if args.extra:
        c = fl.asarray(rng.random(n, dtype=np.float32))
        ch = c.get()
        fl_case(report, peers, w, "fuseloop tanh(A @ B + c)", lambda: fl.tanh(a @ b + c),
                np.tanh(ref + ch), flops, repeat, count_kernels=True)
        fl_case(report, peers, w, "fuseloop (A * 2) @ B", lambda: (a * 2) @ b, 2 * ref, flops,
                repeat, count_kernels=True)
        sin_ref = peers.reference(lambda x, y, m: m.sin(x) @ y, ah, bh)
        fl_case(report, peers, w, "fuseloop sin(A) @ B", lambda: fl.sin(a) @ b,
                sin_ref, flops, repeat, count_kernels=True)
        saved_reuse = linalg.MATERIALISE_REUSE
        linalg.MATERIALISE_REUSE = 1 << 62  # force sin into the tile fill
        try:
            fl_case(report, peers, w, "fuseloop sin(A) @ B, sin in the fill",
                    lambda: fl.sin(a) @ b, sin_ref, flops, repeat, count_kernels=True)
        finally:
            linalg.MATERIALISE_REUSE = saved_reuse
        fl_case(report, peers, w, "fuseloop sin(A).eval() @ B", lambda: fl.sin(a).eval() @ b,
                sin_ref, flops, repeat, count_kernels=True)
        fl_case(report, peers, w, "fuseloop A.T @ B", lambda: a.T @ b, peers.reference(
            lambda x, y, m: x.T @ y, ah, bh), flops, repeat)
        for m in (n - 96, n + 1):  # not multiples of the tiles
            if m <= n:
                ah2, bh2 = ah[:m, :m].copy(), bh[:m, :m].copy()
            else:
                ah2 = rng.random((m, m), dtype=np.float32) - 0.5
                bh2 = rng.random((m, m), dtype=np.float32) - 0.5
            am, bm = fl.asarray(ah2), fl.asarray(bh2)
            rm = peers.reference(lambda x, y, mm: x @ y, ah2, bh2)
            fl_case(report, peers, f"matmul {m}^3 f32", "fuseloop",
                    lambda am=am, bm=bm: am @ bm, rm, 2.0 * m ** 3, repeat)
        nb, s = (32, n // 4) if gpu else (8, n // 4)
        xb = rng.random((nb, s, s), dtype=np.float32) - 0.5
        yb = rng.random((nb, s, s), dtype=np.float32) - 0.5
        xa, ya = fl.asarray(xb), fl.asarray(yb)
        wb = f"bmm {nb}x{s}^3 f32"
        bflops = 2.0 * nb * s ** 3
        fl_case(report, peers, wb, "fuseloop", lambda: xa @ ya,
                peers.reference(lambda x, y, m: x @ y, xb, yb), bflops, repeat)
        peer_matmul(report, peers, wb, xb, yb, repeat, bflops, batched=True)
        if dev.has_fp64:
            a64, b64 = ah.astype(np.float64), bh.astype(np.float64)
            A64, B64 = fl.asarray(a64), fl.asarray(b64)
            w64 = f"matmul {n}^3 f64"
            fl_case(report, peers, w64, "fuseloop", lambda: A64 @ B64, ref, flops, repeat,
                    tol=1e-10)
            peer_matmul(report, peers, w64, a64, b64, repeat, flops)
        # the reduction kernel contractions ran as before (one dot product per output)
        m = min(n, 2048)
        saved = fl_contraction.MIN_SIDE
        fl_contraction.MIN_SIDE = 1 << 62
        try:
            am, bm = fl.asarray(ah[:m, :m].copy()), fl.asarray(bh[:m, :m].copy())
            fl_case(report, peers, f"matmul {m}^3 f32", "reduction kernel (before)",
                    lambda: am @ bm, peers.reference(lambda x, y, mm: x @ y, ah[:m, :m],
                                                     bh[:m, :m]),
                    2.0 * m ** 3, 2)
        finally:
            fl_contraction.MIN_SIDE = saved

    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=dev.name, device_type=dev.type, n=n,
                           recipe=[default.name, default.version], results=report.rows),
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
