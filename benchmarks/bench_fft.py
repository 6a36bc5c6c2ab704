"""``fl.fft.fft`` of one long complex64 signal (2^24 by default) against peers.

Timed with the result on the device (synchronised, not read back), as the median of
``--repeat`` calls after one warm-up call (the builds and the Bluestein chirp); each
result is checked against numpy first.  Peers in the same run: numpy.fft (pocketfft on
the host's CPU) always, cupy.fft (cuFFT) when cupy imports with a GPU.  GFLOP/s counts
the conventional ``5 n log2 n`` of a complex transform; fuseloop's passes (one launch
per radix-16/8/4/2/3/5 factor) are listed.  ``--lengths`` adds other lengths (a 2-3-5
smooth one runs its own passes, a prime one Bluestein's algorithm).

Usage::

    python benchmarks/bench_fft.py [--log2 24] [--lengths 3000000 1000003]
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
from fuseloop.bench.runner import median_time
from fuseloop.ops.fft_kernels import factor


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


def _row(n: int, dt: np.dtype, repeat: int, cp: Any) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    host = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
    ref = np.fft.fft(host)
    dev = fl.asarray(host)
    got = fl.fft.fft(dev).get()
    tol = (1e-4 if dt == np.complex64 else 1e-10) * np.abs(ref).max()
    assert np.abs(got - ref).max() <= tol, f"fl.fft.fft differs from numpy at n={n}"

    def ours() -> None:
        fl.fft.fft(dev).eval()
        fl.synchronize()

    row: dict[str, Any] = {"n": n, "dtype": dt.name, "passes": factor(n) or "bluestein",
                           "fuseloop_s": _median(ours, repeat),
                           "numpy_s": _median(lambda: np.fft.fft(host), repeat)}
    if cp is not None:
        c = cp.asarray(host)

        def peer() -> None:
            cp.fft.fft(c)
            cp.cuda.Device().synchronize()
        row["cupy_s"] = _median(peer, repeat)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2", type=int, default=24, help="the main length is 2**LOG2")
    ap.add_argument("--lengths", type=int, nargs="*", default=[])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dtype", default="complex64", choices=["complex64", "complex128"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dt = np.dtype(args.dtype)
    cp = _cupy()
    print(f"device: {fl.get_device()}; {args.dtype}; median of {args.repeat}; "
          f"cupy: {'yes' if cp else 'no'}")
    print(f"{'n':>10s} {'passes':>26s} {'peer':>9s} {'ms':>10s} {'GFLOP/s':>9s} "
          f"{'fuseloop/peer time':>19s}")
    rows = []
    for n in [2 ** args.log2, *args.lengths]:
        row = _row(n, dt, args.repeat, cp)
        flops = 5 * n * math.log2(n)
        for peer in ("fuseloop", "numpy", "cupy"):
            t = row.get(f"{peer}_s")
            if t is None:
                continue
            row[f"{peer}_gflops"] = flops / t / 1e9
            passes = str(row["passes"]) if peer == "fuseloop" else ""
            print(f"{n:10d} {passes:>26s} {peer:>9s} {t * 1e3:10.2f} {flops / t / 1e9:9.1f} "
                  f"{row['fuseloop_s'] / t:18.2f}x", flush=True)
        rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
