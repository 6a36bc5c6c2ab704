"""Python bytecodes per statement of a loop whose slices grow (issue 26), at loop lengths
past the run plans' tables (NPBench M: durbin 6000 lengths, trisolv 5000).

A loop over ``n`` lengths meets a new signature at every statement; its plans, free keys
and target-meets answers are kept in bounded tables (``run_plans.PLANS_MAX``,
``plan_free.FREE_MAX``, ``signed_keys.MEETS_MAX``), so past their bounds a pass finds
fewer of them than it met.  This probe runs the loop twice untimed (kernels, plans),
then counts the bytecodes of a third pass under ``sys.settrace`` (a count, not a time:
it moves only when the code does), with the functions of most bytecodes of their own,
and its kernel arguments set and launches enqueued (OpenCL: the launchers' pyopencl
calls wrapped by counters before the first launch; the wrappers' own bytecodes left out).
Patterns: ``update`` (durbin's ``y[:k] += a * y[k-1::-1]``, ``a`` 0-d) and ``trisolv``
(``x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]``).  It imports the ``fuseloop`` found in
``--root`` (default: this checkout).  Run with ``FUSELOOP_HOST_PATH=0`` to count the
device path.  Reported, never asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/growing_opcodes.py [--root DIR]
        [--n 5000] [--pattern update] [--top 20] [--fake-gpu]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np


def _count_calls() -> collections.Counter:
    """Counters around the OpenCL launchers' pyopencl calls (made before any launcher
    takes them)."""
    calls: collections.Counter = collections.Counter()
    from fuseloop.backends import opencl

    def wrap(fn: Any, what: str) -> Any:
        def counted(*a: Any) -> Any:
            calls[what] += 1
            return fn(*a)
        return counted

    opencl._set_arg = wrap(opencl._set_arg, "set")
    opencl._set_scalar = wrap(opencl._set_scalar, "set")
    opencl._enqueue_nd_range = wrap(opencl._enqueue_nd_range, "enqueue")
    return calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2]))
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--pattern", default="update", choices=["update", "trisolv"])
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--fake-gpu", action="store_true",
                    help="the CPU device presented as a GPU (the GPU's recipes; set "
                         "FUSELOOP_COMPILE=inline)")
    args = ap.parse_args()
    sys.path.insert(0, args.root)
    import fuseloop as fl

    if args.fake_gpu:
        fl.set_device(dataclasses.replace(fl.set_device("cpu"), index=9132, type="gpu",
                                          compute_units=132, max_work_group_size=1024))

    print(f"# {fl.__file__}")
    calls = _count_calls()
    n = args.n
    rng = np.random.default_rng(0)
    y, a = fl.asarray(rng.random(n + 1)), fl.asarray(np.float64(1e-3))
    if args.pattern == "trisolv":
        L = fl.asarray(np.tril(rng.random((n, n))) + n * np.eye(n))
        x, b = fl.asarray(rng.random(n)), fl.asarray(rng.random(n))

    def loop() -> None:
        if args.pattern == "update":
            for k in range(1, n):
                y[:k] += a * y[k - 1::-1]
        else:
            for i in range(1, n):
                x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
        fl.synchronize()

    loop()
    loop()
    own: collections.Counter = collections.Counter()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if event == "call":
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
        elif event == "opcode":
            code = frame.f_code
            own[f"{os.path.basename(code.co_filename)}:{code.co_name}"] += 1
        return tracer

    calls.clear()
    sys.settrace(tracer)
    try:
        loop()
    finally:
        sys.settrace(None)
    per = n - 1
    for name in list(own):
        if name.endswith(":counted"):
            del own[name]
    print(f"{args.pattern} n={n}: {sum(own.values()) / per:.0f} bytecodes, "
          f"{calls['set'] / per:.2f} kernel arguments set, "
          f"{calls['enqueue'] / per:.2f} launches per statement")
    for name, ops in own.most_common(args.top):
        print(f"{ops / (n - 1):9.1f}  {name}")


if __name__ == "__main__":
    main()
