"""Issue 28's operations against their peers, in one run and one table: random normal
numbers, ``bincount``, a 3-D 7-point stencil and ``reduce_by_key``.

Workloads (sizes: the issue's on a GPU or with ``--full``; on a CPU, or with
``--small``, 2^22 numbers and values, 96^3 and 2^20 keys):

* ``rng normal``: 2^27 float32 standard normal numbers written to a buffer
  (``fl.random.normal(..., dtype=float32).eval()``); ``rng normal + sum``: their
  sum, which fuseloop generates inside the reduction (no buffer);
* ``bincount``: 2^24 int32 values in ``[0, 1024)`` (``fl.bincount``: one reduction
  for the length, read back, then one scatter-add kernel);
* ``stencil 3-D``: a 7-point step ``c*x + w*(6 neighbours)`` on a 256^3 float32 grid,
  as ``fl.stencil`` (every point, clamped at the faces) and as a slice assignment
  of the interior (``y[1:-1, 1:-1, 1:-1] = ...``, the form every peer runs);
* ``reduce_by_key``: 2^24 sorted int32 keys in runs of 64 on average, float32 sums
  (the functions of ``bench_segmented.py``, reused).

Peers in the same run: on a CPU device numpy (``Generator.standard_normal``,
``np.bincount``, the slices, ``add.reduceat``); on a GPU cupy and torch (eager and
``torch.compile`` for the stencil), each skipped with its reason when missing.
Every result is checked once (moments for the random numbers, numpy for the rest).
Times are medians of ``--repeat`` calls after warm-up; ``peer/fuseloop`` is the
peer's time over the first fuseloop row of the workload (above 1: fuseloop is
faster).  Usage::

    python benchmarks/bench_features.py [--device SPEC] [--small | --full]
                                        [--repeat K] [--only WORKLOAD ...]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import median_time

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_segmented  # (reduce_by_key's runs, reused)

Row = bench_segmented.Row
_attempt = bench_segmented._attempt  # (a missing or failing peer is reported, not fatal)
WORKLOADS = ("rng", "bincount", "stencil", "reduce_by_key")
BINS = 1024
# the 7-point step: centre and neighbour weights (Python floats: every library keeps
# its float32 arrays float32 with them, torch.compile included)
CENTRE, SIDE = 0.4, 0.1


def _gpu_peers() -> dict[str, Any]:
    """The importable GPU peers: ``cupy`` and ``torch`` (with CUDA), by name."""
    found: dict[str, Any] = {}
    try:
        import cupy

        found["cupy"] = cupy
    except Exception:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            found["torch"] = torch
    except Exception:
        pass
    return found


def _moments(z: np.ndarray) -> str:
    z = z.astype(np.float64)
    ok = abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    return "" if ok else f"MISMATCH (mean {z.mean():.3g}, std {z.std():.3g})"


def _close(got: Any, want: np.ndarray, rtol: float = 1e-4) -> str:
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"MISMATCH (shape {got.shape}, want {want.shape})"
    return "" if np.allclose(got, want, rtol=rtol, atol=1e-4) else "MISMATCH"


# {{{ random numbers

def _rng(rows: list[Row], n: int, repeat: int, gpu: dict[str, Any]) -> None:
    def fl_normal() -> tuple[float, str]:
        note = _moments(fl.random.normal(n, dtype=np.float32, key=1).get())
        return median_time(lambda: fl.random.normal(n, dtype=np.float32, key=1).eval(),
                           fl.synchronize, repeat), note

    def fl_sum() -> tuple[float, str]:
        got = float(fl.sum(fl.random.normal(n, dtype=np.float32, key=1)).get())
        note = "" if abs(got) < 6 * np.sqrt(n) else f"MISMATCH (sum {got:.3g})"
        return median_time(lambda: fl.sum(fl.random.normal(n, dtype=np.float32, key=1)).eval(),
                           fl.synchronize, repeat), note

    _attempt(rows, "rng normal", "fuseloop", fl_normal)
    _attempt(rows, "rng normal + sum", "fuseloop (one kernel)", fl_sum)
    if not gpu:
        gen = np.random.default_rng(1)
        _attempt(rows, "rng normal", "numpy Generator", lambda: (median_time(
            lambda: gen.standard_normal(n, np.float32), lambda: None, repeat), ""))
        _attempt(rows, "rng normal + sum", "numpy Generator", lambda: (median_time(
            lambda: gen.standard_normal(n, np.float32).sum(), lambda: None, repeat), ""))
        return
    if "cupy" in gpu:
        cp = gpu["cupy"]
        sync = cp.cuda.Device().synchronize

        def cupy_normal() -> tuple[float, str]:
            note = _moments(cp.asnumpy(cp.random.standard_normal(n, dtype=cp.float32)))
            return median_time(lambda: cp.random.standard_normal(n, dtype=cp.float32),
                               sync, repeat), note

        _attempt(rows, "rng normal", "cupy.random", cupy_normal)
        _attempt(rows, "rng normal + sum", "cupy.random + sum", lambda: (median_time(
            lambda: cp.random.standard_normal(n, dtype=cp.float32).sum(), sync, repeat), ""))
    if "torch" in gpu:
        torch = gpu["torch"]
        _attempt(rows, "rng normal", "torch.randn", lambda: (median_time(
            lambda: torch.randn(n, device="cuda"), torch.cuda.synchronize, repeat), ""))

# }}}


# {{{ bincount

def _bincount(rows: list[Row], n: int, repeat: int, gpu: dict[str, Any]) -> None:
    h = np.random.default_rng(3).integers(0, BINS, n).astype(np.int32)
    want = np.bincount(h)

    def fuseloop() -> tuple[float, str]:
        x = fl.asarray(h)
        note = _close(fl.bincount(x).get(), want)
        return median_time(lambda: fl.bincount(x).eval(), fl.synchronize, repeat), note

    _attempt(rows, "bincount", "fuseloop", fuseloop)
    if not gpu:
        _attempt(rows, "bincount", "numpy", lambda: (median_time(
            lambda: np.bincount(h), lambda: None, repeat), ""))
        return
    if "cupy" in gpu:
        cp = gpu["cupy"]

        def cupy() -> tuple[float, str]:
            x = cp.asarray(h)
            note = _close(cp.asnumpy(cp.bincount(x)), want)
            return median_time(lambda: cp.bincount(x), cp.cuda.Device().synchronize,
                               repeat), note

        _attempt(rows, "bincount", "cupy", cupy)
    if "torch" in gpu:
        torch = gpu["torch"]

        def torch_bincount() -> tuple[float, str]:
            x = torch.from_numpy(h).cuda()
            note = _close(torch.bincount(x).cpu().numpy(), want)
            return median_time(lambda: torch.bincount(x), torch.cuda.synchronize,
                               repeat), note

        _attempt(rows, "bincount", "torch", torch_bincount)

# }}}


# {{{ 3-D 7-point stencil

def step(x: Any) -> Any:
    """The interior of the 7-point step, by slices (numpy, cupy, torch, fuseloop)."""
    c = x[1:-1, 1:-1, 1:-1]
    nb = (x[:-2, 1:-1, 1:-1] + x[2:, 1:-1, 1:-1] + x[1:-1, :-2, 1:-1]
          + x[1:-1, 2:, 1:-1] + x[1:-1, 1:-1, :-2] + x[1:-1, 1:-1, 2:])
    return CENTRE * c + SIDE * nb


def _weights() -> np.ndarray:
    w = np.zeros((3, 3, 3), np.float32)
    w[1, 1, 1] = CENTRE
    for axis in range(3):
        for side in (0, 2):
            at = [1, 1, 1]
            at[axis] = side
            w[tuple(at)] = SIDE
    return w


def _stencil(rows: list[Row], s: int, repeat: int, gpu: dict[str, Any]) -> None:
    h = np.random.default_rng(4).random((s, s, s), dtype=np.float32)
    want = step(h)
    x = fl.asarray(h)

    def fl_stencil() -> tuple[float, str]:
        got = fl.stencil(x, _weights()).get()
        return median_time(lambda: fl.stencil(x, _weights()).eval(), fl.synchronize,
                           repeat), _close(got[1:-1, 1:-1, 1:-1], want)

    def fl_slices() -> tuple[float, str]:
        y = fl.zeros((s, s, s), np.float32)

        def run() -> None:
            y[1:-1, 1:-1, 1:-1] = step(x)

        run()
        return median_time(run, fl.synchronize, repeat), _close(
            y.get()[1:-1, 1:-1, 1:-1], want)

    _attempt(rows, "stencil 3-D", "fuseloop slices", fl_slices)
    _attempt(rows, "stencil 3-D", "fuseloop fl.stencil (clamp)", fl_stencil)
    if not gpu:
        y = np.zeros_like(h)

        def numpy_run() -> None:
            y[1:-1, 1:-1, 1:-1] = step(h)

        _attempt(rows, "stencil 3-D", "numpy slices",
                 lambda: (median_time(numpy_run, lambda: None, repeat), ""))
        return
    if "cupy" in gpu:
        cp = gpu["cupy"]

        def cupy_run() -> tuple[float, str]:
            cx, cy = cp.asarray(h), cp.zeros((s, s, s), cp.float32)

            def run() -> None:
                cy[1:-1, 1:-1, 1:-1] = step(cx)

            run()
            note = _close(cp.asnumpy(cy)[1:-1, 1:-1, 1:-1], want)
            return median_time(run, cp.cuda.Device().synchronize, repeat), note

        _attempt(rows, "stencil 3-D", "cupy slices", cupy_run)
    if "torch" in gpu:
        torch = gpu["torch"]
        tx = torch.from_numpy(h).cuda()
        ty = torch.zeros_like(tx)

        def torch_run(fn: Callable[[Any], Any]) -> tuple[float, str]:
            def run() -> None:
                ty[1:-1, 1:-1, 1:-1] = fn(tx)

            run()
            note = _close(ty.cpu().numpy()[1:-1, 1:-1, 1:-1], want)
            return median_time(run, torch.cuda.synchronize, repeat), note

        _attempt(rows, "stencil 3-D", "torch eager slices", lambda: torch_run(step))
        _attempt(rows, "stencil 3-D", "torch.compile slices",
                 lambda: torch_run(torch.compile(step)))

# }}}


def _reduce_by_key(rows: list[Row], n: int, repeat: int, gpu: dict[str, Any]) -> None:
    keys, values = bench_segmented._data(n, 64)
    ref = bench_segmented._reference(keys, values)
    found: list[bench_segmented.Row] = []
    bench_segmented._fuseloop(found, keys, values, repeat, ref)
    if gpu:
        bench_segmented._cupy(found, keys, values, repeat, ref)
        bench_segmented._torch(found, keys, values, repeat, ref)
    else:
        bench_segmented._numpy(found, keys, values, repeat, ref)
    rows.extend(r for r in found if r[0] == "reduce_by_key")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true",
                      help="sizes for a CPU (its default): 2^22 numbers, 2^22 values, 96^3, "
                      "2^20 keys")
    size.add_argument("--full", action="store_true",
                      help="the issue's sizes (a GPU's default): 2^27, 2^24, 256^3, 2^24")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--only", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    args = p.parse_args(argv)
    if args.device:
        fl.set_device(args.device)
    dev = fl.get_device()
    gpu = _gpu_peers() if dev.type == "gpu" else {}
    small = args.small or (dev.type != "gpu" and not args.full)
    n_rng, n_bins, side, n_keys = ((1 << 22, 1 << 22, 96, 1 << 20) if small
                                   else (1 << 27, 1 << 24, 256, 1 << 24))
    sizes = {"rng normal": n_rng, "rng normal + sum": n_rng, "bincount": n_bins,
             "stencil 3-D": (side - 2) ** 3, "reduce_by_key": n_keys}
    peers = ", ".join(gpu) if dev.type == "gpu" else "numpy"
    print(f"device: {dev.name} ({dev.type}); peers: {peers or 'none importable'}; rng 2^"
          f"{n_rng.bit_length() - 1} float32, bincount 2^{n_bins.bit_length() - 1} int32 "
          f"({BINS} bins), stencil {side}^3 float32 (Melem/s: interior points), "
          f"reduce_by_key 2^{n_keys.bit_length() - 1}", flush=True)
    rows: list[Row] = []
    run = {"rng": lambda: _rng(rows, n_rng, args.repeat, gpu),
           "bincount": lambda: _bincount(rows, n_bins, args.repeat, gpu),
           "stencil": lambda: _stencil(rows, side, args.repeat, gpu),
           "reduce_by_key": lambda: _reduce_by_key(rows, n_keys, args.repeat, gpu)}
    for name in args.only:
        run[name]()
    bench_segmented.print_rows(rows, sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
