"""Column-like reductions on the CPU device that do not split their reduced axis (many
outputs, fewer rows than a split's pieces), against numpy, interleaved run by run: the
least wall time and the median CPU time (every thread of the process, PoCL's workers
too) of fuseloop's lazy call (``.eval()`` then ``fl.synchronize()``) and numpy's, and
numpy's over fuseloop's (above 1: faster).  The reduced arrays are lazy (``x * 1``) or
concrete (a concrete array's reduction above ``REDUCE_NOW_MAX`` is a kernel too).
Run once per checkout (``PYTHONPATH=<checkout>``), alternating, to compare revisions.

    PYTHONPATH=. python benchmarks/probes/cpu_column_blocks.py [--log2 22] [--repeats 21]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl


def _cases(n: int, rng: np.random.Generator) -> dict[str, tuple[Any, Callable[..., Any]]]:
    """name -> (numpy input, the reduction of an array module ``m`` and an input)."""
    f32 = lambda shape: rng.random(shape, dtype=np.float32)  # noqa: E731
    i32 = lambda shape: rng.integers(-1000, 1000, shape).astype(np.int32)  # noqa: E731
    out: dict[str, tuple[Any, Callable[..., Any]]] = {}
    for rows in (64, 256, 512):
        out[f"sum ({rows}, {n // rows}) axis 0"] = (
            f32((rows, n // rows)), lambda m, x: m.sum(x, axis=0))
    out[f"int32 max ({256}, {n // 256}) axis 0"] = (
        i32((256, n // 256)), lambda m, x: m.max(x, axis=0))
    out[f"mean-centred sum ({256}, {n // 256})"] = (
        f32((256, n // 256)), lambda m, x: m.sum((x - m.mean(x, axis=0)) ** 2, axis=0))
    out[f"sum (256, {n // 16384}, 64) axes (0, 2)"] = (
        f32((256, n // 16384, 64)), lambda m, x: m.sum(x, axis=(0, 2)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log2", type=int, default=22)
    ap.add_argument("--repeats", type=int, default=21)
    args = ap.parse_args()
    print(f"{fl.__file__}\n{fl.get_device()}: ms, {args.repeats} interleaved runs")
    for name, (h, fn) in _cases(1 << args.log2, np.random.default_rng(0)).items():
        x = fl.asarray(h)

        def ours(fn: Callable[..., Any] = fn, x: Any = x) -> Any:
            out = fn(fl, x).eval()
            fl.synchronize()
            return out

        def theirs(fn: Callable[..., Any] = fn, h: Any = h) -> Any:
            return fn(np, h)

        ok = np.allclose(ours().get(), theirs(), rtol=1e-4, atol=1e-3)
        wall: list[list[float]] = [[], []]
        cpu: list[list[float]] = [[], []]
        for _ in range(args.repeats):
            for k, run in enumerate((ours, theirs)):
                w, c = time.perf_counter(), time.process_time()
                run()
                cpu[k].append(time.process_time() - c)
                wall[k].append(time.perf_counter() - w)
        w0, w1 = min(wall[0]) * 1e3, min(wall[1]) * 1e3
        c0, c1 = (statistics.median(c) * 1e3 for c in cpu)
        print(f"{name:34} wall min {w0:7.3f} / numpy {w1:7.3f} = {w1 / w0:5.2f}   "
              f"cpu {c0:7.3f} / {c1:7.3f} = {c1 / c0:5.2f}{'' if ok else '  MISMATCH'}",
              flush=True)


if __name__ == "__main__":
    main()
