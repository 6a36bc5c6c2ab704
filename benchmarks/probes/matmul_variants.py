"""The GPU matmul recipe's variants against cuBLAS, in one run (issue 25).

Times float32 ``A @ B``, ``A.T @ B``, ``A @ B.T`` (n x n, default 4096) and a batch
``A @ B`` (``--batch`` x ``--bn``^3, default 16 x 1024^3) with fuseloop's
``gpu-tiled`` recipe under several tile configurations (``TileConfig``: ``vec`` =
float4 reads of the local tiles, ``prefetch`` = the next step read into registers
before the products, ``"double"`` = two copies of the tiles and one barrier per
step, ``unroll`` = the step's loop unrolled that many at a time, 0 whole;
``max_registers`` = NVIDIA's ``-cl-nv-maxrregcount``), and the
same products with torch (TF32 off) and cupy (cuBLAS).  Prints one table:
milliseconds, TFLOP/s and the fraction of the best cuBLAS figure of the row's case;
every fuseloop result is checked against torch's (relative error).

``--regs`` adds the registers each variant's kernel takes (NVIDIA's OpenCL build log
with ``-cl-nv-verbose``: two groups of 256 per SM need at most 128).

Usage::

    PYTHONPATH=. python benchmarks/probes/matmul_variants.py [--n 4096] [--batch 16]
        [--bn 1024] [--repeat 10] [--variants default,plain,...] [--regs] [--dump DIR]
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import median_time
from fuseloop.recipes import contraction as rc

T = rc.TileConfig
#: name -> tiles (None: the recipe's default, whatever it is)
VARIANTS: dict[str, Any] = {
    "default": None,
    "plain": rc.GPU_TILES_PLAIN,  # one copy, scalar reads (the recipe before issue 25's work)
    "vec": T(layout="blocked", vec=True),
    "regs": T(layout="blocked", prefetch="regs"),
    "vec+regs": T(layout="blocked", vec=True, prefetch="regs"),
    "double": T(layout="blocked", prefetch="double"),
    "vec+double": T(layout="blocked", vec=True, prefetch="double"),
    "vec+double unroll 4": T(layout="blocked", vec=True, prefetch="double", unroll=4),
    "vec+regs unroll 4": T(layout="blocked", vec=True, prefetch="regs", unroll=4),
    "plain unroll 4": T(layout="blocked", unroll=4),
    # (-cl-nv-maxrregcount: two groups of 256 per SM; spills show in --regs)
    "vec+double max 128 regs": T(layout="blocked", vec=True, prefetch="double",
                                 max_registers=128),
    "vec+double unroll 4 max 128": T(layout="blocked", vec=True, prefetch="double", unroll=4,
                                     max_registers=128),
    "64x64 vec+double": T(64, 64, 8, 16, 16, "blocked", vec=True, prefetch="double"),
    "128x64 vec+double": T(128, 64, 8, 16, 16, "blocked", vec=True, prefetch="double"),
}


def _peers() -> tuple[Any, Any]:
    torch = cupy = None
    try:
        import torch as torch_mod

        torch_mod.backends.cuda.matmul.allow_tf32 = False
        torch_mod.backends.cudnn.allow_tf32 = False
        torch_mod.set_float32_matmul_precision("highest")
        torch = torch_mod if torch_mod.cuda.is_available() else None
    except Exception:
        pass
    try:
        import cupy as cupy_mod

        cupy = cupy_mod if cupy_mod.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:
        pass
    return torch, cupy


def _cases(n: int, batch: int, bn: int) -> list[tuple[str, tuple[int, ...], tuple[int, ...],
                                                       str, float]]:
    """(name, shape of a, shape of b, form, flops): form says which operand is used
    transposed (a's and b's arrays are stored as given)."""
    return [("A @ B", (n, n), (n, n), "ab", 2.0 * n ** 3),
            ("A.T @ B", (n, n), (n, n), "atb", 2.0 * n ** 3),
            ("A @ B.T", (n, n), (n, n), "abt", 2.0 * n ** 3),
            (f"{batch} x A @ B ({bn})", (batch, bn, bn), (batch, bn, bn), "ab",
             2.0 * batch * bn ** 3)]


def _product(a: Any, b: Any, form: str, swap: Callable[[Any], Any]) -> Any:
    if form == "atb":
        return swap(a) @ b
    if form == "abt":
        return a @ swap(b)
    return a @ b


def _evaluate(a: Any, b: Any, form: str, swap: Callable[[Any], Any]) -> None:
    _product(a, b, form, swap).eval()


def _registers(expr: Any, tiles: Any) -> str:
    """Registers of the kernel of ``expr`` as NVIDIA's OpenCL compiler reports them (with
    the register limit of ``tiles``, a TileConfig or None)."""
    import pyopencl as cl

    src = fl.show_code(expr)
    dev = fl.get_device()
    ctx = dev.context if hasattr(dev, "context") else cl.create_some_context()
    try:
        limit = getattr(tiles, "max_registers", 0)
        prg = cl.Program(ctx, src).build(options=[
            "-cl-nv-verbose", *([f"-cl-nv-maxrregcount={limit}"] if limit else [])])
        log = prg.get_build_info(dev.cl_device, cl.program_build_info.LOG)
    except Exception:  # (not NVIDIA's OpenCL: the option is unknown)
        return "regs ?"
    found = re.findall(r"Used (\d+) registers", log)
    return f"{found[-1]} regs" if found else "regs ?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--bn", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--cases", default="ab,atb,abt,batch",
                   help="of ab (A @ B), atb (A.T @ B), abt (A @ B.T), batch")
    p.add_argument("--regs", action="store_true")
    p.add_argument("--dump", default=None, help="a folder: each variant's kernel source")
    args = p.parse_args(argv)
    dev = fl.get_device()
    torch, cupy = _peers()
    print(f"device: {dev.name} ({dev.platform}); recipe {rc.gpu_tiled.name} "
          f"v{rc.gpu_tiled.version}; default tiles {rc.GPU_TILES}", flush=True)
    print(f"{'case':22s} {'impl':26s} {'ms':>9s} {'TFLOP/s':>8s} {'of cuBLAS':>9s}  note")
    rng = np.random.default_rng(7)
    wanted = args.cases.split(",")
    for name, sa, sb, form, flops in _cases(args.n, args.batch, args.bn):
        if ("batch" if len(sa) == 3 else form) not in wanted:
            continue
        ah = rng.random(sa, dtype=np.float32) - 0.5
        bh = rng.random(sb, dtype=np.float32) - 0.5
        rows: list[tuple[str, float | None, str]] = []
        ref = None
        if torch is not None:
            at, bt = torch.from_numpy(ah).cuda(), torch.from_numpy(bh).cuda()
            tswap = lambda x: x.transpose(-1, -2)  # noqa: E731
            ref = _product(at, bt, form, tswap).double().cpu().numpy()
            t = median_time(partial(_product, at, bt, form, tswap), torch.cuda.synchronize,
                            args.repeat, warmup=2)
            rows.append(("torch (cuBLAS, TF32 off)", t, ""))
        if cupy is not None:
            ac, bc = cupy.asarray(ah), cupy.asarray(bh)
            cswap = lambda x: cupy.swapaxes(x, -1, -2)  # noqa: E731
            t = median_time(partial(_product, ac, bc, form, cswap),
                            cupy.cuda.Device().synchronize, args.repeat, warmup=2)
            rows.append(("cupy (cuBLAS)", t, ""))
        if ref is None:
            ref = _product(ah.astype(np.float64), bh.astype(np.float64), form,
                           lambda x: np.swapaxes(x, -1, -2))
        a, b = fl.asarray(ah), fl.asarray(bh)
        fswap = lambda x: fl.swapaxes(x, -1, -2)  # noqa: E731
        for vname in args.variants.split(","):
            tiles = VARIANTS[vname]
            recipe = rc.gpu_tiled if tiles is None else rc.gpu_tiled.with_params(tiles=tiles)
            try:
                with fl.recipes.use(recipe):
                    start = time.time()
                    got = _product(a, b, form, fswap).get()
                    build = time.time() - start
                    err = float(np.abs(got - ref).max() / np.abs(ref).max())
                    t = median_time(partial(_evaluate, a, b, form, fswap),
                                    fl.synchronize, args.repeat, warmup=2)
                    note = f"rel.err {err:.1e}{' MISMATCH' if err > 1e-4 else ''}, " \
                           f"first call {build:.1f} s"
                    if args.dump:
                        import pathlib

                        folder = pathlib.Path(args.dump)
                        folder.mkdir(parents=True, exist_ok=True)
                        slug = re.sub(r"[^A-Za-z0-9]+", "_", f"{name} {vname}").strip("_")
                        (folder / f"{slug}.cl").write_text(
                            fl.show_code(_product(a, b, form, fswap)))
                    if args.regs:
                        note += ", " + _registers(_product(a, b, form, fswap), tiles)
                rows.append((f"fuseloop {vname}", t, note))
            except Exception as exc:  # a variant that fails is reported, not fatal
                rows.append((f"fuseloop {vname}", None, f"{type(exc).__name__}: {exc}"[:120]))
        peer = min((t for impl, t, _ in rows if t is not None and "cuBLAS" in impl),
                   default=None)
        for impl, t, note in rows:
            if t is None:
                print(f"{name:22s} {impl:26s} {'failed':>9s} {'':8s} {'':9s}  {note}")
                continue
            frac = f"{peer / t:9.2f}" if peer else f"{'':9s}"
            print(f"{name:22s} {impl:26s} {t * 1e3:9.3f} {flops / t / 1e12:8.2f} {frac}  {note}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
