"""Issue 29 figures: one array split over several devices against one device, same run.

Workloads (float32, inputs made on the devices by ``fl.random``, nothing uploaded):

* ``2*x - sin(y) + x*y`` over ``2**log2n`` elements: GB/s counting two reads and one
  write; each part is one fused kernel on its device.
* ``fl.sum(x*y)``: GB/s counting two reads; partial sums per device, combined on
  the host.
* a 2-D 5-point stencil step ``u + 0.1 * laplacian(u)`` on a ``2**grid_log2`` square
  grid: GB/s counting one read and one write; with several devices each step copies
  the halo rows (one above and one below each inner boundary): peer to peer between
  CUDA devices, through the host between OpenCL devices.

Each is timed on the first listed device alone (an ordinary array) and on all listed
devices (a ``fl.MultiArray``), and the ratio of throughputs is printed.  Devices:
``--devices`` (specs as ``fl.device`` takes them, comma-separated; one may repeat),
default every GPU ``fl.devices(type="gpu")`` lists.  On a CPU, ``--devices 0,0``
shows the machinery works: the parts share one device, so the figures say nothing
about speed-up.  Usage::

    python benchmarks/bench_multigpu.py [--devices SPECS] [--log2n 30] [--grid-log2 14]
        [--repeat 5] [--weights equal|measure] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import median_time
from fuseloop.runtime.devices import find_device

LAPLACE = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)


def _inputs(shape: Any, where: Any) -> tuple[Any, Any]:
    """x, y on one device (``where`` a Device) or split (``where`` a list)."""
    with fl.device(where):
        x = fl.random.uniform(shape, dtype=np.float32, key=1).eval()
        y = fl.random.uniform(shape, dtype=np.float32, key=2).eval()
    return x, y


def _sample(a: Any, rows: int = 4096) -> np.ndarray:
    """The first rows (split or not) as a numpy array."""
    return a[:rows].get()


def _time(fn: Callable[[], Any], repeat: int) -> float:
    return median_time(fn, fl.synchronize, repeat)


def run_case(name: str, nbytes: int, make: Callable[[Any], Callable[[], Any]],
             devs: list[Any], repeat: int, weights: Any) -> dict[str, Any]:
    """One workload on the first device, then on all of them; the results compared."""
    one = make(devs[0])
    t1 = _time(one, repeat)
    r1 = one()
    check1 = np.asarray(r1.get() if r1.ndim == 0 else _sample(r1), np.float64)
    del one, r1
    fl.synchronize()
    with fl.device(devs, weights=weights) as dset:
        split = make(dset)
    tk = _time(split, repeat)
    rk = split()
    checkk = np.asarray(rk.get() if rk.ndim == 0 else _sample(rk), np.float64)
    ok = np.allclose(check1, checkk, rtol=1e-4, atol=1e-4)
    row = dict(workload=name, one=nbytes / t1 / 1e9, all=nbytes / tk / 1e9, ok=bool(ok))
    row["ratio"] = row["all"] / row["one"]
    del split, rk
    fl.synchronize()
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", default=None,
                   help="comma-separated device specs (default: every GPU)")
    p.add_argument("--log2n", type=int, default=30)
    p.add_argument("--grid-log2", type=int, default=14)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--weights", choices=("equal", "measure"), default="equal")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.devices:
        devs = [find_device(s.strip()) for s in args.devices.split(",")]
    else:
        devs = fl.devices(type="gpu")
    if not devs:
        print("no GPU found; list devices with --devices (e.g. --devices 0,0 on a CPU)")
        return 2
    weights = "measure" if args.weights == "measure" else None
    n, g = 1 << args.log2n, 1 << args.grid_log2
    print(f"devices: {', '.join(str(d) for d in devs)}")
    if len({d.index for d in devs}) < len(devs):
        print("(a device listed more than once: its parts share it, so the ratios are "
              "meaningless as speed-ups; this run shows the split path works)")

    def elementwise(where: Any) -> Callable[[], Any]:
        x, y = _inputs(n, where)
        return lambda: (2 * x - fl.sin(y) + x * y).eval()

    def dot(where: Any) -> Callable[[], Any]:
        x, y = _inputs(n, where)
        return lambda: fl.sum(x * y).eval()

    def stencil(where: Any) -> Callable[[], Any]:
        u, _ = _inputs((g, g), where)
        return lambda: (u + np.float32(0.1) * fl.stencil(u, LAPLACE)).eval()

    rows = [run_case("2*x - sin(y) + x*y", 12 * n, elementwise, devs, args.repeat, weights),
            run_case("sum(x*y)", 8 * n, dot, devs, args.repeat, weights),
            run_case(f"5-point stencil {g}^2", 8 * g * g, stencil, devs, args.repeat, weights)]
    print(f"\n{'workload':28s} {'1 device GB/s':>14s} {f'{len(devs)} parts GB/s':>14s} "
          f"{'ratio':>7s}  check")
    for r in rows:
        print(f"{r['workload']:28s} {r['one']:14.1f} {r['all']:14.1f} {r['ratio']:7.2f}  "
              f"{'ok' if r['ok'] else 'MISMATCH'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(devices=[str(d) for d in devs], log2n=args.log2n,
                           grid_log2=args.grid_log2, rows=rows), f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
