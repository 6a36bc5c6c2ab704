"""What NVIDIA's OpenCL compiler makes of the GPU rows recipe's kernels: PTX counts and
warm time per case, to compare two checkouts (run this file from each).

Cases: row sums, row maxima and softmax of float32 rows (``--rows`` x ``--cols``, and
a short-row shape), whose work-groups combine their partials in two loops of fixed
trip count (``recipes/transforms.combine_in_group``): written out statement by
statement by Loopy, or left to the device compiler to unroll (``#pragma unroll``).
After unrolling they should be the same machine code: the same counts (PTX
instructions, FMAs/adds, shared loads, branches, registers).  Per case: the counts
of the kernel's PTX (the last kernel the case builds), Loopy's code generation CPU
seconds (a new process per checkout has empty caches only if ``FUSELOOP_CACHE_DIR`` is
new) and the median warm time.  On a device other than NVIDIA's OpenCL the counts
print as "-".  Timings are reported, never asserted.

Usage::

    FUSELOOP_CACHE_DIR=$(mktemp -d) python benchmarks/probes/gpu_rows_ptx.py \\
        [--rows 16384] [--cols 8192]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import fuseloop as fl
from fuseloop.bench.runner import median_time


def _counts(src: str) -> str:
    import pyopencl as cl

    dev = fl.get_device()
    if "nvidia" not in dev.platform.lower():
        return "-"
    prg = cl.Program(dev.context, src).build(options=["-cl-nv-verbose"])
    ptx = prg.get_info(cl.program_info.BINARIES)[0].decode(errors="replace")
    log = prg.get_build_info(dev.cl_device, cl.program_build_info.LOG)
    insns = [ln.strip() for ln in ptx.splitlines()]
    insns = [ln for ln in insns if ln and not ln.startswith(("//", ".", "{", "}", "$"))]

    def count(*prefixes: str) -> int:
        return sum(ln.startswith(prefixes) for ln in insns)

    regs = re.findall(r"Used (\d+) registers", log)
    return (f"{len(insns)} PTX instructions, add/max/fma {count('add.f32', 'max.f32', 'fma')}, "
            f"ld.shared {count('ld.shared')}, bra {count('bra', '@')}, "
            f"{regs[-1] if regs else '?'} registers")


def _cases(rows: int, cols: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    a = fl.asarray(rng.random((rows, cols), dtype=np.float32))
    short = fl.asarray(rng.random((rows * 8, 300), dtype=np.float32))

    def softmax(x: Any) -> Any:
        e = fl.exp(x - fl.max(x, axis=1)[:, None])
        return e / fl.sum(e, axis=1)[:, None]

    return {"sum rows": lambda: fl.sum(a, axis=1), "max rows": lambda: fl.max(a, axis=1),
            "softmax": lambda: softmax(a), "sum rows of 300": lambda: fl.sum(short, axis=1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--cols", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    from fuseloop.lower import codegen

    spent = [0.0]
    generate = codegen.generate

    def timed(*a: Any, **k: Any) -> Any:
        t0 = time.process_time()
        try:
            return generate(*a, **k)
        finally:
            spent[0] += time.process_time() - t0

    codegen.generate = timed  # type: ignore[assignment]
    print(f"device: {fl.get_device().name}")
    for name, make in _cases(args.rows, args.cols).items():
        spent[0] = 0.0
        src = fl.show_code(make())
        make().eval()
        fl.synchronize()
        t = median_time(lambda make=make: make().eval(), fl.synchronize, args.repeat, warmup=3)
        last = re.split(r"/\* kernel \d+ of \d+ \*/\n", src)[-1]  # (fl.show_code's parts)
        print(f"{name:16s} codegen {spent[0]:.2f} CPU s, warm {t * 1e3:.3f} ms, "
              f"PTX: {_counts(last)}", flush=True)


if __name__ == "__main__":
    main()
