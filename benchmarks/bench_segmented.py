"""Segmented primitives: ``fl.reduce_by_key`` (and ``fl.inclusive_scan_by_key``) against
peers in one run.

Keys are sorted random integers with about ``n / --run`` distinct values (runs of
``--run`` elements on average), values float32; every result is checked against numpy
(float64 sums) once.  Peers:

* CPU device: numpy, the run starts found with ``np.flatnonzero`` on the keys and
  ``np.add.reduceat`` (the scan: ``np.cumsum`` minus each run's offset);
* GPU device: cupy (``cupy.add.reduceat`` where this cupy has it, and the run ids from a
  ``cumsum`` of the start flags scattered with ``cupyx.scatter_add``), torch
  (``unique_consecutive`` with counts and ``segment_reduce``), each skipped with its
  reason when missing.

Times are medians of ``--repeat`` calls after warm-up; the ratio column is the peer's
time over fuseloop's (above 1: fuseloop is faster).  Usage::

    python benchmarks/bench_segmented.py [--device SPEC] [--log2 N] [--run R] [--repeat K]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import median_time

Row = tuple[str, str, float | None, str]


def _data(n: int, run: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    keys = np.sort(rng.integers(0, max(1, n // run), n)).astype(np.int32)
    return keys, rng.random(n, dtype=np.float32)


def _reference(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return keys[starts], np.add.reduceat(values.astype(np.float64), starts)


def _close(got_keys: Any, got: Any, ref: tuple[np.ndarray, np.ndarray]) -> str:
    got_keys, got = np.asarray(got_keys), np.asarray(got)
    if got_keys.shape != ref[0].shape or not np.array_equal(got_keys, ref[0]):
        return "MISMATCH (keys)"
    return "" if np.allclose(got, ref[1], rtol=1e-3, atol=1e-3) else "MISMATCH (values)"


def _attempt(rows: list[Row], workload: str, impl: str,
             fn: Callable[[], tuple[float, str]]) -> None:
    try:
        t, note = fn()
    except Exception as exc:  # a missing or failing peer is reported, not fatal
        rows.append((workload, impl, None, f"skipped ({type(exc).__name__}: {str(exc)[:70]})"))
        return
    rows.append((workload, impl, t, note))


def _fuseloop(rows: list[Row], keys: np.ndarray, values: np.ndarray, repeat: int,
              ref: tuple[np.ndarray, np.ndarray]) -> None:
    k, v = fl.asarray(keys), fl.asarray(values)

    def reduce() -> tuple[float, str]:
        out_k, out_v = fl.reduce_by_key(k, v)
        note = _close(out_k.get(), out_v.get(), ref)
        return median_time(lambda: fl.reduce_by_key(k, v), fl.synchronize, repeat), note

    def scan() -> tuple[float, str]:
        got = fl.inclusive_scan_by_key(k, v).get()
        ends = np.r_[np.flatnonzero(keys[1:] != keys[:-1]), keys.size - 1]
        note = "" if np.allclose(got[ends], ref[1], rtol=1e-3, atol=1e-3) else "MISMATCH"
        return median_time(lambda: fl.inclusive_scan_by_key(k, v).eval(), fl.synchronize,
                           repeat), note

    _attempt(rows, "reduce_by_key", "fuseloop", reduce)
    _attempt(rows, "scan_by_key", "fuseloop", scan)


def _numpy(rows: list[Row], keys: np.ndarray, values: np.ndarray, repeat: int,
           ref: tuple[np.ndarray, np.ndarray]) -> None:
    def reduce_np() -> tuple[np.ndarray, np.ndarray]:
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        return keys[starts], np.add.reduceat(values, starts)

    def scan_np() -> np.ndarray:
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        cs = np.cumsum(values)
        offset = np.r_[0, cs[starts[1:] - 1]]
        return cs - np.repeat(offset, np.diff(np.r_[starts, keys.size]))

    def reduce() -> tuple[float, str]:
        note = _close(*reduce_np(), ref)
        return median_time(reduce_np, lambda: None, repeat), note

    _attempt(rows, "reduce_by_key", "numpy reduceat", reduce)
    _attempt(rows, "scan_by_key", "numpy cumsum - offsets",
             lambda: (median_time(scan_np, lambda: None, repeat), ""))


def _cupy(rows: list[Row], keys: np.ndarray, values: np.ndarray, repeat: int,
          ref: tuple[np.ndarray, np.ndarray]) -> None:
    def prepare() -> tuple[Any, Any, Any, Callable[[], None]]:
        import cupy as cp

        return cp, cp.asarray(keys), cp.asarray(values), cp.cuda.Device().synchronize

    def reduceat() -> tuple[float, str]:
        cp, k, v, sync = prepare()

        def run() -> tuple[Any, Any]:
            starts = cp.flatnonzero(cp.concatenate([cp.ones(1, bool), k[1:] != k[:-1]]))
            return k[starts], cp.add.reduceat(v, starts)

        got = run()
        note = _close(cp.asnumpy(got[0]), cp.asnumpy(got[1]), ref)
        return median_time(run, sync, repeat), note

    def scatter() -> tuple[float, str]:
        import cupyx

        cp, k, v, sync = prepare()

        def run() -> tuple[Any, Any]:
            flags = cp.concatenate([cp.ones(1, bool), k[1:] != k[:-1]])
            ids = cp.cumsum(flags, dtype=cp.int32) - 1
            starts = cp.flatnonzero(flags)
            out = cp.zeros(starts.size, v.dtype)
            cupyx.scatter_add(out, ids, v)
            return k[starts], out

        got = run()
        note = _close(cp.asnumpy(got[0]), cp.asnumpy(got[1]), ref)
        return median_time(run, sync, repeat), note

    _attempt(rows, "reduce_by_key", "cupy add.reduceat", reduceat)
    _attempt(rows, "reduce_by_key", "cupy cumsum + scatter_add", scatter)


def _torch(rows: list[Row], keys: np.ndarray, values: np.ndarray, repeat: int,
           ref: tuple[np.ndarray, np.ndarray]) -> None:
    def segment_reduce() -> tuple[float, str]:
        import torch

        k, v = torch.from_numpy(keys).cuda(), torch.from_numpy(values).cuda()

        def run() -> tuple[Any, Any]:
            uk, counts = torch.unique_consecutive(k, return_counts=True)
            return uk, torch.segment_reduce(v, "sum", lengths=counts)

        got = run()
        note = _close(got[0].cpu().numpy(), got[1].cpu().numpy(), ref)
        return median_time(run, torch.cuda.synchronize, repeat), note

    _attempt(rows, "reduce_by_key", "torch segment_reduce", segment_reduce)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--log2", type=int, default=24, help="elements: 2**LOG2 (default 24)")
    p.add_argument("--run", type=int, default=64, help="average run length (default 64)")
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args(argv)
    if args.device:
        fl.set_device(args.device)
    dev = fl.get_device()
    n = 1 << args.log2
    keys, values = _data(n, args.run)
    ref = _reference(keys, values)
    print(f"device: {dev.name} ({dev.type}); n = 2^{args.log2}, {ref[0].size} runs, "
          "int32 keys, float32 values", flush=True)
    rows: list[Row] = []
    _fuseloop(rows, keys, values, args.repeat, ref)
    if dev.type == "gpu":
        _cupy(rows, keys, values, args.repeat, ref)
        _torch(rows, keys, values, args.repeat, ref)
    else:
        _numpy(rows, keys, values, args.repeat, ref)
    print_rows(rows, {w: n for w, *_ in rows})
    return 0


def print_rows(rows: list[Row], sizes: dict[str, int]) -> None:
    """One table: each row's time, elements per second (``sizes[workload]`` elements) and
    time over the workload's first fuseloop row's."""
    first: dict[str, float] = {}
    for w, impl, t, _ in rows:
        if impl.startswith("fuseloop") and t and w not in first:
            first[w] = t
    print(f"\n{'workload':17s} {'implementation':28s} {'ms':>9s} {'Melem/s':>9s} "
          f"{'peer/fuseloop':>13s}  note")
    for w, impl, t, note in rows:
        if t is None:
            print(f"{w:17s} {impl:28s} {'-':>9s} {'-':>9s} {'-':>13s}  {note}")
            continue
        ratio = f"{t / first[w]:.2f}" if w in first else "-"
        print(f"{w:17s} {impl:28s} {1e3 * t:9.2f} {sizes[w] / t / 1e6:9.0f} {ratio:>13s}  {note}")


if __name__ == "__main__":
    sys.exit(main())
