"""Python bytecodes, Python calls and C calls per cached lazy call, by stage (build,
eval, sync), on the CPU presented as a GPU with ``FUSELOOP_HOST_PATH=0`` (the device
path a GPU's host takes): ``callgrind_lazy_stages.py``'s cases and stages, counted in
seconds rather than valgrind's minutes (a count: a loaded machine does not move it).

It imports the ``fuseloop`` found in ``--root`` (default: this checkout), so a copy of
another revision (``git archive REV fuseloop | tar -x -C DIR``) counts the same way.
Reported, never asserted.

    python benchmarks/probes/lazy_call_opcodes.py [--root DIR] [--cases A,B] [--n 65536]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(HERE.parent.parent))
    ap.add_argument("--cases", default=None)
    ap.add_argument("--n", type=int, default=1 << 16)
    ap.add_argument("--calls", type=int, default=16)
    args = ap.parse_args()
    os.environ["FUSELOOP_HOST_PATH"] = "0"
    sys.path[:0] = [args.root, str(HERE)]
    from callgrind_lazy_stages import DEFAULT_CASES, STAGES, _fake_gpu, _stages
    from statement_opcodes import count

    import fuseloop as fl

    _fake_gpu(fl)
    print(f"fuseloop from {Path(fl.__file__).parent}; per call: bytecodes / Python calls / "
          "C calls")
    print("| case | " + " | ".join(STAGES) + " |")
    print("| --- |" + " ---: |" * len(STAGES))
    for case in (args.cases or DEFAULT_CASES).split(","):
        stages = _stages(fl, case, args.n)
        for _ in range(40):
            for f in stages:
                f()
        cells = []
        for k in range(len(STAGES)):
            totals = [0, 0, 0]
            for _ in range(args.calls):
                for j, f in enumerate(stages):
                    if j == k:
                        ops, py, c = count(lambda i, f=f: f(), 1)
                        totals[0] += sum(ops.values())
                        totals[1] += py - 1  # (the counted lambda)
                        totals[2] += c
                    else:
                        f()
            cells.append(" / ".join(f"{t / args.calls:.0f}" for t in totals))
        print(f"| {case} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
