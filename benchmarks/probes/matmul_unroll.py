"""Who unrolls the GPU matmul's register tile (``TileConfig.reg_loops``): cold build and
warm speed of each setting in one table (issue 26).

``"loopy"`` (the default): Loopy writes one statement per register (64 products for the
8 x 8 tile, 88 statements with the fill); ``"vector"``: Loopy writes a float4's four
components, the device compiler unrolls the rest (``#pragma unroll``; 16 products);
``"device"``: every register loop is left to the device compiler (one product
statement, the float4 component selected by its index).  After the device compiler
unrolls, the three should be the same machine code; Loopy's code generation time
grows with the statements.

Per setting: the cold first result of ``A @ B`` (``--cold-n``, default ``--n``) in new
processes with every cache empty, built inline (``cold_compile.py``'s machinery: the
process's CPU time includes the OpenCL driver's compiler), ``--rounds`` times,
settings alternating; then, in this process, the warm time of float32 ``A @ B``,
``A.T @ B``, ``A @ B.T`` (n x n, default 4096) against torch (TF32 off) on a CUDA
GPU, else numpy.  Every result is checked against the peer's (relative error).
On NVIDIA's OpenCL, a line per setting counts what its ``A @ B`` kernel's PTX holds
(instructions, FMAs, 16-byte shared loads, local-memory traffic, branches, registers):
the same machine code after unrolling shows as the same counts.  ``--clang clang-15``
does only that, on any machine: each setting's source for a fake H100 through clang's
NVPTX back end (LLVM, as NVIDIA's OpenCL compiler is; not the same compiler).
The recipe is forced with ``fl.recipes.use`` (``gpu-tiled`` on any device: on a CPU
this times PoCL running the GPU recipe, a smoke test).

Usage::

    python benchmarks/probes/matmul_unroll.py [--n 4096] [--cold-n N]
        [--rounds 2] [--repeat 10] [--settings loopy,vector,device] [--clang CLANG]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("FUSELOOP_PROGRESS", "0")  # (no build notices inside the table)
# (this checkout's fuseloop, which the cold processes import too, not an installed one)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import fuseloop as fl
from fuseloop.bench.runner import median_time
from fuseloop.recipes import contraction as rc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cold_compile

ROOT = Path(__file__).resolve().parents[2]
FORMS = (("A @ B", "ab"), ("A.T @ B", "atb"), ("A @ B.T", "abt"))
#: (the block is kept open for the process: a reference held, else its collection
#: would close it)
_SETUP = ("from fuseloop.recipes import contraction as rc\n"
          "_use = fl.recipes.use(rc.gpu_tiled.with_params(tiles=rc.GPU_TILES._replace("
          "reg_loops={!r})))\n_use.__enter__()")


def _recipe(setting: str) -> Any:
    return rc.gpu_tiled.with_params(tiles=rc.GPU_TILES._replace(reg_loops=setting))


def _product(a: Any, b: Any, form: str, swap: Any) -> Any:
    if form == "atb":
        return swap(a) @ b
    if form == "abt":
        return a @ swap(b)
    return a @ b


def _evaluate(a: Any, b: Any, form: str, swap: Any) -> None:
    _product(a, b, form, swap).eval()


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return torch


def _cold(setting: str, n: int) -> dict[str, float]:
    """First result (wall s, CPU s), Loopy's code generation and the OpenCL build (CPU s)
    of one cold process."""
    line = cold_compile._run(f"matmul{n}", str(ROOT), "inline", False,
                             _SETUP.format(setting))[0]
    got: dict[str, float] = {}
    m = re.search(r"first result ([\d.]+) s \(([\d.]+) CPU\)", line)
    if m is None:
        print(f"cold {setting}: {line}", file=sys.stderr)
        return got
    got["wall"], got["cpu"] = float(m.group(1)), float(m.group(2))
    for key, label in (("codegen", "Loopy codegen"), ("build", "OpenCL build"),
                       ("recipe", "recipe")):
        m = re.search(rf"{label} ([\d.]+)", line)
        if m:
            got[key] = float(m.group(1))
    return got


def _machine_code(setting: str, a: Any, b: Any) -> str:
    """Counts in the PTX of the ``A @ B`` kernel as NVIDIA's OpenCL builds it (its program
    binary; ``-cl-nv-verbose`` for the registers): the same machine code for every
    setting shows as the same counts.  Elsewhere, "-"."""
    import pyopencl as cl

    dev = fl.get_device()
    with fl.recipes.use(_recipe(setting)):
        src = fl.show_code(a @ b)
    if "nvidia" not in dev.platform.lower():
        return "-"
    try:
        prg = cl.Program(dev.context, src).build(options=["-cl-nv-verbose"])
        ptx = prg.get_info(cl.program_info.BINARIES)[0].decode(errors="replace")
        log = prg.get_build_info(dev.cl_device, cl.program_build_info.LOG)
    except Exception as exc:  # (reported, not fatal)
        return f"build failed: {type(exc).__name__}"
    regs = re.findall(r"Used (\d+) registers", log)
    return _ptx_counts(ptx) + f", {regs[-1] if regs else '?'} registers"


def _ptx_counts(ptx: str) -> str:
    lines = [ln.strip() for ln in ptx.splitlines()]
    insns = [ln for ln in lines if ln and not ln.startswith(("//", ".", "{", "}", "$"))]

    def count(prefix: str) -> int:
        return sum(ln.startswith(prefix) for ln in insns)

    return (f"{len(insns)} PTX instructions, fma {count('fma.rn.f32')}, ld.shared.v4 "
            f"{count('ld.shared.v4')}, ld.shared {count('ld.shared.f32')}, local ld/st "
            f"{count('ld.local') + count('st.local')}, bra {count('bra') + count('@')}")


def _clang(settings: list[str], n: int, clang: str) -> None:
    """Each setting's ``A @ B`` source for a fake H100 (no GPU needed) through clang's NVPTX
    back end (``-O3``, LLVM like NVIDIA's OpenCL compiler, not the same one): the counts of
    :func:`_ptx_counts`, and whether the loops were unrolled in full (512 FMAs per step of
    8 at 8 x 8 outputs per work-item)."""
    import dataclasses
    import tempfile

    from fuseloop.lower import codegen

    dev = fl.get_device()
    fake = dataclasses.replace(dev, index=9133, type="gpu", compute_units=132,
                               name="NVIDIA H100 80GB HBM3", vendor="NVIDIA Corporation",
                               platform="NVIDIA CUDA", max_work_group_size=1024)
    a = fl.empty((n, n), dtype=np.float32, device=dev)
    with tempfile.TemporaryDirectory() as tmp:
        for s in settings:
            with fl.recipes.use(_recipe(s)):
                low = fl.program(a @ a).lower(fake)
            with codegen.loopy_section():
                src = codegen.generate(low.t_unit, low.device).source
            Path(f"{tmp}/{s}.cl").write_text(src)
            out = subprocess.run([clang, "-x", "cl", "-cl-std=CL1.2", "-target",
                                  "nvptx64-nvidia-nvcl", "-O3", "-S", "-Xclang",
                                  "-finclude-default-header", "-o", f"{tmp}/{s}.ptx",
                                  f"{tmp}/{s}.cl"], capture_output=True, text=True)
            got = (_ptx_counts(Path(f"{tmp}/{s}.ptx").read_text()) if out.returncode == 0
                   else f"clang failed: {out.stderr.strip()[-200:]}")
            print(f"{s:18s} A @ B kernel ({clang}, nvptx64, -O3): {got}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--cold-n", type=int, default=0, help="cold case's size (default: --n)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--settings", default=",".join(rc.REG_LOOPS))
    p.add_argument("--clang", default=None, metavar="CLANG",
                   help="only compile each setting's kernel for a fake H100 with this clang's "
                   "NVPTX back end and count its PTX (no GPU needed)")
    args = p.parse_args(argv)
    settings = args.settings.split(",")
    n, cold_n = args.n, args.cold_n or args.n
    if args.clang:
        _clang(settings, n, args.clang)
        return 0
    # byte-compiled first, as cold_compile.py does (no source compilation in the cases)
    subprocess.run([sys.executable, "-m", "compileall", "-q", f"{ROOT}/fuseloop"], check=True,
                   stdout=subprocess.DEVNULL)
    colds: dict[str, list[dict[str, float]]] = {s: [] for s in settings}
    for _ in range(args.rounds):
        for s in settings:  # (alternating: the machine's load hits all alike)
            colds[s].append(_cold(s, cold_n))
    dev = fl.get_device()
    torch = _torch()
    peer_name = "torch (TF32 off)" if torch is not None else "numpy"
    rng = np.random.default_rng(7)
    ah = rng.random((n, n), dtype=np.float32) - 0.5
    bh = rng.random((n, n), dtype=np.float32) - 0.5
    flops = 2.0 * n ** 3
    warm: dict[str, list[str]] = {s: [] for s in [*settings, peer_name]}
    a, b = fl.asarray(ah), fl.asarray(bh)
    fswap = lambda x: fl.swapaxes(x, -1, -2)  # noqa: E731
    for _, form in FORMS:
        if torch is not None:
            at, bt = torch.from_numpy(ah).cuda(), torch.from_numpy(bh).cuda()
            tswap = lambda x: x.transpose(-1, -2)  # noqa: E731
            ref = _product(at, bt, form, tswap).double().cpu().numpy()
            t = median_time(partial(_product, at, bt, form, tswap), torch.cuda.synchronize,
                            args.repeat, warmup=2)
        else:
            nswap = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
            ref = _product(ah.astype(np.float64), bh.astype(np.float64), form, nswap)
            t = median_time(partial(_product, ah, bh, form, nswap), lambda: None,
                            args.repeat, warmup=1)
        warm[peer_name].append(f"{flops / t / 1e12:.3g}")
        for s in settings:
            try:
                with fl.recipes.use(_recipe(s)):
                    got = _product(a, b, form, fswap).get()
                    err = float(np.abs(got - ref).max() / np.abs(ref).max())
                    t = median_time(partial(_evaluate, a, b, form, fswap),
                                    fl.synchronize, args.repeat, warmup=2)
                warm[s].append(f"{flops / t / 1e12:.3g}"
                               + (f" (err {err:.0e})" if err > 1e-4 else ""))
            except Exception as exc:  # a setting that fails is reported, not fatal
                warm[s].append(f"failed: {type(exc).__name__}"[:24])
    print(f"device: {dev.name} ({dev.platform}); cold: matmul {cold_n}, {args.rounds} "
          f"process(es) per setting, median; warm: {n} x {n} float32, TFLOP/s, median of "
          f"{args.repeat}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'reg_loops':18s} {'cold s':>7s} {'CPU s':>6s} {'codegen':>8s} {'build':>6s}  "
          + "  ".join(f"{name:>14s}" for name, _ in FORMS))
    for s in [*settings, peer_name]:
        runs = colds.get(s, [])

        def med(key: str, runs: list[dict[str, float]] = runs) -> str:
            vals = [r[key] for r in runs if key in r]
            return f"{float(np.median(vals)):.2f}" if vals else "-"

        print(f"{s:18s} {med('wall'):>7s} {med('cpu'):>6s} {med('codegen'):>8s} "
              f"{med('build'):>6s}  " + "  ".join(f"{v:>14s}" for v in warm[s]), flush=True)
    for s in settings:  # (the device compiler's output: the same after it unrolls?)
        print(f"{s:18s} A @ B kernel: {_machine_code(s, a, b)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
