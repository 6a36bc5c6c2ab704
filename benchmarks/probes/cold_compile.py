"""Time to a first result with every cache empty, and where the time of a build goes.

Each case runs in a new Python process with empty fuseloop, Loopy (``XDG_CACHE_HOME``),
PoCL (``POCL_CACHE_DIR``) and NVIDIA (``CUDA_CACHE_PATH``: without it, a case's later
runs found the driver's builds cached) caches, and builds inline
(``FUSELOOP_COMPILE=inline``) so that the process's CPU time covers the OpenCL
compiler too.  Printed per case: the
wall and CPU seconds of ``import fuseloop``, of making the input arrays (the
device's discovery and start, the copies) and of the first result, and the CPU
seconds of the steps of those two: device discovery (the backends' imports and
driver starts), Loopy's import, lowering, the recipe, Loopy's code generation, the
OpenCL build, the wait for the first read (PoCL compiles a kernel's work-group
function at its first launch: most of this wait), and the rest ("other": the
driver's start, the copies, building the expression's program, the launch).  CPU
seconds stay meaningful on a loaded machine, where wall time does not.  Timings are
reported, never asserted.

Cases: ``demo`` (``2*x + x*y - 3*y``), ``sin`` (``2*x - sin(y) + x*y``), ``rep<R>``
(``r = sin(r)*0.5 + r*y``, R times: 4 operations each), ``D<L>`` (L levels of
``sin(r)*.5 + cos(r*k)*.25 + .1``), ``matmul`` (256 x 256 float32; ``matmul<N>``:
N x N), ``mean`` (``x*3 - fl.mean(x)`` over 2^20 elements: three kernels, built
concurrently in compile workers, see ``fuseloop/prebuild.py``), ``sum`` (``fl.sum(x*y)``),
``softmax`` (row softmax of 256 x 256 float32), ``compute<K>`` (``fl.compute`` of K
results of other lengths and depths: K new kernels of one call).

Usage::

    python benchmarks/probes/cold_compile.py [--workers] [--source] [--warm] [--phases]
        [--summary] [--rounds R] [--root DIR ...] [--setup CODE ...] [CASE ... | worker]

``--root`` names a checkout to import fuseloop from (default: this one); with two
(e.g. an export of the base commit and this one) the cases run alternately, ``--rounds``
times each, so the machine's load hits both alike; each line is one run.
The checkout's modules are byte-compiled first (``compileall``, into its
``__pycache__`` folders), as installing a package does: a checkout copied afresh,
or a machine with ``PYTHONDONTWRITEBYTECODE`` set, compiles fuseloop's sources in
every process (0.15-0.2 CPU s of each case on a 2-core VM), which is no user's cold
start.  ``--source`` leaves that out (the former behaviour).
``--workers`` builds in compile workers (fuseloop's default) instead of inline; the
OpenCL compiler's CPU time is then the workers', not in the printed CPU seconds.
``--warm`` runs each case a second time on the caches the first run left (fuseloop's
disk cache, PoCL's kernel cache): a later process's first result, printed as
``warm <case>``.
``--phases`` prints each run's wall-clock timeline instead: ``step start+length`` in
seconds from the process's first line (import, arrays, device discovery, device open,
the compile worker's start and each request to it (its build, or the wait for its
start), the driver's start and the device's context where they are made without the
GIL, Loopy's import (on a thread from device discovery on where the cache is cold, and
the first Loopy section's wait for it), lowering, recipe, code generation, the build,
the first read's wait), then how long Python took to start and the whole, from the
process's spawn to the first result.  With ``--rounds`` above 1 the medians of the arrays, the
first result and the whole come after each case (``--summary``: those alone, and
each step's median length, where 5 ms or more).
``--setup CODE`` (repeatable) runs each variant alternately, as ``--root`` does
(e.g. ``--setup pass --setup "import threading; threading.Thread(target=__import__,
args=('loopy',)).start()"``: Loopy imported on a thread while the arrays are made).
The case ``worker`` times a compile worker's own steps in a process whose device is
discovered: its start (Python, the builder's driver import), readying the device (the
driver's discovery, a context, the warm-up build), two small builds, and its CPU.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CASES = ["demo", "sin", "sum", "softmax", "matmul", "mean", "rep12", "rep50", "D10", "D14",
         "D40"]

_CHILD = """
import os, sys, time
c0, t0, w0 = os.times(), time.perf_counter(), time.time()
import gc, traceback
_freezers = []  # (the first caller of gc.freeze: who froze objects before the first result)
_frozen_at_start = gc.get_freeze_count()  # (frozen before this line: a sitecustomize?)
_gc_freeze = gc.freeze
def _freeze():
    if not _freezers:
        _freezers.append(" < ".join(f"{f.name}@{os.path.basename(f.filename)}:{f.lineno}"
                                    for f in traceback.extract_stack()[-5:-1][::-1]))
    _gc_freeze()
