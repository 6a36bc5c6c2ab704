"""Python bytecodes, Python calls and C calls per run of NPBench's CuPy kernels with
fuseloop as ``cupy`` (issue 26): a count, not a time, so a change to a loop kernel's
per-statement cost shows on a loaded machine too.

Each benchmark runs once untimed (kernels built, plans made, views kept), then once
under ``sys.settrace`` (opcode events) and ``sys.setprofile`` (C calls), as
``statement_opcodes.py`` counts; ``--top`` adds the functions with the most bytecodes
of their own.  ``--root DIR`` counts another checkout's fuseloop (a copy of another
revision: ``git archive REV fuseloop | tar -x -C DIR``).  Reported, never asserted.

    python benchmarks/probes/npbench_opcodes.py --npbench .npbench syrk trmm [--top 15]
        [--root DIR] [--preset S]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="+", help="short names (bench_info)")
    ap.add_argument("--npbench", type=Path, required=True)
    ap.add_argument("--root", default=str(HERE.parent.parent))
    ap.add_argument("--preset", default="S")
    ap.add_argument("--top", type=int, default=0)
    args = ap.parse_args()
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    import npbench_swap as swap  # (it puts the current directory first: root goes before it)
    from statement_opcodes import count

    sys.path.insert(0, args.root)

    import fuseloop as fl

    print(f"# {fl.__file__}")
    infos = {i["benchmark"]["short_name"]: i["benchmark"] for p in sorted(
        (args.npbench / "bench_info").glob("*.json")) if (i := json.loads(p.read_text()))}
    bench_dir = args.npbench / "npbench" / "benchmarks"
    for name in args.names:
        b = infos[name]
        values = swap.bench_inputs(bench_dir, b, args.preset)
        sys.modules["cupy"] = swap._FuseloopAsCupy()
        kernel = getattr(swap._load(bench_dir / b["relative_path"] / f"{b['module_name']}_cupy.py",
                                    f"npb_{b['module_name']}_ops"), b["func_name"])
        swap.timed_call(fl, kernel, b, values)  # (kernels built, views kept)
        ops, py, c = count(lambda i, k=kernel, b=b, v=values: swap.timed_call(fl, k, b, v), 1)
        print(f"{name}: {sum(ops.values()):,} bytecodes, {py:,} Python calls, {c:,} C calls")
        for fn, k in ops.most_common(args.top):
            print(f"  {k:10,}  {fn}")


if __name__ == "__main__":
    main()
