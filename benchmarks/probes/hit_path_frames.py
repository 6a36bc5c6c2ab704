"""Python frames and files the steady-state (cached) hit path passes through (issue 24).

Counts, with ``sys.setprofile``, the Python function calls (frames entered), the
distinct functions and the distinct source files (all, and fuseloop's own) of one
call each of:

* ``eval``: ``(((x * 2 + y) * x - y) / 3).eval()`` (the build and the evaluation: the
  host-overhead expression of ``bench_elementwise.py`` and ``compare_host_overhead.py``);
* ``get``: ``(2*x + y).get()`` (build, evaluation, flush of the deferred launch, read);
* ``fuse``: ``f(x, y)`` with ``f`` the ``@fl.fuse`` of the first expression (skipped by
  a fuseloop without ``fl.fuse``);
* ``flush``: the enqueue of one deferred launch (``fl.synchronize()`` after one
  ``.eval()``: the part of the launch the calls above defer).

x and y are 1000 float32.  Each case is warmed first (kernels compiled, plans made), so
what is counted is the steady state.  C calls (builtins, pyopencl) are counted apart;
the probe's own frames (the lambdas calling each case) are not counted.
It imports the ``fuseloop`` found first on ``sys.path`` (run it from the checkout to
measure, e.g. ``cd /tmp/base && python /path/to/hit_path_frames.py``).  Counts are
reported, never asserted.

    python benchmarks/probes/hit_path_frames.py [--list] [--device SPEC]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
import fuseloop as fl


def count(call: Callable[[], Any]) -> tuple[Counter, Counter]:
    """(Python functions entered, C functions called) during ``call()``, with counts."""
    py: Counter = Counter()
    c: Counter = Counter()

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_filename == __file__:
                return
            py[(os.path.relpath(code.co_filename), code.co_firstlineno, code.co_name)] += 1
        elif event == "c_call":
            c[getattr(arg, "__qualname__", repr(arg))] += 1

    sys.setprofile(prof)
    try:
        call()
    finally:
        sys.setprofile(None)
    # (the profiler's own exit from this frame's callee is not a call; drop setprofile)
    c.pop("setprofile", None)
    return py, c


def cases() -> dict[str, Callable[[], Any]]:
    rng = np.random.default_rng(0)
    x = fl.asarray(rng.random(1000, dtype=np.float32))
    y = fl.asarray(rng.random(1000, dtype=np.float32))

    def expr(x: Any, y: Any) -> Any:
        return ((x * 2 + y) * x - y) / 3

    def flush() -> None:
        fl.synchronize()

    found: dict[str, Callable[[], Any]] = {
        "eval": lambda: expr(x, y).eval(),
        "get": lambda: (2 * x + y).get(),
    }
    if hasattr(fl, "fuse"):
        f = fl.fuse(expr)
        found["fuse"] = lambda: f(x, y)
    found["flush"] = flush
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="list the frames of each case")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    fl.set_device(args.device)
    print(f"fuseloop from {os.path.relpath(os.path.dirname(fl.__file__))}")
    package = os.path.dirname(os.path.abspath(fl.__file__))
    all_cases = cases()
    for name, call in all_cases.items():
        if name == "flush":
            continue
        for _ in range(200):  # warm: compiled, planned, this thread's kernel objects made
            call()
        fl.synchronize()
    print("| case | Python frames | distinct functions | files | fuseloop's files | C calls |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    listed = []
    for name, call in all_cases.items():
        if name == "flush":
            all_cases["eval"]()  # one deferred launch to flush
        py, c = count(call)
        files = {f for f, _, _ in py}
        ours = {f for f in files if os.path.abspath(f).startswith(package)}
        print(f"| {name} | {sum(py.values())} | {len(py)} | {len(files)} | {len(ours)} | "
              f"{sum(c.values())} |")
        listed.append((name, py, c))
        fl.synchronize()
    if args.list:
        for name, py, c in listed:
            print(f"\n{name}:")
            for (f, line, fn), k in py.items():
                print(f"  {k:3d} {f}:{line} {fn}")
            print("  C: " + ", ".join(f"{n} x{k}" for n, k in c.most_common()))


if __name__ == "__main__":
    main()
