"""Short vectors with full reductions inside: one kernel (one row) against a kernel
per reduction, and a peer, in one run.

``x - x.mean()``, a vector's softmax and ``(x - mean) / std`` on fewer than
``fuseloop.evaluate.ONE_ROW_MAX_LENGTH`` elements run as one kernel whose
reductions are computed once, before its element loop.  For comparison the same
process also runs them with that limit set to 0, so that each full reduction
runs as a kernel of its own first (as before the one-row rule), in alternation
with the fused runs so both see the same phase of the machine.  The peer is
numpy on a CPU device and torch on a GPU (when installed).

Two timings per case, medians over ``--repeat`` runs:

* ``pipelined``: ``--calls`` evaluations enqueued back to back, then one
  synchronize (throughput: host work overlaps the device's);
* ``latency``: evaluate and wait, one call at a time (``.eval()`` then
  ``fl.synchronize()``).

Every result is compared with numpy in float64.  Timings are reported, never
asserted.

Usage::

    python benchmarks/bench_one_row.py [--device SPEC] [--lengths 1000,8192,32767]
                                       [--calls N] [--repeat N] [--out F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop import evaluate as _ev


def softmax_fl(x: Any) -> Any:
    e = fl.exp(x - x.max())
    return e / e.sum()


def softmax_np(h: np.ndarray) -> np.ndarray:
    e = np.exp(h - h.max())
    return e / e.sum()


CASES: dict[str, tuple[Callable, Callable, str]] = {
    # name: (fuseloop function, numpy function, torch expression of t)
    "x - mean(x)": (lambda x: x - x.mean(), lambda h: h - h.mean(), "t - t.mean()"),
    "softmax(x)": (softmax_fl, softmax_np, "torch.softmax(t, 0)"),
    "(x - mean) / std": (lambda x: (x - x.mean()) / x.std(),
                         lambda h: (h - h.mean()) / h.std(),
                         "(t - t.mean()) / t.std(correction=0)"),
}


def median_us(fn: Callable[[], Any], calls: int, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return out


def bench_case(name: str, fn: Callable, npfn: Callable, texpr: str, h: np.ndarray,
               calls: int, repeat: int, dev: Any, torch: Any) -> dict[str, Any]:
    """One case at one length: both rules alternating, then the peer."""
    limit = _ev.ONE_ROW_MAX_LENGTH
    x = fl.asarray(h)
    ref = npfn(h.astype(np.float64))
    pipelined: dict[str, list[float]] = {"fused": [], "split": []}
    latency: dict[str, list[float]] = {"fused": [], "split": []}
    launches: dict[str, int] = {}
    errs: dict[str, float] = {}

    def enqueued() -> None:
        for _ in range(calls):
            fn(x).eval()
        fl.synchronize()

    def one_at_a_time() -> None:
        for _ in range(20):
            fn(x).eval()
            fl.synchronize()

    rules = (("fused", limit), ("split", 0))
    try:
        for variant, lim in rules:
            _ev.ONE_ROW_MAX_LENGTH = lim
            got = fn(x).get()  # warm (compiles)
            errs[variant] = float(np.max(np.abs(got - ref)) / max(1e-30, np.max(np.abs(ref))))
            fl.synchronize()
            before = fl.stats()["kernels_launched"]
            fn(x).eval()
            fl.synchronize()
            launches[variant] = fl.stats()["kernels_launched"] - before
        for _ in range(repeat):
            for variant, lim in rules:
                _ev.ONE_ROW_MAX_LENGTH = lim
                pipelined[variant] += median_us(enqueued, calls, 1)
                latency[variant] += median_us(one_at_a_time, 20, 1)
    finally:
        _ev.ONE_ROW_MAX_LENGTH = limit
    peer_us = None
    if torch is not None:
        t = torch.as_tensor(h, device="cuda")
        peer = eval(f"lambda t: {texpr}", {"torch": torch})  # our own expression text

        def peer_loop() -> None:
            for _ in range(calls):
                peer(t)
            torch.cuda.synchronize()

        peer_loop()
        peer_us = statistics.median(median_us(peer_loop, calls, repeat))
    elif dev.type == "cpu":
        def np_loop() -> None:
            for _ in range(calls):
                npfn(h)

        peer_us = statistics.median(median_us(np_loop, calls, repeat))
    return {"case": name, "n": len(h), "launches": launches, "max_rel_error": errs,
            "pipelined_us": {k: statistics.median(v) for k, v in pipelined.items()},
            "latency_us": {k: statistics.median(v) for k, v in latency.items()},
            "peer": "torch" if torch is not None else "numpy", "peer_us": peer_us}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="device spec (default: fuseloop's default)")
    ap.add_argument("--lengths", default="1000,8192,32767", help="vector lengths, comma-separated")
    ap.add_argument("--calls", type=int, default=200, help="evaluations per pipelined run")
    ap.add_argument("--repeat", type=int, default=9, help="timed runs per variant (median)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    if args.device:
        fl.set_device(int(args.device) if args.device.isdigit() else args.device)
    dev = fl.get_device()
    torch = None
    if dev.type == "gpu":
        try:
            import torch as _torch

            if _torch.cuda.is_available():
                torch = _torch
        except ImportError:
            pass
    limit = _ev.ONE_ROW_MAX_LENGTH
    rows: list[dict[str, Any]] = []
    print(f"device: {dev.name} ({dev.type}); one-row limit {limit}; "
          f"peer: {'torch' if torch else 'numpy'}")
    print(f"{'case':18s} {'n':>6s} | {'one kernel':>10s} {'per reduction':>13s} {'peer':>8s} "
          f"| {'latency':>8s} {'per red.':>9s}  (us per call)")
    for n in [int(v) for v in args.lengths.split(",")]:
        h = np.random.default_rng(n).random(n).astype(np.float32) * 10
        for name, (fn, npfn, texpr) in CASES.items():
            row = bench_case(name, fn, npfn, texpr, h, args.calls, args.repeat, dev, torch)
            rows.append(row)
            p, q, k = row["pipelined_us"], row["latency_us"], row["launches"]
            peer_us = row["peer_us"]
            peer_text = f"{peer_us:8.1f}" if peer_us is not None else f"{'-':>8s}"
            print(f"{name:18s} {n:6d} | {p['fused']:10.1f} {p['split']:13.1f} {peer_text} "
                  f"| {q['fused']:8.1f} {q['split']:9.1f}  "
                  f"({k['fused']} vs {k['split']} kernels; "
                  f"err {row['max_rel_error']['fused']:.1e})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": {"name": dev.name, "type": dev.type, "platform": dev.platform},
                       "one_row_max_length": limit, "calls": args.calls,
                       "repeat": args.repeat, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
