"""The GPU matmul rule for float64 and float32 on NPBench's shapes and two others (issues 25, 26).

Times, in one process, fuseloop's ``gpu-tiled`` recipe under the former rule for 8-byte
types (``wide_tiles=GPU_TILES_WIDE_V4``: 64 x 64 blocks, 4 x 4 strided outputs a
work-item, scalar reads, one copy of the tiles) and the current one (``GPU_TILES_WIDE``:
128 x 64 blocks, 8 x 4 outputs in pairs read as double2, two copies of the tiles), against
cupy and torch (TF32 off), each case written as NPBench writes it:

- ``gemm``: ``C[:] = alpha * A @ B + beta * C`` (NPBench gemm, M: 2500 x 3000 @ 3000 x 2750)
- ``2mm``: ``D[:] = alpha * A @ B @ C + beta * D`` (k2mm, M: 2000 x 2500 @ 2500 x 2250
  @ 2250 x 2750)
- ``syrk``: ``C[:] = alpha * A @ A.T + beta * C`` (syrk's product, M: A 200 x 150)
- ``atax``: ``(A @ x) @ A`` (atax, M: 10000 x 12500; a matrix-vector and a vector-matrix product)
- ``atb``: ``A.T @ B``, 1000 x 1531 stored, @ 1000 x 777 (not a shape the rule was tuned on)
- ``abt``: ``A @ B.T``, 3001 x 517 @ (2049 x 517).T (short reduced range, not tuned on)

Sizes come from ``.npbench/bench_info/*.json`` (``--npbench``) when it is there, else the
M presets above.  Float32 takes ``tiles``, which the rule leaves as it was: its old and
new rows are the same kernel (a check of the timing's noise).  Each row prints the
median milliseconds, TFLOP/s, cupy's time over the row's (``cupy/x``: above 1 is faster
than cupy), for the new rule new/old (above 1: the new is faster), kernels launched per
call and the relative error against numpy's float64 result.

``--wide`` adds float64 variants of the wide tiles (gemm and 2mm only): 128 x 128 blocks
in steps of 4 (8 x 8 a work-item), 64 x 64 blocks with the pipeline (4 x 4), 128 x 64
with the step unrolled 4 at a time, and with ``-cl-nv-maxrregcount=128``; ``--regs`` the
registers of each fuseloop kernel (NVIDIA's OpenCL build log).  ``--tune`` runs
``fl.tune`` on float64 gemm within ``--budget`` seconds (not stored) and prints its report.

Usage (from the repository root; about 60-100 s on an H200 without ``--wide``/``--tune``)::

    PYTHONPATH=. python benchmarks/probes/matmul_dtype_probe.py [--dtypes float64,float32]
        [--cases gemm,2mm,syrk,atax,atb,abt] [--repeat 10] [--wide] [--regs]
        [--tune] [--budget 60] [--npbench .npbench] [--scale 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import median_time
from fuseloop.recipes import contraction as rc

T = rc.TileConfig
RULES: dict[str, Any] = {
    "old": rc.gpu_tiled.with_params(wide_tiles=rc.GPU_TILES_WIDE_V4),
    "new": rc.gpu_tiled,
}
#: --wide: float64 variants of the wide tiles
WIDE: dict[str, T] = {
    "128x128 k4 (8x8)": rc.GPU_TILES_WIDE._replace(bn=128, bk=4),
    "64x64 pipelined (4x4)": rc.GPU_TILES_WIDE._replace(bm=64),
    "128x64 unroll 4": rc.GPU_TILES_WIDE._replace(unroll=4),
    "128x64 max 128 regs": rc.GPU_TILES_WIDE._replace(max_registers=128),
    "128x64 loopy regs": rc.GPU_TILES_WIDE._replace(reg_loops="loopy"),
}
#: NPBench's M presets, used when bench_info is not found
PRESETS = {"gemm": {"NI": 2500, "NJ": 2750, "NK": 3000},
           "k2mm": {"NI": 2000, "NJ": 2250, "NK": 2500, "NL": 2750},
           "syrk": {"M": 150, "N": 200},
           "atax": {"M": 10000, "N": 12500}}


def _params(folder: Path, name: str, scale: float) -> dict[str, int]:
    path = folder / "bench_info" / f"{name}.json"
    found = (json.loads(path.read_text())["benchmark"]["parameters"]["M"] if path.is_file()
             else PRESETS[name])
    return {k: max(2, round(v * scale)) for k, v in found.items()}


class Case:
    """One workload: its arrays (host), its function over any array library's arrays
    (``run(xp_arrays, swap)``, writing in place where NPBench does), its flops."""

    def __init__(self, name: str, shapes: list[tuple[int, ...]], run: Callable[..., Any],
                 flops: float, inplace: int | None = None) -> None:
        self.name, self.shapes, self.run, self.flops, self.inplace = \
            name, shapes, run, flops, inplace


def _cases(folder: Path, scale: float = 1.0) -> list[Case]:
    g, m2, sy, at = (_params(folder, n, scale) for n in ("gemm", "k2mm", "syrk", "atax"))
    a, b = 1.5, 1.2

    def gemm(x: list[Any], swap: Callable) -> Any:
        C, A, B = x
        C[:] = a * A @ B + b * C
        return C

    def mm2(x: list[Any], swap: Callable) -> Any:
        A, B, C, D = x
        D[:] = a * A @ B @ C + b * D
        return D

    def syrk(x: list[Any], swap: Callable) -> Any:
        C, A = x
        C[:] = a * A @ swap(A) + b * C
        return C

    def atax(x: list[Any], swap: Callable) -> Any:
        A, v = x
        return (A @ v) @ A

    def atb(x: list[Any], swap: Callable) -> Any:
        return swap(x[0]) @ x[1]

    def abt(x: list[Any], swap: Callable) -> Any:
        return x[0] @ swap(x[1])

    def s(n: int) -> int:
        return max(2, round(n * scale))

    ni, nj, nk = g["NI"], g["NJ"], g["NK"]
    i2, j2, k2, l2 = m2["NI"], m2["NJ"], m2["NK"], m2["NL"]
    return [
        Case("gemm", [(ni, nj), (ni, nk), (nk, nj)], gemm, 2.0 * ni * nj * nk, inplace=0),
        Case("2mm", [(i2, k2), (k2, j2), (j2, l2), (i2, l2)], mm2,
             2.0 * i2 * j2 * (k2 + l2), inplace=3),
        Case("syrk", [(sy["N"], sy["N"]), (sy["N"], sy["M"])], syrk,
             2.0 * sy["N"] ** 2 * sy["M"], inplace=0),
        Case("atax", [(at["M"], at["N"]), (at["N"],)], atax, 4.0 * at["M"] * at["N"]),
        Case("atb", [(s(1000), s(1531)), (s(1000), s(777))], atb,
             2.0 * s(1531) * s(1000) * s(777)),
        Case("abt", [(s(3001), s(517)), (s(2049), s(517))], abt,
             2.0 * s(3001) * s(2049) * s(517)),
    ]


def _peers() -> dict[str, tuple[Any, Callable, Callable, Callable]]:
    """name -> (module, asarray, swap, synchronize) of the libraries found."""
    out: dict[str, tuple[Any, Callable, Callable, Callable]] = {}
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            out["cupy"] = (cupy, cupy.asarray, lambda v: cupy.swapaxes(v, -1, -2),
                           cupy.cuda.Device().synchronize)
    except Exception:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch.set_float32_matmul_precision("highest")
            out["torch (TF32 off)"] = (torch, lambda v: torch.from_numpy(v).cuda(),
                                       lambda v: v.transpose(-1, -2), torch.cuda.synchronize)
    except Exception:
        pass
    return out


def _host(case: Case, dtype: np.dtype, seed: int = 7) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.random(s) - 0.5).astype(dtype) for s in case.shapes]


def _time(case: Case, arrays: list[Any], swap: Callable, sync: Callable,
          repeat: int, force: Callable[[Any], Any] = lambda r: r) -> float:
    """Median seconds of the case; ``force`` evaluates a lazy result (fuseloop's)."""
    def once() -> None:
        force(case.run(arrays, swap))

    return median_time(once, sync, repeat, warmup=2)


def _eval(result: Any) -> Any:
    return result.eval()


def _fuseloop_row(case: Case, host: list[np.ndarray], ref: np.ndarray, recipe: Any,
                  repeat: int, regs: bool) -> tuple[float | None, str]:
    fswap = lambda v: fl.swapaxes(v, -1, -2)  # noqa: E731
    try:
        with fl.recipes.use(recipe):
            arrays = [fl.asarray(h) for h in host]
            start = time.perf_counter()
            got = case.run(arrays, fswap).get()
            first = time.perf_counter() - start
            err = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-300))
            fl.synchronize()
            before = fl.stats()["kernels_launched"]
            _eval(case.run(arrays, fswap))
            fl.synchronize()
            launches = fl.stats()["kernels_launched"] - before
            t = _time(case, arrays, fswap, fl.synchronize, repeat, _eval)
            note = f"{launches} launch(es), rel.err {err:.1e}, first call {first:.1f} s"
            if regs:
                note += ", " + _registers(case, arrays, fswap, recipe)
            return t, note
    except Exception as exc:  # a failing variant is reported, not fatal
        return None, f"{type(exc).__name__}: {exc}"[:140]


