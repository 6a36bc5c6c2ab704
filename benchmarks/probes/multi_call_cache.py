"""Host microseconds per split call with the kept calls of ``fuseloop.multi.calls`` and
without them (every part staged by its own look-ups, as before session 18), interleaved
in one process (issue 29): ``2*x - sin(y) + x*y`` evaluated and ``fl.sum(x*y)``
evaluated, over every device listed.  Per workload and side: the medians over
``--rounds`` rounds of each round's median over ``--repeat`` calls of the time from the
call to the last part's launch handed to its device (``fuseloop.multi.trace``'s
``"enqueued"``) and of the whole call (each call after a wait for the devices).  Parts
are small and their launches not deferred, so what is timed is the host's work.  The
clock is the host thread's CPU time (``--wall``: wall clock, for a GPU host).  Four PoCL
devices on a CPU::

    POCL_DEVICES="pthread pthread pthread pthread" FUSELOOP_HOST_PATH=0 \\
        python benchmarks/probes/multi_call_cache.py --devices 0,1,2,3
    # on a GPU host (2 GPUs, both backends):
    python benchmarks/probes/multi_call_cache.py --devices cuda:0,cuda:1 --wall
    python benchmarks/probes/multi_call_cache.py --devices opencl:0,opencl:1 --wall
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
import fuseloop.launching
from fuseloop.multi import calls, trace


def _without_calls() -> Callable[[], None]:
    """Turn the kept calls off (no key: none found, none kept); returns the undo."""
    saved = calls.found
    calls.found = lambda tag, parts: (None, None, None)  # type: ignore[assignment]

    def undo() -> None:
        calls.found = saved

    return undo


def _one_round(fn: Callable[[], Any], repeat: int, clock: Callable[[], float]
               ) -> tuple[float, float]:
    """(median us to the last part's launch, median us per call) over ``repeat`` calls."""
    stamps: list[float] = []

    def noted(what: str, part: int, device: Any) -> None:
        if what == "enqueued" and trace.events is not None:
            stamps.append(clock())

    last, whole = [], []
    saved = trace.note
    trace.note = noted  # (the stamps on the same clock)
    try:
        for _ in range(repeat):
            fl.synchronize()
            stamps.clear()
            with trace.tracing():
                t0 = clock()
                fn()
                t1 = clock()
            if stamps:
                last.append(stamps[-1] - t0)
            whole.append(t1 - t0)
    finally:
        trace.note = saved
    return (statistics.median(last) * 1e6 if last else float("nan"),
            statistics.median(whole) * 1e6)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", default="0,1,2,3")
    p.add_argument("--log2n", type=int, default=12)
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--wall", action="store_true", help="wall clock (default: thread CPU)")
    args = p.parse_args()
    fuseloop.launching.DEFER_MAX_ELEMENTS = 0  # (every launch enqueued at once)
    specs = [s.strip() for s in args.devices.split(",")]
    spec = [int(s) if s.isdigit() else s for s in specs]
    n = 1 << args.log2n
    with fl.device(spec):
        x = fl.random.uniform(n, dtype=np.float32, key=1).eval()
        y = fl.random.uniform(n, dtype=np.float32, key=2).eval()
    work = {"2*x - sin(y) + x*y": lambda: (2 * x - fl.sin(y) + x * y).eval(),
            "sum(x*y)": lambda: fl.sum(x * y).eval()}
    clock = time.perf_counter if args.wall else time.thread_time
    print(f"devices {specs}, {n} elements; host us ({'wall' if args.wall else 'thread CPU'}"
          f" clock), medians of {args.rounds} rounds x {args.repeat} calls, interleaved")
    print(f"{'workload':22s} {'side':>12s} {'last launch':>12s} {'call':>8s}")
    for name, fn in work.items():
        for _ in range(10):
            fn()
        found = calls.COUNTS[0]
        fn()
        assert calls.COUNTS[0] == found + 1, "the call was not found whole"
        sides: dict[str, list[tuple[float, float]]] = {"kept calls": [], "per part": []}
        for _ in range(args.rounds):
            sides["kept calls"].append(_one_round(fn, args.repeat, clock))
            undo = _without_calls()
            try:
                sides["per part"].append(_one_round(fn, args.repeat, clock))
            finally:
                undo()
        for side, got in sides.items():
            print(f"{name:22s} {side:>12s} {statistics.median(g[0] for g in got):12.1f} "
                  f"{statistics.median(g[1] for g in got):8.1f}")


if __name__ == "__main__":
    main()
