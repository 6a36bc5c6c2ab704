"""Float64 products on FP64 tensor cores (``gpu-tiled``'s DMMA path, recipes/matmul_dmma.py).

1. ``fl_dmma`` alone: one warp's 8 x 4 @ 4 x 8 + 8 x 8 through pyopencl on NVIDIA's
   OpenCL driver and through cupy's NVRTC, against numpy (does the inline PTX build
   and give the right answer?).
2. fuseloop's products with the DMMA rule against numpy: sizes that are multiples of no
   block, a batch, transposed operands, NPBench's gemm epilogue; with the kernel's
   choice (whether its source calls ``fl_dmma``).
3. Timings, median of ``--repeat``: cupy, the FMA tiles (``dmma=False``, version 5's
   rule) and each ``DmmaTiles`` of the search, at 4096^3 and NPBench gemm's M preset
   (2500 x 3000 @ 3000 x 2750), TFLOP/s and cupy's time over each.

Usage (on an NVIDIA GPU of compute capability >= 8.0)::

    FUSELOOP_DEVICE=gpu PYTHONPATH=. python benchmarks/probes/matmul_dmma_probe.py
        [--repeat 5] [--skip-check] [--configs all|final|default] [--npbench] [--parts]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.recipes import contraction as rc
from fuseloop.recipes import matmul_dmma as dm

sys.path.insert(0, str(Path(__file__).parent))
from matmul_dtype_probe import Case, _cases, _fuseloop_row, _host, _peers, _time


def _one_warp(name: str) -> str:
    """A kernel of one warp: ``D = A @ B + C`` for one product of shape ``name``, each
    lane's values placed as the recipe places them (dm.Shape.counts)."""
    shape = dm.SHAPES[name]
    na, nb, nc = shape.counts
    h, k = shape.m // 8, shape.k
    a = [f"a[(g + {8 * (i % h)}) * {k} + t + {4 * (i // h)}]" for i in range(na)]
    b = [f"b[(t + {4 * i}) * 8 + g]" for i in range(nb)]
    c = [f"(g + {8 * (i // 2)}) * 8 + 2 * t + {i % 2}" for i in range(nc)]
    outs = [f"&d{i}" for i in range(1, nc)]
    return dm.dmma_source(name) + f"""
__kernel void one_warp(__global const double *a, __global const double *b,
                       __global const double *c, __global double *d)
{{
    int l = get_local_id(0), g = l / 4, t = l % 4;
    double {", ".join(f"d{i}" for i in range(1, nc))};
    double d0 = fl_dmma_{name}({", ".join(a + b + [f"c[{x}]" for x in c] + outs)});
    {" ".join(f"d[{x}] = d{i};" for i, x in enumerate(c))}
}}
"""


def check_alone() -> None:
    """Each shape's ``fl_dmma`` through NVIDIA's OpenCL and cupy's NVRTC."""
    for name, shape in dm.SHAPES.items():
        rng = np.random.default_rng(1)
        a, b = rng.random((shape.m, shape.k)), rng.random((shape.k, 8))
        c = rng.random((shape.m, 8))
        want = a @ b + c
        src = _one_warp(name)
        try:
            import pyopencl as cl

            dev = next(d for p in cl.get_platforms() for d in p.get_devices()
                       if "nvidia" in p.name.lower())
            ctx = cl.Context([dev])
            q = cl.CommandQueue(ctx)
            prg = cl.Program(ctx, src).build()
            mf = cl.mem_flags
            bufs = [cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
                    for x in (a, b, c)]
            out = np.empty((shape.m, 8))
            dbuf = cl.Buffer(ctx, mf.WRITE_ONLY, out.nbytes)
            prg.one_warp(q, (32,), (32,), *bufs, dbuf)
            cl.enqueue_copy(q, out, dbuf)
            print(f"opencl fl_dmma_{name} on {dev.name} (cc {dev.compute_capability_major_nv}"
                  f".{dev.compute_capability_minor_nv}): max abs err "
                  f"{np.abs(out - want).max():.2e}", flush=True)
        except Exception as exc:
            print(f"opencl fl_dmma_{name} FAILED: {type(exc).__name__}: {str(exc)[:1500]}",
                  flush=True)
        try:
            import cupy

            cu = src.replace("__kernel", 'extern "C" __global__').replace("__global ", "") \
                .replace("get_local_id(0)", "threadIdx.x") \
                .replace("inline double", "__device__ inline double")
            fn = cupy.RawKernel(cu, "one_warp")
            ga, gb, gc = (cupy.asarray(x) for x in (a, b, c))
            gd = cupy.empty((shape.m, 8))
            fn((1,), (32,), (ga, gb, gc, gd))
            print(f"cuda fl_dmma_{name}: max abs err {float(abs(gd.get() - want).max()):.2e}",
                  flush=True)
        except Exception as exc:
            print(f"cuda fl_dmma_{name} FAILED: {type(exc).__name__}: {str(exc)[:800]}",
                  flush=True)


