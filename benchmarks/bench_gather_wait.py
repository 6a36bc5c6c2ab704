"""Cross-entropy (``mean(logsumexp(X) - X[rows, labels])``, the broad suite's) per call:
the gather's range flag read at each call's end (``FUSELOOP_GATHER_WAIT`` unset) or left
unread until the next read back (``=defer``; GPUs only: on a CPU device both rows read
at the end), lazy ``.eval()`` and ``fl.fuse``, with a
peer in the same run (torch eager and torch.compile on a CUDA GPU, numpy on the CPU).

Per call, median of ``--repeat`` runs, wall us:

* ``sync``: one call then ``fl.synchronize()`` (the suite's timing: the host's build and
  the device's run add up either way; deferral saves only the flag's read-back copy);
* ``batch``: ``--batch`` calls then one synchronisation, divided by ``--batch`` (a loop that
  does not read each result: with the flag read each call waits for its kernels, so the
  host cannot prepare the next call while they run);
* ``host``: thread CPU us per call of the batch (the build, enqueues and any waits' spin).

Usage::

    python benchmarks/bench_gather_wait.py                  # default device, 4096 x 4096
    python benchmarks/bench_gather_wait.py --rows 4096 --cols 4096 --repeat 30 --batch 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # (this checkout's fuseloop)

import fuseloop as fl
from fuseloop.bench.broad import cross_entropy


def _walls(call: Callable[[], Any], sync: Callable[[], Any], repeat: int,
           batch: int) -> tuple[float, float, float]:
    """(sync us, batch us, host us per call of the batch), medians."""
    for _ in range(3):
        call()
        sync()
    one, many, host = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        sync()
        one.append(time.perf_counter() - t0)
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(batch):
            call()
        c1 = time.thread_time()
        sync()
        many.append((time.perf_counter() - t0) / batch)
        host.append((c1 - c0) / batch)
    return tuple(1e6 * statistics.median(t) for t in (one, many, host))  # type: ignore[return-value]


def _peers(h: np.ndarray, labels: np.ndarray) -> dict[str, tuple[Callable, Callable]]:
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        x = torch.as_tensor(h, device="cuda")
        lab = torch.as_tensor(labels, device="cuda")
        rows = torch.arange(h.shape[0], device="cuda")

        def eager() -> Any:
            return (torch.logsumexp(x, dim=1) - x[rows, lab]).mean()

        out = {"torch eager": (eager, torch.cuda.synchronize)}
        try:
            compiled = torch.compile(eager)
            compiled()
            out["torch.compile"] = (compiled, torch.cuda.synchronize)
        except Exception as e:  # (no compiler on this host: report the peer as absent)
            print(f"# torch.compile unavailable: {type(e).__name__}: {e}")
        return out
    rows_h = np.arange(h.shape[0])

    def numpy_ce() -> Any:
        m = h.max(axis=1)
        return (m + np.log(np.exp(h - m[:, None]).sum(axis=1)) - h[rows_h, labels]).mean()

    return {"numpy": (numpy_ce, lambda: None)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--batch", type=int, default=20)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    h = rng.uniform(-4, 4, (args.rows, args.cols)).astype(np.float32)
    labels = rng.integers(0, args.cols, args.rows)
    x, rows, lab = fl.asarray(h), fl.asarray(np.arange(args.rows)), fl.asarray(labels)
    hd = h.astype(np.float64)
    m = hd.max(axis=1)
    want = float((m + np.log(np.exp(hd - m[:, None]).sum(axis=1)) - hd[np.arange(args.rows),
                                                                         labels]).mean())
    fused = fl.fuse(lambda x, rows, labels: cross_entropy(fl, x, rows, labels))
    calls = {"lazy .eval()": lambda: cross_entropy(fl, x, rows, lab).eval(),
             "fl.fuse": lambda: fused(x, rows, lab)}
    dev = fl.get_device()
    print(f"# {dev.name} ({dev.type}); {args.rows} x {args.cols} float32; median of "
          f"{args.repeat}; batch {args.batch}")
    print(f"{'path':<16} {'flag read':<12} {'sync us':>9} {'batch us':>9} {'host us':>9}  check")
    saved = os.environ.get("FUSELOOP_GATHER_WAIT")
    try:
        for name, call in calls.items():
            for mode in ("each call", "defer"):
                if mode == "defer":
                    os.environ["FUSELOOP_GATHER_WAIT"] = "defer"
                else:
                    os.environ.pop("FUSELOOP_GATHER_WAIT", None)
                ok = abs(float(call()) - want) <= 1e-4 * max(1.0, abs(want))
                one, many, host = _walls(call, fl.synchronize, args.repeat, args.batch)
                print(f"{name:<16} {mode:<12} {one:9.1f} {many:9.1f} {host:9.1f}  "
                      f"{'ok' if ok else 'WRONG'}")
    finally:
        if saved is None:
            os.environ.pop("FUSELOOP_GATHER_WAIT", None)
        else:
            os.environ["FUSELOOP_GATHER_WAIT"] = saved
    for name, (call, sync) in _peers(h, labels).items():
        ok = abs(float(call()) - want) <= 1e-3 * max(1.0, abs(want))
        one, many, host = _walls(call, sync, args.repeat, args.batch)
        print(f"{name:<16} {'-':<12} {one:9.1f} {many:9.1f} {host:9.1f}  {'ok' if ok else 'WRONG'}")


if __name__ == "__main__":
    main()
