"""Python bytecodes, Python calls and C calls per statement of ``statement_host_ab.py``'s
patterns (a count, not a time: on a loaded machine it moves only when the code does).

Each pattern runs three loops untimed first (kernels, plans), then 64 statements under
``sys.settrace`` (opcode events) and ``sys.setprofile`` (C calls); ``--top`` adds the
functions with the most bytecodes of their own.  It imports the ``fuseloop`` found in
``--root`` (default: this checkout), so a copy of another revision counts the same way.
Run with ``FUSELOOP_HOST_PATH=0`` to count the device path.  Reported, never asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/statement_opcodes.py [--root DIR]
        [--only NAME ...] [--top 20]
"""

from __future__ import annotations

import argparse
import collections
import importlib
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def count(step: Any, calls: int) -> tuple[collections.Counter, int, int]:
    """(bytecodes per function, Python calls, C calls) of ``step(i)`` for ``calls`` i."""
    ops: collections.Counter = collections.Counter()
    n = [0, 0]

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if event == "call":
            frame.f_trace_opcodes = True
            n[0] += 1
        elif event == "opcode":
            code = frame.f_code
            ops[f"{os.path.basename(code.co_filename)}:{code.co_name}"] += 1
        return tracer

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            n[1] += 1

    sys.settrace(tracer)
    sys.setprofile(prof)
    try:
        for i in range(calls):
            step(i)
    finally:
        sys.settrace(None)
        sys.setprofile(None)
    return ops, n[0], n[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(HERE.parent.parent))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--top", type=int, default=0)
    args = ap.parse_args()
    sys.path[:0] = [args.root, str(HERE)]
    # (first: statement_host_ab puts this checkout on sys.path)
    fl = importlib.import_module("fuseloop")
    from statement_host_ab import statements

    print(f"# {fl.__file__}")
    for name, (step, loop) in statements(fl, 64).items():
        if args.only and name not in args.only:
            continue
        for i in range(3 * loop):
            step(i)
        fl.synchronize()
        ops, py, c = count(step, 64)
        fl.synchronize()
        print(f"{name}: {sum(ops.values()) / 64:.0f} bytecodes, {py / 64:.1f} Python calls, "
              f"{c / 64:.1f} C calls per statement")
        for fn, k in ops.most_common(args.top):
            print(f"  {k / 64:8.1f}  {fn}")


if __name__ == "__main__":
    main()
