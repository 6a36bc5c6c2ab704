"""Where a reduction of a concrete array stops being cheaper by numpy than as kernels on
the CPU device (issue 25): the crossover ``ops.reductions.REDUCE_NOW_MAX`` should sit at.

For each element count, single reductions of one concrete float32 (or int32) array, each
fetched to the host (``.get()``, as the broad suite does), are timed three ways in turn: numpy on
the host array, fuseloop as configured now, and fuseloop's kernels only (the host path
and the at-once numpy paths off).  Printed: the CPU time's median (every thread of the
process: PoCL's workers too) and the wall time's least (the run least disturbed by other
load), microseconds.

    python benchmarks/probes/reduce_now_crossover.py [--sizes 2^12 2^16 ...] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import fuseloop as fl
from fuseloop import host_path, host_products
from fuseloop.ops import reductions


def _cases(m: object, x: object, k: object, c: object) -> dict[str, Callable[[], object]]:
    def ev(out: object) -> object:  # (fetched, as the broad suite does)
        return np.asarray(out.get()) if hasattr(out, "get") else out  # type: ignore[union-attr]

    return {
        "sum all": lambda: ev(m.sum(x)),  # type: ignore[attr-defined]
        "sum rows": lambda: ev(m.sum(x, axis=1)),  # type: ignore[attr-defined]
        "sum cols": lambda: ev(m.sum(x, axis=0)),  # type: ignore[attr-defined]
        "max rows": lambda: ev(m.max(x, axis=1)),  # type: ignore[attr-defined]
        "int max cols": lambda: ev(m.max(k, axis=0)),  # type: ignore[attr-defined]
        "int sum rows": lambda: ev(m.sum(k, axis=1)),  # type: ignore[attr-defined]
        "sum axes 0,2": lambda: ev(m.sum(c, axis=(0, 2))),  # type: ignore[attr-defined]
        "argmin all": lambda: ev(m.argmin(x)),  # type: ignore[attr-defined]
        "argmax rows": lambda: ev(m.argmax(x, axis=1)),  # type: ignore[attr-defined]
    }


def _size(text: str) -> int:
    return 2 ** int(text[2:]) if text.startswith("2^") else int(text)


def _kernels_only() -> tuple:
    saved = host_path.HOST_MAX_WORK, host_products.ARG_NOW_MAX, reductions.REDUCE_NOW_MAX
    host_path.HOST_MAX_WORK, host_products.ARG_NOW_MAX, reductions.REDUCE_NOW_MAX = 0, 0, 0
    return saved


def _restore(saved: tuple) -> None:
    host_path.HOST_MAX_WORK, host_products.ARG_NOW_MAX, reductions.REDUCE_NOW_MAX = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["2^12", "2^14", "2^16", "2^18", "2^20",
                                                   "2^22"])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--cases", default="", help="comma-separated case names (default all)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{fl.get_device()}: CPU us median (wall us least)")
    print(f"{'size':>11} {'case':14} {'numpy':>17} {'now':>17} {'kernels':>17}  "
          "numpy/kernels cpu (wall)")
    for n in map(_size, args.sizes):
        side = round(n ** 0.5)
        xs = rng.random((side, side), dtype=np.float32)
        ks = rng.integers(-1000, 1000, (side, side)).astype(np.int32)
        cs = rng.random((max(1, n // (64 * 64)), 64, 64), dtype=np.float32)
        dev = _cases(fl, fl.asarray(xs), fl.asarray(ks), fl.asarray(cs))
        ref = _cases(np, xs, ks, cs)
        names = args.cases.split(",") if args.cases else list(dev)
        for name in names:
            kinds = [ref[name], dev[name], dev[name]]
            for k, fn in enumerate(kinds):  # (warm: kernels built, plans recorded)
                saved = _kernels_only() if k == 2 else None
                fn(), fn()
                if saved:
                    _restore(saved)
            cpu: list[list[float]] = [[], [], []]
            wall: list[list[float]] = [[], [], []]
            for _ in range(args.repeats):
                for k, fn in enumerate(kinds):
                    saved = _kernels_only() if k == 2 else None
                    c0, w0 = time.process_time(), time.perf_counter()
                    fn()
                    cpu[k].append(time.process_time() - c0)
                    wall[k].append(time.perf_counter() - w0)
                    if saved:
                        _restore(saved)
            c = [statistics.median(v) * 1e6 for v in cpu]
            w = [min(v) * 1e6 for v in wall]
            cols = " ".join(f"{a:8.1f} ({b:6.1f})" for a, b in zip(c, w))
            print(f"{side:>5}x{side:<5} {name:14} {cols}  {c[0] / c[2]:5.2f} ({w[0] / w[2]:4.2f})",
                  flush=True)


if __name__ == "__main__":
    main()
