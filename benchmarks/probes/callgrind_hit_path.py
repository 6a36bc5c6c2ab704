"""Instructions per cached call (valgrind's callgrind), fuseloop revisions side by side.

Wall times of a host path a few microseconds long drift with the machine's load; an
instruction count does not.  For each revision (git revisions, ``WT`` for the working
tree: copied as ``compare_host_overhead.py`` copies them) this runs a child process
under ``valgrind --tool=callgrind`` per case that warms it, then counts the
instructions of the main thread over ``--calls`` calls of the case only: collection is
switched on and off around the loop through callgrind's client requests (a small C
helper built with ``cc`` against ``valgrind/callgrind.h``).  The kernels are built by a
first run under ``valgrind --tool=none`` (PoCL sees other CPU features under valgrind,
so the kernels' keys differ from an ordinary run's).  PoCL's worker threads, which
run the kernels, are left out (``--separate-threads``), so the count is the host's: the
Python path and the driver's enqueue, including the flushes of deferred launches
(``--calls`` a multiple of 64 keeps the number of flushes the same per call).

Cases, on 1000 float32 (``((x * 2 + y) * x - y) / 3``, the host-overhead expression
of ``bench_elementwise.py``):

* ``build``: the expression built and dropped (the operators' share of ``eval``);
* ``eval``: the expression built and ``.eval()``-ed;
* ``fuse``: ``f(x, y)`` with ``f = fl.fuse`` of it (revisions without ``fl.fuse``: -);
* ``fuse-scalar``: ``g(x, y, s)``, the ``3`` a Python float argument (7 values in turn);
* ``seidel``: ``A[i, j] += A[i, j - 1]; A[i, j] /= 9.0`` on a 30 x 30 float64 array,
  ``j`` in turn (seidel_2d's inner loop: two statements per call);
* ``stencil``: ``x[1:-1] = 0.5 * (x[:-2] + x[2:])`` on 200 float64;
* ``trisolv``: ``x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]`` (n = 60), ``i`` in turn;
* ``cholesky``: ``A[r, c] -= fl.dot(A[r, :c], A[c, :c]); A[r, c] /= A[c, c]`` on a 40 x 40
  float64 array, ``(r, c)`` in turn over the 780 below the diagonal (cholesky's inner
  loop: two statements per call);
* ``durbin``: durbin's loop body on 200 float64 (a dot of a flipped view, ``y[:k] +=
  alpha * flip(y[:k])``, ``y[k] = alpha``), ``k`` in turn;
* ``held``: crc16's step on one byte of a ``for b in data`` loop (the elements held on
  the host, ``fuseloop.host_held``): ``cur = 0xFF & b``, then 8 times a test of
  ``(crc & 1) ^ (cur & 1)`` and shifts of ``crc`` (a Python int) and ``cur >>= 1``;
* ``chain400`` / ``tree400``: ``bench_lazy_build.py``'s 400-node builds (``r = r * 0.999
  + y`` 200 times; a pairwise sum of 200 products), built and dropped (not in the
  default cases: divide by 400 for a node; ``--calls 64`` is plenty).

The last three are loops of small statements, which the CPU device's host path
(``fuseloop.host_path``) computes with numpy: no kernel is launched.

``stmt:NAME`` counts one statement of ``statement_host_ab.py``'s pattern NAME (n = 64;
``FUSELOOP_HOST_PATH=0`` for the device path).  ``lvf:CASE:lazy`` and ``lvf:CASE:fuse``
count one call of ``lazy_vs_fuse.py``'s case
at its ``--big`` shapes (launches replaced by a no-op there, so only the host's work
per call is left), lazy ``.eval()`` or ``fl.fuse``; run them with
``FUSELOOP_HOST_PATH=0`` in the environment to count the device path.

Counts are reported, never asserted.  Slow: a minute or two per revision.

    python benchmarks/probes/callgrind_hit_path.py REV [REV ...] [--calls N] [--cases A,B]
                                                 [--device SPEC] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

HELPER = r"""
#include <valgrind/callgrind.h>
void fl_collect(void) { CALLGRIND_TOGGLE_COLLECT; }
"""
CASES = ("build", "eval", "fuse", "fuse-scalar", "seidel", "stencil", "trisolv", "chain400",
         "tree400", "cholesky", "durbin", "held")
DEFAULT_CASES = CASES[:7]


def child(calls: int, case: str | None) -> None:
    """Run in the copied revision's folder: warm each case, then (under callgrind)
    count ``case``'s loop; prints the cases this revision has."""
    import ctypes

    import numpy as np

    import fuseloop as fl

    rng = np.random.default_rng(1)
    x = fl.asarray(rng.random(1000, dtype=np.float32))
    y = fl.asarray(rng.random(1000, dtype=np.float32) + 1)
    scales = [float(k) for k in range(2, 9)]

    def expr(x: fl.Array, y: fl.Array) -> fl.Array:
        return ((x * 2 + y) * x - y) / 3

    loops = {"build": lambda i: expr(x, y), "eval": lambda i: expr(x, y).eval()}
    if hasattr(fl, "fuse"):
        f = fl.fuse(expr)
        g = fl.fuse(lambda x, y, s: ((x * 2 + y) * x - y) / s)
        loops["fuse"] = lambda i: f(x, y)
        loops["fuse-scalar"] = lambda i: g(x, y, scales[i % 7])
    a = fl.asarray(rng.random((30, 30)))
    s = fl.asarray(rng.random(200))
    lh = np.tril(rng.random((60, 60))) + np.eye(60) * 60
    low, b, xt = fl.asarray(lh), fl.asarray(rng.random(60)), fl.zeros(60, np.float64)

    def seidel(i: int) -> None:
        j = 1 + i % 28
        a[3, j] += a[3, j - 1]
        a[3, j] /= 9.0

    def stencil(i: int) -> None:
        s[1:-1] = 0.5 * (s[:-2] + s[2:])

    def trisolv(i: int) -> None:
        k = i % 60
        xt[k] = (b[k] - low[k, :k] @ xt[:k]) / low[k, k]

    spd = rng.random((40, 40))
    ch = fl.asarray(spd @ spd.T + 40 * np.eye(40))
    pairs = [(r, c) for r in range(1, 40) for c in range(r)]  # (780 offsets: more than a
    # step keeps launch plans for)
    rd, yd = fl.asarray(rng.random(200) / 200), fl.zeros(200, np.float64)
    carried = [1.0, -0.5]  # durbin's beta and alpha

    def cholesky(i: int) -> None:
        r, c = pairs[i % len(pairs)]
        ch[r, c] -= fl.dot(ch[r, :c], ch[c, :c])
        ch[r, c] /= ch[c, c]

    def durbin(i: int) -> None:
        k = 1 + i % 199
        beta = carried[0] * (1.0 - carried[1] * carried[1])
        alpha = -(rd[k] + fl.dot(fl.flip(rd[:k]), yd[:k])) / beta
        yd[:k] += alpha * fl.flip(yd[:k])
        yd[k] = alpha
        carried[:] = [beta, alpha]

    data = list(fl.asarray(rng.integers(0, 256, 64).astype(np.uint8)))

    def held(i: int) -> None:
        cur, crc = 0xFF & data[i % 64], 0xFFFF
        for _ in range(8):
            crc = (crc >> 1) ^ 0x8408 if (crc & 1) ^ (cur & 1) else crc >> 1
            cur >>= 1

    loops.update(seidel=seidel, stencil=stencil, trisolv=trisolv, cholesky=cholesky,
                 durbin=durbin, held=held)
    from bench_lazy_build import chain as chain400  # (benchmarks/)
    from bench_lazy_build import tree as tree400
    loops.update(chain400=lambda i: chain400(fl, x, y), tree400=lambda i: tree400(fl, x, y))
    if case is not None and case.startswith("lvf:"):
        loops = {case: _lvf_loop(fl, case)}
    if case is not None and case.startswith("stmt:"):
        loops = {case: _stmt_loop(fl, case)}
    # (the first run warms only the cases asked for)
    wanted = os.environ["FL_CASES"].split(",") if case is None else [case]
    for name, loop in loops.items():
        if name not in wanted:
            continue
        for i in range(3 * 64):
            loop(i)
        fl.synchronize()
        if case is not None:
            toggle = ctypes.CDLL(os.environ["FL_CALLGRIND_HELPER"]).fl_collect
            toggle()
            for i in range(calls):
                loop(i)
            toggle()
            fl.synchronize()
        print(name, flush=True)
    if case is None:  # (the first run, last: the lvf cases asked for, which change recipes)
        for name in (c for c in wanted if c.startswith("lvf:")):
            _lvf_loop(fl, name)
            print(name, flush=True)
        for name in (c for c in wanted if c.startswith("stmt:")):
            step = _stmt_loop(fl, name)
            for i in range(3 * 64):
                step(i)
            fl.synchronize()
            print(name, flush=True)


