"""Host instructions per cached lazy call as a GPU's host runs it (issue 25), by stage,
fuseloop revisions side by side (valgrind's callgrind; one revision per process).

The CPU device is presented as a 132-unit GPU (``type="gpu"``: the GPU's recipes,
splits and launch rules, still run by PoCL) and ``FUSELOOP_HOST_PATH=0`` is set, so a
call takes the device path a GPU's takes.  Cases are ``lazy_call_ab.py``'s, at
``--n`` elements (small enough for PoCL under valgrind; ``--kernels`` prints the
kernels per call at two sizes, without valgrind, to choose one with the GPU size's
launches).  Each call runs in three stages, each called through a C trampoline
(``fl_stage_build`` and so on, a small helper built with ``cc``) so that callgrind's
inclusive count of the trampoline is the stage's count:

* ``build``: the expression built (helper lazybuild's part);
* ``eval``: ``.eval()`` of it: signature look-up, the plan's replay, argument binding,
  allocation, launches enqueued or deferred;
* ``sync``: ``fl.synchronize()``: deferred launches enqueued, then the wait (PoCL's
  worker threads, which run the kernels, are left out: ``--separate-threads``).

Also reported: the instructions inside the driver's enqueue and argument setting
(``clEnqueueNDRangeKernel``, ``clSetKernelArg``, inclusive) per call.  Kernels are built
first under ``valgrind --tool=none`` (PoCL sees other CPU features under valgrind).
Counts are reported, never asserted.

    python benchmarks/probes/callgrind_lazy_stages.py a87f94d WT [--n 65536] [--calls 64]
    python benchmarks/probes/callgrind_lazy_stages.py WT --kernels
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

HELPER = r"""
typedef void (*fn)(void);
void fl_stage_build(fn f) { f(); }
void fl_stage_eval(fn f) { f(); }
void fl_stage_sync(fn f) { f(); }
"""
STAGES = ("build", "eval", "sync")
DRIVER = ("clEnqueueNDRangeKernel", "clSetKernelArg")
DEFAULT_CASES = ("small-softmax-1k,small-softmax-4k,softmax-128,vecmat,argmax-rows,"
                 "cross-entropy,sum-all-keepdims")


def _fake_gpu(fl: object) -> None:
    """The CPU device as a 132-unit GPU (lazy_fuse_parity.py's ``--fake-gpu``)."""
    os.environ["FUSELOOP_COMPILE"] = "inline"  # (a compile worker finds no such device)
    cpu = fl.set_device("cpu")  # type: ignore[attr-defined]
    fl.set_device(dataclasses.replace(  # type: ignore[attr-defined]
        cpu, index=9132, type="gpu", compute_units=132, max_work_group_size=1024))


def child(case: str, n: int, calls: int, counted: bool) -> None:
    """Warm ``case``, then (``counted``) run ``calls`` calls through the trampolines."""
    import numpy as np
    from lazy_call_ab import CASES, Ops, _inputs

    import fuseloop as fl

    _fake_gpu(fl)
    ops = Ops(fl)
    args = [fl.asarray(a) for a in _inputs(case, n, np.random.default_rng(0))]
    fn = CASES[case]
    held: list = [None, None]

    def build() -> None:
        held[0] = fn(ops, *args)

    def evaluate() -> None:
        held[1] = held[0].eval()
        held[0] = None

    def sync() -> None:
        fl.synchronize()
        held[1] = None

    for _ in range(3 * 64):
        build()
        evaluate()
        sync()
    if not counted:
        fl.reset_stats()
        for _ in range(8):
            build()
            evaluate()
            sync()
        print(f"{case}: {fl.stats()['kernels_launched'] / 8:g} kernels per call")
        return
    lib = ctypes.CDLL(os.environ["FL_STAGES_HELPER"])
    proto = ctypes.CFUNCTYPE(None)
    calls_of = [(getattr(lib, f"fl_stage_{s}"), proto(f)) for s, f in
                zip(STAGES, (build, evaluate, sync))]
    for _ in range(calls):
        for stage, f in calls_of:
            stage(f)


def _inclusive(path: Path, names: tuple[str, ...]) -> dict[str, int]:
    """Inclusive instructions of functions whose name contains each of ``names``."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                           str(path)], capture_output=True, text=True, check=True).stdout
    found = dict.fromkeys(names, 0)
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S*:(\S+)", line) or \
            re.match(r"\s*([\d,]+)\s+\S*:(\S+)", line)
        if not m:
            continue
        for name in names:
            if m.group(2).startswith(name) and not found[name]:
                found[name] = int(m.group(1).replace(",", ""))
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="*", help="git revisions, folders holding fuseloop/, WT")
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--n", type=int, default=1 << 16)
    ap.add_argument("--calls", type=int, default=64)
    ap.add_argument("--kernels", action="store_true",
                    help="print kernels per call at --n and at 2^24, no valgrind")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.n, args.calls, not args.kernels)
        return
    from lazy_call_ab import _package

    tmp = Path(tempfile.mkdtemp(prefix="callgrind-stages-"))
    helper = tmp / "stages.so"
    (tmp / "stages.c").write_text(HELPER)
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", "-o", str(helper), str(tmp / "stages.c")],
                   check=True)
    cases = args.cases.split(",")
    if not args.kernels:
        print(f"instructions per call (main thread; {args.calls} calls after warm-up, "
              f"n={args.n}): build / eval / sync (driver: enqueue + set-arg)")
        print("| case | " + " | ".join(args.revs) + " |")
        print("| --- |" + " ---: |" * len(args.revs), flush=True)
    homes = [_package(rev, tmp) for rev in args.revs]
    rows: dict[str, list[str]] = {c: [] for c in cases}
    for k, (rev, home) in enumerate(zip(args.revs, homes)):
        env = dict(os.environ, PYTHONPATH=str(home), FL_STAGES_HELPER=str(helper),
                   PYTHONHASHSEED="0", FUSELOOP_HOST_PATH="0",
                   FUSELOOP_CACHE_DIR=str(tmp / f"cache{k}"))
        for case in cases:
            me = [sys.executable, str(Path(__file__).resolve()), "--child", case,
                  "--n", str(args.n), "--calls", str(args.calls)]
            if args.kernels:
                for n in (args.n, 1 << 24):
                    me[5] = str(n)
                    out = subprocess.run([*me, "--kernels"], env=env, capture_output=True,
                                         text=True)
                    print(f"{rev} n={n} {out.stdout.strip() or out.stderr[-400:]}", flush=True)
                continue
            subprocess.run(["valgrind", "--tool=none", *me, "--kernels"], env=env, check=True,
                           capture_output=True)
            out = tmp / f"cg.{k}.{case}"
            subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes",
                            "--collect-atstart=no", "--toggle-collect=fl_stage_*",
                            f"--callgrind-out-file={out}", *me], env=env, check=True,
                           capture_output=True)
            got = _inclusive(Path(f"{out}-01"), tuple(f"fl_stage_{s}" for s in STAGES) + DRIVER)
            per = [got[f"fl_stage_{s}"] / args.calls / 1e3 for s in STAGES]
            drv = sum(got[d] for d in DRIVER) / args.calls / 1e3
            rows[case].append(" / ".join(f"{v:.1f}k" for v in per) + f" ({drv:.1f}k)")
    if not args.kernels:
        for case, cells in rows.items():
            print(f"| {case} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