def _source_has_dmma(expr: Any, recipe: Any) -> str:
    from fuseloop.lower import codegen

    try:
        with fl.recipes.use(recipe):
            low = fl.program(expr).lower(fl.get_device())
        with codegen.loopy_section():
            src = codegen.generate(low.t_unit, low.device).source
        found = re.search(r"fl_dmma_(m\w+)\(", src)
        return f"dmma {found.group(1)}" if found else "fma tiles"
    except Exception as exc:
        return f"source? {type(exc).__name__}: {str(exc)[:200]}"


def check_results() -> None:
    dev = fl.get_device()
    print(f"device {dev.name} ({dev.platform}, {dev.backend}): capability "
          f"{dm.nvidia_capability(dev)}", flush=True)
    rng = np.random.default_rng(3)
    cases = [
        ("300x200 @ 200x260", [(300, 200), (200, 260)], lambda x: x[0] @ x[1]),
        ("1024^3", [(1024, 1024), (1024, 1024)], lambda x: x[0] @ x[1]),
        ("batch 3 x 130x70 @ 70x90", [(3, 130, 70), (3, 70, 90)], lambda x: x[0] @ x[1]),
        ("A.T @ B 517x333, 517x301", [(517, 333), (517, 301)], lambda x: x[0].T @ x[1]),
        ("A @ B.T 333x517, 301x517", [(333, 517), (301, 517)], lambda x: x[0] @ x[1].T),
        ("gemm 1.5 A@B + 1.2 C 700", [(700, 650), (650, 720), (700, 720)],
         lambda x: 1.5 * x[0] @ x[1] + 1.2 * x[2]),
        ("exp(A) @ B 256x100x200", [(256, 100), (100, 200)], lambda x: _exp(x[0]) @ x[1]),
    ]
    for name, shapes, fn in cases:
        host = [rng.random(s) - 0.5 for s in shapes]
        want = fn([np.asarray(h) for h in host]) if "exp" not in name else \
            np.exp(host[0]) @ host[1]
        try:
            start = time.perf_counter()
            arrs = [fl.asarray(h) for h in host]
            got = fn(arrs)
            kind = _source_has_dmma(got, rc.gpu_tiled)
            got = got.get()
            err = float(np.abs(got - want).max() / np.abs(want).max())
            print(f"  {name:28s} rel.err {err:.1e}  ({kind}, {time.perf_counter() - start:.1f}"
                  " s)", flush=True)
        except Exception as exc:
            print(f"  {name:28s} FAILED {type(exc).__name__}: {str(exc)[:1500]}", flush=True)


def _exp(x: Any) -> Any:
    return fl.exp(x)


def _registers(expr: Any, recipe: Any) -> str:
    """Registers and spills of ``expr``'s kernel (NVIDIA's OpenCL build log)."""
    import pyopencl as cl

    try:
        with fl.recipes.use(recipe):
            src = fl.show_code(expr)
        dev = fl.get_device()
        prg = cl.Program(dev.context, src).build(options=["-cl-nv-verbose"])
        log = prg.get_build_info(dev.cl_device, cl.program_build_info.LOG)
    except Exception as exc:
        return f"regs? {type(exc).__name__}"
    regs = re.findall(r"Used (\d+) registers", log)
    spill = re.findall(r"(\d+) bytes spill stores", log)
    return f"{regs[-1] if regs else '?'} regs, {spill[-1] if spill else '?'} B spilled"


