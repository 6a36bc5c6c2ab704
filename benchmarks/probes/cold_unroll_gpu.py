"""Elements of a GPU work-item unrolled by Loopy or by the device compiler: cold cost and speed.

``gpu-coalesced`` gives each work-item several elements (``items``), their loads first,
as copies of each statement made by Loopy (``unr``): Loopy's code generation and the
driver's build grow with the copies.  The variant ``hint`` is the same recipe with
those loops tagged ``unr_hint`` (one statement in a loop under ``#pragma unroll``, the
device compiler unrolls it).  Per expression and variant, in one process (the driver
started, so builds are not a process's first): Loopy's code generation (CPU s, the
faster of two), the driver's build of the source (wall s, made unique so no driver cache
answers; the faster of two), the kernel's time as a fraction of the buffer copy's
bandwidth at ``--size`` elements (float32), and whether the result matches numpy.
Timings are printed, never asserted.

Usage::

    python benchmarks/probes/cold_unroll_gpu.py [--size LOG2]

Expressions: ``demo`` (``2*x - sin(y) + x*y``), ``axpy`` (``2*x + y``), ``poly8`` (a
degree-8 polynomial of ``x``, Horner), ``rep3`` (``r = sin(r)*0.5 + r*y``, 3 times).
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import Any

os.environ.setdefault("FUSELOOP_PROGRESS", "0")

import loopy as lp
import numpy as np
import pyopencl as cl

import fuseloop as fl
from fuseloop.bench.runner import copy_bandwidth, median_time
from fuseloop.lower import codegen
from fuseloop.recipes import elementwise
from fuseloop.recipes.core import Recipe


def _hinted(t_unit: Any, device: Any) -> Any:
    """``gpu-coalesced`` with its Loopy unrolls (``unr``) left to the device compiler."""
    split, tag = lp.split_iname, lp.tag_inames

    def hint(value: Any) -> Any:
        return "unr_hint" if value == "unr" else value

    def split_hinted(*args: Any, **kwargs: Any) -> Any:
        for key in ("outer_tag", "inner_tag"):
            kwargs[key] = hint(kwargs.get(key))
        return split(*args, **kwargs)

    def tag_hinted(t: Any, tags: Any, *args: Any, **kwargs: Any) -> Any:
        return tag(t, {n: hint(v) for n, v in dict(tags).items()}, *args, **kwargs)

    lp.split_iname, lp.tag_inames = split_hinted, tag_hinted
    try:
        return elementwise._gpu_coalesced(t_unit, device, group=elementwise.GPU_GROUP_SIZE,
                                          items=None, tile=False)
    finally:
        lp.split_iname, lp.tag_inames = split, tag


VARIANTS = {"unr": elementwise.gpu_coalesced,
            "hint": Recipe("probe-gpu-coalesced-hint", _hinted)}


def _expressions(x: Any, y: Any, lib: Any) -> dict[str, Any]:
    poly = x * 0 + 0.5
    for k in range(8):
        poly = poly * x + (k + 1) * 0.1
    rep = x
    for _ in range(3):
        rep = lib.sin(rep) * 0.5 + rep * y
    return {"demo": 2 * x - lib.sin(y) + x * y, "axpy": 2 * x + y, "poly8": poly, "rep3": rep}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=26, help="log2 of the element count")
    n = 1 << parser.parse_args().size
    device = fl.get_device()
    rng = np.random.default_rng(0)
    xh, yh = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32) + 0.5
    x, y = fl.asarray(xh), fl.asarray(yh)
    copy = copy_bandwidth(4 * n, 20)
    print(f"{device.name}: 2^{n.bit_length() - 1} float32, buffer copy {copy:.0f} GB/s")
    want = _expressions(xh.astype(np.float64), yh.astype(np.float64), np)
    for name in want:
        for variant, recipe in VARIANTS.items():
            with fl.recipes.use(recipe):
                print(f"{name} {variant}: " + _measure(name, x, y, want[name], device, n, copy),
                      flush=True)


def _measure(name: str, x: Any, y: Any, want: np.ndarray, device: Any, n: int,
             copy: float) -> str:
    gens, builds = [], []
    for _ in range(2):
        lowered = fl.program(_expressions(x, y, fl)[name]).lower(device)
        with codegen.loopy_section(), codegen._without_loopy_caches():  # (Loopy's own too)
            start = time.process_time()
            plan = codegen.generate(lowered.t_unit, lowered.device)
            gens.append(time.process_time() - start)
        nonce = f"\n__kernel void n{uuid.uuid4().hex}(__global int *p) {{ p[0] = 1; }}\n"
        start = time.perf_counter()
        cl.Program(device.context, plan.source + nonce).build(
            options=list(plan.build_options), devices=[device.cl_device])
        builds.append(time.perf_counter() - start)
    expr = _expressions(x, y, fl)[name]
    got = expr.get()
    ok = np.allclose(got, want, rtol=2e-5, atol=1e-5)
    arrays = 3 if name in ("demo", "axpy", "rep3") else 2

    def run() -> None:
        _expressions(x, y, fl)[name].eval()

    seconds = median_time(run, fl.synchronize, 20, warmup=2)
    bandwidth = arrays * 4 * n / seconds / 1e9
    return (f"code generation {min(gens):.3f} CPU s ({plan.source.count(chr(10))} lines), "
            f"build {min(builds):.3f} s, kernel {seconds * 1e6:.0f} us = "
            f"{bandwidth / copy:.0%} of copy, {'matches' if ok else 'DIFFERS from'} numpy")


if __name__ == "__main__":
    main()
