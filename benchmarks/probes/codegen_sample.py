"""CPU seconds of Loopy code generation for a sample of kernel kinds; checkouts compared.

The sample: elementwise (1-D and a 2-D view), row reductions (a sum, softmax), a
column reduction, a contraction, a 5-point stencil, a gather and a 40-operation chain,
each on this machine's CPU device and on a fake H100 (the GPU recipes, lowered here
as on a GPU: no GPU and no driver build needed).  Each checkout runs in its own
process (empty fuseloop and Loopy caches, the host path off); the processes of two
checkouts alternate, ``--rounds`` times each.  In a process every kernel is lowered
and generated ``--reps`` times after one warm-up kernel (Loopy's first kernel in a
process pays its lazy imports), Loopy's own caches off as fuseloop's cache misses
run them; printed per case: the median CPU seconds of lowering with the recipe and of
code generation (``codegen.generate``: Loopy's preprocessing, linearization and
code), and with ``--stages`` the three Loopy stages timed apart on another copy.
``--profile K`` prints the K costliest functions of code generation (cProfile, CPU
clock, summed over the cases).  ``--sources DIR`` writes each case's generated source
under ``DIR/<checkout>/`` for a diff between checkouts (the processes run with one hash
seed: Loopy's schedule of a kernel can depend on it, so sources of two seeds may differ
in order).

Usage::

    python benchmarks/probes/codegen_sample.py [--root DIR ...] [--rounds 2] [--reps 3]
        [--stages] [--sources DIR] [CASE ...]

Timings are reported, never asserted; CPU clock (``time.process_time``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = ["ew", "ew2d", "rows", "softmax", "cols", "mm", "stencil", "gather", "chain",
         "ew@gpu", "rows@gpu", "softmax@gpu", "cols@gpu", "mm@gpu", "stencil@gpu"]

_CHILD = r"""
import json, statistics, sys, time, types
import numpy as np
import fuseloop as fl
from fuseloop.lower import codegen
from fuseloop.runtime.devices import Device
import cProfile
cases, reps = sys.argv[1].split(","), int(sys.argv[2])
stages, sources = sys.argv[3] == "1", sys.argv[4]
profile = cProfile.Profile(time.process_time) if sys.argv[5] else None
fake = Device(index=98, name="NVIDIA H100 80GB HBM3", type="gpu", platform="NVIDIA CUDA",
              vendor="NVIDIA Corporation", driver_version="580.00", global_mem_size=80 << 30,
              max_alloc_size=20 << 30, has_fp64=True, compute_units=132, backend="opencl",
              max_work_group_size=1024, cl_device=types.SimpleNamespace(single_fp_config=0))
rng = np.random.default_rng(0)
def arr(*shape):
    return fl.asarray(rng.random(shape, dtype=np.float32))
x, y = arr(1 << 16), arr(1 << 16)
a, b = arr(300, 257), arr(257, 300)
u = arr(130, 131)
c = arr(40, 20000)
idx = fl.asarray(rng.integers(0, 1 << 16, 5000).astype(np.int32))
def expr(case):
    if case == "ew":
        return 2 * x - fl.sin(y) + x * y
    if case == "ew2d":
        return a[::2, 1:] * b.T[::2, 1:] + 1
    if case == "rows":
        return fl.sum(a * a, axis=1)
    if case == "softmax":
        e = fl.exp(a - fl.max(a, axis=1)[:, None])
        return e / fl.sum(e, axis=1)[:, None]
    if case == "cols":
        return fl.sum(c, axis=0)
    if case == "mm":
        return a @ b
    if case == "stencil":
        return 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    if case == "gather":
        return x[idx] * 2 + 1
    if case in ("chain", "warm"):
        e = x
        for _ in range(10 if case == "chain" else 1):
            e = fl.sin(e) * 0.5 + e * y
        return e
    raise ValueError(case)
