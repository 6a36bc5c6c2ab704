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

    python benchmarks/probes/cold_compile.py [--workers] [--source] [--rounds R] [--root DIR ...]
                                             [CASE ...]

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
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = ["demo", "sin", "sum", "softmax", "matmul", "mean", "rep12", "rep50", "D10", "D14",
         "D40"]

_CHILD = """
import os, sys, time
c0, t0 = os.times(), time.perf_counter()
import numpy as np
import fuseloop as fl
from fuseloop import cache
from fuseloop.lower import codegen
c1, t1 = os.times(), time.perf_counter()
steps = {}
def timed(module, name, label):
    inner = getattr(module, name)
    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            steps[label] = steps.get(label, 0.0) + time.process_time() - start
    setattr(module, name, wrapper)
from fuseloop.runtime import devices
timed(devices, "_discover", "device discovery")
_plan = codegen.kernel_plan
def plan_after_loopy(*args, **kwargs):  # (the first kernel_plan imports Loopy)
    if "loopy" not in sys.modules:
        start = time.process_time()
        import loopy  # noqa: F401
        steps["Loopy import"] = time.process_time() - start
    return _plan(*args, **kwargs)
codegen.kernel_plan = plan_after_loopy
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
"""


def main() -> None:
    args = sys.argv[1:]
    mode = "inline"
    if "--workers" in args:
        args.remove("--workers")
        mode = "process"
    roots: list[str] = []
    rounds = 1
    while "--root" in args:
        at = args.index("--root")
        roots.append(str(Path(args[at + 1]).resolve()))
        del args[at:at + 2]
    warm = "--warm" in args
    if warm:
        args.remove("--warm")
    source = "--source" in args
    if source:
        args.remove("--source")
    if "--rounds" in args:
        at = args.index("--rounds")
        rounds = int(args[at + 1])
        del args[at:at + 2]
    if not source:
        for root in roots or [str(ROOT)]:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            subprocess.run([sys.executable, "-m", "compileall", "-q", f"{root}/fuseloop"],
                           env=env, check=True, stdout=subprocess.DEVNULL)
    for case in args or CASES:
        for _ in range(rounds):
            for root in roots or [str(ROOT)]:
                label = f"[{Path(root).name}] " if roots else ""
                for line in _run(case, root, mode, warm):
                    print(label + line, flush=True)


def _run(case: str, root: str, mode: str, warm: bool, setup: str = "") -> list[str]:
    """Lines of ``case`` run in new processes on empty caches (and again warm); ``setup``:
    Python run in the process after ``import fuseloop as fl`` and before the case (a
    recipe variant: ``u = fl.recipes.use(...); u.__enter__()``; its time is in the
    arrays' figure)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FUSELOOP_CACHE_DIR=f"{tmp}/fl", XDG_CACHE_HOME=f"{tmp}/xdg",
                   POCL_CACHE_DIR=f"{tmp}/pocl", CUDA_CACHE_PATH=f"{tmp}/nv",
                   FUSELOOP_COMPILE=mode,
                   FUSELOOP_PROGRESS="0",
                   # (the checkout first; then what the caller's path held, where a
                   # machine without installed packages keeps them)
                   PYTHONPATH=os.pathsep.join(
                       p for p in (root, os.environ.get("PYTHONPATH")) if p))
        lines = []
        for prefix in ("", "warm ")[:1 + warm]:
            out = subprocess.run([sys.executable, "-c", _CHILD, case, setup], env=env, text=True,
                                 capture_output=True, cwd=root)
            lines.append(prefix + (out.stdout.strip()
                                   or f"{case}: failed\n{out.stderr[-2000:]}"))
        return lines


if __name__ == "__main__":
    main()
