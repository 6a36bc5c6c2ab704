"""Reductions whose neighbouring kept axes merge (``fuseloop.passes.axis_merge``), timed
on one device against torch (or numpy on a CPU device) in the same process.

For each case (a float32 array of about 2^24 elements, or ``--elements``): the median
time of ``x.sum(axis=...)`` (a lazy ``.eval()`` then ``fl.synchronize()``, the input
concrete on the device) over ``--reps`` calls, the peer's in the same way, their ratio
(peer over fuseloop: above 1, fuseloop faster) and the result's largest relative error.
Run once per checkout (``PYTHONPATH`` picks it) to compare the layouts before and after
the merge; reported, never asserted.

    FUSELOOP_DEVICE=nvidia python benchmarks/probes/axis_merge_gpu.py [--elements 2^24]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.ops import reductions

#: (shape as fractions of the elements: the leading axes, the rest fixed; axes; keepdims)
CASES = [
    ("(n/16384, 256, 64) axis 0", lambda n: (n // 16384, 256, 64), (0,), False),
    ("(64, n/4096, 64) axis 0", lambda n: (64, n // 4096, 64), (0,), False),
    ("(n/4096, 64, 64) axis 0", lambda n: (n // 4096, 64, 64), (0,), False),
    ("(n/16384, 256, 64) axes (0, 2)", lambda n: (n // 16384, 256, 64), (0, 2), False),
    ("(64, n/4096, 64) axis 0 keepdims", lambda n: (64, n // 4096, 64), (0,), True),
    ("(8, 8, n/64) axes (0, 1)", lambda n: (8, 8, n // 64), (0, 1), False),
]


def _median(f, reps: int, sync) -> float:
    f()
    sync()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", default="2^24")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    n = 2 ** int(a.elements[2:]) if a.elements.startswith("2^") else int(a.elements)
    reductions.REDUCE_NOW_MAX = 0  # (kernels, as for lazy operands)
    dev = fl.get_device()
    try:
        import torch

        tdev = "cuda" if torch.cuda.is_available() else "cpu"
        peer, sync_peer = "torch", (torch.cuda.synchronize if tdev == "cuda" else lambda: None)
    except ImportError:
        torch, tdev, peer, sync_peer = None, "", "numpy", (lambda: None)
    print(f"{fl.__file__}\ndevice {dev.name}; peer {peer}; ms median of {a.reps}")
    for label, shape_of, axes, keepdims in CASES:
        h = np.random.default_rng(0).random(shape_of(n), dtype=np.float32)
        _case(label, h, axes, keepdims, a.reps, torch, tdev, sync_peer)


def _case(label: str, h: np.ndarray, axes: tuple[int, ...], keepdims: bool, reps: int,
          torch: Any, tdev: str, sync_peer: Any) -> None:
    x = fl.asarray(h)
    ours = _median(lambda: x.sum(axis=axes, keepdims=keepdims).eval(), reps, fl.synchronize)
    if torch is not None:
        t = torch.from_numpy(h).to(tdev)
        theirs = _median(lambda: t.sum(dim=axes, keepdim=keepdims), reps, sync_peer)
    else:
        theirs = _median(lambda: h.sum(axis=axes, keepdims=keepdims), reps, sync_peer)
    want = h.astype(np.float64).sum(axis=axes, keepdims=keepdims)
    err = float(np.abs(x.sum(axis=axes, keepdims=keepdims).get() - want).max()
                / np.abs(want).max())
    print(f"{label:34s} {ours * 1e3:8.3f} {theirs * 1e3:8.3f}  x{theirs / ours:5.2f}"
          f"  err {err:.1e}")

if __name__ == "__main__":
    main()
