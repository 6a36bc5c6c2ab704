"""Command line: ``fuseloop devices`` and ``fuseloop demo``."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _devices(_args: argparse.Namespace) -> int:
    import fuseloop as fl

    found = fl.devices()
    if not found:
        print("no OpenCL devices found")
        return 1
    default = fl.get_device()
    print(f"{'':2}{'#':>2}  {'type':<5} {'fp64':<4} {'memory':>10}  name  [platform]")
    for d in found:
        mark = "*" if d is default else " "
        print(f"{mark:2}{d.index:>2}  {d.type:<5} {'yes' if d.has_fp64 else 'no':<4} "
              f"{d.global_mem_size / 2**30:>7.1f} GiB  {d.name}  [{d.platform}]")
    print("* = default device (FUSELOOP_DEVICE selects another)")
    return 0


def _best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _demo(args: argparse.Namespace) -> int:
    import fuseloop as fl

    if args.device is not None:
        fl.set_device(args.device)
    dev = fl.get_device()
    n = 2**args.log2
    print(f"fuseloop demo on {dev}, {n} float32 elements\n")
    rng = np.random.default_rng(0)
    xh, yh = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    x, y = fl.asarray(xh), fl.asarray(yh)

    fl.reset_stats()
    z = 2 * x + x * y - 3 * y
    print("z = 2*x + x*y - 3*y   # lazy: nothing has run yet,", fl.stats()["kernels_launched"],
          "kernels launched")
    t = time.perf_counter()
    zh = z.get()
    first = time.perf_counter() - t
    np.testing.assert_allclose(zh, 2 * xh + xh * yh - 3 * yh, rtol=1e-5, atol=1e-6)
    print(f"z.get(): first evaluation {first * 1e3:.0f} ms (generate, compile, run);"
          f" matches numpy; stats: {fl.stats()}")
    print("\nthe kernel that ran:\n" + fl.show_code(2 * x + x * y - 3 * y))

    out = fl.empty_like(x)

    def run_fused() -> None:
        out[...] = 2 * x + x * y - 3 * y
        fl.synchronize()

    run_fused()
    t_fl = _best(run_fused)
    t_np = _best(lambda: 2 * xh + xh * yh - 3 * yh)
    gbs = 3 * 4 * n / 1e9
    print(f"cached evaluation: fuseloop {t_fl * 1e3:.2f} ms ({gbs / t_fl:.1f} GB/s), "
          f"numpy {t_np * 1e3:.2f} ms ({gbs / t_np:.1f} GB/s): {t_np / t_fl:.1f}x numpy")

    fl.reset_stats()
    fl.compute(x + y, x - y)
    print(f"\na, b = fl.compute(x + y, x - y): {fl.stats()['kernels_launched']} kernel")
    fl.reset_stats()
    x += 1
    print(f"x += 1: {fl.stats()['kernels_launched']} kernel, in place")
    squared_radius = fl.function("float squared_radius(float x, float y)",
                                 "return x * x + y * y;")
    r = fl.sqrt(squared_radius(x, y))
    np.testing.assert_allclose(r.get(), np.sqrt((xh + 1) ** 2 + yh**2), rtol=1e-5)
    print("user function squared_radius(x, y) fused into sqrt(...): matches numpy")
    print(f"\nfinal stats: {fl.stats()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fuseloop", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("devices", help="list the OpenCL devices fuseloop sees")
    demo = sub.add_parser("demo", help="a short tour on the default device")
    demo.add_argument("--device", default=None, help="device spec (gpu, cpu, index, name)")
    demo.add_argument("--log2", type=int, default=22, help="array size as a power of two")
    args = parser.parse_args(argv)
    from .errors import FuseloopError

    try:
        return {"devices": _devices, "demo": _demo}[args.command](args)
    except FuseloopError as exc:
        print(f"fuseloop: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
