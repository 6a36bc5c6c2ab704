"""Registers, spills and local memory of the hand-written linalg kernels as ptxas
builds them for an H100 (sm_90), through NVRTC with ``--ptxas-options=-v``: no GPU
needed, only CuPy's NVRTC.  ``fuseloop_tslu_rows`` keeps its row in registers only if
the column loop unrolls (0 bytes of stack); a group of 512 needs at most 128 registers.

``fuseloop_gemm_update`` (float32, 128 x 128 tiles by 256 work-items) must stay at 128
registers or fewer for two groups per SM: its inner step of 8 does (steps of 16 took
167-179), and unrolling its inner loop fully takes 143.

Usage: ``PYTHONPATH=. python benchmarks/probes/linalg_registers.py [--arch 90]
[--nvrtc=--maxrregcount=128]``
"""

from __future__ import annotations

import argparse

import numpy as np

from fuseloop import linalg_kernels

#: (kernel, element type, work-items, block, vectors per group) as an H100 builds them
CASES = [
    ("fuseloop_tslu_rows", np.float32, 512, 64, 4),
    ("fuseloop_tslu_rows", np.float64, 512, 32, 4),
    ("fuseloop_tslu", np.float32, 512, 64, 4),
    ("fuseloop_trsm_blocks", np.float32, 256, 64, 64),
    ("fuseloop_trsv_blocks", np.float32, 64, 64, 4),
    ("fuseloop_rowperm", np.float32, 64, 64, 4),
    ("fuseloop_potrf", np.float32, 256, 64, 4),
    # (NB: the tile; see fuseloop.linalg_gemm.gemm_tiling)
    ("fuseloop_gemm_update", np.float32, 256, 128, 4),
    ("fuseloop_gemm_update", np.float32, 256, 128, 1),  # (c element by element)
    ("fuseloop_gemm_update", np.float32, 64, 64, 4),
    ("fuseloop_gemm_update", np.float64, 256, 64, 4),
    ("fuseloop_gemm_update", np.float64, 64, 32, 4),
]


def ptxas_report(name: str, dtype: type, wg: int, nb: int, vpg: int, arch: str,
                 extra: tuple[str, ...] = ()) -> str:
    from fuseloop.backends import cuda

    nvrtc = cuda._nvrtc
    plan = linalg_kernels._kernel(name, np.dtype(dtype), wg, nb, vpg).plan
    flags = [f"--gpu-architecture=sm_{arch}", "--device-as-default-execution-space",
             *plan.build_options, "--ptxas-options=-v", *extra]
    program = nvrtc.createProgram(cuda.PRELUDE + plan.source, "fuseloop.cu", (), ())
    try:
        nvrtc.compileProgram(program, flags)
        log = nvrtc.getProgramLog(program)
    finally:
        nvrtc.destroyProgram(program)
    text = log.decode() if isinstance(log, bytes) else str(log)
    keep = [line.split(":", 1)[-1].strip(" .") if "info" in line else
            line.replace("ptxas", "").strip(" .") for line in text.splitlines()
            if "registers" in line or "spill" in line]
    return "; ".join(keep)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="90")
    ap.add_argument("--nvrtc", nargs="*", default=[],
                    help="more NVRTC options, e.g. --maxrregcount=128 (what a cap would spill)")
    args = ap.parse_args()
    for name, dtype, wg, nb, vpg in CASES:
        print(f"{name:22s} {np.dtype(dtype).name:8s} WG={wg:<4d} NB={nb:<3d} VPG={vpg:<3d} "
              f"{ptxas_report(name, dtype, wg, nb, vpg, args.arch, tuple(args.nvrtc))}")


if __name__ == "__main__":
    main()
