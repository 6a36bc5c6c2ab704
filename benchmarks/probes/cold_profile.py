"""Where a cold first result's time goes, by stage, under cProfile; two checkouts compared.

Each case runs in a new Python process with empty fuseloop, Loopy (``XDG_CACHE_HOME``)
and PoCL (``POCL_CACHE_DIR``) caches, building inline (``FUSELOOP_COMPILE=inline``, so
the OpenCL compiler runs in the profiled process), and profiles ``e.get()`` only
(``import fuseloop`` is not in it; Loopy's import, at the first cache miss, is).
Checkouts are run alternately, ``--rounds`` times each; printed per case and stage: the
median cumulative seconds per checkout and the call counts (which do not depend on the
machine's load, where seconds do).  Profiling slows Python code about twofold, not the
compilers: compare stages between checkouts, not with unprofiled times.

Cases: ``demo`` (``2*x - sin(y) + x*y``), ``rep<R>`` (``r = sin(r)*0.5 + r*y``, R
times: 4 operations each; ``rep50`` is the 200-operation chain), ``matmul`` (256 x 256
float32).

Usage::

    python benchmarks/probes/cold_profile.py [--rounds 3] [--root DIR ...] [CASE ...]

``--root`` names a checkout to import fuseloop from (default: this one); give two to
compare them (e.g. a ``git worktree`` of the base commit and this one).
"""

from __future__ import annotations

import argparse
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import cProfile, sys
import numpy as np
import fuseloop as fl
case, out = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
x = fl.asarray(rng.random(1 << 16, dtype=np.float32))
y = fl.asarray(rng.random(1 << 16, dtype=np.float32))
if case == "demo":
    e = 2 * x - fl.sin(y) + x * y
elif case == "matmul":
    e = (fl.asarray(rng.random((256, 256), dtype=np.float32))
         @ fl.asarray(rng.random((256, 256), dtype=np.float32)))
else:
    e = x
    for _ in range(int(case[3:])):
        e = fl.sin(e) * 0.5 + e * y
profile = cProfile.Profile()
profile.runcall(e.get)
profile.dump_stats(out)
"""

# (label, file suffix, function name): cumulative time and calls of these functions
STAGES = [
    ("Loopy import", "loopy/__init__.py", "<module>"),
    ("fuseloop lowering", "fuseloop/lower/kernel.py", "lower_program"),
    ("  of which lp.make_kernel", "loopy/kernel/creation.py", "make_function"),
    ("recipe", "fuseloop/lower/codegen.py", "apply_recipe"),
    ("Loopy generate_code_v2", "loopy/codegen/__init__.py", "generate_code_v2"),
    ("  preprocess", "loopy/preprocess.py", "preprocess_program"),
    ("  type inference", "loopy/type_inference.py", "infer_unknown_types"),
    ("  scheduling (linearize)", "loopy/schedule/__init__.py", "linearize"),
    ("    bounds check", "loopy/check.py", "check_bounds"),
    ("  code generation", "loopy/codegen/__init__.py", "generate_code_for_a_single_kernel"),
    ("  kernel rewrites by renames", "loopy/translation_unit.py",
     "rename_resolved_functions_in_a_single_kernel"),
    ("  whole-kernel hashes", "loopy/kernel/__init__.py", "__hash__"),
    ("  Loopy cache store", "pytools/persistent_dict.py", "store_if_not_present"),
    ("  Loopy cache fetch", "pytools/persistent_dict.py", "__getitem__"),
    ("OpenCL build", "fuseloop/cache.py", "_build_source"),
    ("OpenCL binary (PoCL code gen)", "fuseloop/cache.py", "_binary_of"),
    # (PoCL compiles a kernel's work-group function at its first launch: most of this)
    ("first read's wait", "fuseloop/runtime/transfer.py", "_wait"),
    ("whole first result", "fuseloop/array.py", "get"),
]


def summarise(path: str) -> dict[str, tuple[float, int]]:
    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
    out: dict[str, tuple[float, int]] = {}
    for label, suffix, name in STAGES:
        cum, calls = 0.0, 0
        for (file, _, func), (prim, _, _, ct, _) in stats.items():
            if func == name and file.endswith(suffix):
                cum, calls = cum + ct, calls + prim
        out[label] = (cum, calls)
    isl = [(tt, nc) for (file, _, func), (_, nc, tt, _, _) in stats.items()
           if "islpy" in file or "islpy" in func]
    out["isl (own time)"] = (sum(t for t, _ in isl), sum(n for _, n in isl))
    out["Python function calls"] = (0.0, sum(v[1] for v in stats.values()))
    return out


def run(root: str, case: str, tmp: str) -> dict[str, tuple[float, int]]:
    env = dict(os.environ, FUSELOOP_CACHE_DIR=f"{tmp}/fl", XDG_CACHE_HOME=f"{tmp}/xdg",
               POCL_CACHE_DIR=f"{tmp}/pocl", FUSELOOP_COMPILE="inline",
               FUSELOOP_PROGRESS="0",
               PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    out = f"{tmp}/profile"
    subprocess.run([sys.executable, "-c", _CHILD, case, out], env=env, check=True,
                   cwd=tmp)
    return summarise(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--root", action="append", default=[])
    parser.add_argument("cases", nargs="*", default=["demo", "rep50"])
    args = parser.parse_args()
    roots = args.root or [str(ROOT)]
    for case in args.cases:
        results: dict[str, list[dict[str, tuple[float, int]]]] = {r: [] for r in roots}
        for _ in range(args.rounds):
            for root in roots:  # alternately: the machine's load hits both alike
                with tempfile.TemporaryDirectory() as tmp:
                    results[root].append(run(root, case, tmp))
        print(f"\n{case}: median seconds (cProfile) and calls, {args.rounds} rounds")
        print(f"{'stage':32s}" + "".join(f" | {Path(r).name[-18:]:>18s} s   calls"
                                         for r in roots))
        for label in results[roots[0]][0]:
            cells = []
            for r in roots:
                t = statistics.median(x[label][0] for x in results[r])
                cells.append(f" | {t:20.3f} {results[r][0][label][1]:7d}")
            print(f"{label:32s}" + "".join(cells), flush=True)


if __name__ == "__main__":
    main()
