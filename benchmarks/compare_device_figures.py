"""Issue 24's device figures for several fuseloop revisions in one process, interleaved.

The figures that must not regress, each as a fraction of its peer measured in the same
loop: ``2*x - sin(y) + x*y`` and ``fl.sum(x*y)`` at 2^27 float32 against a device copy of
the same bytes (CuPy's on a GPU, numpy's on the CPU), softmax over 2^14 rows of 2^13
against the same copy rate, and matmul 4096 float32 against cuBLAS (TF32 off) or numpy's
BLAS.  Revisions are loaded side by side as in ``compare_host_overhead.py`` and timed in
turn, round after round, so drift of a shared machine hits every revision alike.

Each workload is timed two ways:

* ``single``: one call and a wait, the fastest of the rounds (what one evaluation costs,
  host launch cost included);
* ``stream``: ``--batch`` calls back to back and one wait, per call (the device's
  throughput: the host's launch cost overlaps the device's work, as it does in a loop).

The peer is timed the same two ways.  Timings are reported, never asserted.

Usage::

    python benchmarks/compare_device_figures.py REV [REV ...] [--device SPEC]
                                                [--rounds N] [--batch N] [--out F]
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_host_overhead import copy_packages

Call = Callable[[], Any]


def _timed(call: Call, wait: Call, batch: int) -> float:
    """Seconds per call of ``batch`` calls followed by one wait."""
    t0 = time.perf_counter()
    for _ in range(batch):
        call()
    wait()
    return (time.perf_counter() - t0) / batch


class Peer:
    """The reference rates: a device copy of ``n`` float32 and a 4096 matmul."""

    def __init__(self, gpu: bool, n: int, k: int) -> None:
        if gpu:
            import cupy

            self.a = cupy.ones(n, dtype=cupy.float32)
            self.b = cupy.empty_like(self.a)
            self.m = cupy.random.random((k, k), dtype=cupy.float32)
            self.copy: Call = lambda: cupy.copyto(self.b, self.a)
            self.matmul: Call = lambda: self.m @ self.m
            self.wait: Call = cupy.cuda.runtime.deviceSynchronize
        else:
            self.a, self.b = np.ones(n, np.float32), np.empty(n, np.float32)
            self.m = np.random.default_rng(0).random((k, k), dtype=np.float32)
            self.copy = lambda: np.copyto(self.b, self.a)
            self.matmul = lambda: self.m @ self.m
            self.wait = lambda: None


def _workloads(fl: Any, n: int, k: int) -> dict[str, tuple[Call, float]]:
    """name -> (a call that evaluates it, the bytes or flops of one call)."""
    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    x, y = fl.asarray(a), fl.asarray(b)
    np.testing.assert_allclose((2 * x - fl.sin(y) + x * y).get(), 2 * a - np.sin(b) + a * b,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(fl.sum(x * y).get()), np.dot(a.astype(np.float64), b),
                               rtol=1e-3)
    rows = fl.asarray(rng.random((1 << 14, 1 << 13), dtype=np.float32))

    def softmax() -> Any:
        e = fl.exp(rows - rows.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).eval()

    m = fl.asarray(rng.random((k, k), dtype=np.float32))
    return {
        "elementwise": (lambda: (2 * x - fl.sin(y) + x * y).eval(), 3 * a.nbytes),
        "sum": (lambda: fl.sum(x * y).eval(), 2 * a.nbytes),
        "softmax": (softmax, 2 * rows.size * 4),
        "matmul": (lambda: (m @ m).eval(), 2.0 * k**3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+",
                    help="git revisions (WT: the working tree; or a folder holding fuseloop/)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--log2n", type=int, default=27)
    ap.add_argument("--k", type=int, default=4096, help="matmul size")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--out")
    args = ap.parse_args()
    n = 1 << args.log2n

    tmp, names = copy_packages(args.revs, "figures")
    versions = []
    for name in names:
        fl = importlib.import_module(name)
        fl.set_device(args.device)
        work = _workloads(fl, n, args.k)
        for call, _ in work.values():  # compile and warm
            call()
        fl.synchronize()
        versions.append((fl, work))
    gpu = "cpu" not in args.device.lower() and "pocl" not in args.device.lower()
    peer = Peer(gpu, n, args.k)
    peer_calls = {"copy": peer.copy, "matmul": peer.matmul}
    # best[(who, workload, mode)] = fastest seconds per call over the rounds
    best: dict[tuple[str, str, str], float] = {}

    def record(who: str, what: str, call: Call, wait: Call) -> None:
        for mode, batch in (("single", 1), ("stream", args.batch)):
            t = _timed(call, wait, batch)
            key = (who, what, mode)
            best[key] = min(best.get(key, float("inf")), t)

    for _ in range(args.rounds):
        for rev, (fl, work) in zip(args.revs, versions):
            for what, (call, _) in work.items():
                record(rev, what, call, fl.synchronize)
        for what, call in peer_calls.items():
            record("peer", what, call, peer.wait)

    copy_bytes = 2 * n * 4
    rows = []
    print(f"device {args.device}; fastest of {args.rounds} interleaved rounds; "
          f"stream = {args.batch} calls per wait")
    print("| workload | mode | " + " | ".join(args.revs) + " | peer |")
    print("| --- | --- |" + " ---: |" * (len(args.revs) + 1))
    for what, (_, size) in versions[0][1].items():
        for mode in ("single", "stream"):
            peer_key = ("peer", "matmul" if what == "matmul" else "copy", mode)
            peer_rate = (2.0 * args.k**3 if what == "matmul" else copy_bytes) / best[peer_key]
            fractions = [size / best[(rev, what, mode)] / peer_rate for rev in args.revs]
            rows.append({"workload": what, "mode": mode, "fractions": fractions,
                         "peer_rate": peer_rate,
                         "seconds": [best[(rev, what, mode)] for rev in args.revs]})
            unit = "TFLOP/s" if what == "matmul" else "GB/s"
            scale = 1e12 if what == "matmul" else 1e9
            print(f"| {what} | {mode} | " + " | ".join(f"{f:.1%}" for f in fractions)
                  + f" | {peer_rate / scale:.0f} {unit} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": args.device, "revs": args.revs, "n": n, "k": args.k,
                       "rounds": args.rounds, "batch": args.batch, "rows": rows}, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