#: --configs final: the candidates for the default blocks
FINAL = (dm.DmmaTiles(128, 128, 8, 64, 32, 2, "m16n8k8"),
         dm.DmmaTiles(128, 128, 8, 64, 32, 2, "m16n8k4"),
         dm.DmmaTiles(128, 128, 8, 32, 32, 2, "m16n8k8"),
         dm.DmmaTiles(128, 64, 8, 32, 32, 2, "m16n8k8"),
         dm.DmmaTiles(64, 64, 16, 32, 32, 2, "m16n8k16"))


def _row_cases(parts: bool) -> list[Case]:
    """Bare products at 4096^3 and NPBench gemm's M sizes; with ``parts``, gemm's
    statement piece by piece (the scaled operand, the epilogue, in place)."""
    shapes = {"4096^3": (4096, 4096, 4096), "gemm M": (2500, 3000, 2750)}
    out = [Case(label, [(m, k), (k, n)], lambda x, swap: x[0] @ x[1], 2.0 * m * n * k)
           for label, (m, k, n) in shapes.items()]
    if not parts:
        return out
    m, k, n = shapes["gemm M"]

    def inplace(x: list[Any], swap: Any) -> Any:
        x[2][:] = x[0] @ x[1] + x[2]
        return x[2]

    two = [(m, k), (k, n)]
    return [*out,
            Case("1.5 A@B", two, lambda x, swap: 1.5 * x[0] @ x[1], 2.0 * m * n * k),
            Case("A@B + C", [*two, (m, n)], lambda x, swap: x[0] @ x[1] + x[2],
                 2.0 * m * n * k),
            Case("C=A@B+C", [*two, (m, n)], inplace, 2.0 * m * n * k, inplace=2)]


def timings(repeat: int, configs: str, npbench: bool, parts: bool) -> None:
    peers = _peers()
    cupy = {k: v for k, v in peers.items() if k == "cupy"}
    tiles = {"all": dm.DMMA_SEARCH, "final": FINAL}.get(configs, (dm.DMMA_TILES,))
    recipes = {"fma tiles (dmma=False)": rc.gpu_tiled.with_params(dmma=False)}
    recipes |= {f"dmma {tuple(t)}": rc.gpu_tiled.with_params(dmma_tiles=t) for t in tiles}
    cases = _row_cases(parts)
    if npbench:  # (NPBench's M presets as matmul_dtype_probe writes them)
        cases += [c for c in _cases(Path(".npbench")) if c.name in ("gemm", "2mm", "syrk",
                                                                    "atb", "abt")]
    for case in cases:
        label = case.name
        host = _host(case, np.dtype(np.float64), seed=5)
        ref = case.run([h.copy() for h in host], lambda v: np.swapaxes(v, -1, -2))
        rows = []
        for name, (_, asarray, swap, sync) in cupy.items():
            rows.append((name, _time(case, [asarray(h) for h in host], swap, sync, repeat), ""))
        for name, recipe in recipes.items():
            if configs == "all" and label not in ("4096^3", "gemm M") \
                    and name.startswith("dmma") and recipe.values["dmma_tiles"] != dm.DMMA_TILES:
                continue  # (NPBench's cases: the default blocks only)
            t, note = _fuseloop_row(case, host, ref, recipe, repeat, False)
            if name.startswith("dmma") and case.inplace is None and t is not None \
                    and label != "2mm":
                fswap = lambda v: fl.swapaxes(v, -1, -2)  # noqa: E731
                note += ", " + _registers(case.run([fl.asarray(h) for h in host], fswap),
                                          recipe)
            rows.append((name, t, note))
        base = rows[0][1] if rows and rows[0][0] == "cupy" else None
        for name, t, note in rows:
            if t is None:
                print(f"{label:8s} {name:36s} failed  {note}", flush=True)
                continue
            ratio = f"{base / t:6.2f}" if base else ""
            print(f"{label:8s} {name:36s} {t * 1e3:8.2f} ms {case.flops / t / 1e12:6.2f} "
                  f"TFLOP/s cupy/x {ratio}  {note}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--skip-check", action="store_true")
    p.add_argument("--configs", default="all")
    p.add_argument("--npbench", action="store_true", help="and NPBench's product cases")
    p.add_argument("--parts", action="store_true", help="and gemm's statement in pieces")
    args = p.parse_args()
    start = time.perf_counter()
    if not args.skip_check:
        check_alone()
        check_results()
    timings(args.repeat, args.configs, args.npbench, args.parts)
    print(f"probe time {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
