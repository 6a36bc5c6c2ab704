"""CPU time of column-like reductions on the CPU device by the ``cpu-rows`` recipe's
``column_width`` (outputs per work-item; fewer work-items than ``column_items`` per
compute unit split the reduced axis in two stages), widths interleaved in one process.
``rule``: the recipe's defaults (``column_wide`` outputs per work-item in a split's first
stage with pieces of at least ``column_wide_rows`` rows, see ``splits._column_pieces``);
each width ``w``: ``column_width=w`` everywhere (``column_wide`` off).

Each case is fetched to the host (``.get()``); reductions of concrete arrays run as
kernels here (``ops.reductions.REDUCE_NOW_MAX`` = 0).  Printed: median CPU ms (every
thread of the process: PoCL's workers too) per width, numpy's beside.

    python benchmarks/probes/cpu_column_width.py [--widths 256,1024,4096] [--sizes 2^20 2^24]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import fuseloop as fl
from fuseloop.ops import reductions
from fuseloop.recipes.rows import CPU_COLUMN_WIDE, CPU_COLUMN_WIDTH


def _cases(m: object, x: object, k: object, b: object) -> dict[str, Callable[[], object]]:
    def ev(out: object) -> object:
        return np.asarray(out.get()) if hasattr(out, "get") else out  # type: ignore[union-attr]

    def colstat() -> object:
        d = x - m.mean(x, axis=0)  # type: ignore[attr-defined, operator]
        return ev(m.mean(d * d, axis=0))  # type: ignore[attr-defined]

    return {
        "sum cols": lambda: ev(m.sum(x, axis=0)),  # type: ignore[attr-defined]
        "int max cols": lambda: ev(m.max(k, axis=0)),  # type: ignore[attr-defined]
        "colstat": colstat,
        "(N,64) var": lambda: ev(m.var(b, axis=0)),  # type: ignore[attr-defined]
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="256,1024,2048,4096")
    ap.add_argument("--sizes", nargs="+", default=["2^16", "2^20", "2^22", "2^24"])
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    reductions.REDUCE_NOW_MAX = 0
    widths = [int(w) for w in args.widths.split(",")]
    rng = np.random.default_rng(0)
    print(f"{fl.get_device()}: CPU ms, median of {args.repeats}; rule, column_width " +
          " ".join(map(str, widths)) + ", numpy")
    for n in (2 ** int(s[2:]) for s in args.sizes):
        side = round(n ** 0.5)
        xs = rng.random((side, side), dtype=np.float32)
        ks = rng.integers(-1000, 1000, (side, side)).astype(np.int32)
        bs = rng.random((n // 64, 64), dtype=np.float32)
        dev = _cases(fl, fl.asarray(xs), fl.asarray(ks), fl.asarray(bs))
        ref = _cases(np, xs, ks, bs)
        for name, fn in dev.items():
            runs: list[Callable[[], object]] = []
            # (each under a recipe of its own: a ``use`` block costs the same to each)
            for w, wide in [(CPU_COLUMN_WIDTH, CPU_COLUMN_WIDE), *((w, w) for w in widths)]:
                def run(fn: Callable[[], object] = fn, w: int = w, wide: int = wide
                        ) -> object:
                    with fl.recipes.use("cpu-rows", "reduction", column_width=w,
                                        column_wide=wide):
                        return fn()
                runs.append(run)
            runs.append(ref[name])
            want = runs[-1]()
            ok = all(np.allclose(r(), want, rtol=1e-3, atol=1e-3) for r in runs[:-1])
            cpu: list[list[float]] = [[] for _ in runs]
            for _ in range(args.repeats):
                for k, r in enumerate(runs):
                    c0 = time.process_time()
                    r()
                    cpu[k].append(time.process_time() - c0)
            cols = " ".join(f"{statistics.median(c) * 1e3:8.3f}" for c in cpu)
            print(f"{side:>5}x{side:<5} {name:13} {cols}  {'ok' if ok else 'MISMATCH'}",
                  flush=True)


if __name__ == "__main__":
    main()