gc.freeze = _freeze
import numpy as np
import fuseloop as fl
from fuseloop import cache
from fuseloop.lower import codegen
c1, t1 = os.times(), time.perf_counter()
steps = {}
spans = []  # (label, wall start, wall seconds): the timeline of --phases
def timed(module, name, label):
    inner = getattr(module, name)
    def wrapper(*args, **kwargs):
        start, wall = time.process_time(), time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            steps[label] = steps.get(label, 0.0) + time.process_time() - start
            spans.append((label, wall, time.perf_counter() - wall))
    setattr(module, name, wrapper)
from fuseloop.runtime import devices, compile_workers
timed(devices, "_discover", "device discovery")
_open = devices._DeviceRuntime.__init__
def _opened(self, device):  # (the device's context, queue and buffer pool)
    wall = time.perf_counter()
    _open(self, device)
    spans.append(("device open", wall, time.perf_counter() - wall))
devices._DeviceRuntime.__init__ = _opened
for _name, _label in (("__init__", "worker start"), ("request", "worker request")):
    def _wrap(inner, label):
        def wrapper(*args, **kwargs):
            wall = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                spans.append((label, wall, time.perf_counter() - wall))
        return wrapper
    setattr(compile_workers._Worker, _name, _wrap(getattr(compile_workers._Worker, _name),
                                                  _label))
# (wall spans only: the driver's start and the context where fuseloop makes them without
# the GIL, Loopy's import on a thread and the waits for it (the recipes', Loopy's); where
# the checkout has them)
from fuseloop import _lazy
from fuseloop.runtime import icd
for _module, _name, _label in ((icd, "start_drivers", "driver start"),
                               (icd, "new_context", "context"),
                               (_lazy, "_import_loopy_quietly", "Loopy import (thread)"),
                               (_lazy, "await_preload", "Loopy import wait")):
    if hasattr(_module, _name):
        setattr(_module, _name, _wrap(getattr(_module, _name), _label))
# (Loopy's import at the first code generation, as fuseloop does it: with the collector
# off; importing it here before kernel_plan, as this probe did, added the collections)
timed(codegen, "_import_loopy", "Loopy import")
timed(codegen, "lower", "lower"); timed(codegen, "apply_recipe", "recipe")
timed(codegen, "_generate_code", "Loopy codegen"); timed(cache, "_build_source", "OpenCL build")
timed(cache, "_binary_of", "OpenCL binary")
from fuseloop.runtime import transfer
timed(transfer, "_wait", "first read's wait")
import gc
_gc_start = []
def _gc_timer(phase, info):  # (garbage collection: inside the steps above or not)
    if phase == "start":
        _gc_start.append(time.process_time())
    elif _gc_start:
        gc_s[0] += time.process_time() - _gc_start.pop()
gc_s = [0.0]
gc.callbacks.append(_gc_timer)
case = sys.argv[1]
if len(sys.argv) > 2 and sys.argv[2]:
    exec(sys.argv[2])  # (a caller's setup: matmul_unroll.py's recipe variant)
