"""Host CPU microseconds of a split ``float(fl.sum(x*y))`` by phase (issue 29), fuseloop
revisions interleaved call by call in one process (``compare_host_overhead``'s
``import_revisions``): ``build`` (the call's start until its parts' staging began: the
product's parts built, the reduction dispatched), ``stage`` (until part 0's first
enqueue), ``launch`` (until the last part's submit), ``last`` (the three: what every
device but the first waits before its part starts), ``reads`` (until the last partial
was read), ``tail`` (until the float is in Python: the combine and the result) and
``call``.  Each is the median over ``--calls`` calls, each after a wait for the devices,
on the host thread's CPU clock (what other processes take is not counted), with tiny
parts whose launches are not deferred.  ``--profile N``: then the N functions taking the
most own time (us per call, cProfile on the same clock) in the last revision's calls.
``--wide-limit B``: buffers past ``B`` bytes count as past int32 (as the tests lower
it): small parts take the path of 2 GiB ones (2**30 float32 over two GPUs).
Four PoCL devices on a CPU::

    POCL_DEVICES="pthread pthread pthread pthread" FUSELOOP_HOST_PATH=0 \\
        python benchmarks/probes/multi_sum_phases.py 9c3dcfa WT [--devices 0,1,2,3] [--as-gpu]
    # on a GPU host (wall clock, the GPUs' own parts):
    python benchmarks/probes/multi_sum_phases.py ../base WT --devices cuda:0,cuda:1 --wall \
        --log2n 30 --calls 50 --profile 12
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from compare_host_overhead import import_revisions

PHASES = ("build", "stage", "launch", "last", "reads", "tail", "call")
#: the modules holding their own ``INT32_LIMIT`` (``tests/test_multi_wide.py``'s list)
WIDE_MODULES = ("launching", "run_plans", "evaluate", "plan_ready", "plan_lengths",
                "prebuild", "passes.build", "multi.replay", "multi.calls")


def _setup(fl: Any, spec: list[Any], n: int, clock: Any, wide: int | None,
           as_gpu: bool = False) -> tuple[Any, Any, Any]:
    """(x, y, the trace module with its stamps on ``clock``) for revision ``fl``
    (``as_gpu``: its devices presented as GPUs, so the parts take the GPU recipes)."""
    if as_gpu:
        import dataclasses

        found = fl.devices()  # (indices only: a CPU's PoCL devices)
        spec = [dataclasses.replace(found[int(s)], type="gpu") for s in spec]
    import_module(fl.__name__ + ".launching").DEFER_MAX_ELEMENTS = 0
    for name in WIDE_MODULES if wide else ():
        module = import_module(f"{fl.__name__}.{name}")
        if hasattr(module, "INT32_LIMIT"):
            module.INT32_LIMIT = wide
    trace = import_module(fl.__name__ + ".multi.trace")

    def noted(what: str, part: int, device: Any) -> None:
        if trace.events is not None:
            trace.events.append((what, part, device.index, clock()))

    trace.note = noted
    with fl.device(spec):
        x = fl.random.uniform(n, dtype=np.float32, key=1).eval()
        y = fl.random.uniform(n, dtype=np.float32, key=2).eval()
    for _ in range(20):  # (plans recorded, the call kept)
        float(fl.sum(x * y))
    return x, y, trace


def one_call(fl: Any, x: Any, y: Any, trace: Any, clock: Any) -> tuple[dict[str, float],
                                                                     float]:
    """Each phase's microseconds of one call, and its value."""
    fl.synchronize()
    with trace.tracing() as events:
        t0 = clock()
        value = float(fl.sum(x * y))
        t1 = clock()
    at = {}
    for what, part, _, t in events:
        at.setdefault((what, part), t)
        if what in ("enqueued", "read done"):
            at[(what, "last")] = t
    staged = at.get(("staging begun", -1), t0)
    first = at.get(("enqueue begun", 0), staged)
    last = at.get(("enqueued", "last"), first)
    read = at.get(("read done", "last"), last)
    us = 1e6
    return dict(build=(staged - t0) * us, stage=(first - staged) * us,
                launch=(last - first) * us, last=(last - t0) * us, reads=(read - last) * us,
                tail=(t1 - read) * us, call=(t1 - t0) * us), value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("revs", nargs="+", help="git revisions (WT: the working tree) or folders")
    p.add_argument("--devices", default="0,1,2,3",
                   help="comma-separated device specs (indices or names like cuda:0)")
    p.add_argument("--log2n", type=int, default=12)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--wall", action="store_true", help="wall clock, not the thread's CPU")
    p.add_argument("--profile", type=int, default=0, help="functions to list (0: none)")
    p.add_argument("--as-gpu", action="store_true",
                   help="CPU devices presented as GPUs (the GPU recipes: a first stage of "
                   "pieces and its partials, as a GPU part's)")
    p.add_argument("--wide-limit", type=int, default=None,
                   help="bytes past which a buffer counts as past int32 (default: int32's)")
    args = p.parse_args(argv)
    clock = time.perf_counter if args.wall else time.thread_time
    spec = [int(s) if s.isdigit() else s for s in args.devices.split(",")]
    mods = import_revisions(args.revs, "msum")
    ready = [_setup(fl, spec, 1 << args.log2n, clock, args.wide_limit, args.as_gpu)
             for fl in mods]
    got: list[list[dict[str, float]]] = [[] for _ in mods]
    values = set()
    for _ in range(args.calls):  # (interleaved: each call of each revision in turn)
        for k, (fl, (x, y, trace)) in enumerate(zip(mods, ready)):
            phases, value = one_call(fl, x, y, trace, clock)
            got[k].append(phases)
            values.add(round(value, 2))
    print(f"float(fl.sum(x*y)), 2^{args.log2n} float32 over {args.devices}; host "
          f"{'wall' if args.wall else 'thread CPU'} us, medians of {args.calls} calls")
    print(f"{'revision':24s} " + " ".join(f"{ph:>7s}" for ph in PHASES))
    for rev, rows in zip(args.revs, got):
        print(f"{rev[-24:]:24s} " + " ".join(
            f"{statistics.median(r[ph] for r in rows):7.1f}" for ph in PHASES))
    print("values:", sorted(values))
    if args.profile:
        _profile(mods[-1], *ready[-1], clock, args.calls, args.profile)
    return 0 if len(values) == 1 else 1


def _profile(fl: Any, x: Any, y: Any, trace: Any, clock: Any, calls: int, top: int) -> None:
    """The ``top`` functions by own time in ``calls`` calls (each after a wait)."""
    prof = cProfile.Profile(clock)
    for _ in range(calls):
        fl.synchronize()
        prof.enable()
        float(fl.sum(x * y))
        prof.disable()
    stats: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    print(f"most own time in {fl.__name__}'s calls (us per call: own, with callees; calls):")
    for (file, line, name), v in sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]:
        print(f"  {v[2] * 1e6 / calls:7.1f} {v[3] * 1e6 / calls:7.1f} {v[1] / calls:4.0f} "
              f"{file.rsplit('/', 2)[-1][:28]}:{line} {name[:30]}")


if __name__ == "__main__":
    sys.exit(main())
