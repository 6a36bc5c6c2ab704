"""An NPBench kernel's first call on empty caches: its seconds, kernels and each build.

What ``npbench_swap.py`` leaves out of its median (the first call compiles) and what its
``--timeout`` counts: one NPBench CuPy kernel, run with fuseloop as ``cupy`` in a new
process with empty fuseloop, Loopy (``XDG_CACHE_HOME``), PoCL and NVIDIA caches,
building inline (``FUSELOOP_COMPILE=inline``, so the process's CPU time covers the
OpenCL compiler).  Printed per run: wall and CPU seconds of the first call and of a
second one, ``fl.stats()``'s kernels lowered and compiled, and with ``--builds`` each
kernel build (Loopy's part and the driver's, CPU seconds, the kernel's name).  Timings
are reported, never asserted.

Usage::

    python benchmarks/probes/cold_npbench.py --npbench DIR [--preset M] [--root DIR ...]
                                             [--rounds R] [--builds] BENCH [BENCH ...]

``--root`` names a checkout to import fuseloop from (default: this one); with several
(e.g. exports of older commits) the runs alternate, so the machine's load hits all alike.
``--workers`` builds in compile workers, as ``npbench_swap.py`` does (the driver's CPU
time is then the workers', not in the printed CPU seconds).  ``--fake-gpu`` presents the
CPU device as a 132-unit GPU to every rule (the GPU's recipes, splits and linalg paths,
still run by PoCL; builds inline): the kernels a GPU compiles, counted on any machine.
``FUSELOOP_HOST_PATH=0`` in the environment turns the host path off, as the tests of
small work on a GPU do.

On a 2-core VM, contour_integral at preset M with the host path off (``--fake-gpu``)
lowers 14 kernels and builds 4 hand-written ones (the complex solve's LU) at 31e14fb,
950aa8a and 40d9832 alike.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import json, os, sys, time
sys.path.insert(0, sys.argv[4])
import numpy as np
import npbench_swap as ns
import fuseloop as fl
if sys.argv[6] == "1":  # (as lazy_fuse_parity.py --fake-gpu)
    import dataclasses
    fl.set_device(dataclasses.replace(fl.set_device("cpu"), index=9132, type="gpu",
                                      compute_units=132, max_work_group_size=1024))
from fuseloop import cache
from fuseloop.lower import codegen
from pathlib import Path
bench_dir, name, preset, show = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]
builds = []
def timed(module, attr, label):
    inner = getattr(module, attr)
    def wrapper(plan, *args, **kwargs):
        start = time.process_time()
        try:
            return inner(plan, *args, **kwargs)
        finally:
            builds.append((label, time.process_time() - start, getattr(plan, "name", "")))
    setattr(module, attr, wrapper)
_plan = codegen.kernel_plan
def kernel_plan(program, *args, **kwargs):
    start = time.process_time()
    plan = _plan(program, *args, **kwargs)
    sizes = args[4] if len(args) > 4 else kwargs.get("sizes", "")
    builds.append(("Loopy", time.process_time() - start,
                   f"{plan.name} ({len(program.entries)} operations) [{sizes}]"))
    return plan
codegen.kernel_plan = kernel_plan
timed(cache, "_build_source", "driver")
info = json.loads((Path(bench_dir).parents[1] / "bench_info" / f"{name}.json").read_text())
b = info["benchmark"]
folder = Path(bench_dir) / b["relative_path"]
values = ns.bench_inputs(Path(bench_dir), b, preset)
sys.modules["cupy"] = ns._FuseloopAsCupy()
kernel = getattr(ns._load(folder / f"{b['module_name']}_cupy.py", "k"), b["func_name"])
lines = []
for call in ("first", "second"):
    args = dict(values)
    for a in b["array_args"]:
        args[a] = fl.asarray(np.copy(values[a]))
    c0, t0 = os.times(), time.perf_counter()
    ns._force(kernel(*[args[a] for a in b["input_args"]]))
    c1, t1 = os.times(), time.perf_counter()
    s = fl.stats()
    lines.append(f"{call} call {t1 - t0:.2f} s ({c1.user + c1.system - c0.user - c0.system:.2f}"
                 f" CPU), kernels lowered {s['kernels_lowered']}, compiled "
                 f"{s['kernels_compiled']}")
print(name, "; ".join(lines))
if show != "0":
    for label, seconds, what in builds:
        print(f"    {label:6s} {seconds:6.2f} {what}")
    loopy = sum(s for k, s, _ in builds if k == "Loopy")
    driver = sum(s for k, s, _ in builds if k == "driver")
    print(f"    builds: Loopy {loopy:.2f} CPU s, driver {driver:.2f} CPU s")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--npbench", type=Path, required=True)
    parser.add_argument("--preset", default="M")
    parser.add_argument("--root", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--builds", action="store_true")
    parser.add_argument("--workers", action="store_true")
    parser.add_argument("--fake-gpu", action="store_true")
    parser.add_argument("benchmarks", nargs="+")
    args = parser.parse_args()
    roots = [str(Path(r).resolve()) for r in args.root] or [str(ROOT)]
    bench_dir = args.npbench.resolve() / "npbench" / "benchmarks"
    for name in args.benchmarks:
        for _ in range(args.rounds):
            for root in roots:
                with tempfile.TemporaryDirectory() as tmp:
                    env = dict(os.environ, FUSELOOP_CACHE_DIR=f"{tmp}/fl",
                               XDG_CACHE_HOME=f"{tmp}/xdg", POCL_CACHE_DIR=f"{tmp}/pocl",
                               CUDA_CACHE_PATH=f"{tmp}/nv",
                               FUSELOOP_COMPILE="process" if args.workers and not args.fake_gpu
                               else "inline",
                               FUSELOOP_PROGRESS="0",
                               PYTHONPATH=os.pathsep.join(
                                   p for p in (root, os.environ.get("PYTHONPATH")) if p))
                    out = subprocess.run(
                        [sys.executable, "-c", _CHILD, str(bench_dir), name, args.preset,
                         str(ROOT / "benchmarks"), str(int(args.builds)),
                         str(int(args.fake_gpu))],
                        env=env, text=True, capture_output=True, cwd=tmp)
                    label = f"[{Path(root).name}] " if len(roots) > 1 else ""
                    print(label + (out.stdout.strip() or f"{name}: failed\n{out.stderr[-3000:]}"),
                          flush=True)


if __name__ == "__main__":
    main()
