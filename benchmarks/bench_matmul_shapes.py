"""Contractions of every shape: the recipes' shape rule against its alternatives and peers.

For each shape (``x @ A``, ``A.T @ x``, few rows, few columns, square ``A @ B`` and
``A.T @ B``) at order ``--n``, one table of GFLOP/s (2 m n k flops) in one run:

* ``rule``: the registered contraction recipe as it chooses by the extents (on GPUs
  ``gpu-tiled`` with ``skinny="lanes"`` for a short side; on CPUs ``cpu-blocked``);
* ``rule, skinny=tiles`` (GPUs): a short side as one tile instead of split sums;
* ``square tiles``: the recipe's default blocks whatever the shape, no size classes
  (``tiled(GPU_TILES)`` / ``blocked(CPU_BLOCKS)``: what a square product gets);
* ``reduction kernel``: the product not taken as a contraction (how fuseloop ran
  skinny products before the rule);
* peers: torch with TF32 off and cupy (cuBLAS) on GPUs, numpy (BLAS) on CPUs.

Every fuseloop result is checked against a float64 reference.  Usage::

    python benchmarks/bench_matmul_shapes.py [--device SPEC] [--n N] [--repeat K]
        [--shapes NAMES] [--time-limit S] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

# this checkout's fuseloop (not an installed copy), and bench_matmul's helpers
sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

import bench_matmul as bm  # noqa: E402

import fuseloop as fl  # noqa: E402
import fuseloop.expr.contraction as fl_contraction  # noqa: E402
from fuseloop.recipes import contraction as rc  # noqa: E402

# name -> (shape of a, shape of b, transpose a) as functions of the order n
SHAPES: dict[str, Callable[[int], tuple[tuple[int, ...], tuple[int, ...], bool]]] = {
    "vecmat x@A": lambda n: ((n,), (n, n), False),
    "A.T@x": lambda n: ((n, n), (n,), True),
    "8 rows": lambda n: ((8, n), (n, n), False),
    "32 rows": lambda n: ((32, n), (n, n), False),
    "64 rows": lambda n: ((64, n), (n, n), False),
    "8 cols": lambda n: ((n, n), (n, 8), False),
    "square A@B": lambda n: ((n, n), (n, n), False),
    "square A.T@B": lambda n: ((n, n), (n, n), True),
}


class _NotContraction:
    """Products are not taken as contractions inside this block (the reduction kernels;
    the in-memory caches are emptied on the way in and out: launch plans keep programs)."""

    def __enter__(self) -> None:
        self.saved = fl_contraction.MIN_SIDE
        fl_contraction.MIN_SIDE = 1 << 62
        fl.clear_caches()

    def __exit__(self, *exc: object) -> None:
        fl_contraction.MIN_SIDE = self.saved
        fl.clear_caches()


def variants(gpu: bool) -> list[tuple[str, Callable[[], AbstractContextManager[Any]]]]:
    if gpu:
        return [("rule", nullcontext),
                ("rule, skinny=tiles",
                 lambda: fl.recipes.use(rc.gpu_tiled.with_params(skinny="tiles"))),
                ("square tiles", lambda: fl.recipes.use(fl.recipes.Recipe(
                    "square-tiles", rc.tiled(rc.GPU_TILES), kind="contraction"))),
                ("reduction kernel", _NotContraction)]
    return [("rule", nullcontext),
            ("square tiles", lambda: fl.recipes.use(fl.recipes.Recipe(
                "square-blocks", rc.blocked(rc.CPU_BLOCKS), kind="contraction"))),
            ("reduction kernel", _NotContraction)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--n", type=int, default=None, help="order (4096 on GPUs, 1024 on CPUs)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--shapes", default=None, help="comma-separated names: " + ", ".join(SHAPES))
    ap.add_argument("--time-limit", type=float, default=1200.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    dev = fl.get_device() if args.device is None else fl.set_device(args.device)
    gpu = dev.type != "cpu"
    n = args.n or (4096 if gpu else 1024)
    bm.SCALE[:] = [1e9, "GFLOP/s"]
    report = bm.Report(time.time() + args.time_limit)
    peers = bm.Peers(gpu)
    names = args.shapes.split(",") if args.shapes else list(SHAPES)
    print(f"device {dev.name}; order {n}; float32; GFLOP/s = 2 m n k / time", flush=True)
    rng = np.random.default_rng(0)
    for name in names:
        sa, sb, trans = SHAPES[name](n)
        ah = rng.random(sa, dtype=np.float32) - 0.5
        bh = rng.random(sb, dtype=np.float32) - 0.5
        a_eff = np.ascontiguousarray(ah.T) if trans else ah  # the operand as multiplied
        m = a_eff.shape[0] if a_eff.ndim == 2 else 1
        ncols = bh.shape[1] if bh.ndim == 2 else 1
        flops = 2.0 * m * ncols * a_eff.shape[-1]
        ref = peers.reference(lambda x, y, mod: x @ y, a_eff, bh)
        A, B = fl.asarray(ah), fl.asarray(bh)

        def expr(A: Any = A, B: Any = B, trans: bool = trans) -> Any:
            return (A.T if trans else A) @ B

        for label, scope in variants(gpu):
            with scope():
                bm.fl_case(report, peers, name, f"fuseloop {label}", expr, ref, flops,
                           args.repeat)
        bm.peer_matmul(report, peers, name, a_eff, bh, args.repeat, flops)
    if args.out:
        Path(args.out).write_text(json.dumps(dict(device=dev.name, n=n, results=report.rows),
                                             indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