rng = np.random.default_rng(0)
x = fl.asarray(rng.random(1 << 16, dtype=np.float32))
y = fl.asarray(rng.random(1 << 16, dtype=np.float32))
if case == "demo":
    e = 2 * x + x * y - 3 * y
elif case == "sin":
    e = 2 * x - fl.sin(y) + x * y
elif case.startswith("matmul"):
    n = int(case[6:] or 256)
    e = (fl.asarray(rng.random((n, n), dtype=np.float32))
         @ fl.asarray(rng.random((n, n), dtype=np.float32)))
elif case == "mean":
    x = fl.asarray(rng.random(1 << 20, dtype=np.float32))
    e = x * 3 - fl.mean(x)
elif case == "sum":
    e = fl.sum(x * y)
elif case == "softmax":
    m = fl.asarray(rng.random((256, 256), dtype=np.float32))
    z = fl.exp(m - fl.max(m, axis=1, keepdims=True))
    e = z / fl.sum(z, axis=1, keepdims=True)
elif case.startswith("compute"):  # (K results of other lengths: K kernels, one evaluation)
    parts = []
    for k in range(int(case[7:])):
        r = x[:(1 << 16) - 64 * k]
        for _ in range(k + 1):
            r = fl.sin(r) * 0.5 + r
        parts.append(r)
    class _All:
        def get(self):
            return [p.get() for p in fl.compute(*parts)]
    e = _All()
elif case.startswith("rep"):
    e = x
    for _ in range(int(case[3:])):
        e = fl.sin(e) * 0.5 + e * y
else:
    e = x
    for k in range(int(case[1:])):
        e = fl.sin(e) * .5 + fl.cos(e * (k + 1.5)) * .25 + .1
c2, t2 = os.times(), time.perf_counter()
# (whether fuseloop's first code generation will import Loopy with the collector off and
# freeze what lives before it: not where objects are frozen already, or Loopy loaded)
before = (f"{gc.get_freeze_count()} objects frozen, Loopy "
          + ("loaded" if "loopy" in sys.modules else "not loaded")
          + (f", first frozen by {_freezers[0]}" if gc.get_freeze_count() and _freezers else "")
          + (f", {_frozen_at_start} frozen at the start" if _frozen_at_start else ""))
e.get()
c3, t3 = os.times(), time.perf_counter()
cpu = lambda a, b: b.user + b.system - a.user - a.system
built = fl.stats()
print(f"{case}: {built['kernels_compiled']} kernels "
      f"({built.get('programs_built', built['kernels_compiled'])} programs), "
      f"import {t1 - t0:.2f} s ({cpu(c0, c1):.2f} CPU), arrays {t2 - t1:.2f} s "
      f"({cpu(c1, c2):.2f} CPU), first result {t3 - t2:.2f} s ({cpu(c2, c3):.2f} CPU); "
      "steps of both (CPU s): " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items())
      + f", other {cpu(c1, c3) - sum(steps.values()):.2f}; garbage collection {gc_s[0]:.3f}")
spans += [("import", t0, t1 - t0), ("arrays", t1, t2 - t1), ("first result", t2, t3 - t2)]
print("phases (wall s from this process's first line, start+length): " + ", ".join(
    f"{label} {start - t0:.2f}+{length:.2f}" for label, start, length in sorted(
        spans, key=lambda span: span[1])) + f"; python start {w0 - float(sys.argv[3]):.2f}, "
      f"spawn to first result {w0 - float(sys.argv[3]) + t3 - t0:.2f}; before it: {before}")
