"""NPBench's CuPy kernels with several fuseloop revisions as ``cupy``, in one process,
runs interleaved (A, B, A, B, ...), on the CPU clock (issue 26).

``npbench_swap.py --baseline`` times each revision in processes of their own, one after
the other: on a shared machine its before/after figures drift with the load by more
than a change of a few percent.  Here each revision's package is imported under a name
of its own (``benchmarks/compare_host_overhead.py``) and every round runs each
benchmark once per revision, so all see the same phases of the machine.  Outputs are
not checked (``npbench_swap.py`` does).  A module that imports ``fuseloop`` by name
(numpy's dispatch of ``np.float64(a) * x``, ``fuseloop.interop``) reaches the current
checkout's from any copy: a kernel that fails here, or takes that path, is timed
with ``npbench_swap.py --baseline``.  Reported, never asserted.

    python benchmarks/probes/npbench_ab.py REV [REV ...] --npbench DIR [--only a b]
        [--preset S] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent.parent)]

import npbench_swap as swap  # noqa: E402

from benchmarks.compare_host_overhead import copy_packages  # noqa: E402


def _as_cupy(fl: Any) -> types.ModuleType:
    """A ``cupy`` module whose names are ``fl``'s (npbench_swap's stand-in, for ``fl``)."""
    module = types.ModuleType("cupy")
    module.__getattr__ = lambda name: getattr(fl, name)  # type: ignore[method-assign]
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="git revisions, WT, or folders holding fuseloop/")
    ap.add_argument("--npbench", type=Path, required=True)
    ap.add_argument("--only", nargs="+", required=True, help="short names (bench_info)")
    ap.add_argument("--preset", default="S")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    _, names = copy_packages(args.revs, "npb")
    mods = [importlib.import_module(name) for name in names]
    infos = {i["benchmark"]["short_name"]: i["benchmark"] for p in sorted(
        (args.npbench / "bench_info").glob("*.json")) if (i := json.loads(p.read_text()))}
    bench_dir = args.npbench / "npbench" / "benchmarks"
    print(f"{args.rounds} interleaved rounds; CPU-clock ms per run, median (min)")
    print("| benchmark | " + " | ".join(args.revs) + " |")
    print("| --- |" + " ---: |" * len(args.revs))
    for short in args.only:
        b = infos[short]
        values = swap.bench_inputs(bench_dir, b, args.preset)
        path = bench_dir / b["relative_path"] / f"{b['module_name']}_cupy.py"
        kernels = []
        for k, fl in enumerate(mods):
            sys.modules["cupy"] = _as_cupy(fl)
            kernels.append(getattr(swap._load(path, f"npb_{short}_{k}"), b["func_name"]))

        try:
            for k in range(len(mods)):
                swap.timed_call(mods[k], kernels[k], b, values)  # (kernels built, plans recorded)
        except Exception as e:  # (reported; the next benchmark runs)
            print(f"| {short} | {type(e).__name__}: {str(e)[:60]} |", flush=True)
            continue
        times: list[list[float]] = [[] for _ in mods]
        for _ in range(args.rounds):
            for k in range(len(mods)):
                times[k].append(swap.timed_call(mods[k], kernels[k], b, values) * 1e3)
        print(f"| {short} | " + " | ".join(
            f"{statistics.median(t):.1f} ({min(t):.1f})" for t in times) + " |", flush=True)


if __name__ == "__main__":
    main()
