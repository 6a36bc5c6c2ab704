"""What one OpenCL program build costs beyond its kernels: K small fuseloop kernels built
as K programs, against the same K kernels built as one program.

A cold first result of a workload of many small kernels (NPBench's loops) builds each
kernel as its own program; if the driver's build has a large fixed part, building
the kernels a run plan needs as one program would pay it once.  The kernels are
fuseloop's own (``fl.program(...).lower(device)`` and Loopy's code generation for K
different elementwise expressions); for the one-program build each kernel's name gets
its index and repeated ``#define`` lines are kept once.  Run in a new process with an
empty PoCL cache (``POCL_CACHE_DIR``) and NVIDIA's off (``CUDA_CACHE_DISABLE``);
printed: the CPU and wall seconds of both ways, and of the first build alone (the
driver's start: PoCL loads its kernel library then).  OpenCL devices only.
Timings are reported, never asserted.

Usage::

    python benchmarks/probes/build_batch_cost.py [--kernels K] [--device N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

_CHILD = """
import sys, time
import numpy as np
import pyopencl as cl
import fuseloop as fl
from fuseloop.lower import codegen
k_count, device = int(sys.argv[1]), int(sys.argv[2])
dev = fl.devices()[device]
x = fl.asarray(np.ones(4096, np.float32), device=dev)
sources = []
for k in range(k_count + 1):  # (the first one starts the driver)
    low = fl.program(fl.sin(x) * (k + 2) + x * (k + 1)).lower(dev)
    with codegen.loopy_section():
        plan = codegen.generate(low.t_unit, dev)
    sources.append((plan.source.replace(plan.name, f"{plan.name}_{k}"), plan.build_options))
ctx = dev.context
def build(src, options):
    c0, t0 = time.process_time(), time.perf_counter()
    cl.Program(ctx, src).build(options=options)
    return time.process_time() - c0, time.perf_counter() - t0
first = build(*sources[0])
apart = [build(*s) for s in sources[1:]]
seen, lines = set(), []
for src, _ in sources[1:]:
    for line in src.splitlines():
        if line.startswith("#define"):
            if line in seen:
                continue
            seen.add(line)
        lines.append(line)
together = build("\\n".join(lines), sources[1][1])
print(f"{dev.name}: first build {first[0]:.3f} CPU s ({first[1]:.3f} s); "
      f"{k_count} kernels as {k_count} programs {sum(c for c, _ in apart):.3f} CPU s "
      f"({sum(w for _, w in apart):.3f} s), as one program {together[0]:.3f} CPU s "
      f"({together[1]:.3f} s)")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=8)
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, POCL_CACHE_DIR=f"{tmp}/pocl", CUDA_CACHE_DISABLE="1",
                   FUSELOOP_CACHE_DIR=f"{tmp}/fl", XDG_CACHE_HOME=f"{tmp}/xdg",
                   FUSELOOP_PROGRESS="0")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", _CHILD, str(args.kernels), str(args.device)],
                       env=env, check=True)
        print(f"(whole run {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
