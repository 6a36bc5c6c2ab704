"""``fl.fft.fft`` of complex signals (one of 2^24 points, 16 rows of 2^20) against peers.

Timed with the result on the device (synchronised, not read back), as the median of
``--repeat`` calls after one warm-up call (the builds and the Bluestein chirp); each
result is checked against numpy first.  Peers in the same run: numpy.fft (pocketfft on
the host's CPU) always, cupy.fft (cuFFT) when cupy imports with a GPU.  GFLOP/s counts
the conventional ``5 n log2 n`` per transform; ``GB/s`` is fuseloop's launches times a
read and a write of the array over its time (the device's copy bandwidth is printed
first: a pass can go no faster).  ``--variant`` (repeatable) runs fuseloop once per set
of knobs of :class:`fuseloop.ops.fft_local.FFTParams` (``default``: the device's rule;
``legacy=1``: one launch per radix, the former passes; e.g. ``max_sub=4096,jj=1`` for
2 passes of 4096 points over 2^24), so variants compare in one run.

Usage (the lead's GPU run)::

    python benchmarks/bench_fft.py --variant default --variant legacy=1 \\
        --variant max_sub=4096,jj=1 --variant min_jj=16 --variant max_radix=8 --variant pad=0
    python benchmarks/bench_fft.py [--log2 24] [--rows 16 --row-log2 20] [--lengths ...]
                                   [--repeat 5] [--dtype complex64] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import copy_bandwidth, median_time
from fuseloop.ops import fft_local


def _median(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of ``fn`` (which synchronises itself) after one warm-up call."""
    return median_time(fn, lambda: None, repeat, warmup=1)


def _cupy() -> Any:
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        return cupy
    except Exception:
        return None


def _knobs(text: str) -> dict[str, int]:
    if text == "default":
        return {}
    out = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        out[key.strip()] = int(value)
    return out


def _passes(n: int, dt: np.dtype) -> str:
    p = fft_local.params(fl.get_device(), dt)
    if p.legacy:
        return "radix " + "x".join(map(str, fft_local._radix.plan(n, dt, fl.get_device())
                                       or ["bluestein"]))
    shapes = fft_local.shapes(n, dt, p)
    if shapes is None:
        return "bluestein"
    return "x".join(f"{s.sub}" + (f"/{s.jj}" if s.jj > 1 else "") for s in shapes)


def _case(shape: tuple[int, ...], dt: np.dtype, repeat: int, cp: Any,
          variants: list[str]) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    host = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    ref = np.fft.fft(host)
    dev = fl.asarray(host)
    tol = (1e-4 if dt == np.complex64 else 1e-10) * np.abs(ref).max()
    rows = []
    for variant in variants:
        fft_local.set_override(**_knobs(variant))
        try:
            got = fl.fft.fft(dev).get()
            assert np.abs(got - ref).max() <= tol, f"fl.fft.fft differs from numpy: {shape}"

            def ours() -> None:
                fl.fft.fft(dev).eval()
                fl.synchronize()
            launches = fft_local.launches(shape[-1], dt, fl.get_device())
            rows.append({"shape": shape, "peer": "fuseloop", "variant": variant,
                         "passes": _passes(shape[-1], dt), "launches": launches,
                         "s": _median(ours, repeat)})
        finally:
            fft_local.set_override()
    rows.append({"shape": shape, "peer": "numpy", "s": _median(lambda: np.fft.fft(host),
                                                               max(1, repeat // 2))})
    if cp is not None:
        c = cp.asarray(host)

        def peer() -> None:
            cp.fft.fft(c)
            cp.cuda.Device().synchronize()
        rows.append({"shape": shape, "peer": "cupy", "s": _median(peer, repeat)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2", type=int, default=24, help="one signal of 2**LOG2 points")
    ap.add_argument("--rows", type=int, default=16, help="ROWS signals of 2**ROW_LOG2 "
                    "points (0: none)")
    ap.add_argument("--row-log2", type=int, default=20)
    ap.add_argument("--lengths", type=int, nargs="*", default=[],
                    help="more single signals (a prime one runs Bluestein's algorithm)")
    ap.add_argument("--variant", action="append", default=None,
                    help="knobs of fuseloop.ops.fft_local.FFTParams, 'k=v,k=v' "
                    "(repeatable; default: the device's rule)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dtype", default="complex64", choices=["complex64", "complex128"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dt = np.dtype(args.dtype)
    cp = _cupy()
    variants = args.variant or ["default"]
    shapes: list[tuple[int, ...]] = [(2 ** args.log2,)]
    if args.rows:
        shapes.append((args.rows, 2 ** args.row_log2))
    shapes += [(n,) for n in args.lengths]
    bw = copy_bandwidth(2 ** args.log2 * dt.itemsize, args.repeat)
    print(f"device: {fl.get_device()}; {args.dtype}; median of {args.repeat}; cupy: "
          f"{'yes' if cp else 'no'}; copy bandwidth {bw:.0f} GB/s; "
          f"rule: {fft_local.params(fl.get_device(), dt)}")
    print(f"{'shape':>14s} {'peer':>9s} {'variant':>22s} {'passes (sub/jj)':>22s} "
          f"{'ms':>9s} {'GFLOP/s':>8s} {'GB/s':>6s} {'speed vs peer':>13s}")
    results = []
    for shape in shapes:
        rows = _case(shape, dt, args.repeat, cp, variants)
        base = next((r["s"] for r in rows if r["peer"] == "cupy"),
                    next(r["s"] for r in rows if r["peer"] == "numpy"))
        size = math.prod(shape)
        flops = 5 * size * math.log2(shape[-1])
        for r in rows:
            moved = r.get("launches", 0) * 2 * size * dt.itemsize / r["s"] / 1e9
            shown = "x".join(map(str, shape))
            print(f"{shown:>14s} {r['peer']:>9s} {r.get('variant', ''):>22s} "
                  f"{r.get('passes', ''):>22s} {r['s'] * 1e3:9.3f} "
                  f"{flops / r['s'] / 1e9:8.1f} {moved:6.0f} {base / r['s']:13.2f}",
                  flush=True)
            r["gflops"] = flops / r["s"] / 1e9
        results += rows
    print("(last column: the fastest peer's time (cupy, else numpy) over each row's time; "
          "the issue's target is fuseloop >= 0.50 of cupy at 2^24)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