"""

# --worker: a compile worker's own steps, one after the other (what the caller waits for
# when its first build comes before the worker is warm): its start (Python, the builder
# file's pyopencl import, the driver's load), readying the device (its discovery, a
# context, the warm-up build) and two builds of small programs
_WORKER_CHILD = """
import os, time
import fuseloop as fl
from fuseloop.runtime import compile_workers
from fuseloop.backends import backend_for
device = fl.get_device()
builder = backend_for(device).worker_builder
address = compile_workers._device_address(device)
source = ("__kernel void k{}(__global float *o, __global const float *x, "
          "__global const float *y) {{ int i = get_global_id(0); "
          "o[i] = 2 * x[i] - sin(y[i]) + x[i] * y[i] + {}; }}")
t0 = time.perf_counter()
worker = compile_workers._Worker()
steps = []
def step(label, message):
    start = time.perf_counter()
    worker.request(message) if message else compile_workers.read_message(worker.process.stdout)
    steps.append(f"{label} {time.perf_counter() - start:.2f}")
step("start (until ready)", None)
worker.ready = True
step("ready the device", (builder, *address, None, (), (), None, False))
for k in range(2):
    step(f"build {k + 1}", (builder, *address, source.format(k, k), (), (f"k{k}",), None, True))
total = time.perf_counter() - t0
worker.process.stdin.close()  # (it ends: its CPU time is then known)
_, _, usage = os.wait4(worker.process.pid, 0)
print(f"worker on {device.name} (wall s): " + ", ".join(steps)
      + f"; total {total:.2f} s, {usage.ru_utime + usage.ru_stime:.2f} CPU s")
"""


def main() -> None:
    args = sys.argv[1:]
    flags = {flag: flag in args
             for flag in ("--workers", "--warm", "--source", "--phases", "--summary")}
    args = [a for a in args if a not in flags]
    mode = "process" if flags["--workers"] else "inline"
    roots: list[str] = []
    rounds = 1
    while "--root" in args:
        at = args.index("--root")
        roots.append(str(Path(args[at + 1]).resolve()))
        del args[at:at + 2]
    if "--rounds" in args:
        at = args.index("--rounds")
        rounds = int(args[at + 1])
        del args[at:at + 2]
    setups = [""]  # (--setup CODE, repeatable: variants run alternately, as roots are)
    while "--setup" in args:
        at = args.index("--setup")
        setups = [s for s in setups if s] + [args[at + 1]]
        del args[at:at + 2]
    if not flags["--source"]:
        for root in roots or [str(ROOT)]:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            subprocess.run([sys.executable, "-m", "compileall", "-q", f"{root}/fuseloop"],
                           env=env, check=True, stdout=subprocess.DEVNULL)
    if args == ["worker"]:  # (--worker: no case)
        for _ in range(rounds):
            for root in roots or [str(ROOT)]:
                label = f"[{Path(root).name}] " if roots else ""
                print(label + _run("", root, mode, False, child=_WORKER_CHILD)[0], flush=True)
        return
    for case in args or CASES:
        # (root, warm or cold): the wall seconds of each run, for the medians
        figures: dict[tuple[str, str], list[tuple[float, ...]]] = {}
        spans: dict[tuple[str, str], list[dict[str, float]]] = {}  # (each run's span lengths)
        for _ in range(rounds):
            for root, setup in [(r, s) for r in roots or [str(ROOT)] for s in setups]:
                label = f"[{Path(root).name}] " if roots else ""
                label += f"[setup {setups.index(setup)}] " if len(setups) > 1 else ""
                for prefix, out in _run(case, root, mode, flags["--warm"], setup, both=True):
                    first, _, phases = out.partition("\n")
                    line = phases if flags["--phases"] and phases else first
                    if not flags["--summary"] or not phases:  # (a failure: always)
                        print(label + prefix + line, flush=True)
                    got = _walls(out)
                    if got:
                        figures.setdefault((label, prefix), []).append(got)
                        spans.setdefault((label, prefix), []).append(_span_lengths(phases))
        if rounds > 1:
            for (label, prefix), runs in figures.items():
                med = [statistics.median(run[k] for run in runs) for k in range(3)]
                print(f"{label}{prefix}{case}: median of {len(runs)}: arrays {med[0]:.2f} s, "
                      f"first result {med[1]:.2f} s, spawn to first result {med[2]:.2f} s",
                      flush=True)
                if flags["--summary"]:  # (and the median length of each step over 5 ms)
                    runs_spans = spans[(label, prefix)]
                    medians = {n: statistics.median(r.get(n, 0.0) for r in runs_spans)
                               for n in runs_spans[0] if n not in _WHOLE}
                    print(f"{label}{prefix}{case}: median s of " + ", ".join(
                        f"{n} {m:.2f}" for n, m in medians.items() if m >= 0.005), flush=True)


_WHOLE = ("import", "arrays", "first result")


def _span_lengths(phases: str) -> dict[str, float]:
    """Each step's wall seconds in a run's phases line (summed where it recurs), in
    the order they started; "before lowering": from the first result's start to the
    lowering's (what precedes the code generator, the waits for Loopy too); "codegen to
    build" and "after the build" (the launch, the read) the gaps after those steps."""
    found: dict[str, float] = {}
    starts: dict[str, float] = {}
    for name, start, length in re.findall(r"([A-Za-z' ()]+?) ([\d.]+)\+([\d.]+)",
                                          phases.partition(": ")[2]):
        name = name.strip(", ")
        found[name] = found.get(name, 0.0) + float(length)
        starts.setdefault(name, float(start))
    lowering = starts.get("lower")
    if lowering is not None and "first result" in starts:
        found["before lowering"] = lowering - starts["first result"]
    ends = {n: starts[n] + found[n] for n in starts}  # (of a step's last occurrence: one)
    if "Loopy codegen" in ends and "OpenCL build" in starts:
        found["codegen to build"] = starts["OpenCL build"] - ends["Loopy codegen"]
    if "OpenCL build" in ends and "first result" in ends:
        found["after the build"] = ends["first result"] - ends["OpenCL build"]
    return found


