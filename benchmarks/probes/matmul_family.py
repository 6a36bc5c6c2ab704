"""The matmul family's recipe parameters by shape (issue 25): rule against candidates.

For each product of the broad suite's matmul family (``A @ B``, ``A.T @ B``, ``A @ B.T``
at ``--n``; a batch of 8 at ``n/4``; ``einsum('bqd,bkd->bqk')`` with b=4, d=64; 64 and 8
rows and 8 columns times an ``n x n`` matrix; ``x @ A``) it times the ``gpu-tiled``
recipe's defaults (the rule) and a few parameter sets (``gpu_tiled.with_params``:
tiles from the recipe's declared space and the layouts the rule could take by shape),
with torch (TF32 off: cuBLAS) in the same process.  Every result is checked against
torch's (or numpy's) in float64: a mismatch is printed as ``WRONG``.

Per line: microseconds per call of a function traced once (``fl.fuse``) queued
``--batch`` at a time before one wait (``thr``: the device's time when the host keeps
up), one call and its wait (``lat``), TFLOP/s from ``thr``, torch's ``thr`` over ours
(``t/x``, above 1 we are faster), kernels per call and the relative error.

    PYTHONPATH=. python benchmarks/probes/matmul_family.py [--n 4096]
        [--cases ab,atb,abt,batch,attn,rows64,rows8,cols8,vecmat] [--only default,bk16]
        [--repeat 5] [--batch 10]

On a CPU (a smoke test: ``--n 256``) the GPU recipe is registered for the CPU device.
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

# (after PYTHONPATH: PYTHONPATH=<another tree> times that tree's fuseloop)
sys.path.append(str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("FUSELOOP_PROGRESS", "0")  # (no build notices in the output)

import fuseloop as fl
from fuseloop.bench.runner import wall_times
from fuseloop.recipes import contraction as rc

T = rc.TileConfig
D = rc.GPU_TILES
#: tile candidates (gpu_tiled.with_params values) for products tiled in blocks
TILED: dict[str, dict[str, Any]] = {
    "default": {},
    # a longer step: 64-byte runs of an operand contiguous along the sum (33 KiB of tiles)
    "bk16": {"tiles": D._replace(bk=16)},
    "bk16 unroll8": {"tiles": D._replace(bk=16, unroll=8)},
    "bk4": {"tiles": D._replace(bk=4)},
    # twice the block on one side: 512 work-items, 8 x 8 outputs each
    "128x256": {"tiles": D._replace(bn=256, tn=32)},
    "256x128": {"tiles": D._replace(bm=256, tm=32)},
    # more, smaller blocks (fewer waves' tails; 4 x 8 / 8 x 4 / 4 x 4 outputs per item)
    "64x128": {"tiles": D._replace(bm=64)},
    "128x64": {"tiles": D._replace(bn=64)},
    "64x64": {"tiles": D._replace(bm=64, bn=64)},
    "one copy": {"tiles": D._replace(prefetch="regs")},
    "split1": {"split_k": 1},
    "split4": {"split_k": 4},
}
#: candidates for products with a short side (streamed, lanes) or few blocks
SKINNY: dict[str, dict[str, Any]] = {
    "default": {},
    "split1": {"split_k": 1},
    "split8": {"split_k": 8},
    "split16": {"split_k": 16},
    "lanes one launch": {"stream_lanes": 16},
    "lanes g512": {"stream_lanes": 16, "stream_lanes_group": 512},
    "stream_lanes0": {"stream_lanes": 0},
    "64x64": {"tiles": D._replace(bm=64, bn=64)},
    "64x64 split1": {"tiles": D._replace(bm=64, bn=64), "split_k": 1},
    "medium0": {"medium": 0},
    "skinny g128": {"skinny_group": 128},
    "skinny lanes16": {"skinny_lanes": 16},
    # the streaming kernel (a short side whose long operand is contiguous along the long
    # side) and the lanes kernel of x @ A: loads in flight, columns per work-item
    "unroll4": {"stream_unroll": 4},
    "unroll16": {"stream_unroll": 16},
    "per4": {"stream_per": 4},
    "per1": {"stream_per": 1},
    "per4-unroll16": {"stream_per": 4, "stream_unroll": 16},
    "sgroup256": {"stream_group": 256},
    "bytes128k": {"stream_bytes": 128 * 1024},
    "lgroup256": {"stream_lanes_group": 256},
    # the lanes kernel of a short side whose long operand is contiguous along the sum
    "sk-unroll8": {"skinny_unroll": 8},
    "sk-unroll16": {"skinny_unroll": 16},
    "sk-nostage": {"skinny_stage": False},
    "sk-nostage-u8": {"skinny_stage": False, "skinny_unroll": 8},
    "sk-g512": {"skinny_group": 512},
    # tiles of a medium side in split-K pieces
    "split4": {"split_k": 4},
    "split8-onecopy": {"split_k": 8, "tiles": D._replace(prefetch="regs")},
    "split8-128x64": {"split_k": 8, "tiles": D._replace(bn=64)},
}

Body = Callable[[Any, Any, Any], Any]


def _mm(xp: Any, a: Any, b: Any) -> Any:
    return a @ b


def _tn(xp: Any, a: Any, b: Any) -> Any:
    return xp.swapaxes(a, -1, -2) @ b


def _nt(xp: Any, a: Any, b: Any) -> Any:
    return a @ xp.swapaxes(b, -1, -2)


def cases(n: int) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], Body, float, dict]]:
    """name: (shape of a, shape of b, body, flops, candidates)."""
    q = max(8, n // 4)
    return {
        "ab": ((n, n), (n, n), _mm, 2.0 * n ** 3, TILED),
        "atb": ((n, n), (n, n), _tn, 2.0 * n ** 3, TILED),
        "abt": ((n, n), (n, n), _nt, 2.0 * n ** 3, TILED),
        "batch": ((8, q, q), (8, q, q), _mm, 16.0 * q ** 3, TILED),
        "attn": ((4, n, 64), (4, n, 64), _nt, 2.0 * 4 * n * n * 64, TILED),
        "rows64": ((64, n), (n, n), _mm, 2.0 * 64 * n * n, SKINNY),
        "rows8": ((8, n), (n, n), _mm, 2.0 * 8 * n * n, SKINNY),
        "cols8": ((n, n), (n, 8), _mm, 2.0 * 8 * n * n, SKINNY),
        "vecmat": ((n,), (n, n), _mm, 2.0 * n * n, SKINNY),
    }


def _torch() -> Any:
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        return torch
    except Exception:
        return None


def _times(call: Callable[[], Any], sync: Callable[[], Any], repeat: int,
           batch: int) -> tuple[float, float]:
    """(per call queued ``batch`` at a time, one call and its wait), medians in seconds."""
    thr = statistics.median(wall_times(call, sync, repeat, warmup=2, batch=batch))
    lat = statistics.median(wall_times(call, sync, repeat, warmup=1, batch=1))
    return thr, lat


def _line(case: str, impl: str, thr: float, lat: float, flops: float, peer: float | None,
          note: str) -> str:
    ratio = f"{peer / thr:5.2f}" if peer else "    -"
    return (f"{case:7s} {impl:17s} {thr * 1e6:9.1f} {lat * 1e6:8.1f} "
            f"{flops / thr / 1e12:7.2f} {ratio}  {note}")


def _register_on_cpu(device: Any) -> None:
    """The CPU device takes the GPU recipe (a smoke test of the candidates' kernels)."""
    from fuseloop.recipes import DevicePredicate

    pred = DevicePredicate(type=device.type, vendor=device.vendor, name=device.name,
                           platform=device.platform)
    fl.register_recipe(pred, rc.gpu_tiled, name="probe-gpu-tiled", kind="contraction")


def run_case(name: str, spec: tuple, only: list[str] | None, torch: Any, repeat: int,
             batch: int) -> None:
    sa, sb, body, flops, cands = spec
    rng = np.random.default_rng(3)
    ah = (rng.random(sa, dtype=np.float32) - 0.5)
    bh = (rng.random(sb, dtype=np.float32) - 0.5)
    peer = None
    if torch is not None:
        at, bt = torch.from_numpy(ah).cuda(), torch.from_numpy(bh).cuda()
        want = body(torch, at.double(), bt.double()).cpu().numpy()
        thr, lat = _times(lambda: body(torch, at, bt), torch.cuda.synchronize, repeat, batch)
        peer = thr
        print(_line(name, "torch (cuBLAS)", thr, lat, flops, peer, ""), flush=True)
    else:
        want = body(np, ah.astype(np.float64), bh.astype(np.float64))
    a, b = fl.asarray(ah), fl.asarray(bh)
    scale = float(np.abs(want).max())
    for cand, params in cands.items():
        if only and cand not in only:
            continue
        recipe = rc.gpu_tiled.with_params(**params) if params else rc.gpu_tiled
        try:
            with fl.recipes.use(recipe):
                f = fl.fuse(lambda x, y: body(fl, x, y))
                start = time.perf_counter()
                got = f(a, b).get()
                first = time.perf_counter() - start
                err = float(np.abs(got - want).max()) / scale
                fl.reset_stats()
                f(a, b)
                fl.synchronize()
                kernels = fl.stats()["kernels_launched"]
                thr, lat = _times(lambda f=f: f(a, b), fl.synchronize, repeat, batch)
            bad = " WRONG" if not err < 1e-4 else ""
            note = f"k={kernels} err {err:.0e}{bad} build {first:.1f}s"
            print(_line(name, cand, thr, lat, flops, peer, note), flush=True)
        except Exception as exc:  # a candidate that fails is reported, not fatal
            print(f"{name:7s} {cand:17s} failed: {type(exc).__name__}: {exc}"[:150], flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--cases", default="ab,atb,abt,batch,attn,rows64,rows8,cols8,vecmat")
    p.add_argument("--only", default=None, help="candidate names, comma-separated")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--batch", type=int, default=10)
    args = p.parse_args(argv)
    dev = fl.get_device()
    if dev.type == "cpu":
        _register_on_cpu(dev)
    torch = _torch() if dev.type != "cpu" else None
    tree = Path(fl.__file__).resolve().parents[1].name
    print(f"{dev.name}; {tree} gpu-tiled v{rc.gpu_tiled.version}; n={args.n}; us per call: thr "
          f"(queued {args.batch}), lat (one + wait); t/x = torch thr / ours", flush=True)
    print(f"{'case':7s} {'impl':17s} {'thr us':>9s} {'lat us':>8s} {'TFLOP/s':>7s} {'t/x':>5s}")
    all_cases = cases(args.n)
    only = args.only.split(",") if args.only else None
    for name in args.cases.split(","):
        run_case(name, all_cases[name], only, torch, args.repeat, args.batch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
