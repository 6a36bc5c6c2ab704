"""Host cost of a cached launch on the CUDA backend, and where it goes.

Part 1, the figure of issue 29: a cached 5-operation ``.eval()`` on 1000 float32
(``((x * 2 + y) * x - y) / 3``, as ``compare_host_overhead.py --case overhead``) on the
CUDA device and on the OpenCL GPU, loops interleaved in one process, median us per call
(synchronising every 100 calls).  Part 2, the pieces of a CUDA launch, us per call:
CuPy's ``Function.__call__`` of a trivial kernel with numpy-scalar arguments (converted
by CuPy on every launch, what the launcher passed before) and with CuPy's own argument
objects (``CIntptr``, made once: what it passes now), ``cudaGetDevice``
(no longer asked per launch on a one-GPU host), the memory pool's ``malloc`` of an
output, and the ``np.uint64``/``CIntptr`` of an output address.  Reported, not asserted.

    PYTHONPATH=. python benchmarks/probes/cuda_launch_cost.py [--calls N] [--rounds R]

To compare with the launcher before this change, on the same host:
``python benchmarks/compare_host_overhead.py main WT --device cuda:0``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import fuseloop as fl


def _per_call(fn: Callable[[int], None], calls: int, rounds: int,
              sync: Callable[[], None]) -> float:
    fn(calls)  # (warm)
    sync()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn(calls)
        sync()
        times.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(times)


def eval_loops(calls: int, rounds: int) -> list[tuple[str, float]]:
    rng = np.random.default_rng(1)
    xh, yh = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32) + 1
    devices = [d for d in fl.devices() if d.type == "gpu" and d.usable]
    picked = [next((d for d in devices if d.backend == b), None) for b in ("cuda", "opencl")]
    loops = []
    for dev in [d for d in picked if d is not None]:
        with fl.device(dev):
            x, y = fl.asarray(xh), fl.asarray(yh)
            np.testing.assert_allclose((((x * 2 + y) * x - y) / 3).get(),
                                       ((xh * 2 + yh) * xh - yh) / 3, rtol=1e-5, atol=1e-6)

        def loop(n: int, dev=dev, x=x, y=y) -> None:
            with fl.device(dev):
                for i in range(n):
                    (((x * 2 + y) * x - y) / 3).eval()
                    if i % 100 == 99:
                        fl.synchronize()
                fl.synchronize()
        loop(calls)
        loops.append((f"cached 5-op .eval(), {dev.backend} ({dev.name})", loop))
    times: dict[str, list[float]] = {name: [] for name, _ in loops}
    for _ in range(rounds):  # interleaved: both see the same phases of the machine
        for name, loop in loops:
            t = time.perf_counter()
            loop(calls)
            times[name].append((time.perf_counter() - t) / calls * 1e6)
    return [(name, statistics.median(ts)) for name, ts in times.items()]


def launch_pieces(calls: int, rounds: int) -> list[tuple[str, float]]:
    import cupy
    from cupy.cuda import runtime
    from cupy.cuda.function import CIntptr

    src = ('extern "C" __global__ void k(float *o, const float *a, const float *b, '
           'float s, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; '
           'if (i < n) o[i] = a[i] * s + b[i]; }')
    fn = cupy.RawKernel(src, "k").kernel
    o, a, b = (cupy.zeros(1024, cupy.float32) for _ in range(3))
    stream = cupy.cuda.Stream(non_blocking=True)
    old = [np.uint64(o.data.ptr), np.uint64(a.data.ptr), np.uint64(b.data.ptr),
           np.float32(2), np.int32(1000)]
    from fuseloop.backends.cuda import by_value

    new = [CIntptr(o.data.ptr), CIntptr(a.data.ptr), CIntptr(b.data.ptr),
           by_value(np.float32(2)), by_value(np.int32(1000))]
    assert not isinstance(new[3], np.generic)  # (this CuPy has its argument classes)
    pool = cupy.cuda.MemoryPool()
    ptr = o.data.ptr

    def launch(args: list) -> Callable[[int], None]:
        def run(n: int) -> None:
            for _ in range(n):
                fn((4,), (256,), args, 0, stream)
        return run

    def get_device(n: int) -> None:
        for _ in range(n):
            runtime.getDevice()

    def malloc(n: int) -> None:
        for _ in range(n):
            pool.malloc(4000)

    def u64(n: int) -> None:
        for _ in range(n):
            np.uint64(ptr)

    def intptr(n: int) -> None:
        for _ in range(n):
            CIntptr(ptr)

    sync = stream.synchronize
    pieces = [("Function() with numpy scalars (before)", launch(old)),
              ("Function() with CuPy argument objects (now)", launch(new)),
              ("cudaGetDevice (before: per launch)", get_device),
              ("MemoryPool.malloc(4000) + free", malloc),
              ("np.uint64(address) (before)", u64), ("CIntptr(address) (now)", intptr)]
    return [(name, _per_call(fn_, calls, rounds, sync)) for name, fn_ in pieces]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    rows = eval_loops(args.calls, args.rounds)
    if not rows:
        print("no GPU device: nothing to measure")
        return
    if any(d.backend == "cuda" for d in fl.devices()):
        rows += launch_pieces(args.calls * 5, args.rounds)
    print("| what | us per call (median) |")
    print("| --- | ---: |")
    for name, us in rows:
        print(f"| {name} | {us:.2f} |")


if __name__ == "__main__":
    main()
