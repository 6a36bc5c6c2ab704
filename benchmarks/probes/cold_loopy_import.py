"""Loopy's import in a new process: its CPU seconds, and whether its modules had bytecode.

A cache miss imports Loopy (with pymbolic, islpy, pytools, cgen).  A package installed
by ``pip install --no-compile`` (wheels carried to a machine that cannot download) has
no ``.pyc`` files, so every process compiles Loopy's sources, unless the first one
could write its ``__pycache__`` (``PYTHONDONTWRITEBYTECODE`` unset, a writable folder);
a user's ``pip install`` compiles them once.  Each sample is a new process that imports
numpy and pyopencl, then times ``import loopy`` (CPU seconds: ``time.process_time``) and
counts the modules Loopy's import loaded whose bytecode file (``__cached__``) is missing.
With ``--compile`` the packages' folders are byte-compiled (``compileall``, as pip does)
after the first samples and sampled again: the difference is what a measurement on
such a machine adds to a user's cold start.  Timings are printed, never asserted.

Usage::

    python benchmarks/probes/cold_loopy_import.py [--rounds 3] [--compile]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PACKAGES = ("loopy", "pymbolic", "islpy", "pytools", "cgen", "genpy", "pyopencl")

_CHILD = """
import json, os, sys, time
import numpy, pyopencl
before = set(sys.modules)
c0, t0 = time.process_time(), time.perf_counter()
import loopy
c1, t1 = time.process_time(), time.perf_counter()
new = [sys.modules[m] for m in set(sys.modules) - before]
files = [getattr(m, "__cached__", None) for m in new if getattr(m, "__file__", "")
         and m.__file__.endswith(".py")]
print(json.dumps({"cpu": c1 - c0, "wall": t1 - t0, "modules": len(files),
                  "without_bytecode": sum(1 for f in files if not f or not os.path.exists(f)),
                  "dont_write": sys.flags.dont_write_bytecode,
                  "pycache_prefix": sys.pycache_prefix}))
"""


def sample(rounds: int) -> list[dict]:
    out = []
    for _ in range(rounds):
        done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                              check=True)
        out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


def report(label: str, runs: list[dict]) -> None:
    first = runs[0]
    print(f"{label}: import loopy {statistics.median(r['cpu'] for r in runs):.3f} CPU s "
          f"({statistics.median(r['wall'] for r in runs):.3f} s wall), median of "
          f"{len(runs)}; first process {first['cpu']:.3f} CPU s; modules loaded "
          f"{first['modules']}, without bytecode: first {first['without_bytecode']}, "
          f"last {runs[-1]['without_bytecode']}; PYTHONDONTWRITEBYTECODE "
          f"{bool(first['dont_write'])}, pycache prefix {first['pycache_prefix']}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compile", action="store_true",
                        help="byte-compile the packages' folders, then sample again")
    args = parser.parse_args()
    report("as installed", sample(args.rounds))
    if args.compile:
        import importlib.util

        folders = []
        for name in PACKAGES:
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.submodule_search_locations:
                folders.extend(spec.submodule_search_locations)
        subprocess.run([sys.executable, "-m", "compileall", "-q", *folders],
                       env={k: v for k, v in os.environ.items()
                            if k != "PYTHONDONTWRITEBYTECODE"}, check=False)
        report("byte-compiled", sample(args.rounds))


if __name__ == "__main__":
    main()
