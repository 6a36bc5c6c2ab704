"""cProfile of NPBench's CuPy kernels run with fuseloop as ``cupy`` (issue 26).

Loads one benchmark the way ``benchmarks/npbench_swap.py`` does (NPBench is not part
of this repository: pass a checkout with ``--npbench``), runs it once to warm
(kernels built, plans made), then runs it ``--repeats`` times under cProfile and
prints the functions with the most time of their own, and the CPU time per run with
and without the profiler.  Reported, never asserted.

    python benchmarks/probes/npbench_profile.py --npbench /tmp/npbench trisolv [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import npbench_swap as swap

import fuseloop as fl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--npbench", type=Path, required=True)
    ap.add_argument("name", help="a benchmark's short name (bench_info/*.json)")
    ap.add_argument("--preset", default="S")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--sort", default="tottime")
    args = ap.parse_args()
    info = next(i for p in sorted((args.npbench / "bench_info").glob("*.json"))
                if (i := json.loads(p.read_text()))["benchmark"]["short_name"] == args.name)
    b = info["benchmark"]
    folder = args.npbench / "npbench" / "benchmarks" / b["relative_path"]
    module = b["module_name"]
    values = swap.bench_inputs(args.npbench / "npbench" / "benchmarks", b, args.preset)
    sys.modules["cupy"] = swap._FuseloopAsCupy()
    kernel = getattr(swap._load(folder / f"{module}_cupy.py", f"npb_{module}_fl"), b["func_name"])

    def run() -> float:
        return swap.timed_call(fl, kernel, b, values)

    run()  # (builds, plans)
    plain = min(run() for _ in range(args.repeats))
    prof = cProfile.Profile()
    prof.enable()
    profiled = [run() for _ in range(args.repeats)]
    prof.disable()
    print(f"{args.name} preset {args.preset}: {plain * 1e3:.1f} ms CPU per run "
          f"({min(profiled) * 1e3:.1f} ms profiled); stats: {fl.stats()}")
    pstats.Stats(prof).sort_stats(args.sort).print_stats(args.top)


if __name__ == "__main__":
    main()
