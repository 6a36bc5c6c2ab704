"""Where a reduction to a small result stops being faster on the host path (numpy in the
device buffers' host memory) than as a kernel on the CPU device (issue 25).

For each element count read, small-result reductions of device arrays are timed with
arg-reductions of concrete arrays computed at once by numpy at any size
(``host_products.ARG_NOW_MAX`` past it; the rest as the host path decides) and with the
host path off (``HOST_MAX_WORK = 0``: kernels), numpy on host arrays alongside, on the
CPU and wall clocks (the CPU clock counts every thread of the process: PoCL's workers
too).  The largest count where numpy still wins a kind of statement is where its limit
should be.

    python benchmarks/probes/host_reduce_threshold.py [--sizes 2^12 2^16 ...] [--repeats 50]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import fuseloop as fl
from fuseloop import host_path, host_products


def _time(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median CPU and wall seconds per call of ``fn`` (then synchronised), in 5
    batches (the wall clock: what a caller waits, PoCL's threads woken included)."""
    fn()
    fl.synchronize()
    cpu, wall = [], []
    for _ in range(5):
        t0, w0 = time.process_time(), time.perf_counter()
        for _ in range(repeats):
            fn()
        fl.synchronize()
        cpu.append((time.process_time() - t0) / repeats)
        wall.append((time.perf_counter() - w0) / repeats)
    return float(np.median(cpu)), float(np.median(wall))


def _statements(m: object, x: object, y: object, k: object
                ) -> dict[str, Callable[[], object]]:
    """Reductions of a square ``x``, ``y`` (float32) and ``k`` (int32), each evaluated."""
    def ev(out: object) -> object:
        return out.eval() if hasattr(out, "eval") else out

    def lse(v: object) -> object:
        top = m.max(v, axis=1, keepdims=True)  # type: ignore[attr-defined]
        return top[:, 0] + m.log(m.sum(m.exp(v - top), axis=1))  # type: ignore[attr-defined]

    return {
        "argmax rows": lambda: ev(m.argmax(x, axis=1)),  # type: ignore[attr-defined]
        "argmin all": lambda: ev(m.argmin(x)),  # type: ignore[attr-defined]
        "int max cols": lambda: ev(m.max(k, axis=0)),  # type: ignore[attr-defined]
        "sum(x*y)": lambda: ev(m.sum(x * y)),  # type: ignore[attr-defined, operator]
        "sum rows": lambda: ev(m.sum(x, axis=1)),  # type: ignore[attr-defined]
        "sum all": lambda: ev(m.sum(x)),  # type: ignore[attr-defined]
        "logsumexp rows": lambda: ev(lse(x)),
        "6-op row sum": lambda: ev(m.sum(m.sqrt(x * x + y * y + 1.0) * (x - y) / 3.0,  # type: ignore[attr-defined, operator]
                                         axis=1)),
    }


def _size(text: str) -> int:
    return 2 ** int(text[2:]) if text.startswith("2^") else int(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["2^12", "2^14", "2^16", "2^18", "2^20"])
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    saved = host_path.HOST_MAX_WORK, host_products.ARG_NOW_MAX
    print("CPU us (wall us)   size     statement       numpy        host         kernel"
          "       host/kernel (wall)")
    for n in map(_size, args.sizes):
        side = round(n ** 0.5)
        xs, ys = (rng.standard_normal((side, side)).astype(np.float32) for _ in "xy")
        ks = rng.integers(-1000, 1000, (side, side)).astype(np.int32)
        dev = _statements(fl, fl.asarray(xs), fl.asarray(ys), fl.asarray(ks))
        ref = _statements(np, xs, ys, ks)
        reps = max(3, args.repeats * 65536 // max(n, 65536))
        for name, fn in dev.items():
            t_np = _time(ref[name], reps)
            host_products.ARG_NOW_MAX = 1 << 40
            t_host = _time(fn, reps)
            host_path.HOST_MAX_WORK = 0
            t_dev = _time(fn, reps)
            host_path.HOST_MAX_WORK, host_products.ARG_NOW_MAX = saved
            cols = " ".join(f"{c * 1e6:6.1f} ({w * 1e6:6.1f})" for c, w in (t_np, t_host, t_dev))
            print(f"{side:>5}x{side:<6} {name:15} {cols} {t_host[0] / t_dev[0]:5.2f} "
                  f"({t_host[1] / t_dev[1]:4.2f})")


if __name__ == "__main__":
    main()
