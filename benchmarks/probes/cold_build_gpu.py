"""What a process's first driver build of a kernel costs, and what would shorten it.

Each sequence runs in a new process with empty fuseloop, Loopy and driver caches
(``CUDA_CACHE_PATH``, ``POCL_CACHE_DIR``): it opens the default device (``FUSELOOP_DEVICE``:
``nvidia`` on a GPU host), makes its context, then generates with fuseloop's recipes the
OpenCL sources the sequence names and builds them one after the other with pyopencl,
each made unique by a kernel of its own (no driver cache hit).  Printed per run: each build's
wall seconds (and the source's lines), the code generation's, and for ``thread``
the whole from the context to the last build.  Timings are printed, never asserted.

Steps of a sequence (comma-separated):

* ``tiny``: a one-line kernel (what a first build costs beyond compiling the kernel);
* ``demo``: fuseloop's source of ``2*x - sin(y) + x*y`` (``gpu-coalesced``: 4 elements
  per work-item, a bulk and a final slab), with fuseloop's build options;
* ``demo1``: the same recipe with one element per work-item (no slabs);
* ``nosin``: fuseloop's source of ``2*x + x*y - 3*y`` (no ``sin``);
* ``hand``: a hand-written one-element kernel of the demo's arithmetic (``hand<K>``: with
  K calls of ``sin`` instead of one: what each inlined copy costs the build);
* ``bare``: ``demo`` without fuseloop's build options;
* ``thread``: a tiny build on a thread, started right after the context, while this
  thread generates the code; must come first.

On the CUDA backend (``FUSELOOP_DEVICE=cuda:0``) each build is NVRTC's compilation, as
the backend makes it (its prelude first).

Usage::

    python benchmarks/probes/cold_build_gpu.py [--rounds R] [SEQUENCE ...]

Default sequences: ``demo``, ``demo,demo``, ``tiny,demo``, ``thread,demo``,
``tiny,demo1``, ``tiny,nosin``, ``tiny,hand``, ``tiny,bare`` (each round runs them all,
in turn; medians at the end).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEQUENCES = ["demo", "demo,demo", "tiny,demo", "thread,demo", "tiny,demo1", "tiny,nosin",
             "tiny,hand", "tiny,bare"]

_CHILD = r"""
import os, sys, time, uuid
import numpy as np
import pyopencl as cl
import fuseloop as fl
from fuseloop.lower import codegen
from fuseloop.recipes import elementwise
steps = sys.argv[1].split(",")
device = fl.get_device()
t_ctx = time.perf_counter()
ctx = device.context
t0 = time.perf_counter()
TINY = "__kernel void tiny(__global float *o) { o[get_global_id(0)] = 1.0f; }"
def hand(calls):  # (the demo's arithmetic, one element per work-item, `calls` sines)
    sines = " - ".join(f"sin(y[i] + {k}.0f)" for k in range(calls))
    return ("__kernel void hand(__global float *o, __global const float *x, __global const "
            "float *y, int n) { int i = get_global_id(0); if (i < n) o[i] = 2.0f * x[i] - "
            f"{sines} + x[i] * y[i]; }}")
from fuseloop.backends import backend_for
def build(source, options=()):
    start = time.perf_counter()
    # (a kernel of its own makes the source unique: a comment is preprocessed away before
    # a driver's cache key, PoCL's at least)
    nonce = (f"\n__kernel void n{uuid.uuid4().hex}(__global int *p) "
             f"{{ p[0] = {time.perf_counter_ns() % 1000}; }}\n")
    if device.backend == "cuda":  # (NVRTC, as the CUDA backend compiles)
        backend_for(device)._compile(device, source + nonce, tuple(options), ())
        return time.perf_counter() - start, None
    program = cl.Program(ctx, source + nonce).build(
        options=list(options), devices=[device.cl_device])
    return time.perf_counter() - start, program
