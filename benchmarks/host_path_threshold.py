"""Where small evaluations stop being faster in host memory than as kernels (issue 26).

For each size, three statements are timed on the default (CPU) device with
``fuseloop.host_path`` on (numpy in the buffers' host memory) and off (cached
kernels), numpy alongside: an elementwise expression, a reduction, and an
in-place update of a slice.  The crossover (the largest size where the host path
still wins every statement) is what ``host_path.HOST_MAX_WORK`` should be near.

    python benchmarks/host_path_threshold.py [--sizes 256 1024 ...] [--repeats 200]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import fuseloop as fl
from fuseloop import host_path


def _time(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds per call of ``fn`` (then synchronised), in 5 batches, of the
    process's CPU time (every thread: the OpenCL driver's workers too), which other
    work on a shared machine distorts far less than the wall-clock time."""
    fn()
    fl.synchronize()
    per = []
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(repeats):
            fn()
        fl.synchronize()
        per.append((time.process_time() - t0) / repeats)
    return float(np.median(per))


def _statements(lib: object, x: object, y: object, z: object
                ) -> dict[str, Callable[[], object]]:
    sin = lib.sin  # type: ignore[attr-defined]
    total = lib.sum  # type: ignore[attr-defined]
    n = len(x)  # type: ignore[arg-type]

    def elementwise() -> object:
        out = x * 2.0 + sin(y)  # type: ignore[operator]
        return out.eval() if hasattr(out, "eval") else out

    def reduction() -> object:
        out = total(x * y)  # type: ignore[operator]
        return out.eval() if hasattr(out, "eval") else out

    def update() -> None:
        z[1:n] += x[: n - 1] * 0.5  # type: ignore[index]

    return {"elementwise": elementwise, "reduction": reduction, "slice +=": update}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*",
                        default=[64, 1024, 4096, 16384, 32768, 65536, 262144])
    parser.add_argument("--repeats", type=int, default=100)
    ns = parser.parse_args()
    device = fl.get_device()
    saved = host_path.HOST_MAX_WORK
    print(f"device: {device.name}; CPU time (all threads) in us per statement")
    print(f"{'statement':12s} {'size':>8s} {'numpy':>9s} {'host path':>10s} {'kernels':>9s}")
    try:
        for n in ns.sizes:
            rng = np.random.default_rng(0)
            xs, ys = rng.random(n), rng.random(n)
            hosts = _statements(np, xs, ys, np.zeros(n))
            fx, fy, fz = fl.asarray(xs), fl.asarray(ys), fl.asarray(np.zeros(n))
            devs = _statements(fl, fx, fy, fz)
            for name in hosts:
                t_np = _time(hosts[name], ns.repeats)
                host_path.HOST_MAX_WORK = 1 << 62
                t_host = _time(devs[name], ns.repeats)
                host_path.HOST_MAX_WORK = 0
                t_kernel = _time(devs[name], ns.repeats)
                print(f"{name:12s} {n:8d} {t_np * 1e6:9.1f} {t_host * 1e6:10.1f} "
                      f"{t_kernel * 1e6:9.1f}", flush=True)
    finally:
        host_path.HOST_MAX_WORK = saved


if __name__ == "__main__":
    main()
