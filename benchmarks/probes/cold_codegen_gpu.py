"""Loopy's part of a cold build for a GPU, measured on any machine (no GPU, no build).

Each case runs in a new Python process with empty fuseloop and Loopy caches; the
kernel is lowered, transformed by the recipe the registry picks for a fake H100
(an NVIDIA OpenCL GPU: ``gpu-coalesced``, ``gpu-rows``, ``gpu-tiled``) and its
code generated, as a cache miss on that device would (``codegen.kernel_plan``
without the driver's build).  Printed per case: the CPU seconds of Loopy's import,
of lowering with the recipe, and of code generation, with the size class.  The
GPU driver's compiler (NVIDIA's: most of a 200-operation chain's cold time on the
H100) is not in these figures.  Timings are reported, never asserted.

Cases: ``demo`` (``2*x - sin(y) + x*y``), ``rep<R>`` (``r = sin(r)*0.5 + r*y``, R
times; ``rep50`` is the 200-operation chain), ``D<L>`` (L levels of
``sin(r)*.5 + cos(r*k)*.25 + .1``), ``mm<N>`` (N x N float32 matmul: ``mm256``
is the aligned size class, ``mm250`` the padded one, ``mm4096`` issue 26's; ``mm256:device``
with ``TileConfig.reg_loops="device"``, likewise ``:vector``, ``:lanes`` and ``:loopy``).

Usage::

    python benchmarks/probes/cold_codegen_gpu.py [--profile K [--sort KEYS]] [CASE ...]

``--profile K`` prints the K functions of code generation with the most
cumulative CPU time (cProfile with a CPU-time clock: the machine's load does not
count); ``--sort cumulative,tottime`` prints a table per sort key.  Each case also
prints the time of Loopy's stages (preprocessing, linearization, code), measured
by running code generation a second time stage by stage.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = ["demo", "mm256", "mm250", "rep50", "D40"]

_CHILD = """
import cProfile, pstats, sys, time, types
t0 = time.process_time()
import numpy as np
import fuseloop as fl
from fuseloop.lower import codegen
from fuseloop.runtime.devices import Device
t_import = time.process_time() - t0
fake = Device(index=98, name="NVIDIA H100 80GB HBM3", type="gpu", platform="NVIDIA CUDA",
              vendor="NVIDIA Corporation", driver_version="580.00", global_mem_size=80 << 30,
              max_alloc_size=20 << 30, has_fp64=True, compute_units=132, backend="opencl",
              max_work_group_size=1024, cl_device=types.SimpleNamespace(single_fp_config=0))
case, top = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
x = fl.asarray(rng.random(1 << 16, dtype=np.float32))
y = fl.asarray(rng.random(1 << 16, dtype=np.float32))
if case == "demo":
    e = 2 * x - fl.sin(y) + x * y
elif case.startswith("mm"):
    n, _, reg_loops = case[2:].partition(":")
    e = (fl.asarray(rng.random((int(n), int(n)), dtype=np.float32))
         @ fl.asarray(rng.random((int(n), int(n)), dtype=np.float32)))
    if reg_loops:
        from fuseloop.recipes import contraction as rc
        use = fl.recipes.use(rc.gpu_tiled.with_params(
            tiles=rc.GPU_TILES._replace(reg_loops=reg_loops)))
        use.__enter__()
elif case.startswith("rep"):
    e = x
    for _ in range(int(case[3:])):
        e = fl.sin(e) * 0.5 + e * y
else:
    e = x
    for k in range(int(case[1:])):
        e = fl.sin(e) * .5 + fl.cos(e * (k + 1.5)) * .25 + .1
t0 = time.process_time()
import loopy  # noqa: F401
t_loopy = time.process_time() - t0
lin = fl.program(e)
with codegen.loopy_section(), codegen._without_loopy_caches():
    t0 = time.process_time()
    low = lin.lower(fake)
    t_lower = time.process_time() - t0
    profile = cProfile.Profile(time.process_time)
    t0 = time.process_time()
    plan = profile.runcall(codegen.generate, low.t_unit, fake) if top else \\
        codegen.generate(low.t_unit, fake)
    t_gen = time.process_time() - t0
    # Loopy's stages of that code generation, again (its caches are off)
    t0 = time.process_time()
    pre = loopy.preprocess_program(low.t_unit)
    t1 = time.process_time()
    lin = loopy.linearize(pre)
    t2 = time.process_time()
    loopy.generate_code_v2(lin)
    t3 = time.process_time()
print(f"{case}: recipe {low.recipe.name}, size class {low.sizes!r}: import fuseloop "
      f"{t_import:.2f}, Loopy {t_loopy:.2f}, lowering + recipe {t_lower:.2f}, code generation "
      f"{t_gen:.2f} CPU s ({plan.source.count(chr(10))} lines; again by stage: preprocessing "
      f"{t1 - t0:.2f}, linearization {t2 - t1:.2f}, code {t3 - t2:.2f})", flush=True)
if top:
    for key in sys.argv[3].split(","):
        pstats.Stats(profile).sort_stats(key).print_stats(top)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=int, default=0, metavar="K")
    parser.add_argument("--sort", default="cumulative", metavar="KEYS",
                        help="pstats sort keys, comma-separated: one table each "
                        "(cumulative,tottime)")
    parser.add_argument("cases", nargs="*", default=CASES)
    args = parser.parse_args()
    # (byte-compiled first, as an installed package is: a fresh checkout or
    # PYTHONDONTWRITEBYTECODE compiled fuseloop's sources in each case, see cold_compile.py)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", f"{ROOT}/fuseloop"], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    for case in args.cases:
        with tempfile.TemporaryDirectory() as tmp:
            # (the host path off: on it, a small product of this machine's CPU device ran
            # on the host and the program lowered was its result's copy, not the product)
            env = dict(os.environ, FUSELOOP_CACHE_DIR=f"{tmp}/fl", XDG_CACHE_HOME=f"{tmp}/xdg",
                       FUSELOOP_PROGRESS="0", FUSELOOP_HOST_PATH="0",
                       PYTHONPATH=os.pathsep.join(
                           p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
            out = subprocess.run([sys.executable, "-c", _CHILD, case, str(args.profile), args.sort],
                                 env=env, text=True, capture_output=True, cwd=tmp)
            print(out.stdout.strip() or f"{case}: failed\n{out.stderr[-2000:]}", flush=True)


if __name__ == "__main__":
    main()
