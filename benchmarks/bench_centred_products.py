"""Products of centred data (``d.T @ d``, ``d @ d.T``, ``fl.cov``): fuseloop's ways against a peer.

``d = x - x.mean(axis=0)`` (or the row means for ``d @ d.T``).  Variants, one table in one run:

* ``means first``: the rule of :func:`fuseloop.expr.contraction.operand_producers`: the means
  run as their own kernels, the centring fuses into the contraction's tile loads;
* ``d evaluated``: the centred array computed into a buffer first (``cov``'s way);
* ``one kernel``: the rule switched off: the product fused with its means into one
  reduction kernel (fuseloop before the rule);
* peers: cupy and torch on a GPU, numpy on a CPU (each computing ``d`` as numpy does).

Every result is checked against numpy in float64.  Usage::

    python benchmarks/bench_centred_products.py [--device SPEC] [--rows N] [--cols P]
        [--dtype float32|float64] [--repeat K]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # this checkout's fuseloop

import fuseloop as fl  # noqa: E402
from fuseloop import evaluate as fl_evaluate  # noqa: E402


def _products(lib: Any, x: Any, evaluated: bool = False) -> dict[str, Callable[[], Any]]:
    def centred(axis: int) -> Any:
        d = x - x.mean(axis=axis, keepdims=True)
        return d.eval() if evaluated else d

    def cols() -> Any:
        d = centred(0)
        return d.T @ d

    def rows() -> Any:
        d = centred(1)
        return d @ d.T

    out = {"d.T @ d": cols, "d @ d.T": rows}
    if lib is fl:
        out["fl.cov(x, rowvar=False)"] = lambda: fl.cov(x, rowvar=False)
        # (fuseloop is lazy: each call is evaluated, then the device waited for)
        return {k: (lambda f=f: f().eval()) for k, f in out.items()}
    return out


def _time(fn: Callable[[], Any], sync: Callable[[], None], repeat: int) -> tuple[float, Any]:
    got = fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), got


def _peer(gpu: bool) -> tuple[str, Any, Callable[[Any], Any], Callable[[], None]] | None:
    if not gpu:
        return "numpy", np, np.asarray, lambda: None
    try:
        import cupy as cp

        return "cupy", cp, cp.asarray, cp.cuda.Device().synchronize
    except ImportError:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--cols", type=int, default=None)
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    dev = fl.get_device() if args.device is None else fl.set_device(args.device)
    gpu = dev.type != "cpu"
    n = args.rows or (16384 if gpu else 2000)
    p = args.cols or (2048 if gpu else 300)
    h = np.random.default_rng(0).standard_normal((n, p)).astype(args.dtype)
    h64 = h.astype(np.float64)
    dc, dr = h64 - h64.mean(0), h64 - h64.mean(1, keepdims=True)
    want = {"d.T @ d": dc.T @ dc, "d @ d.T": dr @ dr.T,
            "fl.cov(x, rowvar=False)": np.cov(h64, rowvar=False)}
    rtol = 1e-3 if h.dtype == np.float32 else 1e-9
    x = fl.asarray(h)
    saved = fl_evaluate._operand_producers
    rows: dict[str, dict[str, float]] = {}
    for variant, evaluated, rule in (("means first", False, True),
                                     ("d evaluated", True, True), ("one kernel", False, False)):
        fl_evaluate._operand_producers = saved if rule else (lambda node: [])
        fl.clear_caches()
        for name, fn in _products(fl, x, evaluated).items():
            if not rule and name.startswith("fl.cov"):
                continue  # (cov evaluates d itself)
            t, got = _time(fn, fl.synchronize, args.repeat)
            np.testing.assert_allclose(np.asarray(got.get(), np.float64), want[name],
                                       rtol=rtol, atol=rtol * np.abs(want[name]).max())
            rows.setdefault(name, {})[variant] = t
    fl_evaluate._operand_producers = saved
    fl.clear_caches()
    peer = _peer(gpu)
    if peer is not None:
        pname, lib, conv, sync = peer
        px = conv(h)
        for name, fn in _products(lib, px).items():
            rows[name][pname] = _time(fn, sync, args.repeat)[0]
        if pname == "numpy":
            rows["fl.cov(x, rowvar=False)"][pname] = _time(
                lambda: np.cov(h, rowvar=False), sync, args.repeat)[0]
    cols = ["means first", "d evaluated", "one kernel"] + ([peer[0]] if peer else [])
    print(f"{dev.name}: x of shape ({n}, {p}) {h.dtype}; median seconds per call "
          f"of {args.repeat}")
    print(f"{'product':<26}" + "".join(f"{c:>14}" for c in cols))
    for name, by in rows.items():
        print(f"{name:<26}" + "".join(f"{by[c]:>14.5f}" if c in by else f"{'-':>14}"
                                      for c in cols))


if __name__ == "__main__":
    main()
