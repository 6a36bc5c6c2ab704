"""How long waiting for the device takes, by the way one waits (a probe for ``fl.synchronize``).

Per call of a small kernel and of the issue's large workloads, the wall time of
"enqueue, then wait" with three ways to wait: ``queue.finish()``, ``Event.wait()`` on a
marker, and polling the marker's status in a loop.  The difference is pure host/driver
latency: the kernels are the same.

Usage::

    python benchmarks/probes/gpu_sync_probe.py [--log2 27] [--repeat 30]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl as cl

import fuseloop as fl

COMPLETE = cl.command_execution_status.COMPLETE


def waits(queue: cl.CommandQueue) -> dict[str, Callable[[], Any]]:
    def finish() -> None:
        queue.finish()

    def marker_wait() -> None:
        cl.enqueue_marker(queue).wait()

    def marker_poll() -> None:
        ev = cl.enqueue_marker(queue)
        queue.flush()
        while ev.command_execution_status != COMPLETE:
            pass

    return {"queue.finish": finish, "marker.wait": marker_wait, "marker poll": marker_poll}


def per_call(fn: Callable[[], Any], wait: Callable[[], Any], repeat: int) -> float:
    for _ in range(3):
        fn()
        wait()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        wait()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log2", type=int, default=27)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    n = 1 << args.log2
    dev = fl.get_device()
    q = dev.queue
    print(f"device: {dev.name}; n = 2^{args.log2}")
    rng = np.random.default_rng(0)
    x = fl.asarray(rng.random(n, dtype=np.float32))
    y = fl.asarray(rng.random(n, dtype=np.float32))
    small = fl.asarray(rng.random(1000, dtype=np.float32))
    rows = fl.asarray(rng.standard_normal((1 << 14, n >> 14), dtype=np.float32))
    out = fl.empty_like(rows)

    def softmax() -> None:
        e = fl.exp(rows - rows.max(axis=-1, keepdims=True))
        out[...] = e / e.sum(axis=-1, keepdims=True)

    work = {
        "small 2*x+1 (1000)": lambda: (2 * small + 1).eval(),
        "2*x - sin(y) + x*y": lambda: (2 * x - fl.sin(y) + x * y).eval(),
        "sum(x*y)": lambda: fl.sum(x * y).eval(),
        "softmax rows": softmax,
    }
    for name, fn in work.items():
        line = []
        for wname, wait in waits(q).items():
            t = per_call(fn, wait, args.repeat)
            line.append(f"{wname} {t * 1e6:9.1f} us")
        # host time alone: building and enqueueing, no wait (then drain)
        fn()
        q.finish()
        t0 = time.perf_counter()
        for _ in range(10):
            fn()
        host = (time.perf_counter() - t0) / 10
        q.finish()
        print(f"{name:22s} " + " | ".join(line) + f" | host only {host * 1e6:8.1f} us",
              flush=True)


if __name__ == "__main__":
    main()
