"""How long ``fl.synchronize()`` takes to see one small kernel finish on a GPU, by the
way it waits (issue 25: the lazy call's ``wait`` stage): the driver's finish against a
polled marker, and fuseloop's bookkeeping before the finish.

Per device and wait, after a lazy call whose one launch is small (``(x * 2 + 1).eval()``
on ``--n`` float32, or ``A @ v`` at 64 x 64), wall microseconds from the call's return
to the wait's (median, min over ``--repeat`` calls, the waits interleaved):

* ``sync``: ``fl.synchronize()`` (what the broad suite's lazy call pays);
* ``finish``: the deferred launches enqueued, then the queue's finish (the same,
  without fuseloop's bookkeeping);
* ``poll``: the deferred launches enqueued and submitted (``clFlush``), a marker
  enqueued and its status polled until complete (no sleep in the driver), then the
  queue's finish (which then has nothing to wait for);

then torch's ``torch.cuda.synchronize()`` after a small op, where torch sees CUDA.
``--torch-first`` makes torch's CUDA context (a tensor on the GPU, one op) before the
waits are timed: NVIDIA's OpenCL has a context of its own, and two contexts on one GPU
share it by time slices (the broad suite runs its peers in fuseloop's process).
Reported, never asserted.

    PYTHONPATH=$PWD python benchmarks/probes/lazy_wait_latency.py --device nvidia
    PYTHONPATH=$PWD python benchmarks/probes/lazy_wait_latency.py --device cuda:0
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.runtime.devices import _runtime

POLL_LIMIT_S = 0.01  # (a marker never submitted: give up polling, finish instead)


def _waits(device: Any) -> dict[str, Callable[[], None]]:
    rt = _runtime(device)

    def finish() -> None:
        rt.flush()
        rt.finish_queue(rt.bare_queue)

    def poll() -> None:
        rt.flush()
        queue = rt.bare_queue
        ev = rt.marker(queue)
        rt.submit(queue)
        status = rt.event_status
        t0 = time.perf_counter()
        while status(ev) > 0 and time.perf_counter() - t0 < POLL_LIMIT_S:
            pass
        rt.finish_queue(queue)

    return {"sync": fl.synchronize, "finish": finish, "poll": poll}


def _case(name: str, n: int) -> Callable[[], Any]:
    rng = np.random.default_rng(0)
    if name == "matvec":
        a = fl.asarray(rng.random((64, 64), dtype=np.float32))
        v = fl.asarray(rng.random(64, dtype=np.float32))
        return lambda: (a @ v).eval()
    x = fl.asarray(rng.random(n, dtype=np.float32))
    return lambda: (x * 2 + 1).eval()


def _torch(repeat: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    x = torch.ones(1024, device="cuda")
    got = []
    for k in range(repeat + 5):
        y = x * 2 + 1
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        if k >= 5:
            got.append(time.perf_counter() - t0)
        del y
    return statistics.median(got) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--torch-first", action="store_true")
    args = ap.parse_args()
    if args.torch_first:
        import torch

        (torch.ones(16, device="cuda") * 2).sum().item()
    if args.device:
        fl.set_device(args.device)
    device = fl.get_device()
    waits = _waits(device)
    print(f"{device.name} ({device.backend}; torch's context first: {args.torch_first}): us "
          f"from the call's return to the wait's, median / min of {args.repeat}")
    for case in ("elementwise", "matvec"):
        call = _case(case, args.n)
        for _ in range(10):
            call()
            fl.synchronize()
        got: dict[str, list[float]] = {w: [] for w in waits}
        for _ in range(args.repeat):
            for w, wait in waits.items():
                r = call()
                t0 = time.perf_counter()
                wait()
                got[w].append(time.perf_counter() - t0)
                del r
                fl.synchronize()
        print(f"{case:<12} " + "  ".join(
            f"{w} {statistics.median(v) * 1e6:7.1f} / {min(v) * 1e6:6.1f}"
            for w, v in got.items()), flush=True)
    t = _torch(args.repeat)
    if t is not None:
        print(f"torch.cuda.synchronize after a small op: {t:.1f} us (median)")


if __name__ == "__main__":
    main()
