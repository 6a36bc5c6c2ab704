"""Host instructions per cached lazy call as a GPU's host runs it (issue 25), by stage,
fuseloop revisions side by side (valgrind's callgrind; one revision per process).

The CPU device is presented as a 132-unit GPU (``type="gpu"``: the GPU's recipes,
splits and launch rules, still run by PoCL) and ``FUSELOOP_HOST_PATH=0`` is set, so a
call takes the device path a GPU's takes.  Cases are ``lazy_call_ab.py``'s, at
``--n`` elements (small enough for PoCL under valgrind; ``--kernels`` prints the
kernels per call at two sizes, without valgrind, to choose one with the GPU size's
launches).  One process per revision warms every case (its kernels built there, as
PoCL sees the CPU under valgrind), then counts each case's calls stage by stage:
collection is switched on around that stage of each call only (callgrind's client
requests, through a small C helper built with ``cc``) and dumped per case and stage:

* ``build``: the expression built (helper lazybuild's part);
* ``eval``: ``.eval()`` of it: signature look-up, the plan's replay, argument binding,
  allocation, launches enqueued or deferred;
* ``sync``: ``fl.synchronize()``: deferred launches enqueued, then the wait (PoCL's
  worker threads, which run the kernels, are left out: ``--separate-threads``).

Counts are reported, never asserted (a few minutes per revision on a loaded machine).

    python benchmarks/probes/callgrind_lazy_stages.py a87f94d WT [--n 65536] [--calls 32]
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

STAGES = ("build", "eval", "sync")
DEFAULT_CASES = ("small-softmax-1k,small-softmax-4k,softmax-128,vecmat,argmax-rows,"
                 "cross-entropy,sum-all-keepdims")


HELPER = r"""
#include <valgrind/callgrind.h>
void fl_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void fl_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
"""


def _fake_gpu(fl: Any) -> None:
    """The CPU device as a 132-unit GPU (lazy_fuse_parity.py's ``--fake-gpu``)."""
    os.environ["FUSELOOP_COMPILE"] = "inline"  # (a compile worker finds no such device)
    cpu = fl.set_device("cpu")
    fl.set_device(dataclasses.replace(cpu, index=9132, type="gpu", compute_units=132,
                                      max_work_group_size=1024))


def _stages(fl: Any, case: str, n: int) -> tuple[Callable[[], None], ...]:
    """(build, eval, sync) of one call of ``case``."""
    import numpy as np
    from lazy_call_ab import CASES, Ops, _inputs

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

    return build, evaluate, sync


def child(cases: list[str], n: int, calls: int, counted: bool) -> None:
    """Warm every case, then (``counted``) count ``calls`` calls of each stage of each
    case, collection switched on around that stage only, dumped as ``case:stage``; else
    print the kernels per call."""
    import fuseloop as fl

    _fake_gpu(fl)
    lib = ctypes.CDLL(os.environ["FL_STAGES_HELPER"]) if counted else None
    for case in cases:
        stages = _stages(fl, case, n)
        for _ in range(40):
            for f in stages:
                f()
        if lib is None:
            fl.reset_stats()
            for _ in range(8):
                for f in stages:
                    f()
            print(f"n={n} {case}: {fl.stats()['kernels_launched'] / 8:g} kernels per call",
                  flush=True)
            continue
        for k, stage in enumerate(STAGES):
            lib.fl_dump(b"-")  # (what ran since the last dump: not counted)
            for _ in range(calls):
                for j, f in enumerate(stages):
                    if j == k:
                        lib.fl_toggle()
                        f()
                        lib.fl_toggle()
                    else:
                        f()
            lib.fl_dump(f"{case}:{stage}".encode())


def _dumps(prefix: Path) -> dict[str, int]:
    """Main-thread instructions of each dump named ``case:stage`` (``{prefix}.N-01``)."""
    found = {}
    for path in prefix.parent.glob(f"{prefix.name}.*-01"):
        text = path.read_text()
        trigger = re.search(r"^desc: Trigger: Client Request: (\S+)", text, re.M)
        total = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
        if trigger and total and trigger.group(1) != "-":
            found[trigger.group(1)] = int(total.group(1))
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="*", help="git revisions, folders holding fuseloop/, WT")
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--n", type=int, default=1 << 16)
    ap.add_argument("--calls", type=int, default=32)
    ap.add_argument("--kernels", action="store_true",
                    help="print kernels per call at --n and at 2^24, no valgrind")
    ap.add_argument("--cache", help="the revisions' disk cache of kernels (shared: kernels "
                    "of one source are one entry); a later run loads them, where building "
                    "under valgrind takes minutes")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    cases = args.cases.split(",")
    if args.child:
        child(cases, args.n, args.calls, not args.kernels)
        return
    from lazy_call_ab import _package

    tmp = Path(tempfile.mkdtemp(prefix="callgrind-stages-"))
    helper = tmp / "stages.so"
    (tmp / "stages.c").write_text(HELPER)
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", "-o", str(helper), str(tmp / "stages.c")],
                   check=True)
    rows: dict[str, list[str]] = {c: [] for c in cases}
    for k, rev in enumerate(args.revs):
        home = _package(rev, tmp)
        path = os.pathsep.join([str(home), *filter(None, [os.environ.get("PYTHONPATH")])])
        env = dict(os.environ, PYTHONPATH=path, FL_STAGES_HELPER=str(helper),
                   PYTHONHASHSEED="0", FUSELOOP_HOST_PATH="0",
                   FUSELOOP_CACHE_DIR=str(args.cache or tmp / f"cache{k}"))
        me = [sys.executable, str(Path(__file__).resolve()), "--child", "--cases",
              args.cases, "--calls", str(args.calls), "--n"]
        if args.kernels:
            for n in (args.n, 1 << 24):
                out = subprocess.run([*me, str(n), "--kernels"], env=env, capture_output=True,
                                     text=True)
                print(f"{rev}: {out.stdout.strip() or out.stderr[-400:]}", flush=True)
            continue
        out = tmp / f"cg.{k}"
        subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes",
                        "--collect-atstart=no", f"--callgrind-out-file={out}", *me,
                        str(args.n)], env=env, check=True, capture_output=True)
        got = _dumps(out)
        for case in cases:
            per = [got.get(f"{case}:{s}", 0) / args.calls / 1e3 for s in STAGES]
            rows[case].append(" / ".join(f"{v:.1f}k" for v in per))
        print(f"{rev} done", file=sys.stderr, flush=True)
    if not args.kernels:
        print(f"instructions per call (main thread; {args.calls} calls after warm-up, "
              f"n={args.n}): build / eval / sync")
        print("| case | " + " | ".join(args.revs) + " |")
        print("| --- |" + " ---: |" * len(args.revs))
        for case, cells in rows.items():
            print(f"| {case} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