import loopy as lp
def one(case, dev):
    lin = fl.program(expr(case))
    with codegen.loopy_section(), codegen._without_loopy_caches():
        t0 = time.process_time()
        low = lin.lower(dev)
        t1 = time.process_time()
        if profile is not None and case != "warm":
            profile.enable()
        plan = codegen.generate(low.t_unit, dev)
        if profile is not None:
            profile.disable()
        t2 = time.process_time()
        out = {"lower": t1 - t0, "gen": t2 - t1, "recipe": low.recipe.name,
               "source": plan.source}
        if stages:
            t_unit = lin.lower(dev).t_unit
            t0 = time.process_time()
            pre = lp.preprocess_program(t_unit)
            t1 = time.process_time()
            lin_ = lp.linearize(pre)
            t2 = time.process_time()
            lp.generate_code_v2(lin_)
            t3 = time.process_time()
            out.update(pre=t1 - t0, sched=t2 - t1, code=t3 - t2)
    return out
one("warm", fl.get_device())
result = {}
for case in cases:
    name, _, where = case.partition("@")
    dev = fake if where == "gpu" else fl.get_device()
    runs = [one(name, dev) for _ in range(reps)]
    if sources:
        with open(f"{sources}/{case}.cl", "w") as f:
            f.write(runs[0]["source"])
    result[case] = {k: statistics.median(r[k] for r in runs) for k in runs[0]
                    if k not in ("recipe", "source")}
    result[case]["recipe"] = runs[0]["recipe"]
if profile is not None:
    profile.dump_stats(sys.argv[5])
print(json.dumps(result))
"""


def run(root: str, cases: list[str], args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FUSELOOP_CACHE_DIR=f"{tmp}/fl", XDG_CACHE_HOME=f"{tmp}/xdg",
                   FUSELOOP_PROGRESS="0", FUSELOOP_HOST_PATH="0", PYTHONPATH=root,
                   PYTHONHASHSEED="0")
        src = ""
        if args.sources:
            src = f"{args.sources}/{Path(root).name}"
            os.makedirs(src, exist_ok=True)
        # (a file, not -c: a sampling profiler's stacks then name it in one line)
        Path(f"{tmp}/codegen_child.py").write_text(_CHILD)
        out = subprocess.run([sys.executable, f"{tmp}/codegen_child.py", ",".join(cases),
                              str(args.reps),
                              "1" if args.stages else "0", src,
                              f"{tmp}/prof" if args.profile else ""],
                             env=env, text=True, capture_output=True, cwd=tmp)
        if out.returncode:
            sys.exit(f"{root}: failed\n{out.stderr[-3000:]}")
        if args.profile:
            import pstats

            stats = pstats.Stats(f"{tmp}/prof")
            if args.profile_out:
                stats.dump_stats(args.profile_out)
            for key in args.sort.split(","):
                stats.sort_stats(key).print_stats(args.profile)
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", action="append", help="a checkout (default: this one)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--stages", action="store_true")
    parser.add_argument("--sources", default="")
    parser.add_argument("--profile", type=int, default=0, metavar="K",
                        help="print the K functions of code generation with the most CPU "
                        "time (cProfile, summed over the cases; each process's)")
    parser.add_argument("--sort", default="cumulative,tottime", metavar="KEYS")
    parser.add_argument("--profile-out", default="", metavar="FILE",
                        help="the profile's pstats file (of the last process)")
    parser.add_argument("cases", nargs="*", default=CASES)
    args = parser.parse_args()
    roots = args.root or [str(ROOT)]
    results: dict[str, list[dict]] = {r: [] for r in roots}
    for _ in range(args.rounds):
        for r in roots:
            results[r].append(run(r, args.cases, args))
    keys = ["lower", "gen"] + (["pre", "sched", "code"] if args.stages else [])
    head = f"{'case':14s} {'recipe':22s}"
    for r in roots:
        head += " | " + " ".join(f"{k:>6s}" for k in keys) + f"  ({Path(r).name})"
    print(head)
    totals = {r: dict.fromkeys(keys, 0.0) for r in roots}
    for case in args.cases:
        line = f"{case:14s} {results[roots[0]][0][case]['recipe']:22s}"
        for r in roots:
            cells = []
            for k in keys:
                v = statistics.median(x[case][k] for x in results[r])
                totals[r][k] += v
                cells.append(f"{v:6.3f}")
            line += " | " + " ".join(cells)
        print(line)
    line = f"{'total':14s} {'':22s}"
    for r in roots:
        line += " | " + " ".join(f"{totals[r][k]:6.3f}" for k in keys)
    print(line)


if __name__ == "__main__":
    main()
