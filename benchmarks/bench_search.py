"""``fl.searchsorted`` and ``fl.isin`` (binary search, issue 27) against peers in one run.

Workloads: ``searchsorted`` of 2^N random float32 values into 2^M sorted float32 (both
sides), and ``isin`` of 2^N int32 against 2^M int32 (about half of them hits).  Rows:
fuseloop's binary search; with ``--old`` (default on a GPU) the all-pairs formulation it
replaced (one fused reduction comparing every pair, written here with fuseloop's own
functions: O(2^N * 2^M) work); peers ``numpy`` on a CPU device, ``cupy`` (and ``torch``
for searchsorted) on a GPU, each skipped with its reason when missing.  Every result is
checked against numpy once; times are medians of ``--repeat`` calls after warm-up; the
last column is the time over fuseloop's binary search (above 1: fuseloop is faster).
Usage::

    python benchmarks/bench_search.py [--device SPEC] [--log2-values 20] [--log2-sorted 16]
        [--repeat 10] [--old | --no-old]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

# (this checkout's fuseloop, not an installed one)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import fuseloop as fl
from fuseloop.bench.runner import median_time

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_segmented import Row, _attempt, print_rows  # (the suite's table and runner)


def _data(n: int, m: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(27)
    return {"values": rng.random(n, dtype=np.float32),
            "sorted": np.sort(rng.random(m, dtype=np.float32)),
            "elements": rng.integers(0, 2 * m, n, dtype=np.int32),
            "tests": rng.permutation(2 * m)[:m].astype(np.int32)}


def _check(got: Any, ref: np.ndarray) -> str:
    return "" if np.array_equal(np.asarray(got), ref) else "MISMATCH"


def _all_pairs_searchsorted(s: Any, v: Any, side: str) -> Any:
    """The formulation before issue 27's binary search: every pair compared."""
    a = fl.reshape(s, (1, s.shape[0]))
    b = fl.reshape(v, (v.shape[0], 1))
    return fl.sum(a <= b if side == "right" else a < b, axis=-1, dtype=np.int64)


def _all_pairs_isin(x: Any, t: Any) -> Any:
    return fl.any(fl.reshape(x, (x.shape[0], 1)) == fl.reshape(t, (1, t.shape[0])), axis=-1)


def _fuseloop(rows: list[Row], d: dict[str, np.ndarray], repeat: int, old: bool) -> None:
    v, s = fl.asarray(d["values"]), fl.asarray(d["sorted"])
    x, t = fl.asarray(d["elements"]), fl.asarray(d["tests"])
    impls = [("fuseloop binary search", fl.searchsorted, fl.isin)]
    if old:
        impls.append(("fuseloop all pairs (before)",
                      lambda s, v, side: _all_pairs_searchsorted(s, v, side),
                      _all_pairs_isin))
    for label, search, member in impls:
        for side in ("left", "right"):
            ref = np.searchsorted(d["sorted"], d["values"], side=side)

            def run(search: Any = search, side: str = side, ref: np.ndarray = ref
                    ) -> tuple[float, str]:
                note = _check(search(s, v, side=side).get(), ref)
                return median_time(lambda: search(s, v, side=side).eval(), fl.synchronize,
                                   repeat), note

            _attempt(rows, f"searchsorted {side}", label, run)
        ref = np.isin(d["elements"], d["tests"])

        def run_isin(member: Any = member, ref: np.ndarray = ref) -> tuple[float, str]:
            note = _check(member(x, t).get(), ref)
            return median_time(lambda: member(x, t).eval(), fl.synchronize, repeat), note

        _attempt(rows, "isin", label, run_isin)


def _numpy(rows: list[Row], d: dict[str, np.ndarray], repeat: int) -> None:
    for side in ("left", "right"):
        _attempt(rows, f"searchsorted {side}", "numpy",
                 lambda side=side: (median_time(
                     lambda: np.searchsorted(d["sorted"], d["values"], side=side),
                     lambda: None, repeat), ""))
    _attempt(rows, "isin", "numpy", lambda: (median_time(
        lambda: np.isin(d["elements"], d["tests"]), lambda: None, repeat), ""))


def _cupy(rows: list[Row], d: dict[str, np.ndarray], repeat: int) -> None:
    def run(side: str | None) -> tuple[float, str]:
        import cupy as cp

        sync = cp.cuda.Device().synchronize
        if side is None:
            x, t = cp.asarray(d["elements"]), cp.asarray(d["tests"])
            note = _check(cp.asnumpy(cp.isin(x, t)), np.isin(d["elements"], d["tests"]))
            return median_time(lambda: cp.isin(x, t), sync, repeat), note
        s, v = cp.asarray(d["sorted"]), cp.asarray(d["values"])
        note = _check(cp.asnumpy(cp.searchsorted(s, v, side=side)),
                      np.searchsorted(d["sorted"], d["values"], side=side))
        return median_time(lambda: cp.searchsorted(s, v, side=side), sync, repeat), note

    for side in ("left", "right"):
        _attempt(rows, f"searchsorted {side}", "cupy", lambda side=side: run(side))
    _attempt(rows, "isin", "cupy", lambda: run(None))


def _torch(rows: list[Row], d: dict[str, np.ndarray], repeat: int) -> None:
    def run(side: str | None) -> tuple[float, str]:
        import torch

        sync = torch.cuda.synchronize
        if side is None:
            x = torch.as_tensor(d["elements"], device="cuda")
            t = torch.as_tensor(d["tests"], device="cuda")
            note = _check(torch.isin(x, t).cpu().numpy(), np.isin(d["elements"], d["tests"]))
            return median_time(lambda: torch.isin(x, t), sync, repeat), note
        s = torch.as_tensor(d["sorted"], device="cuda")
        v = torch.as_tensor(d["values"], device="cuda")
        note = _check(torch.searchsorted(s, v, side=side).cpu().numpy(),
                      np.searchsorted(d["sorted"], d["values"], side=side))
        return median_time(lambda: torch.searchsorted(s, v, side=side), sync, repeat), note

    for side in ("left", "right"):
        _attempt(rows, f"searchsorted {side}", "torch", lambda side=side: run(side))
    _attempt(rows, "isin", "torch", lambda: run(None))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--log2-values", type=int, default=20, help="values searched (2**N)")
    p.add_argument("--log2-sorted", type=int, default=16, help="sorted values (2**M)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--old", action=argparse.BooleanOptionalAction, default=None,
                   help="also time the all-pairs formulation (default: on a GPU only)")
    args = p.parse_args(argv)
    if args.device:
        fl.set_device(args.device)
    dev = fl.get_device()
    n, m = 1 << args.log2_values, 1 << args.log2_sorted
    data = _data(n, m)
    print(f"device: {dev.name} ({dev.type}, {dev.backend}); 2^{args.log2_values} values, "
          f"2^{args.log2_sorted} sorted", flush=True)
    old = dev.type == "gpu" if args.old is None else args.old
    rows: list[Row] = []
    _fuseloop(rows, data, args.repeat, old)
    if dev.type == "gpu":
        _cupy(rows, data, args.repeat)
        _torch(rows, data, args.repeat)
    else:
        _numpy(rows, data, args.repeat)
    rows.sort(key=lambda r: r[0])  # (stable: fuseloop's rows first in each workload)
    print_rows(rows, {w: n for w, _, _, _ in rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