def _walls(out: str) -> tuple[float, ...] | None:
    """(arrays, first result, spawn to first result) wall seconds of a run's output."""
    arrays = re.search(r"arrays ([\d.]+) s", out)
    first = re.search(r"first result ([\d.]+) s", out)
    total = re.search(r"spawn to first result ([\d.]+)", out)
    if not (arrays and first and total):
        return None
    return float(arrays.group(1)), float(first.group(1)), float(total.group(1))


def _run(case: str, root: str, mode: str, warm: bool, setup: str = "", both: bool = False,
         child: str = _CHILD) -> list[Any]:
    """Lines of ``case`` run in new processes on empty caches (and again warm); ``setup``:
    Python run in the process after ``import fuseloop as fl`` and before the case (a
    recipe variant: ``u = fl.recipes.use(...); u.__enter__()``; its time is in the
    arrays' figure).  With ``both``: (prefix, output) pairs, the output's second line
    being the run's phases."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FUSELOOP_CACHE_DIR=f"{tmp}/fl", XDG_CACHE_HOME=f"{tmp}/xdg",
                   POCL_CACHE_DIR=f"{tmp}/pocl", CUDA_CACHE_PATH=f"{tmp}/nv",
                   FUSELOOP_COMPILE=mode,
                   FUSELOOP_PROGRESS="0",
                   # (the checkout first; then what the caller's path held, where a
                   # machine without installed packages keeps them)
                   PYTHONPATH=os.pathsep.join(
                       p for p in (root, os.environ.get("PYTHONPATH")) if p))
        lines: list[Any] = []
        for prefix in ("", "warm ")[:1 + warm]:
            out = subprocess.run([sys.executable, "-c", child, case, setup, repr(time.time())],
                                 env=env, text=True, capture_output=True, cwd=root)
            text = out.stdout.strip() or f"{case}: failed\n{out.stderr[-2000:]}"
            lines.append((prefix, text) if both else prefix + text.partition("\n")[0])
        return lines


if __name__ == "__main__":
    main()