done = {}
if steps[0] == "thread":  # (pyopencl's build or CuPy's NVRTC call: without the GIL?)
    import threading
    worker = threading.Thread(target=lambda: done.setdefault("thread", build(TINY)[0]))
    worker.start()
    steps = steps[1:]
rng = np.random.default_rng(0)
x = fl.asarray(rng.random(1 << 16, dtype=np.float32))
y = fl.asarray(rng.random(1 << 16, dtype=np.float32))
def plan_of(e, recipe=None):
    if recipe is not None:
        with fl.recipes.use(recipe):
            low = fl.program(e).lower(device)
    else:
        low = fl.program(e).lower(device)
    with codegen.loopy_section():
        return codegen.generate(low.t_unit, low.device)
g0 = time.perf_counter()
sources = {}
for step in steps:
    if step in ("demo", "bare") and "demo" not in sources:
        sources["demo"] = plan_of(2 * x - fl.sin(y) + x * y)
    elif step == "demo1":
        sources[step] = plan_of(2 * x - fl.sin(y) + x * y,
                                elementwise.gpu_coalesced.with_params(items=1))
    elif step == "nosin":
        sources[step] = plan_of(2 * x + x * y - 3 * y)
t_gen = time.perf_counter() - g0
out = []
for step in steps:
    if step == "tiny":
        seconds, _ = build(TINY)
        lines = 1
    elif step.startswith("hand"):
        seconds, _ = build(hand(int(step[4:] or 1)))
        lines = 1
    else:
        plan = sources["demo" if step == "bare" else step]
        seconds, _ = build(plan.source, () if step == "bare" else plan.build_options)
        lines = plan.source.count("\n")
    out.append(f"{step} {seconds:.3f} ({lines} lines)")
if "thread" in sys.argv[1]:
    worker.join()
    out.insert(0, f"thread's tiny {done['thread']:.3f}")
total = time.perf_counter() - t0
print(f"{sys.argv[1]}: context {t0 - t_ctx:.3f}, code generation {t_gen:.3f}, builds: "
      + ", ".join(out) + f"; context to last build {total:.3f} s ({device.name})")
"""


def main() -> None:
    args = sys.argv[1:]
    rounds = 1
    if "--rounds" in args:
        at = args.index("--rounds")
        rounds = int(args[at + 1])
        del args[at:at + 2]
    sequences = args or SEQUENCES
    env0 = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", f"{ROOT}/fuseloop"], env=env0,
                   check=True, stdout=subprocess.DEVNULL)
    figures: dict[str, dict[str, list[float]]] = {}
    for _ in range(rounds):
        for sequence in sequences:
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(env0, FUSELOOP_CACHE_DIR=f"{tmp}/fl", XDG_CACHE_HOME=f"{tmp}/xdg",
                           POCL_CACHE_DIR=f"{tmp}/pocl", CUDA_CACHE_PATH=f"{tmp}/nv",
                           FUSELOOP_COMPILE="inline", FUSELOOP_PROGRESS="0",
                           FUSELOOP_HOST_PATH="0",
                           PYTHONPATH=os.pathsep.join(
                               p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
                out = subprocess.run([sys.executable, "-c", _CHILD, sequence], env=env,
                                     text=True, capture_output=True, cwd=tmp)
            line = out.stdout.strip() or f"{sequence}: failed\n{out.stderr[-1500:]}"
            if rounds == 1:
                print(line, flush=True)
            body = line.partition(": ")[2]
            for name, value in re.findall(r"([a-z0-9' ]+?) (\d+\.\d+)", body):
                figures.setdefault(sequence, {}).setdefault(name.strip(), []).append(
                    float(value))
    if rounds > 1:
        for sequence, found in figures.items():
            print(f"{sequence}: median of {rounds}: " + ", ".join(
                f"{name} {statistics.median(values):.3f}" for name, values in found.items()),
                flush=True)


if __name__ == "__main__":
    main()
