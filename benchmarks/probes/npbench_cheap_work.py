"""Host path against kernels for cheap elementwise statements above the host path's
element limit (issue 26: mandelbrot2's ``np.logical_not(I, I)`` on 40000 booleans ran
as a kernel every iteration): for each size, statements of one to a few cheap
operations (logical not, comparisons, an add, a complex square), timed with the host
path forced on (``HOST_MAX_WORK`` huge) and off (kernels), numpy alongside, in the
process's CPU time (all threads: PoCL's workers too), interleaved.  Where the host
path wins is what the cost-weighted limit (``host_path.cheap_enough``) should admit.
Reported, never asserted.

    python benchmarks/probes/npbench_cheap_work.py [--sizes 4096 16384 65536] [--repeats 50]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop import host_path


def _statements(xp: Any, b: Any, x: Any, y: Any, z: Any) -> dict[str, Callable[[], Any]]:
    def ev(v: Any) -> Any:
        return v.eval() if hasattr(v, "eval") else v

    return {
        "not(b, b)": lambda: xp.logical_not(b, b),
        "x > 0.5": lambda: ev(x > 0.5),
        "x + y": lambda: ev(x + y),
        "x*2 + y > 1": lambda: ev(x * 2 + y > 1),
        "z*z + z": lambda: ev(z * z + z),
        "abs(x-y)*3+x*y": lambda: ev(abs(x - y) * 3 + x * y),
    }


def _time(fn: Callable[[], Any], repeats: int) -> float:
    fl.synchronize()
    t0 = time.process_time()
    for _ in range(repeats):
        fn()
    fl.synchronize()
    return (time.process_time() - t0) / repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[4096, 16384, 65536, 262144])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    saved = host_path.HOST_MAX_WORK
    print(f"{fl.get_device().name}; CPU us per statement, median of {args.rounds} rounds")
    print(f"{'statement':16s} {'size':>8s} {'numpy':>8s} {'host':>8s} {'kernels':>8s}")
    try:
        for n in args.sizes:
            rng = np.random.default_rng(0)
            hb, hx, hy = rng.random(n) > 0.5, rng.random(n), rng.random(n)
            hz = (rng.random(n) + 1j * rng.random(n)) * 0.1
            ref = _statements(np, hb, hx, hy, hz)
            ours = _statements(fl, *(fl.asarray(v) for v in (hb, hx, hy, hz)))
            for name, f in ours.items():
                times: dict[str, list[float]] = {"numpy": [], "host": [], "kernels": []}
                for limit in (1 << 62, 0):  # (warm: kernels built)
                    host_path.HOST_MAX_WORK = limit
                    f()
                for _ in range(args.rounds):
                    times["numpy"].append(_time(ref[name], args.repeats))
                    for label, limit in (("host", 1 << 62), ("kernels", 0)):
                        host_path.HOST_MAX_WORK = limit
                        times[label].append(_time(f, args.repeats))
                    host_path.HOST_MAX_WORK = saved
                m = {k: statistics.median(v) * 1e6 for k, v in times.items()}
                print(f"{name:16s} {n:8d} {m['numpy']:8.1f} {m['host']:8.1f} "
                      f"{m['kernels']:8.1f}", flush=True)
    finally:
        host_path.HOST_MAX_WORK = saved


if __name__ == "__main__":
    main()