def _lvf_loop(fl: Any, case: str) -> Callable[[int], None]:
    """One call of ``lazy_vs_fuse.py``'s case ``lvf:NAME:lazy`` (or ``:fuse``), big."""
    sys.path.insert(0, str(HERE))
    from lazy_vs_fuse import prepare

    _, name, which = case.split(":")
    lazy, fuse = prepare(fl, name, big=True)
    one = lazy if which == "lazy" else fuse
    return lambda i: one(1)


def _stmt_loop(fl: Any, case: str) -> Callable[[int], None]:
    """The statement of ``statement_host_ab.py``'s pattern ``stmt:NAME`` (n = 64)."""
    sys.path.insert(0, str(HERE))
    from statement_host_ab import statements

    return statements(fl, 64)[case.split(":")[1]][0]


def main_thread_total(prefix: Path) -> int:
    """The main thread's instructions from callgrind's per-thread files (``-01``)."""
    text = Path(f"{prefix}-01").read_text()
    found = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
    return int(found.group(1)) if found else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="*")
    ap.add_argument("--calls", type=int, default=640)
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES),
                    help="comma-separated cases to count")
    ap.add_argument("--device", default="cpu",
                    help="FUSELOOP_DEVICE for every revision (older ones know fewer forms)")
    ap.add_argument("--keep", help="copy callgrind's output files here (callgrind_annotate)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.calls, None if args.child == "-" else args.child)
        return
    from compare_host_overhead import copy_package

    tmp = Path(tempfile.mkdtemp(prefix="fuseloop-callgrind-"))
    helper = tmp / "fl_callgrind.so"
    (tmp / "helper.c").write_text(HELPER)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(helper), str(tmp / "helper.c")],
                   check=True)
    cache_root = Path(os.environ.get("FUSELOOP_CACHE_DIR", tmp / "cache"))
    print(f"instructions per call (main thread; {args.calls} calls after warm-up)")
    cases = [c for c in CASES if c in args.cases.split(",")] + [
        c for c in args.cases.split(",") if c.startswith(("lvf:", "stmt:"))]
    print("| revision | " + " | ".join(cases) + " |")
    print("| --- |" + " ---: |" * len(cases), flush=True)
    for k, rev in enumerate(args.revs):
        home = tmp / f"v{k}"
        home.mkdir()
        copy_package(rev, "fuseloop", home)
        env = dict(os.environ, PYTHONPATH=str(home), FL_CALLGRIND_HELPER=str(helper),
                   FL_CASES=",".join(cases),
                   PYTHONHASHSEED="0",
                   FUSELOOP_DEVICE=args.device,
                   FUSELOOP_CACHE_DIR=str(cache_root.with_name(cache_root.name + f"-cg{k}")))

        def me(case: str) -> list[str]:
            return [sys.executable, str(Path(__file__).resolve()), "--child", case,
                    "--calls", str(args.calls)]

        # first under valgrind without a tool, building in-process: fills this revision's
        # disk cache for the device as PoCL sees it under valgrind (its CPU features
        # differ there, and so do the kernels' keys and binaries)
        present = subprocess.run(["valgrind", "--tool=none", *me("-")], cwd=home,
                                 env=dict(env, FUSELOOP_COMPILE="inline"), check=True,
                                 capture_output=True, text=True).stdout.split()
        cells = []
        for case in cases:
            if case not in present:
                cells.append("-")
                continue
            prefix = tmp / f"cg.v{k}.{case}"
            subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no",
                            "--separate-threads=yes", f"--callgrind-out-file={prefix}",
                            *me(case)], cwd=home, env=env, check=True, capture_output=True)
            cells.append(f"{main_thread_total(prefix) / args.calls:,.0f}")
            if args.keep:
                Path(args.keep).mkdir(parents=True, exist_ok=True)
                shutil.copy(f"{prefix}-01", Path(args.keep) / f"{k}-{Path(rev).name}.{case}")
        print(f"| {rev} | " + " | ".join(cells) + " |", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
