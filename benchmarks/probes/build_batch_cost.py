"""What one program build costs beyond its kernels: K small fuseloop kernels built as K
programs, as two programs of K/2 and as one program (``fuseloop.batch_build.combine``).

A cold first result of a workload of many small kernels (NPBench's loops) builds each
kernel as its own program; where the driver's build has a large fixed part, building
the kernels a run plan needs as one program pays it once (``fuseloop/batch_build.py``);
where its cost is per kernel, separate programs built in parallel (the compile workers)
finish first.  The kernels are fuseloop's own (``fl.program(...).lower(device)`` and
Loopy's code generation for K elementwise expressions, ``r = sin(r)*0.5 + r`` 1 to K
times), built through the
device's backend in this process (``FUSELOOP_COMPILE=inline``: the CPU seconds cover
the compiler).  Run in a new process with an empty PoCL cache (``POCL_CACHE_DIR``) and
NVIDIA's off (``CUDA_CACHE_DISABLE``); printed: the CPU and wall seconds of the first
build alone (the driver's start) and of each way, with its slowest program (the wall
time of building the programs in parallel).  OpenCL and CUDA devices.  Timings are
reported, never asserted.

Usage::

    python benchmarks/probes/build_batch_cost.py [--kernels K] [--device SPEC]

``--device``: an index or a ``FUSELOOP_DEVICE`` spec (``cuda:0``).
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
import fuseloop as fl
from fuseloop import batch_build
from fuseloop.backends import backend_for
from fuseloop.lower import codegen
k_count, spec = int(sys.argv[1]), sys.argv[2]
dev = fl.device(int(spec) if spec.isdigit() else spec).__enter__()
x = fl.asarray(np.ones(4096, np.float32), device=dev)
plans = []
for k in range(k_count + 1):  # (the first one starts the driver)
    r = x
    for _ in range(k + 1):  # (distinct sources: a driver's cache finds none of them)
        r = fl.sin(r) * 0.5 + r
    low = fl.program(r).lower(dev)
    with codegen.loopy_section():
        plans.append(codegen.generate(low.t_unit, dev))
backend = backend_for(dev)
def build(group):
    shared = batch_build.combine(group) if len(group) > 1 else group
    c0, t0 = time.process_time(), time.perf_counter()
    backend.build_source(dev, shared[0].source, shared[0].build_options,
                         [p.name for p in shared])
    return time.process_time() - c0, time.perf_counter() - t0
def way(groups):
    times = [build(g) for g in groups]
    return (f"{sum(c for c, _ in times):.3f} CPU s ({sum(w for _, w in times):.3f} s, "
            f"slowest program {max(w for _, w in times):.3f} s)")
first = build(plans[:1])
rest = plans[1:]
half = (len(rest) + 1) // 2
print(f"{dev.name} ({dev.backend}): first build {first[0]:.3f} CPU s ({first[1]:.3f} s); "
      f"{k_count} kernels as {k_count} programs {way([[p] for p in rest])}; "
      f"as 2 programs {way([rest[:half], rest[half:]])}; as one program {way([rest])}")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=8)
    parser.add_argument("--device", default="0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, POCL_CACHE_DIR=f"{tmp}/pocl", CUDA_CACHE_DISABLE="1",
                   FUSELOOP_CACHE_DIR=f"{tmp}/fl", XDG_CACHE_HOME=f"{tmp}/xdg",
                   FUSELOOP_PROGRESS="0", FUSELOOP_COMPILE="inline")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", _CHILD, str(args.kernels), args.device],
                       env=env, check=True)
        print(f"(whole run {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
