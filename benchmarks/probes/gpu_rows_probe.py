"""Probe the GPU reduction recipe's tunables on one device, in one run.

For ``fl.sum(x * y)`` (2^27 float32 by default): work-items per group and the
number of first-stage pieces; for row softmax (2^14 x 2^13): work-items per
row and row elements each work-item keeps in registers.  Each variant is
timed per call (``.eval()`` then synchronize: what the issue's figure
counts) and pipelined (``--batch`` calls, one synchronize: the device's own
rate), as GB/s and as a fraction of the buffer-copy bandwidth
measured in the same run.  Usage::

    python benchmarks/probes/gpu_rows_probe.py [--sum-log2 27] [--rows-log2 14] [--cols-log2 13]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import fuseloop as fl
import fuseloop.splits as splits
from fuseloop.bench.runner import copy_bandwidth, median_time, wall_times
from fuseloop.recipes.rows import make_gpu_rows


def per_call(fn, repeat: int) -> float:
    return median_time(fn, fl.synchronize, repeat, warmup=3)


def pipelined(fn, batch: int, repeat: int = 5) -> float:
    fl.synchronize()
    return min(wall_times(fn, fl.synchronize, repeat, warmup=0, batch=batch))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default=None)
    ap.add_argument("--sum-log2", type=int, default=27)
    ap.add_argument("--rows-log2", type=int, default=14)
    ap.add_argument("--cols-log2", type=int, default=13)
    ap.add_argument("--groups", default="256,512",
                    help="work-items per group to try for the sum")
    ap.add_argument("--softmax-variants", default="512:0,256:32,512:16,1024:8",
                    help="GROUP:CACHE_ITEMS pairs to try for softmax (0: no row cache)")
    ap.add_argument("--pieces", default="2048")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.device:
        fl.set_device(args.device)
    dev = fl.get_device()
    groups = [int(g) for g in args.groups.split(",")]
    piece_counts = [int(p) for p in args.pieces.split(",")]
    rows = []
    n = 1 << args.sum_log2
    copy = copy_bandwidth(4 * n, args.repeat, warmup=3)
    print(f"device: {dev.name}; copy bandwidth (read + write) {copy:.0f} GB/s", flush=True)

    rng = np.random.default_rng(0)
    xh, yh = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    ref = float((xh.astype(np.float64) * yh).sum())
    x, y = fl.asarray(xh), fl.asarray(yh)
    original_pieces = splits.piece_count

    def report(workload: str, variant: str, nbytes: int, t_call: float, t_pipe: float,
               ok: bool) -> None:
        r = dict(workload=workload, variant=variant, per_call_gbs=nbytes / t_call / 1e9,
                 pipelined_gbs=nbytes / t_pipe / 1e9, copy_gbs=copy, correct=ok)
        r["per_call_frac"] = r["per_call_gbs"] / copy
        r["pipelined_frac"] = r["pipelined_gbs"] / copy
        rows.append(r)
        print(f"{workload:8s} {variant:24s} per call {r['per_call_gbs']:7.0f} GB/s "
              f"({100 * r['per_call_frac']:5.1f}%)  pipelined {r['pipelined_gbs']:7.0f} GB/s "
              f"({100 * r['pipelined_frac']:5.1f}%){'' if ok else '  MISMATCH'}", flush=True)

    for g in groups:
        fl.register_recipe("gpu", make_gpu_rows(g), name=f"probe-rows-{g}", kind="reduction")
        for p in piece_counts:
            splits.piece_count = lambda length, device, p=p: min(p, max(1, length // 256))
            got = float(fl.sum(x * y))
            ok = abs(got - ref) <= 1e-5 * abs(ref)
            f = lambda: fl.sum(x * y).eval()  # noqa: E731
            report("sum", f"group {g}, pieces {p}", 8 * n, per_call(f, args.repeat),
                   pipelined(f, args.batch), ok)
    splits.piece_count = original_pieces

    r, c = 1 << args.rows_log2, 1 << args.cols_log2
    h = rng.random((r, c), dtype=np.float32)
    a = fl.asarray(h)
    out = fl.empty_like(a)
    e64 = np.exp(h - h.max(axis=-1, keepdims=True))
    want = e64 / e64.sum(axis=-1, keepdims=True)

    def softmax() -> None:
        e = fl.exp(a - a.max(axis=-1, keepdims=True))
        out[...] = e / e.sum(axis=-1, keepdims=True)

    for variant in args.softmax_variants.split(","):
        g, items = (int(v) for v in variant.split(":"))
        fl.register_recipe("gpu", make_gpu_rows(g, items), name=f"probe-rows-{g}-{items}",
                           kind="reduction")
        softmax()
        ok = bool(np.allclose(out.get(), want, rtol=1e-5, atol=1e-9))
        report("softmax", f"group {g}, cache {items}", 2 * 4 * r * c,
               per_call(softmax, args.repeat), pipelined(softmax, args.batch), ok)

    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": dev.name, "copy_gbs": copy, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
