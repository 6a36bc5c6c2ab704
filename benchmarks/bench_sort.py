"""``fl.sort`` and ``fl.argsort`` of 2^24 float32 and int32 against peers in one run.

fuseloop's radix sort (:mod:`fuseloop.ops.radix_sort`) with each of its passes' ways
(``radix_sort.VARIANT``: "classic", "onesweep" and "fused", or those of
``--variants``) and, in
the same run, the
pyopencl ``RadixSort`` it replaced (``radix_sort.ENABLED = False``); peers: cupy's
``sort`` / ``argsort`` (CUB) and ``torch.sort`` on a GPU, ``numpy.sort`` (and
``argsort(kind="stable")``) on a CPU, each skipped with its reason when missing.  The
data are random (float32 normal, int32 over the whole range); every result is checked
against numpy once.  Times are medians of ``--repeat`` calls after warm-up; the last
column is the peer's time over fuseloop's (above 1: fuseloop is faster).  Usage::

    python benchmarks/bench_sort.py [--device SPEC] [--log2 N] [--repeat K] [--no-old]
        [--variants classic,onesweep,fused] [--sweep] [--pass-variants] [--speculate]

``--pass-variants`` times the one-sweep pass kernel's variants (``PASS_VARIANTS``).
``--speculate`` times the fused variant without and with ``radix_sort.SPECULATE``
("early", "late", "side": the first pass enqueued before the histograms are read back;
"all": a pass every byte, no read),
alternating call by call, on float32 and on integer-valued float32 (byte 0 the same in
every key: the speculative pass copies it straight).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# (this checkout's fuseloop, not an installed one: the settings timed are this branch's)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import fuseloop as fl
from fuseloop.bench.runner import median_time
from fuseloop.ops import radix_sort

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_segmented import Row, _attempt, print_rows  # (the suite's table and runner)


def _data(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(27)
    return {"float32": rng.standard_normal(n).astype(np.float32),
            "int32": rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32)}


def _check(got: Any, ref: np.ndarray) -> str:
    return "" if np.array_equal(np.asarray(got), ref) else "MISMATCH"


def _fuseloop(rows: list[Row], data: dict[str, np.ndarray], repeat: int, impl: str,
              new: bool, variant: str | None = None) -> None:
    for name, a in data.items():
        x = fl.asarray(a)
        for op, ref in (("sort", np.sort(a)), ("argsort", np.argsort(a, kind="stable"))):
            fn = getattr(fl, op)

            def run(fn: Any = fn, ref: np.ndarray = ref) -> tuple[float, str]:
                radix_sort.ENABLED, radix_sort.VARIANT = new, variant
                try:
                    note = _check(fn(x).get(), ref)  # noqa: B023 (run now, in the loop)
                    return (median_time(lambda: fn(x).eval(), fl.synchronize, repeat),  # noqa: B023
                            note)
                finally:
                    radix_sort.ENABLED, radix_sort.VARIANT = True, None

            _attempt(rows, f"{op} {name}", impl, run)


def _sweep(rows: list[Row], a: np.ndarray, repeat: int) -> None:
    """fl.sort and fl.argsort of ``a`` with each layout (radix_sort.GPU_GROUP and
    MAX_PER_ITEM; CPU_GROUP on a CPU device; less where local memory is short)."""
    saved = radix_sort.GPU_GROUP, radix_sort.CPU_GROUP, radix_sort.MAX_PER_ITEM
    x = fl.asarray(a)
    try:
        for group in (128, 256):
            for per in (8, 16, 32):
                radix_sort.GPU_GROUP = radix_sort.CPU_GROUP = group
                radix_sort.MAX_PER_ITEM = per
                for op, ref, values in (("sort", np.sort(a), False),
                                        ("argsort", np.argsort(a, kind="stable"), True)):
                    got = radix_sort.layout_for(x.device, 4, values, a.size)
                    used = f"layout {tuple(got) if got else None} "
                    fn = getattr(fl, op)

                    def run(used: str = used, fn: Any = fn,
                            ref: np.ndarray = ref) -> tuple[float, str]:
                        note = used + _check(fn(x).get(), ref)
                        return median_time(lambda: fn(x).eval(), fl.synchronize,
                                           repeat), note

                    _attempt(rows, f"{op} float32", f"fuseloop group {group} per <= {per}",
                             run)
    finally:
        radix_sort.GPU_GROUP, radix_sort.CPU_GROUP, radix_sort.MAX_PER_ITEM = saved
    # the count kernel's copies of its histogram (radix_sort.GPU_COPIES; CPU_COPIES on a
    # CPU device) at the default layout: the skewed top byte of normal floats
    saved_copies = radix_sort.GPU_COPIES, radix_sort.CPU_COPIES
    try:
        for copies in (1, 4, 8, 16):
            radix_sort.GPU_COPIES = radix_sort.CPU_COPIES = copies
            ref = np.sort(a)

            def run_copies(ref: np.ndarray = ref) -> tuple[float, str]:
                return (median_time(lambda: fl.sort(x).eval(), fl.synchronize, repeat),
                        _check(fl.sort(x).get(), ref))

            _attempt(rows, "sort float32", f"fuseloop histogram copies {copies}", run_copies)
    finally:
        radix_sort.GPU_COPIES, radix_sort.CPU_COPIES = saved_copies
    # the one-sweep look-back's status words read at once (radix_sort.LOOKBACK), fused
    saved_lookback = radix_sort.LOOKBACK
    try:
        for lookback in (1, 4, 8):
            ref = np.sort(a)

            def run_lookback(ref: np.ndarray = ref, lookback: int = lookback
                             ) -> tuple[float, str]:
                radix_sort.LOOKBACK, radix_sort.VARIANT = lookback, "fused"
                try:
                    return (median_time(lambda: fl.sort(x).eval(), fl.synchronize, repeat),
                            _check(fl.sort(x).get(), ref))
                finally:
                    radix_sort.VARIANT = None

            _attempt(rows, "sort float32", f"fuseloop fused look-back {lookback}",
                     run_lookback)
    finally:
        radix_sort.LOOKBACK = saved_lookback


#: --pass-variants: the one-sweep pass kernel's variants (radix_sort's settings), each
#: timed fused on sort and argsort of float32, taking turns call by call
PASS_VARIANTS: dict[str, dict[str, Any]] = {
    "nibbles": {"RANKING": "nibbles"},
    "match": {"RANKING": "match"},
    "match per 32": {"RANKING": "match", "SWEEP_PER": 32},
    "match per 24": {"RANKING": "match", "SWEEP_PER": 24},
    "match volatile look-back 4": {"RANKING": "match", "LOOKBACK_VOLATILE": True},
    "match raking scan": {"RANKING": "match", "RAKE_SCAN": True},
}


def _pass_variants(rows: list[Row], a: np.ndarray, repeat: int) -> None:
    """fl.sort and fl.argsort of ``a`` by the fused one-sweep passes with each of
    PASS_VARIANTS, taking turns (see :func:`_alternate`)."""
    saved = radix_sort.VARIANT
    try:
        radix_sort.VARIANT = "fused"
        x = fl.asarray(a)
        for op, ref in (("sort", np.sort(a)), ("argsort", np.argsort(a, kind="stable"))):
            got = _alternate(getattr(fl, op), x, ref, repeat, PASS_VARIANTS)
            for label, (t, note) in got.items():
                rows.append((f"{op} float32", f"fuseloop fused {label}", t, note))
    finally:
        radix_sort.VARIANT = saved


#: --speculate: radix_sort.SPECULATE settings timed with the fused variant
SPECULATE_MODES = {f"speculate {m}": {"SPECULATE": m}
                   for m in (None, "early", "late", "side", "all")}


def _alternate(fn: Any, x: Any, ref: np.ndarray, repeat: int,
               modes: dict[str, dict[str, Any]]) -> dict[str, tuple[float | None, str]]:
    """Each of ``modes``' (radix_sort's settings by label) median time and check of
    ``fn(x)``, the modes taking turns call by call (a drifting clock or a warming card
    touches them alike) after one checked, warming call each."""
    names = {k for settings in modes.values() for k in settings}
    saved = {k: getattr(radix_sort, k) for k in names}

    def use(settings: dict[str, Any]) -> None:
        for k in names:
            setattr(radix_sort, k, settings.get(k, saved[k]))

    notes: dict[str, str] = {}
    times: dict[str, list[float]] = {m: [] for m in modes}
    try:
        for mode, settings in modes.items():
            use(settings)
            notes[mode] = _check(fn(x).get(), ref)
            fn(x).eval()
        fl.synchronize()
        for _ in range(repeat):
            for mode, settings in modes.items():
                use(settings)
                t0 = time.perf_counter()
                fn(x).eval()
                fl.synchronize()
                times[mode].append(time.perf_counter() - t0)
    finally:
        use(saved)
    return {m: (float(np.median(times[m])), notes[m]) for m in modes}


def _speculate(rows: list[Row], a: np.ndarray, repeat: int) -> None:
    """fl.sort and fl.argsort of ``a`` (float32) and of ``a`` rounded (integer-valued:
    byte 0 of every key the same) by the fused variant with each of SPECULATE_MODES,
    the modes taking turns call by call (a drifting clock or a warming card touches
    them alike); each time is the median of ``repeat`` calls."""
    saved = radix_sort.VARIANT
    try:
        radix_sort.VARIANT = "fused"
        for label, data in (("float32", a), ("float32 integral", np.round(a * 100))):
            data = data.astype(np.float32)
            x = fl.asarray(data)
            for op, ref in (("sort", np.sort(data)),
                            ("argsort", np.argsort(data, kind="stable"))):
                try:
                    got = _alternate(getattr(fl, op), x, ref, repeat, SPECULATE_MODES)
                except Exception as exc:  # (reported in the table, as _attempt does)
                    got = {m: (None, f"skipped ({type(exc).__name__}: {str(exc)[:60]})")
                           for m in SPECULATE_MODES}
                for mode, (t, note) in got.items():
                    rows.append((f"{op} {label}", f"fuseloop fused {mode}", t, note))
                if fl.get_device().type == "gpu" and label != "float32":
                    _cupy(rows, {label: data}, repeat, only=op)  # (float32's: main's)
    finally:
        radix_sort.VARIANT = saved


def _numpy(rows: list[Row], data: dict[str, np.ndarray], repeat: int) -> None:
    for name, a in data.items():
        _attempt(rows, f"sort {name}", "numpy sort",
                 lambda a=a: (median_time(lambda: np.sort(a), lambda: None, repeat), ""))
        _attempt(rows, f"argsort {name}", "numpy argsort stable",
                 lambda a=a: (median_time(lambda: np.argsort(a, kind="stable"),
                                          lambda: None, repeat), ""))


def _cupy(rows: list[Row], data: dict[str, np.ndarray], repeat: int,
          only: str | None = None) -> None:
    """cupy's sort and argsort of each of ``data`` (``only``: that one of them)."""
    for name, a in data.items():
        def run(op: str, a: np.ndarray = a) -> tuple[float, str]:
            import cupy as cp

            x, fn = cp.asarray(a), getattr(cp, op)
            ref = np.sort(a) if op == "sort" else np.argsort(a, kind="stable")
            note = _check(cp.asnumpy(fn(x)), ref)
            return median_time(lambda: fn(x), cp.cuda.Device().synchronize, repeat), note

        for op in ("sort", "argsort") if only is None else (only,):
            _attempt(rows, f"{op} {name}", f"cupy {op}", lambda run=run, op=op: run(op))