def _registers(case: Case, arrays: list[Any], swap: Callable, recipe: Any) -> str:
    """Registers of the case's contraction kernels (NVIDIA's OpenCL build log)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from matmul_variants import _registers as regs_of  # (this folder's probe)

    if case.inplace is not None:
        return "regs: n/a (in place)"
    tiles = getattr(recipe, "values", {}).get("wide_tiles")
    return regs_of(case.run(arrays, swap), tiles)


def _print(case: Case, dtype: np.dtype, rows: list[tuple[str, float | None, str]]) -> None:
    cupy_t = next((t for name, t, _ in rows if name == "cupy" and t), None)
    old_t = next((t for name, t, _ in rows if name == "fuseloop old" and t), None)
    for name, t, note in rows:
        label = f"{case.name:5s} {dtype.name:8s} {name:30s}"
        if t is None:
            print(f"{label} {'failed':>9s}  {note}", flush=True)
            continue
        vs_cupy = f"{cupy_t / t:7.2f}" if cupy_t else f"{'':7s}"
        vs_old = f"{old_t / t:7.2f}" if old_t and name.startswith("fuseloop") \
            and name != "fuseloop old" else f"{'':7s}"
        print(f"{label} {t * 1e3:9.3f} {case.flops / t / 1e12:8.2f} {vs_cupy} {vs_old}  {note}",
              flush=True)


def _tune(case: Case, budget: float) -> None:
    host = _host(case, np.dtype(np.float64))
    arrays = [fl.asarray(h) for h in host]
    C, A, B = arrays
    report = fl.tune(1.5 * A @ B + 1.2 * C, budget_s=budget, progress=False, store=False)
    print(report.as_text(), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", default="float64,float32")
    p.add_argument("--cases", default="gemm,2mm,syrk,atax,atb,abt")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--wide", action="store_true", help="float64 wide-tile variants")
    p.add_argument("--regs", action="store_true")
    p.add_argument("--tune", action="store_true")
    p.add_argument("--budget", type=float, default=60.0, help="--tune's budget_s")
    p.add_argument("--npbench", default=".npbench")
    p.add_argument("--scale", type=float, default=1.0,
                   help="every extent times this (a smoke test on a small device)")
    args = p.parse_args(argv)
    start = time.perf_counter()
    dev = fl.get_device()
    peers = _peers()
    print(f"device: {dev.name} ({dev.platform}); recipe {rc.gpu_tiled.name} "
          f"v{rc.gpu_tiled.version}; wide tiles old {rc.GPU_TILES_WIDE_V4}, new "
          f"{rc.GPU_TILES_WIDE}; peers: {', '.join(peers) or 'none'}", flush=True)
    print(f"{'case':5s} {'dtype':8s} {'impl':30s} {'ms':>9s} {'TFLOP/s':>8s} {'cupy/x':>7s} "
          f"{'new/old':>7s}  note")
    cases = [c for c in _cases(Path(args.npbench), args.scale)
             if c.name in args.cases.split(",")]
    for dtype in map(np.dtype, args.dtypes.split(",")):
        for case in cases:
            host = _host(case, dtype)
            ref = case.run([h.astype(np.float64) for h in host], lambda v: np.swapaxes(v, -1, -2))
            rows: list[tuple[str, float | None, str]] = []
            for name, (_, asarray, swap, sync) in peers.items():
                try:
                    rows.append((name, _time(case, [asarray(h) for h in host], swap, sync,
                                             args.repeat), ""))
                except Exception as exc:
                    rows.append((name, None, f"{type(exc).__name__}: {exc}"[:140]))
            recipes = dict(RULES)
            if args.wide and dtype == np.float64 and case.name in ("gemm", "2mm"):
                recipes |= {v: rc.gpu_tiled.with_params(wide_tiles=cfg) for v, cfg in WIDE.items()}
            for name, recipe in recipes.items():
                t, note = _fuseloop_row(case, host, ref, recipe, args.repeat, args.regs)
                rows.append((f"fuseloop {name}", t, note))
            _print(case, dtype, rows)
    if args.tune:
        _tune(next(c for c in _cases(Path(args.npbench), args.scale) if c.name == "gemm"),
              args.budget)
    print(f"probe time {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
