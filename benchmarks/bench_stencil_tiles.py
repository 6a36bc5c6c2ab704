"""Stencils with and without local-memory tiles (gpu-coalesced's ``tile`` parameter,
``fuseloop.recipes.stencil_tiles``) against their peers, in one run and one table.

Workloads (sizes: on a GPU or with ``--full``; on a CPU, or with ``--small``, 2048^2
and 96^3):

* ``stencil 2-D``: a 5-point step ``c*x + w*(4 neighbours)`` on an 8192^2 float32 grid;
* ``stencil 3-D``: a 7-point step ``c*x + w*(6 neighbours)`` on a 256^3 float32 grid;

each as a slice assignment of the interior (``y[1:-1, 1:-1] = ...``, the form every
peer runs) and as ``fl.stencil(x, w, boundary="clamp")`` (every point), with the
device's elementwise recipe as registered (gpu-coalesced: no tile, its default), with
``tile=None`` (``tiles`` rows: the rule's local-memory tile) and with ``tile=None,
tile_local=False`` (``grid`` rows: the tiles' 2-D/3-D grid reading global memory, what
the local copy adds over the grid alone).  Peers in the same run: numpy on a CPU device;
cupy, torch eager and ``torch.compile`` on a GPU, each skipped with its reason when
missing.  Every result is checked once against numpy.  Times are medians of ``--repeat``
calls after warm-up; ``peer/fuseloop`` is the row's time over the workload's first
fuseloop row (slices, the recipe as registered): above 1, that row is slower.
``fuseloop stencil`` rows are ``fl.stencil`` (clamp).
Usage::

    python benchmarks/bench_stencil_tiles.py [--device SPEC] [--small | --full]
                                             [--repeat K] [--only 2d 3d]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import median_time

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_features  # (the GPU peers, found once)
import bench_segmented  # (the table)

Row = bench_segmented.Row
_attempt = bench_segmented._attempt  # (a missing or failing peer is reported, not fatal)
CENTRE, SIDE = 0.4, 0.1


def step(x: Any) -> Any:
    """The interior of the 5-point (2-D) or 7-point (3-D) step, by slices."""
    inner = (slice(1, -1),) * x.ndim
    nb = None
    for axis in range(x.ndim):
        for lo, hi in ((None, -2), (2, None)):
            at = list(inner)
            at[axis] = slice(lo, hi)
            nb = x[tuple(at)] if nb is None else nb + x[tuple(at)]
    return CENTRE * x[inner] + SIDE * nb


def weights(ndim: int) -> np.ndarray:
    w = np.zeros((3,) * ndim, np.float32)
    w[(1,) * ndim] = CENTRE
    for axis in range(ndim):
        for side in (0, 2):
            at = [1] * ndim
            at[axis] = side
            w[tuple(at)] = SIDE
    return w


def _close(got: np.ndarray, want: np.ndarray) -> str:
    return "" if np.allclose(got, want, rtol=1e-4, atol=1e-5) else "MISMATCH"


def _fuseloop(rows: list[Row], name: str, h: np.ndarray, repeat: int) -> None:
    inner = (slice(1, -1),) * h.ndim
    want = step(h)
    x = fl.asarray(h)
    y = fl.zeros(h.shape, np.float32)
    w = weights(h.ndim)
    recipe = fl.recipe_for(fl.get_device(), "elementwise")
    variants: list[tuple[str, Any]] = [("", None)]
    if "tile" in recipe.params:
        variants.append((" tiles", recipe.with_params(tile=None)))
        variants.append((" grid", recipe.with_params(tile=None, tile_local=False)))

    def slices() -> tuple[float, str]:
        def run() -> None:
            y[inner] = step(x)

        run()
        return median_time(run, fl.synchronize, repeat), _close(y.get()[inner], want)

    def stencil() -> tuple[float, str]:
        got = fl.stencil(x, w, boundary="clamp").get()
        return median_time(lambda: fl.stencil(x, w, boundary="clamp").eval(), fl.synchronize,
                           repeat), _close(got[inner], want)

    for label, variant in variants:
        for form, fn in (("slices", slices), ("stencil", stencil)):
            if variant is None:
                _attempt(rows, name, f"fuseloop {form}{label}", fn)
                continue
            with fl.recipes.use(variant):
                _attempt(rows, name, f"fuseloop {form}{label}", fn)


def _peers(rows: list[Row], name: str, h: np.ndarray, repeat: int, gpu: dict[str, Any]) -> None:
    inner = (slice(1, -1),) * h.ndim
    want = step(h)
    if not gpu:
        y = np.zeros_like(h)

        def numpy_run() -> None:
            y[inner] = step(h)

        _attempt(rows, name, "numpy slices",
                 lambda: (median_time(numpy_run, lambda: None, repeat), ""))
        return
    if "cupy" in gpu:
        cp = gpu["cupy"]

        def cupy_run() -> tuple[float, str]:
            cx, cy = cp.asarray(h), cp.zeros(h.shape, cp.float32)

            def run() -> None:
                cy[inner] = step(cx)

            run()
            note = _close(cp.asnumpy(cy)[inner], want)
            return median_time(run, cp.cuda.Device().synchronize, repeat), note

        _attempt(rows, name, "cupy slices", cupy_run)
    if "torch" in gpu:
        torch = gpu["torch"]
        tx = torch.from_numpy(h).cuda()
        ty = torch.zeros_like(tx)

        def torch_run(fn: Callable[[Any], Any]) -> tuple[float, str]:
            def run() -> None:
                ty[inner] = fn(tx)

            run()
            note = _close(ty.cpu().numpy()[inner], want)
            return median_time(run, torch.cuda.synchronize, repeat), note

        _attempt(rows, name, "torch eager slices", lambda: torch_run(step))
        _attempt(rows, name, "torch.compile slices", lambda: torch_run(torch.compile(step)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true",
                      help="sizes for a CPU (its default): 2048^2 and 96^3")
    size.add_argument("--full", action="store_true",
                      help="the GPU sizes (a GPU's default): 8192^2 and 256^3")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--only", nargs="+", choices=("2d", "3d"), default=["2d", "3d"])
    args = p.parse_args(argv)
    if args.device:
        fl.set_device(args.device)
    dev = fl.get_device()
    gpu = bench_features._gpu_peers() if dev.type == "gpu" else {}
    small = args.small or (dev.type != "gpu" and not args.full)
    side2, side3 = (2048, 96) if small else (8192, 256)
    recipe = fl.recipe_for(dev, "elementwise")
    print(f"device: {dev.name} ({dev.type}); elementwise recipe {recipe.name}; peers: "
          f"{', '.join(gpu) if dev.type == 'gpu' else 'numpy'}; float32, 2-D {side2}^2 "
          f"5-point, 3-D {side3}^3 7-point (Melem/s: interior points)", flush=True)
    rng = np.random.default_rng(5)
    rows: list[Row] = []
    sizes = {}
    for key, name, shape in (("2d", "stencil 2-D", (side2, side2)),
                             ("3d", "stencil 3-D", (side3,) * 3)):
        if key not in args.only:
            continue
        h = rng.random(shape, dtype=np.float32)
        sizes[name] = int(np.prod([n - 2 for n in shape]))
        _fuseloop(rows, name, h, args.repeat)
        _peers(rows, name, h, args.repeat, gpu)
    bench_segmented.print_rows(rows, sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