def _torch(rows: list[Row], data: dict[str, np.ndarray], repeat: int) -> None:
    for name, a in data.items():
        def run(op: str, a: np.ndarray = a) -> tuple[float, str]:
            import torch

            x = torch.from_numpy(a).cuda()
            if op == "sort":
                note = _check(torch.sort(x).values.cpu().numpy(), np.sort(a))
                fn = lambda: torch.sort(x)  # noqa: E731
            else:
                got = torch.sort(x, stable=True).indices.cpu().numpy()
                note = _check(got, np.argsort(a, kind="stable"))
                fn = lambda: torch.sort(x, stable=True)  # noqa: E731
            return median_time(fn, torch.cuda.synchronize, repeat), note

        _attempt(rows, f"sort {name}", "torch sort", lambda run=run: run("sort"))
        _attempt(rows, f"argsort {name}", "torch sort stable (indices)",
                 lambda run=run: run("argsort"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--log2", type=int, default=24, help="elements: 2**LOG2 (default 24)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--no-old", action="store_true",
                   help="leave out pyopencl's RadixSort (slow: ~25 ms a sort on an H100)")
    p.add_argument("--variants", default="classic,onesweep,fused",
                   help="radix_sort.VARIANT values to time, comma-separated (default: "
                        "classic,onesweep,fused)")
    p.add_argument("--sweep", action="store_true",
                   help="also time fuseloop's sort of float32 with other GPU layouts "
                        "(work-items per group x the most keys per work-item) and "
                        "copies of the count kernel's histogram, and the fused one-sweep "
                        "look-back's reads at once")
    p.add_argument("--speculate", action="store_true",
                   help="also time the fused variant with radix_sort.SPECULATE off, "
                        "early, late, side and all, alternating, on float32 and integer-valued "
                        "float32")
    p.add_argument("--pass-variants", action="store_true",
                   help="also time the fused one-sweep pass kernel's variants "
                        "(PASS_VARIANTS: look-back reads, tile size, raking scan) on float32")
    args = p.parse_args(argv)
    if args.device:
        fl.set_device(args.device)
    dev = fl.get_device()
    n = 1 << args.log2
    data = _data(n)
    print(f"device: {dev.name} ({dev.type}, {dev.backend}); n = 2^{args.log2}", flush=True)
    rows: list[Row] = []
    for variant in args.variants.split(","):
        _fuseloop(rows, data, args.repeat, f"fuseloop radix sort {variant}", True, variant)
    if args.sweep and dev.backend == "opencl":
        _sweep(rows, data["float32"], args.repeat)
    if args.pass_variants and dev.backend == "opencl":
        _pass_variants(rows, data["float32"], args.repeat)
    if args.speculate and dev.backend == "opencl":
        _speculate(rows, data["float32"], args.repeat)
    if not args.no_old and dev.backend == "opencl":
        _fuseloop(rows, data, max(3, args.repeat // 3), "fuseloop + pyopencl RadixSort",
                  False)
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
